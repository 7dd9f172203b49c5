"""What is compared and what comes out: one side of a benchmark (:class:`Measurement`), one verdict
(:class:`Item`), the verdicts of a suite (:class:`SuiteComparison`), and the names of verdicts and
metrics.  The rule itself is :mod:`perfguard.compare.rule`; the two stages are
:mod:`perfguard.compare.stages`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from perfguard import stats
from perfguard.engine.suite import short_name
from perfguard.errors import EXIT_FAILED, EXIT_OK
from perfguard.store.records import (
    CHECK_ITEM_COLUMNS,
    CheckItemRecord,
    ResultRecord,
    params_key,
)

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
    NOT_AFFECTED = "not affected"  # the change cannot reach it: not measured (perfguard.reach)


FAILING_VERDICTS = frozenset({Verdict.REGRESSION, Verdict.BROKEN, Verdict.FAILED})
#: The benchmark name of the item that stands for a broken implementation with no benchmark.
VERIFY_BENCHMARK = "perfguard verify"
#: The benchmark name of the item that stands for an implementation the change cannot reach
#: (perfguard.reach): not measured, its stored baseline stays the baseline.
REACH_BENCHMARK = "perfguard reach"
STATUSES = ("ok", "failed", "skipped")
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
for _suffix, _causal in (("", ""), ("_causal", "causal ")):
    _LABELS[f"Accuracy.track_output_error{_suffix}"] = f"{_causal}output error"
    for _tensor in ("q", "k", "v"):
        _LABELS[f"Accuracy.track_{_tensor}_error{_suffix}"] = f"{_causal}{_tensor} gradient error"


def derived_source(benchmark: str) -> str | None:
    """The benchmark a derived one is computed from, with the same asv module, or None.

    ``bench_attention.Throughput.track_tflops`` -> ``bench_attention.Forward.track_time``.
    """
    parts = benchmark.split(".")
    source = DERIVED_FROM.get(".".join(parts[-2:]))
    return None if source is None else ".".join([*parts[:-2], source])


def describe(benchmark: str, metric: str) -> str:
    """Human name of a benchmark for reason texts ("forward time"), with or without asv's module."""
    short = short_name(benchmark)
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
    side: stats.Samples = field(init=False, repr=False)

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
        object.__setattr__(self, "side", stats.Samples.of(rounds))

    @classmethod
    def from_results(cls, results: Sequence[ResultRecord]) -> Measurement:
        """One side from its stored rounds (``Store.results_for(...)[key]``: one result per round).

        Every ok round contributes its samples (or its value when it has none).  A benchmark that
        failed in any round is ``failed`` (with that round's error): one that crashes now and then
        is broken, not noisy.  One that no round ran is ``skipped``.
        """
        return _from_results(results)


def measurements_from_rounds(rounds: Iterable[Iterable[ResultRecord]]) -> list[Measurement]:
    """One :class:`Measurement` per benchmark x params from rounds of results (one list per round).

    What ``perfguard check`` and ``perfguard calibrate`` compare: the store's rounds, or the
    records of rounds just measured, grouped by ``(benchmark, params_key)`` in first-seen order.
    """
    by_key: dict[tuple[str, str], list[ResultRecord]] = {}
    for results in rounds:
        for result in results:
            by_key.setdefault((result.benchmark, result.params_key), []).append(result)
    return [Measurement.from_results(group) for group in by_key.values()]


def _from_results(results: Sequence[ResultRecord]) -> Measurement:
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


@dataclass(frozen=True, kw_only=True)
class Item(CheckItemRecord):
    """One verdict: a ``check_items`` row (the fields of :class:`CheckItemRecord`, :meth:`as_row`)
    and what the comparison knows besides, which is not stored.

    Stored: ``gated``: whether this item can fail the check.  ``ratio``, ``ci_low``, ``ci_high``:
    oriented so that > 1 is worse (None where undefined or infinite).  ``p_value``: the p-value the
    decision used, the one its reason states: the two-sided test of the ratio over the round
    medians (:func:`perfguard.stats.rounds_test`), Bonferroni-adjusted over the comparison's gated
    timings (a derived row: its own test, adjusted over its source's family); none for a
    deterministic metric or a side of one round.  ``ci_low`` / ``ci_high``: that test's interval.
    ``noise``: the larger
    within-round IQR/median of the two sides.  ``threshold``: the relative threshold in force
    (0.20 = 20%).  ``base_n`` / ``head_n``: samples a side.  Not stored: the CV of round medians,
    the unadjusted p-value, round counts, each side's round medians
    (baseline, head: what a re-measurement pools into its variance), where the threshold came
    from, and for a retried item its stage-1 item (``first``).
    """

    params: dict[str, Any]
    verdict: Verdict
    round_cv: float | None = None
    round_spread: float | None = None
    p_raw: float | None = None
    base_rounds: int = 0
    head_rounds: int = 0
    rule_source: str = ""
    round_medians: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    first: Item | None = None

    @classmethod
    def of_implementation(
        cls, impl: str, benchmark: str, verdict: Verdict, *, gated: bool, threshold: float, reason: str
    ) -> Item:
        """An item that stands for an implementation as a whole, not one of its benchmarks (a broken
        one, :data:`VERIFY_BENCHMARK`; one the change cannot reach, :data:`REACH_BENCHMARK`): the
        store's check_items know the metrics only, so it is recognised by its benchmark name."""
        return cls(
            benchmark=benchmark,
            impl=impl,
            params={"impl": impl},
            params_key=params_key({"impl": impl}),
            metric="time",
            unit="n/a",
            direction="lower",
            gated=gated,
            verdict=verdict,
            threshold=threshold,
            reason=reason,
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.benchmark, self.params_key)

    @property
    def fails(self) -> bool:
        """Whether this item fails the check (exit code 1)."""
        return self.gated and self.verdict in FAILING_VERDICTS

    def as_row(self) -> dict[str, Any]:
        """The ``check_items`` columns of this item (``verdict`` as its string value)."""
        row = {name: getattr(self, name) for name in CHECK_ITEM_COLUMNS}
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


def geometric_mean_ratio(items: Iterable[Item]) -> float | None:
    """Geometric mean of the finite positive ratios of ``items`` (a per-implementation summary)."""
    r = np.array([i.ratio for i in items if i.ratio is not None and i.ratio > 0])
    return float(np.exp(np.mean(np.log(r)))) if r.size else None
