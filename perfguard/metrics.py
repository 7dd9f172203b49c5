"""The metric vocabulary: every kind of number perfguard measures, defined once (issue 28).

A benchmark's numbers are of one *metric*; what perfguard does with them follows from the metric
alone: the unit they are stored in, which direction is worse, whether they gate a check by
default, whether they repeat exactly (a peak, a count: no statistics) or need them (a timing),
whether zero is a valid value (a count of work inside a compiled region), the words a verdict uses
("1.30× slower", "2.00× more kernels"), the word a benchmark's label ends with (the report's
columns, in this order) and the family the history site groups it in.  The store's choices, the
configuration's keys, the comparison rules, the reports and the site all read this table; adding
a metric is a row here, its benchmark in the suite (``perfguard.engine.suite`` and
``asv_benchmarks/``) and its label (``perfguard.report.formatting.BENCHMARK_LABELS``).

A leaf module: no perfguard import, so the store's records and the engine can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: Which way is worse: a time or a byte count going up, a throughput going down.
DIRECTIONS = ("lower", "higher")


@dataclass(frozen=True)
class Metric:
    """One kind of number: how it is stored, compared and named."""

    name: str
    unit: str
    direction: str  # the better direction: "lower" or "higher"
    gated: bool  # fails a check by default (a config override can say otherwise)
    deterministic: bool  # repeats exactly for the same code: compared without statistics
    work: bool  # counts what one call does (zero is a valid count)
    column: str  # the word a benchmark label of this metric ends with (report columns, in order)
    worse: str  # after "N.NN×" when it got worse
    better: str  # ... and when it got better
    family: str  # the history site's group: "time", "memory", "work" or "accuracy"
    zero_valid: bool = False  # zero is a valid value (a count of nothing dispatched; an exact result)
    # how far two measurements of the same code on the same device may differ and still be the same
    # number (relative; 0: bit for bit): a deterministic metric whose kernels are not bit-exact
    repeat_rtol: float = 0.0


_ALL = (
    Metric(
        name="time",
        unit="seconds",
        direction="lower",
        gated=True,
        deterministic=False,
        work=False,
        column="time",
        worse="slower",
        better="faster",
        family="time",
    ),
    Metric(
        name="memory",
        unit="bytes",
        direction="lower",
        gated=True,
        deterministic=True,
        work=False,
        column="memory",
        worse="more memory",
        better="less memory",
        family="memory",
    ),
    Metric(
        name="throughput",
        unit="tokens/s",
        direction="higher",
        gated=False,
        deterministic=False,
        work=False,
        column="tokens/s",
        worse="lower",
        better="higher",
        family="time",
    ),
    Metric(
        name="efficiency",
        unit="TFLOP/s",
        direction="higher",
        gated=False,
        deterministic=False,
        work=False,
        column="TFLOP/s",
        worse="lower",
        better="higher",
        family="time",
    ),
    Metric(
        name="flops",
        unit="FLOP",
        direction="lower",
        gated=True,
        deterministic=True,
        work=True,
        column="FLOPs",
        worse="more FLOPs",
        better="fewer FLOPs",
        family="work",
        zero_valid=True,
    ),
    Metric(
        name="ops",
        unit="aten ops",
        direction="lower",
        gated=True,
        deterministic=True,
        work=True,
        column="ops",
        worse="more ops",
        better="fewer ops",
        family="work",
        zero_valid=True,
    ),
    Metric(
        name="kernels",
        unit="kernels",
        direction="lower",
        gated=True,
        deterministic=True,
        work=True,
        column="kernels",
        worse="more kernels",
        better="fewer kernels",
        family="work",
        zero_valid=True,
    ),
    Metric(
        name="allocated",
        unit="bytes",
        direction="lower",
        gated=True,
        deterministic=True,
        work=True,
        column="allocated",
        worse="more allocated",
        better="less allocated",
        family="work",
        zero_valid=True,
    ),
    # the relative L2 error of one call's output or an input gradient against the float64
    # reference of the same inputs (perfguard.engine.accuracy): the same seed and inputs give the
    # same number, and it is gated on growth by a factor above a floor (accuracy_threshold,
    # accuracy_floor in [tool.perfguard]), not by the timing threshold
    Metric(
        name="error",
        unit="relative error",
        direction="lower",
        gated=True,
        deterministic=True,
        work=False,
        column="error",
        worse="less exact",
        better="more exact",
        family="accuracy",
        zero_valid=True,
        # GPU backward kernels accumulate dq with atomic adds in no fixed order: on an H200 the q
        # gradient's error differed from one process to the next by up to 7.5e-6 relative
        # (docs/perf/fidelity.md, fifth session); 1e-4 is 13x that and 4 orders below the 2x gate
        repeat_rtol=1e-4,
    ),
)
#: Every metric by name, in report order (the order of the report's columns).
REGISTRY: Mapping[str, Metric] = MappingProxyType({m.name: m for m in _ALL})

#: Every metric name, in report order.
NAMES = tuple(REGISTRY)
#: Counts of what one call does (perfguard.engine.work), gated with ``work_threshold``.  Zero is a
#: count: a call whose work runs inside a compiled region dispatches no FLOP-counted op.
WORK_METRICS = frozenset(m.name for m in REGISTRY.values() if m.work)
#: Metrics whose value may be exactly zero (every other one is a positive amount).
ZERO_VALID_METRICS = frozenset(m.name for m in REGISTRY.values() if m.zero_valid)
#: The accuracy metric's name: its own rule (perfguard.compare.rule), threshold and floor.
ERROR = "error"
#: Values that repeat exactly: a rise over the threshold fails (memory also needs its byte floor).
DETERMINISTIC_METRICS = frozenset(m.name for m in REGISTRY.values() if m.deterministic)
#: How far two measurements of the same code may differ and still repeat (relative), by metric.
REPEAT_RTOL: Mapping[str, float] = MappingProxyType({m.name: m.repeat_rtol for m in REGISTRY.values()})
#: Reported, not gated, unless a configuration override says ``gate = true``.
REPORTED_METRICS = frozenset(m.name for m in REGISTRY.values() if not m.gated)
#: How benchmark labels end, in the order their columns and lines come.
COLUMN_WORDS = tuple(m.column for m in REGISTRY.values())


def metric(name: str) -> Metric:
    """The metric called ``name`` (a ``KeyError`` names the known ones)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(NAMES)}") from None


def in_family(family: str) -> tuple[str, ...]:
    """The metric names of one history-site family, in report order."""
    return tuple(m.name for m in REGISTRY.values() if m.family == family)
