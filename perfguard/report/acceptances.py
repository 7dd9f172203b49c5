"""Accepted regressions in a check report: who accepted what, why, up to what, and what was ignored.

``perfguard check`` applies the acceptances after stage 2 (:mod:`perfguard.accept`) and stores in
the check's summary, as ``summary["acceptances"]``, every acceptance that applied (its scope,
ceiling, reason, author, approver, source, and the items it accepted and those over its ceiling,
as ``Forward.track_time(dtype=float32,impl=improved,seq_len=512)`` labels) and every ignored one
with why (docs/living-with-regressions.md).  :func:`parse_acceptances` reads it defensively (JSON
from a store that older or newer perfguards also write) and ties each label to the report's row,
so a reader sees, next to each accepted item, who accepted it, why, the ceiling and where the
acceptance came from; and the pull request's author sees why an acceptance did not count (an
unapproved trailer, a typo in one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.report import formatting
from perfguard.report.items import ACCEPTED, ItemView

#: The commit trailer an acceptance can be written as (perfguard.accept.TRAILER).
TRAILER = "Perfguard-Accept"
#: How many parameter sets of one acceptance the top of a report names.
SHOWN_CASES = 3


def item_label(view: ItemView) -> str:
    """``Forward.track_time(dtype=float32,impl=improved,seq_len=512)``: how the summary names an item."""
    return f"{formatting.benchmark_label(view.item.benchmark)}({view.item.params_key})"


@dataclass(frozen=True)
class AcceptedCase:
    """The items of one implementation x parameter set that one acceptance covers."""

    impl: str
    params_text: str
    params_key: str
    items: list[ItemView]


@dataclass
class AcceptanceView:
    """One trusted acceptance that applied to the check, with the rows it accepted or could not."""

    scope: str
    ceiling: float | None
    reason: str
    author: str
    approved_by: str | None
    source: str  # "trailer" | "command"
    sha: str
    id: int | None
    accepted: list[ItemView] = field(default_factory=list)
    over: list[ItemView] = field(default_factory=list)  # in scope, beyond the ceiling: still regressions

    @property
    def origin(self) -> str:
        """``Perfguard-Accept trailer in 1a2b3c4d5e`` or ``perfguard accept #7 at 1a2b3c4d5e``."""
        at = self.sha[:10] if self.sha else "an unknown commit"
        if self.source == "trailer":
            return f"{TRAILER} trailer in {at}"
        return f"perfguard accept{f' #{self.id}' if self.id is not None else ''} at {at}"

    @property
    def name(self) -> str:
        """The author's name without the e-mail address (``Pat Author``), for the PR comment."""
        return self.author.split(" <", 1)[0].strip() or self.author

    @property
    def ceiling_text(self) -> str:
        return "–" if self.ceiling is None else f"×{self.ceiling:g}"

    @property
    def cases(self) -> list[AcceptedCase]:
        """Its accepted items by implementation and parameter set, in the report's order."""
        out: dict[tuple[str, str], AcceptedCase] = {}
        for view in self.accepted:
            key = (view.item.impl, view.params_text)
            if key not in out:
                out[key] = AcceptedCase(view.item.impl, view.params_text, view.item.params_key, [])
            out[key].items.append(view)
        return list(out.values())

    @property
    def shown(self) -> list[AcceptedCase]:
        return self.cases[:SHOWN_CASES]

    @property
    def more(self) -> int:
        return max(0, len(self.cases) - SHOWN_CASES)


@dataclass(frozen=True)
class IgnoredView:
    """An acceptance that does not count, and why (unapproved trailer, unreadable, untrusted)."""

    sha: str
    text: str
    why: str

    @property
    def short(self) -> str:
        return self.sha[:10] if self.sha else "–"


@dataclass
class AcceptanceStory:
    """What the acceptances did to one check."""

    applied: list[AcceptanceView]
    ignored: list[IgnoredView]
    unclaimed: list[ItemView]  # accepted rows no stored acceptance names (an older summary)

    @property
    def accepted_items(self) -> list[ItemView]:
        """Every primary row the acceptances accepted (derived rows follow their timing)."""
        return [i for i in self.all_accepted if i.role != "derived"]

    @property
    def all_accepted(self) -> list[ItemView]:
        seen: dict[int, ItemView] = {}
        for a in self.applied:
            for view in a.accepted:
                seen.setdefault(id(view), view)
        for view in self.unclaimed:
            seen.setdefault(id(view), view)
        return list(seen.values())

    @property
    def used(self) -> list[AcceptanceView]:
        """The acceptances that accepted something or had something over their ceiling."""
        return [a for a in self.applied if a.accepted or a.over]

    @property
    def unused(self) -> list[AcceptanceView]:
        """Trusted acceptances that found no regression in their scope."""
        return [a for a in self.applied if not (a.accepted or a.over)]

    def ceiling_broken(self, view: ItemView) -> float | None:
        """The highest ceiling an item is over (it stays a regression), or None."""
        ceilings = [
            a.ceiling for a in self.applied if a.ceiling is not None and any(v is view for v in a.over)
        ]
        return max(ceilings) if ceilings else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _ceiling(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _labels(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse_acceptances(summary: Mapping[str, Any] | None, items: Sequence[ItemView]) -> AcceptanceStory | None:
    """The check's ``summary["acceptances"]`` tied to its rows; None when there is nothing to say.

    Entries that are not objects are skipped; a label that names no row of the check is dropped
    (the row's own reason still says who accepted it).
    """
    raw = (summary or {}).get("acceptances")
    raw = raw if isinstance(raw, Mapping) else {}
    by_label: dict[str, ItemView] = {}
    for view in items:
        by_label.setdefault(item_label(view), view)
    applied = []
    for entry in raw.get("applied") or []:
        if not isinstance(entry, Mapping):
            continue
        entry_id = entry.get("id")
        applied.append(
            AcceptanceView(
                scope=_text(entry.get("scope"))
                or " ".join(_text(entry.get(k)) for k in ("impl", "benchmark") if _text(entry.get(k))),
                ceiling=_ceiling(entry.get("ceiling")),
                reason=_text(entry.get("reason")),
                author=_text(entry.get("author")),
                approved_by=_text(entry.get("approved_by")) or None,
                source=_text(entry.get("source")),
                sha=_text(entry.get("sha")),
                id=entry_id if isinstance(entry_id, int) and not isinstance(entry_id, bool) else None,
                accepted=[by_label[x] for x in _labels(entry.get("accepted")) if x in by_label],
                over=[by_label[x] for x in _labels(entry.get("over_ceiling")) if x in by_label],
            )
        )
    ignored = [
        IgnoredView(_text(e.get("sha")), _text(e.get("text")), _text(e.get("why")))
        for e in raw.get("ignored") or []
        if isinstance(e, Mapping)
    ]
    claimed = {id(v) for a in applied for v in a.accepted}
    unclaimed = [v for v in items if v.verdict == ACCEPTED and v.role != "derived" and id(v) not in claimed]
    if not (applied or ignored or unclaimed):
        return None
    return AcceptanceStory(applied=applied, ignored=ignored, unclaimed=unclaimed)
