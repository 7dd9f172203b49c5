"""Steps on the baseline branch and acceptances, as the history site shows them (issue 16).

``perfguard changes`` stores each step beyond the threshold between two recorded commits of the
baseline branch (``Store.change_points``): *flagged* when no trusted acceptance covers it, with the
software change between the two runs named as its likely cause; *accepted* otherwise, with the
acceptance that covers it.  ``perfguard accept`` and approved ``Perfguard-Accept`` trailers are
stored at their commit (``Store.acceptances``).  A maintainer looks at a benchmark's chart and at
the index, so:

* each chart gets a flag at the commit of every step of its series (red: flagged, with the ratio
  and the likely cause; blue: accepted, with who, why and up to what) and at the commit of every
  acceptance whose scope covers the series (who, why, the ceiling, where it came from), listed
  under the chart and read out on hover;
* the index lists every flagged step (``change_points(flagged_only=True)``), newest first, with
  the command that accepts it if it was intended;
* the changes page lists every step and every acceptance.

These flags are kept apart from the asv step detection (``series.Mark``, triangles): that one finds
creep in the drawn series itself; these are what the baseline workflow decided at the gate's
threshold.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from perfguard import units
from perfguard.report import formatting
from perfguard.report.series import Series
from perfguard.store import StoredAcceptance, StoredChangePoint

#: Flag kinds, in the order one commit's flags are drawn over each other (the last on top).
FLAG_KINDS = ("acceptance", "accepted", "flagged")
FLAG_WORDS = {"flagged": "flagged step", "accepted": "accepted step", "acceptance": "acceptance"}


def acceptance_who(a: StoredAcceptance) -> str:
    """``Pat Author <pat@x> (approved by maint)``."""
    return a.author + (f" (approved by {a.approved_by})" if a.approved_by else "")


def acceptance_origin(a: StoredAcceptance) -> str:
    """Where the acceptance came from: ``Perfguard-Accept trailer`` or ``perfguard accept #7``."""
    return "Perfguard-Accept trailer" if a.source == "trailer" else f"perfguard accept #{a.id}"


def acceptance_text(a: StoredAcceptance) -> str:
    """``improved Forward.track_time up to ×1.35 by X (approved by Y): 'why' (perfguard accept #7 at …)``."""
    text = (
        f"{a.scope()} up to ×{a.ceiling:g} by {acceptance_who(a)}: {a.reason!r} "
        f"({acceptance_origin(a)} at {formatting.short_sha(a.sha)})"
    )
    if a.revocation:
        return f"{text}; {a.revocation}: it accepts nothing"
    return text if a.trusted else text + "; not trusted: it accepts nothing"


def step_change(cp: StoredChangePoint) -> str:
    """``×2.000 worse (10.0 ms → 20.0 ms)``: the ratio is oriented, > 1 is worse."""
    values = f"{units.format_value(cp.before, cp.unit)} → {units.format_value(cp.after, cp.unit)}"
    return f"{formatting.format_ratio(cp.ratio)} worse ({values})"


def accept_command(cp: StoredChangePoint) -> str:
    """The command that accepts a flagged step at its commit, if it was intended."""
    ceiling = f"{max(cp.ratio * 1.05, 1.01):.2f}"
    return shlex.join(
        [
            "perfguard",
            "accept",
            "--commit",
            cp.sha[:12],
            cp.impl,
            formatting.benchmark_label(cp.benchmark),
            "--max",
            ceiling,
            "--reason",
            "why it is intended",
        ]
    )


@dataclass(frozen=True)
class StepFlag:
    """A step or an acceptance drawn at one commit of one series."""

    index: int  # into Series.points
    kind: str  # flagged | accepted | acceptance
    sha: str
    title: str  # one line: what and how much
    detail: str  # why: the likely cause, or who accepted it, why and up to what

    @property
    def word(self) -> str:
        return FLAG_WORDS[self.kind]

    @property
    def summary(self) -> str:
        return f"{self.word}: {self.title}" + (f"; {self.detail}" if self.detail else "")


def step_flag(cp: StoredChangePoint, index: int) -> StepFlag:
    at = f"at {formatting.short_sha(cp.sha)} since {formatting.short_sha(cp.previous_sha)}"
    if cp.acceptance is None:
        cause = (
            f"likely cause: {cp.cause} between the two runs"
            if cp.cause
            else "no software change between the runs"
        )
        return StepFlag(
            index, "flagged", cp.sha, f"{step_change(cp)} {at}", f"{cause}; no acceptance covers it"
        )
    return StepFlag(
        index, "accepted", cp.sha, f"{step_change(cp)} {at}", f"accepted: {acceptance_text(cp.acceptance)}"
    )


def attach_flags(
    series: Sequence[Series], points: Iterable[StoredChangePoint], acceptances: Iterable[StoredAcceptance]
) -> dict[int, list[StepFlag]]:
    """``id(series)`` -> its flags, by commit: its steps, then the acceptances covering it at its points.

    A step or acceptance at a commit that is not a point of the series (not recorded on that
    machine, or the series failed there) is not drawn; the index and the changes page still list it.
    An acceptance already shown as the acceptance of a step of the series at its commit is not
    drawn twice.
    """
    by_key: dict[tuple[str, str, str], Series] = {
        (s.machine.key, s.benchmark, s.params_key): s for s in series
    }
    flags: dict[int, list[StepFlag]] = {}

    def index_of(s: Series, sha: str) -> int | None:
        position = s.machine.position.get(sha)
        if position is None:
            return None
        return next((i for i, p in enumerate(s.points) if p.position == position), None)

    shown: set[tuple[int, int | None]] = set()
    for cp in points:
        s = by_key.get((cp.machine_key, cp.benchmark, cp.params_key))
        index = index_of(s, cp.sha) if s is not None else None
        if s is None or index is None:
            continue
        flags.setdefault(id(s), []).append(step_flag(cp, index))
        if cp.acceptance is not None:
            shown.add((id(s), cp.acceptance.id))
    accepted = list(acceptances)
    if accepted:
        for s in series:
            for a in accepted:
                if (id(s), a.id) in shown or not a.covers(s.impl, s.benchmark, s.metric, s.params):
                    continue
                index = index_of(s, a.sha)
                if index is None:
                    continue
                title = f"at {formatting.short_sha(a.sha)}"
                flags.setdefault(id(s), []).append(
                    StepFlag(index, "acceptance", a.sha, title, acceptance_text(a))
                )
    for items in flags.values():
        items.sort(key=lambda f: (f.index, FLAG_KINDS.index(f.kind)))
    return flags


@dataclass(frozen=True)
class StepRow:
    """One stored step for the index and the changes page."""

    point: StoredChangePoint
    slug: str | None  # the benchmark page, when the site has one
    machine_label: str

    @property
    def flagged(self) -> bool:
        return self.point.flagged

    @property
    def series_name(self) -> str:
        p = self.point
        return " · ".join(
            x for x in (p.impl, formatting.metric_label(p.benchmark), formatting.params_label(p.params)) if x
        )

    @property
    def change(self) -> str:
        return step_change(self.point)

    @property
    def detail(self) -> str:
        p = self.point
        if p.acceptance is not None:
            return f"accepted: {acceptance_text(p.acceptance)}"
        return f"likely cause: {p.cause}" if p.cause else "no software change between the two runs"

    @property
    def command(self) -> str:
        return accept_command(self.point)

    @property
    def date(self) -> datetime:
        return self.point.committed_at


def step_rows(
    points: Iterable[StoredChangePoint],
    slugs: Mapping[tuple[str, str], str],
    machine_labels: Mapping[str, str],
) -> list[StepRow]:
    """Steps newest first."""
    rows = [
        StepRow(p, slugs.get((p.benchmark, p.params_key)), machine_labels.get(p.machine_key, p.machine_key))
        for p in points
    ]
    rows.sort(key=lambda r: (r.date.replace(tzinfo=None), r.point.id), reverse=True)
    return rows


def acceptances_json(acceptances: Iterable[StoredAcceptance]) -> list[dict[str, Any]]:
    """The stored acceptances for ``data/history.json``."""
    return [
        {
            "id": a.id,
            "sha": a.sha,
            "scope": a.scope(),
            "ceiling": a.ceiling,
            "reason": a.reason,
            "author": a.author,
            "approved_by": a.approved_by,
            "source": a.source,
            "trusted": a.trusted,
            "created_at": a.created_at.isoformat(),
        }
        for a in acceptances
    ]


def change_points_json(points: Iterable[StoredChangePoint]) -> list[dict[str, Any]]:
    """The stored steps for ``data/history.json``."""
    return [
        {
            "machine": p.machine_key,
            "sha": p.sha,
            "previous": p.previous_sha,
            "benchmark": p.benchmark,
            "impl": p.impl,
            "params": dict(p.params),
            "params_key": p.params_key,
            "metric": p.metric,
            "unit": p.unit,
            "before": p.before,
            "after": p.after,
            "ratio": p.ratio,
            "threshold": p.threshold,
            "cause": p.cause,
            "flagged": p.flagged,
            "acceptance_id": p.acceptance.id if p.acceptance is not None else None,
        }
        for p in points
    ]
