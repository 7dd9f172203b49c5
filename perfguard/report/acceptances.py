"""Accepted regressions in a check report: who accepted what, why, up to what, and what was ignored.

``perfguard check`` applies the acceptances after stage 2 (:mod:`perfguard.accept`) and stores in
the check's summary, as ``summary["acceptances"]``, every acceptance that applied (its scope,
ceiling, reason, author, approver, source, and the items it accepted and those over its ceiling,
as ``Forward.track_time(dtype=float32,impl=improved,seq_len=512)`` labels) and every ignored one
with why (docs/living-with-regressions.md).  :func:`parse_acceptances` takes it as the one typed reader of a
check's summary gives it (:class:`perfguard.store.check_summary.CheckSummary`: JSON from a store
that older or newer perfguards also write) and ties each label to the report's row,
so a reader sees, next to each accepted item, who accepted it, why, the ceiling and where the
acceptance came from; and the pull request's author sees why an acceptance did not count (an
unapproved trailer, a typo in one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from perfguard.report import formatting
from perfguard.report.items import ACCEPTED, ItemView
from perfguard.store.check_summary import CheckSummary, IgnoredAcceptance

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


@dataclass
class AcceptanceStory:
    """What the acceptances did to one check."""

    applied: list[AcceptanceView]
    ignored: list[IgnoredAcceptance]
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


def parse_acceptances(summary: CheckSummary, items: Sequence[ItemView]) -> AcceptanceStory | None:
    """The check's ``summary.acceptances`` tied to its rows; None when there is nothing to say.

    A label that names no row of the check is dropped (the row's own reason still says who
    accepted it); entries that are not objects were skipped by :meth:`CheckSummary.from_json`.
    """
    by_label: dict[str, ItemView] = {}
    for view in items:
        by_label.setdefault(item_label(view), view)
    applied = [
        AcceptanceView(
            scope=entry.scope,
            ceiling=entry.ceiling,
            reason=entry.reason,
            author=entry.author,
            approved_by=entry.approved_by,
            source=entry.source,
            sha=entry.sha,
            id=entry.id,
            accepted=[by_label[x] for x in entry.accepted if x in by_label],
            over=[by_label[x] for x in entry.over_ceiling if x in by_label],
        )
        for entry in summary.acceptances.applied
    ]
    ignored = list(summary.acceptances.ignored)
    claimed = {id(v) for a in applied for v in a.accepted}
    unclaimed = [v for v in items if v.verdict == ACCEPTED and v.role != "derived" and id(v) not in claimed]
    if not (applied or ignored or unclaimed):
        return None
    return AcceptanceStory(applied=applied, ignored=ignored, unclaimed=unclaimed)
