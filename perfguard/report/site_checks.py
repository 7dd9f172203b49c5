"""The stored checks as the Changes page lists them, and what that page covers (issue 30).

The Changes page drew only the marks on the history charts: steps of the baseline branch's series
and the verdicts of checks whose head commit is a point of that history.  A pull request's check
(its head is not a history point) was on no chart, so a store holding a check with 35 regressions
showed "No change has been detected".  The page now says what its marks cover and lists every
stored check with its gated items counted as that check's report counts them
(:func:`perfguard.report.queries.check_tallies`, :mod:`perfguard.report.tally`), marking the ones
whose head is not a commit of the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from perfguard.report import formatting
from perfguard.report.items import FAILING, VERDICT_ORDER, phrase
from perfguard.report.lineage import Lineage
from perfguard.report.queries import CheckTally

#: Checks the page lists (newest first); the rest are counted.
CHECKS_LISTED = 100


@dataclass(frozen=True)
class CheckRow:
    """One stored check on the Changes page."""

    check_id: int
    date: datetime | None
    machine: str
    head: str  # short sha
    branch: str
    subject: str
    base: str
    verdict: str
    phrases: tuple[str, ...]  # "2 regressions", "1 unstable": its gated items, as its headline counts
    failing: bool
    on_history: bool  # its head commit is a point of the history charts


def check_rows(tallies: Iterable[CheckTally], history_shas: set[str]) -> list[CheckRow]:
    """Each stored check (``tallies``, newest first) as a row; ``history_shas``: the charts' commits."""
    rows = []
    for t in tallies:
        order = [*VERDICT_ORDER, *sorted(set(t.gated) - set(VERDICT_ORDER))]
        phrases = tuple(phrase(v, t.gated[v]) for v in order if t.gated.get(v))
        rows.append(
            CheckRow(
                check_id=t.check_id,
                date=t.created_at,
                machine=t.machine_label,
                head=formatting.short_sha(t.head_sha),
                branch=t.head_branch or "",
                subject=t.head_subject or "",
                base=formatting.short_sha(t.base_sha),
                verdict=t.verdict,
                phrases=phrases,
                failing=any(t.gated.get(v) for v in FAILING),
                on_history=t.head_sha in history_shas,
            )
        )
    return rows


def coverage(commits: int, machines: int, checks: Sequence[CheckRow], lineage: Lineage | None = None) -> str:
    """What the page's marks cover, in one sentence (and whose lineage the charts follow)."""
    failing = sum(1 for c in checks if c.failing)
    off = sum(1 for c in checks if c.failing and not c.on_history)
    if lineage is not None and lineage.shas is not None:
        follows = f" on {lineage.ref}'s first-parent lineage (other commits are listed under their charts)"
    elif lineage is not None:
        follows = f" in commit-date order ({lineage.ref}'s lineage unknown: {lineage.why})"
    else:
        follows = ""
    text = (
        f"The marks below cover the history charts: {formatting.count(commits, 'commit')} of trusted "
        f"runs (perfguard run, baselines){follows} on {formatting.count(machines, 'machine')}."
    )
    if checks:
        text += f" {formatting.count(len(checks), 'stored check')}, {failing} with failing items"
        text += (
            f" ({off} of them of commits that are not on the charts, such as pull requests)" if off else ""
        )
        text += ", are listed under Checks."
    return text
