"""The two stages of a comparison (docs/verdicts.md).

Stage 1 (:func:`compare_suite`) decides every benchmark x params of both sides at once and names the
timing *suspects*; stage 2 (:func:`apply_retry`) decides each suspect on its interleaved
re-measurement alone.  A derived number (tokens/s, TFLOP/s) carries its timing's verdict in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from perfguard.compare.model import (
    VERIFY_BENCHMARK,
    Item,
    Measurement,
    SuiteComparison,
    Verdict,
    derived_source,
    describe,
)
from perfguard.compare.rule import Pair, compare_pairs, structural
from perfguard.config import Config
from perfguard.metrics import DETERMINISTIC_METRICS, REPORTED_METRICS


def _index(measurements: Iterable[Measurement], side: str) -> dict[tuple[str, str], Measurement]:
    out: dict[tuple[str, str], Measurement] = {}
    for m in measurements:
        k = (m.benchmark, m.key)
        if k in out:
            raise ValueError(f"{side} has two measurements of {m.benchmark} ({m.key}); merge their rounds")
        out[k] = m
    return out


def _is_suspect(item: Item, config: Config) -> bool:
    """A gated timing that moved by more than ``suspect_fraction`` of its threshold, either way: a
    regression and an improvement are claimed by the same rule, after an interleaved re-measurement
    (issue 30: improvements were never re-measured)."""
    if not (
        item.gated
        and item.metric not in DETERMINISTIC_METRICS
        and item.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT, Verdict.UNSTABLE, Verdict.UNCHANGED)
        and item.ratio is not None
        and item.ratio > 0
    ):
        return False
    bound = 1.0 + config.suspect_fraction * item.threshold
    return item.ratio > bound or item.ratio < 1.0 / bound


def _compare(
    base: Iterable[Measurement],
    head: Iterable[Measurement],
    config: Config,
    broken_impls: Iterable[str] = (),
    *,
    only: set[tuple[str, str]] | None = None,
    prior: dict[tuple[str, str], Item] | None = None,
) -> list[Item]:
    b = _index(base, "the baseline")
    h = _index(head, "head")
    broken = set(broken_impls)
    keys = [k for k in h if only is None or k in only]
    keys += [k for k in b if k not in h and (only is None or k in only)]
    slots: list[Item | Pair] = [
        structural(b.get(k), h.get(k), config, (h.get(k) or b[k]).impl in broken) for k in keys
    ]
    pairs = [s for s in slots if isinstance(s, Pair)]
    for pair in pairs:  # a re-measurement pools stage 1's spread of each side into its variance
        earlier = (prior or {}).get((pair.head.benchmark, pair.head.key))
        if earlier is not None:
            pair.prior = earlier.round_medians
    compared = iter(compare_pairs(pairs, config))
    items = [next(compared) if isinstance(s, Pair) else s for s in slots]
    seen = {i.impl for i in items}
    for impl in sorted(broken - seen):  # a broken implementation with no benchmark at all
        reason = f"implementation {impl!r} failed perfguard verify in head"
        items.append(
            Item.of_implementation(
                impl, VERIFY_BENCHMARK, Verdict.BROKEN, gated=True, threshold=config.threshold, reason=reason
            )
        )
    return items


def compare_sides(
    base: Measurement | None, head: Measurement | None, config: Config, *, broken: bool = False
) -> Item:
    """The verdict of one benchmark x params (either side may be absent).

    The p-value is not adjusted (a family of one); :func:`compare_suite` adjusts over the suite.
    ``broken``: the implementation failed ``perfguard verify`` in head.
    """
    if base is None and head is None:
        raise ValueError("compare_sides needs at least one side")
    if base is not None and head is not None and (base.benchmark, base.key) != (head.benchmark, head.key):
        raise ValueError(
            f"different benchmarks: {base.benchmark} ({base.key}), {head.benchmark} ({head.key})"
        )
    slot = structural(base, head, config, broken)
    return compare_pairs([slot], config)[0] if isinstance(slot, Pair) else slot


def compare_suite(
    base: Iterable[Measurement],
    head: Iterable[Measurement],
    config: Config,
    broken_impls: Iterable[str] = frozenset(),
) -> SuiteComparison:
    """Stage 1: every benchmark x params of both sides, the suspects to re-measure, the exit code.

    Items follow head's order, then the baseline-only ones.  Each side may hold a benchmark x
    params once (merge rounds into one :class:`Measurement`).  ``broken_impls``: implementations
    that failed ``perfguard verify`` in head; each gets ``broken`` items (one "perfguard verify"
    item if it has no benchmark).  With retries enabled, call :func:`apply_retry` with the
    re-measurement of ``suspects`` before using ``exit_code``.
    """
    items = _follow_sources(_unclaimed(_compare(base, head, config, broken_impls)))
    # worst first, then the improvements, biggest first
    suspects = sorted(
        (i for i in items if _is_suspect(i, config)),
        key=lambda i: (-(i.ratio or 0.0), 0.0) if (i.ratio or 0.0) >= 1 else (0.0, i.ratio or 0.0),
    )
    return SuiteComparison(items=tuple(items), suspects=tuple(suspects))


#: What a reported timing's reason says when stage 1 alone saw it move (:func:`_unclaimed`).
NOT_CLAIMED = "reported only: never re-measured, so no change is claimed"


def _unclaimed(items: Sequence[Item]) -> list[Item]:
    """A reported timing (never gated, not derived) that stage 1 saw move reads ``unstable``.

    A change in time is claimed only after an interleaved re-measurement (issue 30: the two sides'
    stage-1 rounds ran at different times, under whatever load each met), and a reported timing is
    never re-measured: the re-measurement is the gate's cost, spent on what can fail a check.  So
    its ratio, interval and p stay (what the data say), its verdict does not claim.  On 4 H200s an
    A/A check read "improvement x0.312" for the ring's communication time, whose NCCL kernels
    include waiting for the peer (docs/perf/distributed.md).  Exact numbers (memory, work) and
    derived ones (their source's verdict) keep theirs.
    """
    out = []
    for item in items:
        if (
            not item.gated
            and item.metric not in DETERMINISTIC_METRICS
            and derived_source(item.benchmark) is None
            and item.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
        ):
            item = replace(item, verdict=Verdict.UNSTABLE, reason=f"{item.reason}; {NOT_CLAIMED}")
        out.append(item)
    return out


def _source_key(item: Item) -> tuple[str, str] | None:
    """The key of the timing a reported, derived item comes from (None: not derived, or gated)."""
    source = derived_source(item.benchmark)
    if source is None or item.gated or item.metric not in REPORTED_METRICS:
        return None
    return (source, item.params_key)


def _follow_sources(items: Sequence[Item]) -> list[Item]:
    """Derived items take their source timing's verdict: one measurement, one verdict.

    tokens/s and TFLOP/s are the forward samples seen through a constant; a verdict of their own
    (other p-value, other interval, no re-measurement) could only contradict the timing's.
    """
    by_key = {i.key: i for i in items}
    out = []
    for item in items:
        key = _source_key(item)
        source = by_key.get(key) if key is not None else None
        if source is None:
            out.append(item)
            continue
        label = describe(source.benchmark, source.metric)
        own = item.reason.split("; verdict of ", 1)[0]
        out.append(
            replace(item, verdict=source.verdict, reason=f"{own}; verdict of {label}: {source.verdict}")
        )
    return out


def decide_after_retry(first: Item, retry: Item) -> Item:
    """The final verdict of a suspect: the re-measurement's verdict, marked ``retried``.

    The re-measurement (baseline and head interleaved in fresh processes) decides with the rule
    of stage 1, over its own rounds: the stage-1 data were taken in two sessions, which is what
    made the item a suspect.  Both measurements must agree on the direction: a regression (or an
    improvement) on re-measurement of a suspect that the first measurement saw move the other
    way is ``unstable`` (docs/verdicts.md, "Stage 2").  How far apart fresh processes of the same
    code landed in the first measurement is pooled into the re-measurement's variance
    (:func:`apply_retry`), so it widens the interval instead of vetoing the verdict: a consistent
    slowdown beyond the threshold in both stages fails however far apart same-code processes
    land, once enough rounds show it (issue 30).
    """
    if first.key != retry.key:
        raise ValueError(f"retry of {retry.benchmark} ({retry.params_key}) given for {first.key}")
    way = {Verdict.REGRESSION: "slower", Verdict.IMPROVEMENT: "faster"}.get(retry.verdict)
    first_way = None if first.ratio is None else ("slower" if first.ratio > 1 else "faster")
    if way is not None and first_way is not None and way != first_way:
        why = f"but the first measurement was {first_way}: the two measurements disagree"
        retry = replace(retry, verdict=Verdict.UNSTABLE, reason=f"{retry.reason}; {why}")
    if retry.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) and retry.verdict is first.verdict:
        prefix = "confirmed on re-measurement"
    elif first.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) and retry.verdict is not first.verdict:
        prefix = "not confirmed on re-measurement"
    elif retry.verdict is Verdict.REGRESSION:
        prefix = "confirmed on re-measurement"
    else:
        prefix = "re-measured"
    rounds = f"{retry.base_rounds}+{retry.head_rounds} rounds"
    was = f"first measurement {first.ratio:.2f}× ({first.verdict})" if first.ratio is not None else ""
    was = was or f"first measurement {first.verdict}"
    return replace(retry, retried=True, first=first, reason=f"{prefix} ({rounds}): {retry.reason}; {was}")


def apply_retry(
    first: SuiteComparison, base: Iterable[Measurement], head: Iterable[Measurement], config: Config
) -> SuiteComparison:
    """Stage 2: decide every suspect of ``first`` on its re-measurement (``base`` / ``head``).

    Only the suspects' keys are read from ``base`` and ``head``; their p-values are adjusted
    (Bonferroni) over the re-measured family.  A suspect with no re-measurement keeps its stage-1 verdict, and
    its reason says so.
    """
    wanted = set(first.suspect_keys)
    # Derived items of a suspect come from the same re-measured samples: their numbers follow too.
    followers = {i.key for i in first.items if _source_key(i) in wanted}
    keys = wanted | followers
    prior = {i.key: i for i in first.items if i.key in keys}
    retried = {i.key: i for i in _compare(base, head, config, only=keys, prior=prior)}
    out = []
    for item in first.items:
        if item.key in followers and item.key in retried:
            again = retried[item.key]
            out.append(replace(again, retried=True, first=item, reason=f"re-measured: {again.reason}"))
        elif item.key not in wanted:
            out.append(item)
        elif item.key in retried:
            out.append(decide_after_retry(item, retried[item.key]))
        else:
            out.append(replace(item, reason=f"{item.reason}; suspect, but not re-measured"))
    return SuiteComparison(items=tuple(_follow_sources(out)), suspects=())


def undecided(result: SuiteComparison) -> tuple[Item, ...]:
    """The re-measured suspects still ``unstable``: what more interleaved rounds can decide.

    The pipeline extends their re-measurement by ``config.retry.rounds`` rounds a side, up to
    ``config.retry.max_rounds``, and calls :func:`apply_retry` again on every re-measured round
    (docs/verdicts.md, "Stage 2": more rounds until decided, up to a budget).
    """
    return tuple(
        i for i in result.items if i.retried and i.first is not None and i.verdict is Verdict.UNSTABLE
        and i.metric not in DETERMINISTIC_METRICS and _source_key(i) is None
    )  # fmt: skip
