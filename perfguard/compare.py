"""Verdicts: baseline against head, per benchmark x params, and the two-stage retry protocol.

This is the rule that decides whether a pull request fails.  ``docs/verdicts.md`` explains every
number to users; ``research/gpu_timing.md`` §6.3 is where the rule comes from.

Stage 1 compares what is stored for the baseline (the merge-base) with what was measured for the
head.  Those were usually measured at different times, so a shift of the whole machine between
the two sessions (another job, a bimodal process state) is invisible to statistics computed
inside each session.  Therefore nothing fails on stage 1 alone while retries are enabled: every
gated timing whose ratio exceeds ``1 + suspect_fraction * threshold`` (regressions included) is a
*suspect*; the pipeline re-measures the suspects, baseline and head interleaved (A B B A ...) in
fresh processes, ``config.retry.rounds`` rounds a side, and :func:`apply_retry` decides each
suspect on that re-measurement alone.  The false-alarm rate of the whole rule is then about
P(suspect) x P(regression on an interleaved re-measurement).

Typical use by ``perfguard check``::

    config = load_config(find_pyproject(repo), threshold=cli_threshold)
    base = [Measurement.from_results(rounds) for rounds in store.results_for(key, base_sha, profile).values()]
    head = [Measurement.from_results(rounds) for rounds in store.results_for(key, head_sha, profile).values()]
    first = compare_suite(base, head, config, broken_impls=failed_verify)
    if first.suspects and config.retry.enabled:
        # the pipeline's job: re-measure first.suspect_keys, baseline and head interleaved
        # (A B B A ...) in fresh processes, config.retry.rounds rounds a side
        result = apply_retry(first, retry_base, retry_head, config)
    else:
        result = first
    store.record_check(..., items=[CheckItemRecord(**item.as_row()) for item in result.items])
    sys.exit(result.exit_code)

API
---
``Verdict``                  regression improvement unchanged unstable new missing broken failed skipped
                             accepted
``Measurement``              one side of one benchmark x params (rounds of samples, status, unit, metric...)
``Measurement.from_results(rounds)``           -> Measurement from the store's results, one per round
``measurements_from_rounds(rounds)``            -> [Measurement] from rounds of results (grouped by key)
``Item``                     one verdict; its fields are the ``check_items`` columns (``Item.as_row()``)
``compare_sides(base, head, config)``          -> Item (a family of one for the p-value adjustment)
``compare_suite(base, head, config, broken_impls)`` -> SuiteComparison (items, suspects, exit_code)
``decide_after_retry(first, retry)``           -> the final Item of one suspect
``apply_retry(first, base, head, config)``     -> SuiteComparison with every suspect decided
``params_key(params)``       canonical "k=v,k=v" (sorted), as stored
"""

from __future__ import annotations

import enum
import json
import math
import sys
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from perfguard import stats
from perfguard.config import Config, Rule
from perfguard.errors import EXIT_FAILED, EXIT_OK

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str(self.value)


class Verdict(StrEnum):
    """The outcome of one item; ``regression``, ``broken`` and ``failed`` fail a gated item."""

    REGRESSION = "regression"  # worse beyond the threshold, significant, stable (confirmed on retry)
    IMPROVEMENT = "improvement"  # the mirror image (never fails)
    UNCHANGED = "unchanged"  # no change beyond the threshold that the data can show
    UNSTABLE = "unstable"  # too noisy to tell whether it moved beyond the threshold (reported)
    NEW = "new"  # in head only, or the baseline gave no usable number (never fails)
    MISSING = "missing"  # in the baseline only (reported, does not fail)
    BROKEN = "broken"  # the implementation failed `perfguard verify` in head (fails)
    FAILED = "failed"  # the benchmark failed in head (fails when it worked in the baseline)
    SKIPPED = "skipped"  # skipped on either side (cannot run here: no CUDA, too big)
    ACCEPTED = "accepted"  # a regression within a trusted acceptance's scope and ceiling (perfguard.accept)


FAILING_VERDICTS = frozenset({Verdict.REGRESSION, Verdict.BROKEN, Verdict.FAILED})
#: The benchmark name of the item that stands for a broken implementation with no benchmark.
VERIFY_BENCHMARK = "perfguard verify"
STATUSES = ("ok", "failed", "skipped")
#: Metrics whose value is deterministic (no statistics: a rise over the threshold fails; memory
#: also needs a rise over its byte floor).  The work metrics count what one call does.
WORK_METRICS = frozenset({"flops", "ops", "kernels", "allocated"})
DETERMINISTIC_METRICS = frozenset({"memory"}) | WORK_METRICS
#: Metrics that are reported, not gated, unless an override says ``gate = true``.
REPORTED_METRICS = frozenset({"throughput", "efficiency"})
#: Reported numbers computed from another benchmark's samples (asvrun derives them from the forward
#: samples): one measurement gets one verdict, its source's (DESIGN.md, "Verdicts").
DERIVED_FROM = {
    "Throughput.track_tokens_per_second": "Forward.track_time",
    "Throughput.track_tflops": "Forward.track_time",
}

_LABELS = {
    "Forward.track_time": "forward time",
    "ForwardBackward.track_time": "forward+backward time",
    "PeakMemory.track_forward": "forward peak memory",
    "PeakMemory.track_forward_backward": "forward+backward peak memory",
    "Throughput.track_tokens_per_second": "throughput",
    "Throughput.track_tflops": "TFLOP/s",
}
for _pass, _words in (("forward", "forward"), ("forward_backward", "forward+backward")):
    _LABELS[f"Work.track_{_pass}_flops"] = f"{_words} FLOPs"
    _LABELS[f"Work.track_{_pass}_ops"] = f"{_words} aten ops"
    _LABELS[f"Work.track_{_pass}_kernels"] = f"{_words} CUDA kernels"
    _LABELS[f"Work.track_{_pass}_allocated"] = f"{_words} bytes allocated"
_WORDS = {  # metric -> (worse, better) after "N.NN×"
    "time": ("slower", "faster"),
    "memory": ("more memory", "less memory"),
    "throughput": ("lower", "higher"),
    "efficiency": ("lower", "higher"),
    "flops": ("more FLOPs", "fewer FLOPs"),
    "ops": ("more ops", "fewer ops"),
    "kernels": ("more kernels", "fewer kernels"),
    "allocated": ("more allocated", "less allocated"),
}


def params_key(params: Mapping[str, Any]) -> str:
    """The canonical key of a parameter set, as the store writes it (``perfguard.store.params_key``).

    ``k=v`` sorted by name and joined by commas; strings as they are, everything else as JSON
    (``seq_len=256``, ``causal=true``).  Repeated here rather than imported so that comparing
    needs no database layer; ``tests/test_compare.py`` holds the two to the same output.
    """
    parts = []
    for name in sorted(params):
        value = params[name]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        parts.append(f"{name}={text}")
    return ",".join(parts)


def derived_source(benchmark: str) -> str | None:
    """The benchmark a derived one is computed from, with the same asv module, or None.

    ``bench_attention.Throughput.track_tflops`` -> ``bench_attention.Forward.track_time``.
    """
    parts = benchmark.split(".")
    source = DERIVED_FROM.get(".".join(parts[-2:]))
    return None if source is None else ".".join([*parts[:-2], source])


def describe(benchmark: str, metric: str) -> str:
    """Human name of a benchmark for reason texts ("forward time"), with or without asv's module."""
    short = benchmark.split(".", 1)[1] if benchmark.count(".") >= 2 else benchmark  # drop asv's module
    return _LABELS.get(short, f"{short} ({metric})")


# --------------------------------------------------------------------------------------------
# Inputs and outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Measurement:
    """One side (baseline or head) of one benchmark x params, as the pipeline read it.

    ``rounds``: per-call samples of each round (one fresh process each); rounds need not have
    equal sizes; NaN/inf samples are ignored.  When there are no samples, ``value`` (asv's single
    number) counts as one round of one sample.  ``status`` is ``ok``, ``failed`` (``error`` says
    why) or ``skipped``.  ``metric`` / ``unit`` / ``direction`` / ``gated`` are the benchmark's
    (docs/design.md, "asv suites"); ``method`` is how it was timed (cuda-graph, cuda-events,
    cpu-wall).  ``impl`` defaults to ``params["impl"]`` and ``key`` to :func:`params_key`.
    """

    benchmark: str
    params: Mapping[str, Any]
    rounds: Sequence[ArrayLike] = ()
    value: float | None = None
    status: str = "ok"
    metric: str = "time"
    unit: str = "seconds"
    direction: stats.Direction = "lower"
    gated: bool = True
    method: str | None = None
    error: str | None = None
    impl: str = ""
    key: str = ""
    side: stats.Side = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")
        if self.direction not in ("lower", "higher"):
            raise ValueError(f"direction must be 'lower' or 'higher', not {self.direction!r}")
        if not self.impl:
            object.__setattr__(self, "impl", str(self.params.get("impl", "")))
        if not self.key:
            object.__setattr__(self, "key", params_key(self.params))
        rounds: Sequence[ArrayLike] = self.rounds
        if not any(np.size(r) for r in rounds) and self.value is not None:
            rounds = [[self.value]]
        object.__setattr__(self, "side", stats.Side.of(rounds))

    @classmethod
    def from_results(cls, results: Sequence[ResultLike]) -> Measurement:
        """One side from its stored rounds (``Store.results_for(...)[key]``: one result per round).

        Every ok round contributes its samples (or its value when it has none).  A benchmark that
        failed in any round is ``failed`` (with that round's error): one that crashes now and then
        is broken, not noisy.  One that no round ran is ``skipped``.
        """
        return _from_results(results)


def measurements_from_rounds(rounds: Iterable[Iterable[ResultLike]]) -> list[Measurement]:
    """One :class:`Measurement` per benchmark x params from rounds of results (one list per round).

    What ``perfguard check`` and ``perfguard calibrate`` compare: the store's rounds, or the
    records of rounds just measured, grouped by ``(benchmark, params_key)`` in first-seen order.
    """
    by_key: dict[tuple[str, str], list[ResultLike]] = {}
    for results in rounds:
        for result in results:
            by_key.setdefault((result.benchmark, result.params_key), []).append(result)
    return [Measurement.from_results(group) for group in by_key.values()]


class ResultLike(Protocol):
    """What :meth:`Measurement.from_results` reads from one round (a store ``StoredResult``)."""

    benchmark: str
    impl: str
    params: Mapping[str, Any]
    params_key: str
    metric: str
    unit: str
    direction: str
    gated: bool
    status: str
    value: float | None
    samples: Sequence[float] | None
    method: str | None
    error: str | None


def _from_results(results: Sequence[ResultLike]) -> Measurement:
    if not results:
        raise ValueError("from_results needs at least one round")
    first = results[0]
    keys = {(r.benchmark, r.params_key) for r in results}
    if len(keys) > 1:
        raise ValueError(f"rounds of different benchmarks: {sorted(keys)}")
    failed = [r for r in results if r.status == "failed"]
    ok = [r for r in results if r.status == "ok"]
    rounds: list[list[float]]
    if failed:  # a benchmark that crashes in some rounds is a failing benchmark
        status, error, rounds = "failed", failed[0].error, []
    elif not ok:
        status, error, rounds = "skipped", results[0].error, []
    else:
        status, error = "ok", None
        rounds = [list(r.samples) if r.samples else ([r.value] if r.value is not None else []) for r in ok]
    direction = first.direction if first.direction in ("lower", "higher") else "lower"
    return Measurement(
        benchmark=first.benchmark,
        params=dict(first.params),
        rounds=rounds,
        status=status,
        metric=first.metric,
        unit=first.unit,
        direction=direction,  # type: ignore[arg-type]
        gated=first.gated,
        method=next((r.method for r in ok if r.method), first.method),
        error=error,
        impl=first.impl,
        key=first.params_key,
    )


_ROW_FIELDS = (
    "benchmark",
    "impl",
    "params",
    "params_key",
    "metric",
    "unit",
    "direction",
    "gated",
    "verdict",
    "base_value",
    "head_value",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
    "noise",
    "threshold",
    "method",
    "retried",
    "base_n",
    "head_n",
    "reason",
)


@dataclass(frozen=True)
class Item:
    """One verdict.  The first 22 fields are exactly the ``check_items`` columns (:meth:`as_row`).

    ``gated``: whether this item can fail the check.  ``ratio``, ``ci_low``, ``ci_high``: oriented
    so that > 1 is worse (None where undefined or infinite).  ``p_value``: the p-value the
    decision used (Holm-adjusted over the suite's gated timings).  ``noise``: the larger
    within-round IQR/median of the two sides.  ``threshold``: the relative threshold in force
    (0.20 = 20%).  ``base_n`` / ``head_n``: samples a side.  The fields after ``reason`` are not
    stored: the CV of round medians, the raw p-value, the Hodges-Lehmann ratio, round counts,
    where the threshold came from, and for a retried item its stage-1 item (``first``).
    """

    benchmark: str
    impl: str
    params: dict[str, Any]
    params_key: str
    metric: str
    unit: str
    direction: str
    gated: bool
    verdict: Verdict
    base_value: float | None
    head_value: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    noise: float | None
    threshold: float
    method: str | None
    retried: bool
    base_n: int
    head_n: int
    reason: str
    round_cv: float | None = None
    round_spread: float | None = None
    p_raw: float | None = None
    hodges_lehmann: float | None = None
    base_rounds: int = 0
    head_rounds: int = 0
    rule_source: str = ""
    first: Item | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.benchmark, self.params_key)

    @property
    def fails(self) -> bool:
        """Whether this item fails the check (exit code 1)."""
        return self.gated and self.verdict in FAILING_VERDICTS

    def as_row(self) -> dict[str, Any]:
        """The ``check_items`` columns of this item (``verdict`` as its string value)."""
        row = {name: getattr(self, name) for name in _ROW_FIELDS}
        row["verdict"] = str(self.verdict)
        row["params"] = dict(self.params)
        return row


@dataclass(frozen=True)
class SuiteComparison:
    """All items of one comparison, the suspects to re-measure (worst first), and the exit code."""

    items: tuple[Item, ...]
    suspects: tuple[Item, ...] = ()

    @property
    def failing(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.fails)

    @property
    def exit_code(self) -> int:
        """1 if any item fails (regression, broken, failed where the baseline worked), else 0."""
        return EXIT_FAILED if self.failing else EXIT_OK

    @property
    def suspect_keys(self) -> tuple[tuple[str, str], ...]:
        """(benchmark, params_key) of each suspect, worst first: what the pipeline re-measures."""
        return tuple(i.key for i in self.suspects)

    def counts(self) -> dict[str, int]:
        """Number of items per verdict (every verdict present, zeros included)."""
        out = {str(v): 0 for v in Verdict}
        for i in self.items:
            out[str(i.verdict)] += 1
        return out


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def _fmt_p(p: float) -> str:
    """3e-06 -> "3e-6", 0.0123 -> "0.012", 0.5 -> "0.5"."""
    if p >= 0.001:
        return f"{p:.2g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _fmt_bytes(b: float) -> str:
    sign = "-" if b < 0 else "+"
    b = abs(b)
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if b >= size:
            return f"{sign}{b / size:.1f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{sign}{b:.0f} B"


def _fmt_ratio(ratio: float, metric: str) -> str:
    """ "2.01× slower" or "1.50× faster" for an oriented ratio (> 1 = worse)."""
    worse, better = _WORDS.get(metric, ("worse", "better"))
    if math.isinf(ratio):
        return f"infinitely {worse}" if metric == "time" else f"∞× {worse}"
    if ratio >= 1:
        return f"{ratio:.2f}× {worse}"
    return f"{1 / ratio:.2f}× {better}"


def _fmt_stats(ratio: float, ci: tuple[float, float], p: float | None, confidence: float) -> str:
    """ "(95% CI 1.93–2.10, p=3e-6)", the interval in the orientation _fmt_ratio shows."""
    lo, hi = ci if ratio >= 1 else (1 / ci[1] if ci[1] else math.inf, 1 / ci[0] if ci[0] else math.inf)
    parts = []
    if math.isfinite(lo) and math.isfinite(hi):
        parts.append(f"{round(confidence * 100)}% CI {lo:.2f}–{hi:.2f}")
    if p is not None:
        parts.append(f"p={_fmt_p(p)}")
    return f"({', '.join(parts)})" if parts else ""


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------------------------
# The rule
# --------------------------------------------------------------------------------------------


@dataclass
class _Pair:
    """Working state of one benchmark x params present on both sides."""

    base: Measurement
    head: Measurement
    rule: Rule
    gated: bool
    ratio: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    p_raw: float = 1.0
    p_adj: float = 1.0
    family: int = 1  # gated timings the p-value was adjusted over
    noise: stats.Noise = field(default_factory=lambda: stats.Noise(0.0, None))


def _gated(m: Measurement, rule: Rule) -> bool:
    if rule.gate is not None:
        return rule.gate
    return m.gated and m.metric not in REPORTED_METRICS


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
    m = head if head is not None else base
    assert m is not None
    bv = _finite(base.side.median) if base is not None and base.status == "ok" else None
    hv = _finite(head.side.median) if head is not None and head.status == "ok" else None
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
        base_value=bv,
        head_value=hv,
        ratio=None,
        ci_low=None,
        ci_high=None,
        p_value=None,
        noise=None,
        threshold=threshold,
        method=(head.method if head is not None else None) or (base.method if base is not None else None),
        retried=False,
        base_n=base.side.n if base is not None else 0,
        head_n=head.side.n if head is not None else 0,
        reason=reason,
        base_rounds=base.side.k if base is not None else 0,
        head_rounds=head.side.k if head is not None else 0,
        rule_source=rule_source,
    )


def _structural(
    base: Measurement | None, head: Measurement | None, config: Config, broken: bool
) -> Item | _Pair:
    """Items that need no statistics (new, missing, broken, failed, skipped), or a pair to compare."""
    m = head if head is not None else base
    assert m is not None
    rule = config.rule_for(m.impl, m.benchmark, m.metric, m.params)
    gated = _gated(m, rule)

    def item(verdict: Verdict, reason: str, gated: bool = gated) -> Item:
        return _bare_item(
            base, head, verdict, reason, threshold=rule.threshold, gated=gated, rule_source=rule.source
        )

    if broken:
        return item(Verdict.BROKEN, f"implementation {m.impl!r} failed perfguard verify in head", gated=True)
    if base is None:
        assert head is not None
        if head.status == "failed":
            return item(Verdict.FAILED, f"new in head and failed there: {head.error or 'no error'}", False)
        return item(Verdict.NEW, "new in head: no baseline to compare with", False)
    if head is None:
        return item(Verdict.MISSING, "in the baseline only: not measured in head", False)
    if head.status == "failed" or (head.status == "ok" and head.side.n == 0):
        error = head.error or "no finite samples"
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
    return _Pair(base=base, head=head, rule=rule, gated=gated)


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


def _decide_timing(pair: _Pair, config: Config, p_better: float) -> tuple[Verdict, str]:
    """The statistical rule for a timing-like item (docs/verdicts.md, "Stage 1")."""
    t = pair.rule.threshold
    hi = 1.0 + t
    lo_bound = 1.0 + t / 2.0
    r = pair.ratio
    ci_lo, ci_hi = pair.ci
    noisy = _is_noisy(pair.noise, config)
    alpha = config.alpha
    pct = round(config.confidence * 100)

    def line(p: float | None) -> str:
        label = describe(pair.head.benchmark, pair.head.metric)
        change = _fmt_ratio(r, pair.head.metric)
        numbers = _fmt_stats(r, pair.ci, p, config.confidence)
        return f"{label} {change}{' ' if numbers else ''}{numbers}, threshold {hi:.2f}"

    evidence = r > hi and pair.p_adj < alpha and ci_lo > lo_bound
    if evidence and (not noisy or ci_lo > hi):
        return Verdict.REGRESSION, line(pair.p_adj)
    if evidence or (ci_hi > hi and (noisy or r > hi)):
        if noisy:
            why = f"too noisy to decide ({_noise_text(pair.noise, config)})"
        elif pair.p_adj >= alpha:
            why = f"not significant (p >= {alpha:g}"
            why += f" after Holm over {pair.family} benchmarks)" if pair.family > 1 else ")"
        else:
            why = f"the {pct}% CI reaches down to {ci_lo:.2f} (needs > {lo_bound:.2f})"
        return Verdict.UNSTABLE, f"{line(pair.p_adj)}; {why}"
    better_evidence = r < 1 / hi and p_better < alpha and ci_hi < 1 / lo_bound
    if better_evidence and (not noisy or ci_hi < 1 / hi):
        return Verdict.IMPROVEMENT, line(p_better)
    text = line(None if r < 1 else pair.p_adj)  # the p of "worse" says nothing about a speed-up
    if noisy:
        text += f"; noisy ({_noise_text(pair.noise, config)}), but the CI stays under the threshold"
    return Verdict.UNCHANGED, text


def _decide_memory(pair: _Pair, config: Config) -> tuple[Verdict, str]:
    """Deterministic rule: worse by more than the threshold *and* by more than the byte floor."""
    t = pair.rule.threshold
    hi = 1.0 + t
    b, h = pair.base.side.median, pair.head.side.median
    worse_by = (h - b) if pair.head.direction == "lower" else (b - h)
    r = pair.ratio
    floor = config.memory_floor_bytes
    label = describe(pair.head.benchmark, pair.head.metric)
    ratio_text = "from 0" if math.isinf(r) else f"{r:.2f}×"
    change = f"{label} {_fmt_bytes(h - b)} ({ratio_text})"
    floor_text = f"{_fmt_bytes(floor)[1:]} floor"
    if abs(worse_by) <= floor and (r > hi or r < 1 / hi):
        return Verdict.UNCHANGED, f"{change}: within the {floor_text}"
    if r > hi:
        return Verdict.REGRESSION, f"{change}, over threshold {hi:.2f} and the {floor_text}"
    if r < 1 / hi:
        return Verdict.IMPROVEMENT, f"{change}, beyond threshold {hi:.2f} and the {floor_text}"
    return Verdict.UNCHANGED, f"{change}, within threshold {hi:.2f}"


def _decide_work(pair: _Pair) -> tuple[Verdict, str]:
    """Deterministic rule for a work count: worse by more than the threshold is a regression.

    The counts of one call repeat exactly (same code, software and shapes), so no statistics and
    no floor: an exact repeat is ratio 1.000, and 40 -> 140 kernels is 3.50x whatever the machine did.
    """
    t = pair.rule.threshold
    hi = 1.0 + t
    b, h = pair.base.side.median, pair.head.side.median
    label = describe(pair.head.benchmark, pair.head.metric)
    r = pair.ratio
    if b == h:
        return Verdict.UNCHANGED, f"{label} {_fmt_count(h)} in both (ratio 1.000)"
    ratio_text = "from 0" if math.isinf(r) else f"{r:.3f}×"
    change = f"{label} {_fmt_count(b)} → {_fmt_count(h)} ({ratio_text})"
    if r > hi:
        return Verdict.REGRESSION, f"{change}, over threshold {hi:.2f}"
    if r < 1 / hi:
        return Verdict.IMPROVEMENT, f"{change}, beyond threshold {hi:.2f}"
    return Verdict.UNCHANGED, f"{change}, within threshold {hi:.2f}"


def _fmt_count(value: float) -> str:
    if abs(value) >= 1e9:
        return f"{value / 1e9:.3g}G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    return f"{value:,.0f}"


def _pair_item(pair: _Pair, verdict: Verdict, reason: str, hl: float | None) -> Item:
    base, head = pair.base, pair.head
    deterministic = head.metric in DETERMINISTIC_METRICS
    return Item(
        benchmark=head.benchmark,
        impl=head.impl,
        params=dict(head.params),
        params_key=head.key,
        metric=head.metric,
        unit=head.unit,
        direction=head.direction,
        gated=pair.gated,
        verdict=verdict,
        base_value=_finite(base.side.median),
        head_value=_finite(head.side.median),
        ratio=_finite(pair.ratio),
        ci_low=None if deterministic else _finite(pair.ci[0]),
        ci_high=None if deterministic else _finite(pair.ci[1]),
        p_value=None if deterministic else pair.p_adj,
        noise=_finite(pair.noise.iqr_ratio),
        threshold=pair.rule.threshold,
        method=head.method or base.method,
        retried=False,
        base_n=base.side.n,
        head_n=head.side.n,
        reason=reason + (f" [{pair.rule.note}]" if pair.rule.note else ""),
        round_cv=_finite(pair.noise.round_cv),
        round_spread=_finite(pair.noise.round_spread),
        p_raw=None if deterministic else pair.p_raw,
        hodges_lehmann=_finite(hl) if hl is not None else None,
        base_rounds=base.side.k,
        head_rounds=head.side.k,
        rule_source=pair.rule.source,
    )


def _seed(config: Config, pair: _Pair) -> list[int]:
    return [config.seed, zlib.crc32(f"{pair.head.benchmark}|{pair.head.key}".encode())]


def _compare_pairs(pairs: list[_Pair], config: Config) -> list[Item]:
    """Statistics for all pairs at once (batched), Holm over the gated timings, then the rule."""
    timing = [p for p in pairs if p.head.metric not in DETERMINISTIC_METRICS]
    for p in pairs:
        p.ratio = stats.oriented_ratio(p.base.side.median, p.head.side.median, p.head.direction)
        p.noise = stats.Noise.worst(p.base.side.noise, p.head.side.noise)
    if timing:
        p_raw = stats.mann_whitney_worse_many(
            [(p.base.side.pooled, p.head.side.pooled) for p in timing], [p.head.direction for p in timing]
        )
        cis = stats.bootstrap_ratio_cis(
            [(p.base.side, p.head.side) for p in timing],
            [p.head.direction for p in timing],
            confidence=config.confidence,
            resamples=config.bootstrap_resamples,
            seeds=[_seed(config, p) for p in timing],
        )
        gated_idx = [i for i, p in enumerate(timing) if p.gated]
        adjusted = stats.holm(p_raw[gated_idx])
        for i, p in enumerate(timing):
            p.p_raw = float(p_raw[i])
            p.p_adj = float(p_raw[i])
            p.ci = (float(cis[i, 0]), float(cis[i, 1]))
        for j, i in enumerate(gated_idx):
            timing[i].p_adj = float(adjusted[j])
            timing[i].family = len(gated_idx)
    family = max(1, sum(p.gated for p in timing))
    items = []
    for p in pairs:
        hl: float | None = None
        if p.head.metric in WORK_METRICS:
            verdict, reason = _decide_work(p)
        elif p.head.metric in DETERMINISTIC_METRICS:
            verdict, reason = _decide_memory(p, config)
        else:
            p_better = 1.0
            hi = 1.0 + p.rule.threshold
            if p.ratio < 1 / hi:  # only then can it be an improvement; Bonferroni (never fails)
                p_better = stats.mann_whitney_worse(p.head.side.pooled, p.base.side.pooled, p.head.direction)
                p_better = min(1.0, p_better * (family if p.gated else 1))
            verdict, reason = _decide_timing(p, config, p_better)
            if verdict is not Verdict.UNCHANGED:
                hl = stats.hodges_lehmann_ratio(p.base.side.pooled, p.head.side.pooled, p.head.direction)
        items.append(_pair_item(p, verdict, reason, hl))
    return items


def _index(measurements: Iterable[Measurement], side: str) -> dict[tuple[str, str], Measurement]:
    out: dict[tuple[str, str], Measurement] = {}
    for m in measurements:
        k = (m.benchmark, m.key)
        if k in out:
            raise ValueError(f"{side} has two measurements of {m.benchmark} ({m.key}); merge their rounds")
        out[k] = m
    return out


def _is_suspect(item: Item, config: Config) -> bool:
    return (
        item.gated
        and item.metric not in DETERMINISTIC_METRICS
        and item.verdict in (Verdict.REGRESSION, Verdict.UNSTABLE, Verdict.UNCHANGED)
        and item.ratio is not None
        and item.ratio > 1.0 + config.suspect_fraction * item.threshold
    )


def _compare(
    base: Iterable[Measurement],
    head: Iterable[Measurement],
    config: Config,
    broken_impls: Iterable[str] = (),
    *,
    only: set[tuple[str, str]] | None = None,
) -> list[Item]:
    b = _index(base, "the baseline")
    h = _index(head, "head")
    broken = set(broken_impls)
    keys = [k for k in h if only is None or k in only]
    keys += [k for k in b if k not in h and (only is None or k in only)]
    slots: list[Item | _Pair] = [
        _structural(b.get(k), h.get(k), config, (h.get(k) or b[k]).impl in broken) for k in keys
    ]
    compared = iter(_compare_pairs([s for s in slots if isinstance(s, _Pair)], config))
    items = [next(compared) if isinstance(s, _Pair) else s for s in slots]
    seen = {i.impl for i in items}
    for impl in sorted(broken - seen):  # a broken implementation with no benchmark at all
        items.append(
            Item(
                # The store's check_items know the four metrics only; this row stands for the
                # implementation as a whole and is recognised by its benchmark name.
                benchmark=VERIFY_BENCHMARK,
                impl=impl,
                params={"impl": impl},
                params_key=params_key({"impl": impl}),
                metric="time",
                unit="n/a",
                direction="lower",
                gated=True,
                verdict=Verdict.BROKEN,
                base_value=None,
                head_value=None,
                ratio=None,
                ci_low=None,
                ci_high=None,
                p_value=None,
                noise=None,
                threshold=config.threshold,
                method=None,
                retried=False,
                base_n=0,
                head_n=0,
                reason=f"implementation {impl!r} failed perfguard verify in head",
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
    slot = _structural(base, head, config, broken)
    return _compare_pairs([slot], config)[0] if isinstance(slot, _Pair) else slot


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
    items = _follow_sources(_compare(base, head, config, broken_impls))
    suspects = sorted((i for i in items if _is_suspect(i, config)), key=lambda i: -(i.ratio or 0.0))
    return SuiteComparison(items=tuple(items), suspects=tuple(suspects))


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

    The re-measurement (baseline and head interleaved in fresh processes) decides: the stage-1
    data were taken in two sessions, which is what made the item a suspect.  A regression is
    only reported when it holds again on the re-measurement.  One piece of the first
    measurement is kept: its *round spread*, how far apart fresh processes of the same code
    landed.  When that exceeds 1 + threshold (a launch-bound benchmark whose processes run at one
    of two speeds), five rounds against five can show up to that factor by chance, so the
    re-measurement's interval must clear spread x (1 + threshold/2), the margin ``L > 1 +
    threshold/2`` asks of any benchmark, scaled by the spread (docs/verdicts.md, "Stage 2").
    """
    if first.key != retry.key:
        raise ValueError(f"retry of {retry.benchmark} ({retry.params_key}) given for {first.key}")
    spread = first.round_spread or 1.0
    t = retry.threshold
    if retry.verdict is Verdict.REGRESSION and spread > 1 + t:
        needed = spread * (1 + t / 2)
        if retry.ci_low is not None and retry.ci_low <= needed:
            why = (
                f"but fresh processes of the same code landed up to {spread:.2f}× apart in the first "
                f"measurement: a regression needs the CI above {needed:.2f}"
            )
            retry = replace(retry, verdict=Verdict.UNSTABLE, reason=f"{retry.reason}; {why}")
    if retry.verdict is Verdict.REGRESSION:
        prefix = "confirmed on re-measurement"
    elif first.verdict is Verdict.REGRESSION:
        prefix = "not confirmed on re-measurement"
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

    Only the suspects' keys are read from ``base`` and ``head``; their p-values are Holm-adjusted
    over the re-measured family.  A suspect with no re-measurement keeps its stage-1 verdict, and
    its reason says so.
    """
    wanted = set(first.suspect_keys)
    # Derived items of a suspect come from the same re-measured samples: their numbers follow too.
    followers = {i.key for i in first.items if _source_key(i) in wanted}
    retried = {i.key: i for i in _compare(base, head, config, only=wanted | followers)}
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


def geometric_mean_ratio(items: Iterable[Item]) -> float | None:
    """Geometric mean of the finite positive ratios of ``items`` (a per-implementation summary)."""
    r = np.array([i.ratio for i in items if i.ratio is not None and i.ratio > 0])
    return float(np.exp(np.mean(np.log(r)))) if r.size else None
