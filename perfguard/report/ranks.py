"""Scaling over ranks: time and per-GPU memory of the distributed suite against the number of GPUs
(``ranks.html``), and its errors against the float64 reference over N (``accuracy.html``).

A distributed run is stored under its machine key with the number of ranks
(:func:`perfguard.engine.machine.with_ranks`: ``NVIDIA H200 x4 ranks=4``), so the runs at N = 1, 2, 4
are separate machines in the store.  This view joins them again: a group is one hardware class
(:func:`perfguard.engine.machine.scaling_class`: the GPU model, or the CPU with its cores) x benchmark x
the parameters other than ``impl`` (``seq_len``, ``dtype``), and each implementation is a line over
N, from each series' latest value.

Next to each measured line its *ideal*: the value at the smallest N measured, times that N / N
(perfect strong scaling: N GPUs, 1/N of the time and 1/N of the memory each).  The *efficiency*
at N is ideal / measured (1.0 = perfect); for per-GPU memory the issue's bound "at most 1/N x 1.25
of one GPU's" is an efficiency of at least 0.8.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.engine.machine import scaling_class, split_ranks
from perfguard.metrics import REGISTRY
from perfguard.profiles import DISTRIBUTED_SUITE
from perfguard.report import formatting
from perfguard.report.items import column_order
from perfguard.report.series import Series
from perfguard.units import COUNT_UNITS

#: What the view shows: the group's time, each rank's peak memory, each rank's work in FLOPs and
#: bytes (its share of the sequence); aten ops and kernels count code, which a shard does not divide.
#: The errors have no ideal (N ranks do not divide an error): the accuracy page shows them over N.
METRICS = tuple(
    m.name for m in REGISTRY.values() if m.gated and m.unit not in COUNT_UNITS and m.family != "accuracy"
)


@dataclass
class RankPoint:
    ranks: int
    value: float
    sha: str  # short sha of the commit the value is from
    machine: str  # the machine key it was stored under
    slug: str  # the page of its series
    ideal: float = 0.0
    efficiency: float = 0.0  # ideal / value
    growth: float = 1.0  # value / the value at the fewest ranks (the accuracy page's errors)


@dataclass
class RankLine:
    impl: str
    color: int
    points: list[RankPoint] = field(default_factory=list)  # by ranks

    def at(self, n: int) -> RankPoint | None:
        return next((p for p in self.points if p.ranks == n), None)


@dataclass
class RankGroup:
    hardware: str
    benchmark: str
    params: dict[str, Any]  # without impl
    unit: str
    metric: str
    lines: list[RankLine]
    ranks: list[int]

    @property
    def title(self) -> str:
        rest = formatting.params_label(self.params)
        return f"{formatting.metric_label(self.benchmark)}{' · ' + rest if rest else ''}"


def groups(
    series: Sequence[Series],
    *,
    colors: dict[str, int],
    slugs: dict[tuple[str, str], str],
    metrics: Sequence[str] = METRICS,
) -> list[RankGroup]:
    """The distributed suite's series of ``metrics`` grouped by hardware over the number of ranks
    (module docstring; the accuracy page asks for the errors)."""
    buckets: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[tuple[int, Series]]] = defaultdict(list)
    for s in series:
        _, n = split_ranks(s.machine.key)
        if n is None or s.metric not in metrics or not s.benchmark.startswith(f"{DISTRIBUTED_SUITE}."):
            continue
        latest = s.latest
        if latest is None or latest.value is None or latest.value <= 0:
            continue
        rest = tuple(sorted((k, str(v)) for k, v in s.params.items() if k != "impl"))
        buckets[(scaling_class(s.machine.key), s.benchmark, rest)].append((n, s))
    out = []
    for (hardware, benchmark, rest), members in buckets.items():
        lines: dict[str, RankLine] = {}
        for n, s in members:
            latest = s.latest
            assert latest is not None and latest.value is not None
            line = lines.setdefault(s.impl, RankLine(s.impl, colors.get(s.impl, 0) % 10))
            if line.at(n) is None:  # two machines with the same ranks and class: the first one (by key)
                line.points.append(
                    RankPoint(n, latest.value, latest.commit.short, s.machine.key, slugs[s.page_key])
                )
        for line in lines.values():
            line.points.sort(key=lambda p: p.ranks)
            first = line.points[0]
            for p in line.points:
                p.ideal = first.value * first.ranks / p.ranks
                p.efficiency = p.ideal / p.value
                p.growth = p.value / first.value
        first_series = members[0][1]
        ordered = sorted(lines.values(), key=lambda ln: ln.impl)
        out.append(
            RankGroup(
                hardware=hardware,
                benchmark=benchmark,
                params=dict(rest),
                unit=first_series.unit,
                metric=first_series.metric,
                lines=ordered,
                ranks=sorted({p.ranks for ln in ordered for p in ln.points}),
            )
        )
    out.sort(key=lambda g: (g.hardware, column_order(g.benchmark), formatting.natural_key(g.params)))
    return out


def chart(group: RankGroup) -> Any:
    """The group's log-log chart: a line per implementation over N, its ideal dashed beside it."""
    from perfguard.report.charts import PALETTE, loglog_chart

    measured = [(ln.impl, PALETTE[ln.color], [(p.ranks, p.value) for p in ln.points]) for ln in group.lines]
    ideals = [
        (f"ideal {ln.impl}", PALETTE[ln.color], [(p.ranks, p.ideal) for p in ln.points])
        for ln in group.lines
        if len(ln.points) > 1
    ]
    drawn = loglog_chart([*measured, *ideals], unit=group.unit)
    guides = drawn.lines[len(measured) :]
    for guide in guides:
        guide.label = guide.name
    drawn.lines = drawn.lines[: len(measured)]
    drawn.guides = guides
    return drawn
