"""Acceptances applied to a finished comparison: ``regression`` -> ``accepted`` within a trusted
acceptance's scope and ceiling, and what each did, for the check's summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfguard.accept.finding import Acceptance, Found
from perfguard.metrics import REPORTED_METRICS
from perfguard.store.acceptances import short_benchmark
from perfguard.store.check_summary import AcceptanceSummary, AppliedAcceptance, IgnoredAcceptance

if TYPE_CHECKING:
    from perfguard.compare import Item, SuiteComparison


def beyond_ceiling(item: Item, ceiling: float) -> bool:
    """Whether an item is worse than an accepted ceiling, by the gate's own margins.

    Memory and work counts are exact: their ratio above the ceiling.  A timing needs its ratio
    above the ceiling *and* its interval's lower end above 1 + (ceiling - 1) / 2, the margin a
    regression needs over the threshold (docs/verdicts.md, stage 1), so noise around an accepted
    ratio cannot fail a check that the same noise could not fail without the acceptance.
    """
    from perfguard.metrics import DETERMINISTIC_METRICS

    if item.ratio is None:  # infinitely worse (from 0), or no number at all
        return True
    if item.ratio <= ceiling:
        return False
    if item.metric in DETERMINISTIC_METRICS or item.ci_low is None:
        return True
    return item.ci_low > 1.0 + (ceiling - 1.0) / 2.0


@dataclass(frozen=True)
class Decision:
    """What one acceptance did to one item."""

    key: tuple[str, str]
    acceptance: Acceptance
    accepted: bool  # False: in scope but beyond the ceiling (still a regression)


@dataclass(frozen=True)
class Applied:
    """A comparison after the acceptances: the new result, what each acceptance did, what was ignored."""

    result: SuiteComparison
    decisions: tuple[Decision, ...] = ()
    acceptances: tuple[Acceptance, ...] = ()
    ignored: tuple[IgnoredAcceptance, ...] = ()

    @property
    def accepted(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.accepted)

    @property
    def over_ceiling(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.accepted)

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    def summary(self) -> AcceptanceSummary:
        """What the stored check keeps (``summary.acceptances``): each acceptance with the items it
        accepted and the ones it could not (over its ceiling), and every ignored one with why."""
        applied = []
        for acceptance in self.acceptances:
            mine = [d for d in self.decisions if d.acceptance is acceptance]
            accepted = tuple(_label(d.key) for d in mine if d.accepted)
            over = tuple(_label(d.key) for d in mine if not d.accepted)
            applied.append(AppliedAcceptance(**acceptance.as_json(), accepted=accepted, over_ceiling=over))
        return AcceptanceSummary(tuple(applied), self.ignored)

    def lines(self) -> list[str]:
        """What to say in the log: one line per acceptance that matched something, per ignored one."""
        out = []
        for acceptance in self.acceptances:
            mine = [d for d in self.decisions if d.acceptance is acceptance]
            if not mine:
                out.append(f"acceptance {acceptance.describe()}: no regression in its scope")
                continue
            took = sum(d.accepted for d in mine)
            over = len(mine) - took
            text = f"acceptance {acceptance.describe()}: {took} item(s) accepted"
            if over:
                text += f", {over} over its ceiling (still regressions)"
            out.append(text)
        out += [f"ignored acceptance in {i.sha[:10]} ({i.text}): {i.why}" for i in self.ignored]
        return out


def _label(key: tuple[str, str]) -> str:
    return f"{short_benchmark(key[0])}({key[1]})"


def _source_of(item: Item) -> tuple[str, str] | None:
    """The key of the timing a reported, derived item comes from (tokens/s, TFLOP/s), or None.

    Since issue 14 a derived item carries its source timing's verdict (one measurement, one
    verdict); it is never accepted on its own, it follows its source.  A perfguard whose compare
    has no derived items (``derived_source`` absent) gives None: every item stands alone.
    """
    from perfguard import compare

    derived_source = getattr(compare, "derived_source", None)
    source = derived_source(item.benchmark) if derived_source is not None else None
    if source is None or item.gated or item.metric not in REPORTED_METRICS:
        return None
    return (source, item.params_key)


def _follow_accepted_sources(items: list[Item]) -> list[Item]:
    """A derived item whose source timing was just accepted reads ``accepted`` too."""
    from perfguard.compare import Verdict, describe

    by_key = {i.key: i for i in items}
    out = []
    for item in items:
        key = _source_of(item)
        source = by_key.get(key) if key is not None else None
        if source is None or source.verdict is not Verdict.ACCEPTED or item.verdict is not Verdict.REGRESSION:
            out.append(item)
            continue
        own = item.reason.split("; verdict of ", 1)[0]
        label = describe(source.benchmark, source.metric)
        out.append(replace(item, verdict=Verdict.ACCEPTED, reason=f"{own}; verdict of {label}: accepted"))
    return out


def apply_acceptances(
    result: SuiteComparison, found: Found | Sequence[Acceptance], *, ignored: Sequence[IgnoredAcceptance] = ()
) -> Applied:
    """Turn the regressions within a trusted acceptance's scope and ceiling into ``accepted``.

    Call it on the final comparison (after stage 2).  Only ``regression`` items change; an item
    that several acceptances cover takes the one with the highest ceiling (the most permissive
    trusted statement).  Beyond every covering ceiling it stays a regression and its reason says
    which ceiling it broke.  Untrusted acceptances passed here are ignored (a caller's mistake
    cannot make one count).
    """
    from perfguard.compare import SuiteComparison, Verdict

    if isinstance(found, Found):
        candidates, ignored_all = list(found.trusted), list(found.ignored) + list(ignored)
    else:
        candidates, ignored_all = list(found), list(ignored)
    usable = []
    for acceptance in candidates:
        if acceptance.trusted:
            usable.append(acceptance)
        else:
            ignored_all.append(IgnoredAcceptance(acceptance.sha, acceptance.describe(), "not trusted"))
    decisions: list[Decision] = []
    items = []
    for item in result.items:
        covering = [a for a in usable if a.covers(item.impl, item.benchmark, item.metric, item.params)]
        if item.verdict is not Verdict.REGRESSION or not covering or _source_of(item) is not None:
            items.append(item)
            continue
        best = max(covering, key=lambda a: a.ceiling)
        if beyond_ceiling(item, best.ceiling):
            decisions += [Decision(item.key, a, False) for a in covering]
            over = (
                f"over the accepted ceiling {best.ceiling:g} ({best.signed}: {best.reason!r}, {best.origin})"
            )
            items.append(replace(item, reason=f"{item.reason}; {over}"))
            continue
        decisions.append(Decision(item.key, best, True))
        items.append(
            replace(
                item,
                verdict=Verdict.ACCEPTED,
                reason=f"accepted up to {best.ceiling:g}× by {best.signed}: {best.reason!r} ({best.origin}); "
                f"{item.reason}",
            )
        )
    items = _follow_accepted_sources(items)
    return Applied(
        result=SuiteComparison(items=tuple(items), suspects=result.suspects),
        decisions=tuple(decisions),
        acceptances=tuple(usable),
        ignored=tuple(ignored_all),
    )
