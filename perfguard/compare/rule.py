"""The rule for one benchmark x params: the structural verdicts (new, missing, broken, failed,
skipped), the statistics of a timing (the test over rounds, :func:`perfguard.stats.rounds_test`,
Bonferroni over the suite's gated timings), the deterministic rules of memory and work counts, and
the reason text of each verdict.

docs/verdicts.md explains every number; :mod:`perfguard.compare.stages` applies the rule to a
suite (stage 1) and to re-measured suspects (stage 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfguard import stats
from perfguard.compare.model import (
    Item,
    Measurement,
    Verdict,
    derived_source,
    describe,
)
from perfguard.config import Config, Rule
from perfguard.errors import error_summary
from perfguard.metrics import DETERMINISTIC_METRICS, ERROR, REGISTRY, REPORTED_METRICS, WORK_METRICS
from perfguard.units import format_delta, format_p, format_value


def _fmt_ratio(ratio: float, metric: str) -> str:
    """ "2.01× slower" or "1.50× faster" for an oriented ratio (> 1 = worse)."""
    known = REGISTRY.get(metric)
    worse, better = (known.worse, known.better) if known is not None else ("worse", "better")
    if math.isinf(ratio):
        return f"infinitely {worse}" if metric == "time" else f"∞× {worse}"
    if ratio >= 1:
        return f"{ratio:.2f}× {worse}"
    return f"{1 / ratio:.2f}× {better}"


def _fmt_stats(
    ratio: float, ci: tuple[float, float], p: float | None, confidence: float, p_label: str = ""
) -> str:
    """ "(95% CI 1.93–2.10, p=3e-6)", the interval in the orientation _fmt_ratio shows; ``p_label``
    names the test when it is not the samples' (``rounds p=0.002``)."""
    lo, hi = ci if ratio >= 1 else (1 / ci[1] if ci[1] else math.inf, 1 / ci[0] if ci[0] else math.inf)
    parts = []
    if math.isfinite(lo) and math.isfinite(hi):
        parts.append(f"{round(confidence * 100)}% CI {lo:.2f}–{hi:.2f}")
    if p is not None:
        parts.append(f"{p_label + ' ' if p_label else ''}p={format_p(p)}")
    return f"({', '.join(parts)})" if parts else ""


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------------------------
# The rule
# --------------------------------------------------------------------------------------------


@dataclass
class Pair:
    """Working state of one benchmark x params present on both sides."""

    base: Measurement
    head: Measurement
    rule: Rule
    gated: bool
    ratio: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    test: stats.RoundsTest = stats.UNTESTABLE
    prior: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # stage 1's round medians, a side each
    p_adj: float = 1.0
    family: int = 1  # gated timings the p-value was adjusted over (Bonferroni)
    noise: stats.Noise = field(default_factory=lambda: stats.Noise(0.0, None))


def _gated(m: Any, rule: Rule) -> bool:
    if rule.gate is not None:
        return rule.gate
    return bool(m.gated) and m.metric not in REPORTED_METRICS


def gates(config: Config, result: Any) -> bool:
    """Whether a measurement can fail a check: the configuration's ``gate`` for it when it sets one,
    else its kind's ``gated`` (a number derived from a timing never gates).  ``result``: anything
    with ``impl``, ``benchmark``, ``metric``, ``params`` and ``gated`` (a stored result, a record,
    a :class:`Measurement`)."""
    return _gated(result, config.rule_for(result.impl, result.benchmark, result.metric, result.params))


def _item(
    base: Measurement | None,
    head: Measurement | None,
    verdict: Verdict,
    reason: str,
    *,
    gated: bool,
    threshold: float,
    rule_source: str,
    **numbers: Any,
) -> Item:
    """An item of one benchmark x params: named after its measurement (head's, else the baseline's),
    with both sides' sample and round counts and the timing method; ``numbers``: what the rule found."""
    m = head if head is not None else base
    assert m is not None
    return Item(
        benchmark=m.benchmark,
        impl=m.impl,
        params=dict(m.params),
        params_key=m.key,
        metric=m.metric,
        unit=m.unit,
        direction=m.direction,
        gated=gated,
        verdict=verdict,
        threshold=threshold,
        method=(head.method if head is not None else None) or (base.method if base is not None else None),
        base_n=base.side.n if base is not None else 0,
        head_n=head.side.n if head is not None else 0,
        reason=reason,
        base_rounds=base.side.k if base is not None else 0,
        head_rounds=head.side.k if head is not None else 0,
        rule_source=rule_source,
        **numbers,
    )


def _bare_item(
    base: Measurement | None,
    head: Measurement | None,
    verdict: Verdict,
    reason: str,
    *,
    threshold: float,
    gated: bool,
    rule_source: str = "",
) -> Item:
    """An item no statistics decided: the sides' medians where they measured something, nothing else."""
    bv = _finite(base.side.median) if base is not None and base.status == "ok" else None
    hv = _finite(head.side.median) if head is not None and head.status == "ok" else None
    return _item(
        base, head, verdict, reason, gated=gated, threshold=threshold, rule_source=rule_source,
        base_value=bv, head_value=hv,
    )  # fmt: skip


def structural(
    base: Measurement | None, head: Measurement | None, config: Config, broken: bool
) -> Item | Pair:
    """Items that need no statistics (new, missing, broken, failed, skipped), or a pair to compare."""
    m = head if head is not None else base
    assert m is not None
    rule = config.rule_for(m.impl, m.benchmark, m.metric, m.params)
    gated = _gated(m, rule)

    def item(verdict: Verdict, reason: str, gated: bool = gated) -> Item:
        return _bare_item(
            base, head, verdict, reason, threshold=rule.threshold, gated=gated, rule_source=rule.source
        )

    if broken:  # fails the check, through its own items: a derived one follows its timing (issue 30)
        why = f"implementation {m.impl!r} failed perfguard verify in head"
        return item(Verdict.BROKEN, why, gated=derived_source(m.benchmark) is None)
    if base is None:
        assert head is not None
        if head.status == "failed":
            return item(Verdict.FAILED, f"new in head and failed there: {error_summary(head.error)}", False)
        return item(Verdict.NEW, "new in head: no baseline to compare with", False)
    if head is None:
        return item(Verdict.MISSING, "in the baseline only: not measured in head", False)
    if head.status == "failed" or (head.status == "ok" and head.side.n == 0):
        error = error_summary(head.error) if head.error else "no finite samples"
        if base.status == "ok" and base.side.n:
            return item(Verdict.FAILED, f"worked in the baseline, failed in head: {error}")
        before = {"failed": "failed in the baseline too", "skipped": "skipped in the baseline"}
        was = before.get(base.status, "the baseline measured nothing")
        return item(Verdict.FAILED, f"failed in head ({was}, so not caused here): {error}", False)
    if head.status == "skipped" or base.status == "skipped":
        where = "head" if head.status == "skipped" else "the baseline"
        why = (head.error if head.status == "skipped" else base.error) or "cannot run here"
        return item(Verdict.SKIPPED, f"skipped in {where}: {why}", False)
    if base.status == "failed" or base.side.n == 0:
        why = base.error or "no finite samples"
        return item(Verdict.NEW, f"the baseline failed ({why}): nothing to compare", False)
    if m.metric not in DETERMINISTIC_METRICS:
        if not head.side.median > 0:
            return item(Verdict.FAILED, f"head's median is not positive ({head.side.median:g} {m.unit})")
        if not base.side.median > 0:
            why = f"the baseline's median is not positive ({base.side.median:g} {m.unit})"
            return item(Verdict.NEW, f"{why}: nothing to compare", False)
    return Pair(base=base, head=head, rule=rule, gated=gated)


def _noise_text(noise: stats.Noise, config: Config) -> str:
    """The noise measures over their gates, e.g. "within-round IQR/median 14% > 10%"."""
    parts = []
    if noise.iqr_ratio > config.max_iqr_ratio:
        parts.append(f"within-round IQR/median {noise.iqr_ratio:.0%} > {config.max_iqr_ratio:.0%}")
    if noise.round_cv is not None and noise.round_cv > config.max_round_cv:
        parts.append(f"CV of round medians {noise.round_cv:.1%} > {config.max_round_cv:.0%}")
    return ", ".join(parts)


def _is_noisy(noise: stats.Noise, config: Config) -> bool:
    return noise.iqr_ratio > config.max_iqr_ratio or (
        noise.round_cv is not None and noise.round_cv > config.max_round_cv
    )


def _decide_timing(pair: Pair, config: Config) -> tuple[Verdict, str]:
    """The statistical rule for a timing-like item (docs/verdicts.md, "The rule for a timing").

    One rule for both directions (issue 30): a slowdown is judged on (R, L, U) and a speed-up on
    the mirror image (1/R, 1/U, 1/L), with the same p-value, the test over rounds.  The reason
    states that p and that interval, the ones the item stores."""
    t = pair.rule.threshold
    hi = 1.0 + t
    lo_bound = 1.0 + t / 2.0
    r = pair.ratio
    ci_lo, ci_hi = pair.ci
    noisy = _is_noisy(pair.noise, config)
    alpha = config.alpha
    pct = round(config.confidence * 100)
    rounds = f"{pair.base.side.k}+{pair.head.side.k} rounds"

    def line() -> str:
        label = describe(pair.head.benchmark, pair.head.metric)
        change = _fmt_ratio(r, pair.head.metric)
        p = pair.p_adj if pair.test.testable else None
        numbers = _fmt_stats(r, pair.ci, p, config.confidence, "rounds")
        return f"{label} {change}{' ' if numbers else ''}{numbers}, threshold {hi:.2f}"

    if not pair.test.testable:  # one round a side: no process-to-process variance to test against
        why = f"one round on a side ({rounds}) cannot be tested over rounds"
        if r > hi or r < 1 / hi:
            return Verdict.UNSTABLE, f"{line()}; {why}"
        return Verdict.UNCHANGED, f"{line()}; {why}"

    def moved(ratio: float, low: float, high: float) -> str | None:
        """ "yes" when (ratio, its interval) show a change beyond the threshold, "maybe" when the
        data cannot exclude one, None when they exclude it (worse-oriented numbers)."""
        evidence = ratio > hi and pair.p_adj < alpha and low > lo_bound
        if evidence and (not noisy or low > hi):
            return "yes"
        if evidence or (high > hi and (noisy or ratio > hi)):
            return "maybe"
        return None

    worse = moved(r, ci_lo, ci_hi)
    better = moved(1 / r, 1 / ci_hi, 1 / ci_lo) if r > 0 and ci_lo > 0 else None
    if worse == "yes":
        return Verdict.REGRESSION, line()
    if better == "yes":
        return Verdict.IMPROVEMENT, line()
    if worse == "maybe" or better == "maybe":
        way = "worse" if worse == "maybe" else "better"
        low = ci_lo if way == "worse" else 1 / ci_hi
        if noisy:
            why = f"too noisy to decide ({_noise_text(pair.noise, config)})"
        elif pair.p_adj >= alpha:
            why = f"not significant over {rounds} (p >= {alpha:g}"
            why += f" after Bonferroni over {pair.family})" if pair.family > 1 else ")"
        else:
            why = f"the {pct}% CI reaches to {low:.2f}× {way} (needs beyond {lo_bound:.2f}×)"
        return Verdict.UNSTABLE, f"{line()}; {why}"
    text = line()
    if noisy:
        text += f"; noisy ({_noise_text(pair.noise, config)}), but the CI stays within the threshold"
    return Verdict.UNCHANGED, text


def _decide_memory(pair: Pair, config: Config) -> tuple[Verdict, str]:
    """Deterministic rule: worse by more than the threshold *and* by more than the byte floor."""
    t = pair.rule.threshold
    hi = 1.0 + t
    b, h = pair.base.side.median, pair.head.side.median
    worse_by = (h - b) if pair.head.direction == "lower" else (b - h)
    r = pair.ratio
    floor = config.memory_floor_bytes
    label = describe(pair.head.benchmark, pair.head.metric)
    ratio_text = "from 0" if math.isinf(r) else f"{r:.2f}×"
    change = f"{label} {format_delta(h - b, 'bytes')} ({ratio_text})"
    floor_text = f"{format_value(floor, 'bytes')} floor"
    if abs(worse_by) <= floor and (r > hi or r < 1 / hi):
        return Verdict.UNCHANGED, f"{change}: within the {floor_text}"
    if r > hi:
        return Verdict.REGRESSION, f"{change}, over threshold {hi:.2f} and the {floor_text}"
    if r < 1 / hi:
        return Verdict.IMPROVEMENT, f"{change}, beyond threshold {hi:.2f} and the {floor_text}"
    return Verdict.UNCHANGED, f"{change}, within threshold {hi:.2f}"


def _decide_work(pair: Pair) -> tuple[Verdict, str]:
    """Deterministic rule for a work count: worse by more than the threshold is a regression.

    The counts of one call repeat exactly (same code, software and shapes), so no statistics and
    no floor: an exact repeat is ratio 1.000, and 40 -> 140 kernels is 3.50x whatever the machine did.
    """
    t = pair.rule.threshold
    hi = 1.0 + t
    b, h = pair.base.side.median, pair.head.side.median
    label = describe(pair.head.benchmark, pair.head.metric)
    unit = pair.head.unit
    r = pair.ratio
    if b == h:
        return Verdict.UNCHANGED, f"{label} {format_value(h, unit)} in both (ratio 1.000)"
    ratio_text = "from 0" if math.isinf(r) else f"{r:.3f}×"
    change = f"{label} {format_value(b, unit)} → {format_value(h, unit)} ({ratio_text})"
    if r > hi:
        return Verdict.REGRESSION, f"{change}, over threshold {hi:.2f}"
    if r < 1 / hi:
        return Verdict.IMPROVEMENT, f"{change}, beyond threshold {hi:.2f}"
    return Verdict.UNCHANGED, f"{change}, within threshold {hi:.2f}"


def _decide_accuracy(pair: Pair, config: Config) -> tuple[Verdict, str]:
    """Deterministic rule for an error against the float64 reference: growth by a factor above a floor.

    Below the floor (``accuracy_floor``, by default the dtype's unit roundoff) an error is rounding:
    both sides are measured against ``max(error, floor)``, so 1e-9 -> 5e-9 in float32 is no change,
    and a regression needs the head's error above the floor and more than ``1 + accuracy_threshold``
    times the base's (default: doubled).  The errors repeat exactly for the same code and inputs on
    the CPU; on a GPU their spread is far below the factor (docs/perf/accuracy.md).
    """
    t = pair.rule.threshold
    hi = 1.0 + t
    b, h = pair.base.side.median, pair.head.side.median
    floor = config.accuracy_floor_for(pair.head.params.get("dtype"))
    label = describe(pair.head.benchmark, pair.head.metric)
    unit = pair.head.unit
    if b == h:
        return Verdict.UNCHANGED, f"{label} {format_value(h, unit)} in both (ratio 1.000)"
    r = max(h, floor) / max(b, floor)
    factor = f" ({h / b:.2f}×)" if b > 0 else ""
    change = f"{label} {format_value(b, unit)} → {format_value(h, unit)}{factor}"
    floor_text = f"the {format_value(floor, unit)} floor"
    if r > hi:
        return Verdict.REGRESSION, f"{change}: less exact, over threshold {hi:.2f} above {floor_text}"
    if r < 1 / hi:
        return Verdict.IMPROVEMENT, f"{change}: more exact, beyond threshold {hi:.2f} above {floor_text}"
    if max(b, h) <= floor:
        return Verdict.UNCHANGED, f"{change}: both below {floor_text} (rounding)"
    return Verdict.UNCHANGED, f"{change}, within threshold {hi:.2f} above {floor_text}"


def _pair_item(pair: Pair, verdict: Verdict, reason: str) -> Item:
    deterministic = pair.head.metric in DETERMINISTIC_METRICS
    return _item(
        pair.base,
        pair.head,
        verdict,
        reason + (f" [{pair.rule.note}]" if pair.rule.note else ""),
        gated=pair.gated,
        threshold=pair.rule.threshold,
        rule_source=pair.rule.source,
        base_value=_finite(pair.base.side.median),
        head_value=_finite(pair.head.side.median),
        ratio=_finite(pair.ratio),
        ci_low=None if deterministic else _finite(pair.ci[0]),
        ci_high=None if deterministic else _finite(pair.ci[1]),
        p_value=None if deterministic or not pair.test.testable else pair.p_adj,
        noise=_finite(pair.noise.iqr_ratio),
        round_cv=_finite(pair.noise.round_cv),
        round_spread=_finite(pair.noise.round_spread),
        p_raw=None if deterministic or not pair.test.testable else pair.test.p,
        round_medians=(pair.base.side.round_medians, pair.head.side.round_medians),
    )


def compare_pairs(pairs: list[Pair], config: Config) -> list[Item]:
    """The test over rounds for every timing, Bonferroni over the gated timings, then the rule.

    A derived number (tokens/s, TFLOP/s of a forward time) is tested over its own rounds and
    adjusted over its source's family: it stores its own p and interval, of the same test its
    source's verdict used (its verdict is the source's, :func:`perfguard.compare.stages`)."""
    timing = [p for p in pairs if p.head.metric not in DETERMINISTIC_METRICS]
    for p in pairs:
        p.ratio = stats.oriented_ratio(p.base.side.median, p.head.side.median, p.head.direction)
        p.noise = stats.Noise.worst(p.base.side.noise, p.head.side.noise)
    family = max(1, sum(p.gated for p in timing))
    gated_keys = {(p.head.benchmark, p.head.key) for p in timing if p.gated}
    for p in timing:
        p.test = stats.rounds_test(
            p.base.side.round_medians,
            p.head.side.round_medians,
            p.head.direction,
            prior_base=p.prior[0],
            prior_head=p.prior[1],
        )
        if p.test.testable:  # the estimate the test is about: the ratio of the rounds' geometric means
            p.ratio = math.exp(p.test.log_ratio)
        p.ci = p.test.interval(config.confidence)
        source = derived_source(p.head.benchmark)
        if p.gated or (source is not None and (source, p.head.key) in gated_keys):
            p.family = family
        p.p_adj = min(1.0, p.test.p * p.family)
    items = []
    for p in pairs:
        if p.head.metric in WORK_METRICS:
            verdict, reason = _decide_work(p)
        elif p.head.metric == ERROR:
            verdict, reason = _decide_accuracy(p, config)
        elif p.head.metric in DETERMINISTIC_METRICS:
            verdict, reason = _decide_memory(p, config)
        else:
            verdict, reason = _decide_timing(p, config)
        items.append(_pair_item(p, verdict, reason))
    return items
