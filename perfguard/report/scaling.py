"""Views across sequence lengths: which implementation wins where, and how memory grows.

Both use each series' latest value on a machine.  A group is one machine x benchmark x the
parameters other than ``impl`` and ``seq_len`` (e.g. dtype); each implementation is a line over
``seq_len``.

*Crossovers*: where the best implementation changes between two measured sequence lengths, the
crossing point is interpolated on log-log axes (the lines cross where their log ratio is zero).
All pairwise crossings are listed too.

*Memory exponent*: the least-squares slope of log(peak memory) against log(seq_len), so linear
memory reads ≈ 1 and quadratic ≈ 2, fitted only to :data:`MIN_FIT_POINTS` or more lengths: two
points always lie on a line, so their slope says nothing about the shape (issue 30).

*Decided* (issue 30: "ring is best at every measured length" from single noisy values): the best
value at a length is a claim only when its ≈95% interval and the runner-up's do not overlap and
both come from two or more rounds; otherwise the page says why not (one round: the interval is
within one process; the intervals overlap), and a crossover says whether the lengths around it
are decided.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from typing import Any

from perfguard import units
from perfguard.report import formatting
from perfguard.report.items import column_order
from perfguard.report.series import MachineInfo, Series

SEQ = "seq_len"
#: Lengths a complexity fit needs: two points always lie on a line.
MIN_FIT_POINTS = 3


@dataclass
class Line:
    impl: str
    color: int  # palette index
    points: dict[int, float]  # seq_len -> latest value
    shas: dict[int, str]  # seq_len -> commit of that value
    slug: dict[int, str]  # seq_len -> page of the series
    low: dict[int, float | None] = field(default_factory=dict)  # seq_len -> ≈95% interval of the value
    high: dict[int, float | None] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)  # seq_len -> rounds behind the value
    exponent: float | None = None
    fit_points: int = 0

    @property
    def complexity(self) -> str:
        """``≈ O(n)`` / ``≈ O(n²)`` when the exponent is near one of them, else ``n^1.43``."""
        if self.exponent is None:
            return "–"
        for k, text in ((1.0, "O(n)"), (2.0, "O(n²)"), (1.5, "O(n^1.5)"), (0.0, "O(1)")):
            if abs(self.exponent - k) < 0.2:
                return f"≈ {text}"
        return f"n^{self.exponent:.2f}"


@dataclass
class Crossover:
    seq_len: float  # interpolated
    below: int  # measured seq_len just below
    above: int
    before: str  # winner (or first impl) below
    after: str  # winner above
    undecided: str = ""  # why the lengths around it do not decide it ("" when both do)

    @property
    def label(self) -> str:
        return f"≈{units.sig3(self.seq_len)}"


@dataclass
class Group:
    machine: MachineInfo
    benchmark: str
    params: dict[str, Any]  # without impl and seq_len
    unit: str
    direction: str
    metric: str
    lines: list[Line]
    seq_lens: list[int]
    winners: dict[int, str] = field(default_factory=dict)
    undecided: dict[int, str] = field(default_factory=dict)  # seq_len -> why its winner is no claim
    crossovers: list[Crossover] = field(default_factory=list)  # of the winner
    pairwise: list[Crossover] = field(default_factory=list)

    @property
    def title(self) -> str:
        rest = formatting.params_label(self.params)
        return f"{formatting.metric_label(self.benchmark)}{' · ' + rest if rest else ''}"

    @property
    def claim(self) -> str:
        """What the page may say of the best values without a crossover: ``decided at every measured
        length``, or which lengths are not and why."""
        if not self.undecided:
            return (
                "the best value at every measured length, "
                "with ≈95% intervals apart each time (two or more rounds)"
            )
        open_ = "; ".join(f"{n}: {why}" for n, why in sorted(self.undecided.items()))
        decided = [n for n in self.winners if n not in self.undecided]
        where = f"decided at {', '.join(map(str, sorted(decided)))}; " if decided else ""
        return f"the best value at every measured length, but {where}not decided at {open_}"

    def value(self, impl: str, n: int) -> float | None:
        for line in self.lines:
            if line.impl == impl:
                return line.points.get(n)
        return None


def _better(direction: str, a: float, b: float) -> bool:
    return a > b if direction == "higher" else a < b


def groups(
    series: Sequence[Series],
    *,
    metrics: Sequence[str],
    colors: dict[str, int],
    slugs: dict[tuple[str, str], str],
    min_lines: int = 1,
) -> list[Group]:
    """Groups of series over seq_len with the latest value per implementation."""
    buckets: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Series]] = defaultdict(list)
    for s in series:
        if s.metric not in metrics or SEQ not in s.params or not s.points:
            continue
        try:
            int(s.params[SEQ])
        except (TypeError, ValueError):
            continue
        rest = tuple(sorted((k, str(v)) for k, v in s.params.items() if k not in ("impl", SEQ)))
        buckets[(s.machine.key, s.benchmark, rest)].append(s)
    out = []
    for (_, benchmark, rest), members in buckets.items():
        lines: dict[str, Line] = {}
        for s in members:
            latest = s.latest
            if latest is None or latest.value is None or latest.value <= 0:
                continue
            n = int(s.params[SEQ])
            line = lines.setdefault(s.impl, Line(s.impl, colors.get(s.impl, 0) % 10, {}, {}, {}))
            line.points[n] = latest.value
            line.low[n], line.high[n], line.runs[n] = latest.low, latest.high, latest.runs
            line.shas[n] = latest.commit.short
            line.slug[n] = slugs[s.page_key]
        if len(lines) < min_lines:
            continue
        first = members[0]
        ordered = sorted(lines.values(), key=lambda ln: ln.impl)
        seq_lens = sorted({n for ln in ordered for n in ln.points})
        group = Group(
            machine=first.machine,
            benchmark=benchmark,
            params=dict(rest),
            unit=first.unit,
            direction=first.direction,
            metric=first.metric,
            lines=ordered,
            seq_lens=seq_lens,
        )
        _crossovers(group)
        for line in ordered:
            _fit(line)
        out.append(group)
    out.sort(key=lambda g: (g.machine.key, column_order(g.benchmark), sorted(g.params.items())))
    return out


def _cross(n0: int, n1: int, d0: float, d1: float) -> float:
    """Where a line through (log n0, d0) and (log n1, d1) crosses zero, back in n."""
    t = d0 / (d0 - d1)
    return math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0)))


def _crossovers(group: Group) -> None:
    for n in group.seq_lens:
        best = None
        for line in group.lines:
            v = line.points.get(n)
            if v is not None and (best is None or _better(group.direction, v, best[1])):
                best = (line.impl, v)
        if best is not None:
            group.winners[n] = best[0]
            why = _undecided(group, n, best[0])
            if why:
                group.undecided[n] = why
    # The winner's changes, interpolated between the two impls involved.
    for n0, n1 in zip(group.seq_lens, group.seq_lens[1:], strict=False):
        a, b = group.winners.get(n0), group.winners.get(n1)
        if a is None or b is None or a == b:
            continue
        va0, va1, vb0, vb1 = group.value(a, n0), group.value(a, n1), group.value(b, n0), group.value(b, n1)
        if None in (va0, va1, vb0, vb1):
            at = math.sqrt(n0 * n1)  # not measured on both sides: the geometric midpoint
        else:
            at = _cross(n0, n1, math.log(va0 / vb0), math.log(va1 / vb1))  # type: ignore[operator]
        why = "; ".join(f"at {n}: {group.undecided[n]}" for n in (n0, n1) if n in group.undecided)
        group.crossovers.append(Crossover(at, n0, n1, a, b, why))
    for la, lb in combinations(group.lines, 2):
        common = sorted(set(la.points) & set(lb.points))
        for n0, n1 in pairwise(common):
            d0 = math.log(la.points[n0] / lb.points[n0])
            d1 = math.log(la.points[n1] / lb.points[n1])
            if d0 == 0 or d1 == 0 or (d0 > 0) == (d1 > 0):
                continue
            a_first = _better(group.direction, la.points[n0], lb.points[n0])
            before, after = (la.impl, lb.impl) if a_first else (lb.impl, la.impl)
            group.pairwise.append(Crossover(_cross(n0, n1, d0, d1), n0, n1, before, after))
    group.pairwise.sort(key=lambda c: (c.seq_len, c.before, c.after))


def _undecided(group: Group, n: int, best: str) -> str:
    """Why the best value at ``n`` is no claim ("" when it is one): the runner-up's ≈95% interval
    overlaps it, or either value is one round (its interval within one process only)."""
    lines = {ln.impl: ln for ln in group.lines if n in ln.points}
    if len(lines) < 2:
        return "one implementation measured"
    others = [ln for impl, ln in lines.items() if impl != best]
    higher = group.direction == "higher"
    runner = max(others, key=lambda ln: ln.points[n]) if higher else min(others, key=lambda ln: ln.points[n])
    pair = (lines[best], runner)
    if any(ln.runs.get(n, 1) < 2 for ln in pair):
        return "one round (no interval across processes)"
    b_lo, b_hi, r_lo, r_hi = (pair[0].low.get(n), pair[0].high.get(n), runner.low.get(n), runner.high.get(n))
    if None in (b_lo, b_hi, r_lo, r_hi):
        return "no interval"
    apart = b_lo > r_hi if higher else b_hi < r_lo  # type: ignore[operator]
    return "" if apart else f"the ≈95% intervals of {best} and {runner.impl} overlap"


def _fit(line: Line) -> None:
    pts = [(math.log(n), math.log(v)) for n, v in sorted(line.points.items()) if n > 0 and v > 0]
    line.fit_points = len(pts)
    if len(pts) < MIN_FIT_POINTS or len({x for x, _ in pts}) < MIN_FIT_POINTS:
        return
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    line.exponent = sxy / sxx
