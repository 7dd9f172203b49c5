"""History series: one benchmark x params on one machine, over the commits of the baseline branch.

Built from ``perfguard.store.Store.series`` (purposes ``run`` and ``baseline``, clean commits):
a commit measured more than once on a machine is one point, the median of its runs.  The store
never reads sample arrays for the history, so each point's interval is computed from what it
keeps, the quartiles and the sample count: an approximate 95% confidence interval of the median,
``median ± 1.82 · IQR / √n`` (the median's standard error under normality, 1.2533 σ / √n with
σ = IQR / 1.349, times 1.96; the same construction as McGill et al.'s box-plot notches, which use
1.58 for comparing two medians).  With fewer than 2 samples or no quartiles there is none.

Changes are marked from two sources, kept apart on the charts:

* ``check``: a stored ``perfguard check`` verdict (regression / improvement) whose head commit is
  a point of the series (the commit was measured for the history on the same machine).
* ``step``: a step change found in the series itself by asv's step detection (the
  piecewise-constant L1 "Potts" fit of ``asv.step_detect`` behind ``asv publish``'s regressions
  page, its linear-time solver), reported when the level moves by more than ``step_threshold``
  (default 5%, asv's default) and by more than the fit's error estimate of both segments.  This
  catches creep below the PR gate's 20% threshold.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from perfguard import units
from perfguard.report import formatting
from perfguard.report.lineage import Lineage
from perfguard.report.queries import VerdictMark
from perfguard.store import SeriesPoint, StoredMachine, StoredSeries


@dataclass
class CommitInfo:
    sha: str
    date: datetime
    subject: str
    # Display strings, made once per commit rather than once per point that shows them.
    short: str = field(init=False)
    iso: str = field(init=False)
    when: str = field(init=False)

    def __post_init__(self) -> None:
        self.short = formatting.short_sha(self.sha)
        self.iso = self.date.isoformat()
        self.when = formatting.format_date(self.date)


@dataclass
class MachineInfo:
    key: str
    label: str
    kind: str
    commits: list[CommitInfo] = field(default_factory=list)
    position: dict[str, int] = field(default_factory=dict)  # commit sha -> index in commits


@dataclass
class Point:
    position: int  # index in the machine's commits (the x axis)
    commit: CommitInfo
    value: float | None
    low: float | None
    high: float | None
    interval: str  # "≈95% CI" | ""
    n: int
    method: str | None
    status: str
    runs: int = 1  # rounds (fresh processes) behind the value: one round's interval is within-process only


@dataclass(frozen=True)
class OtherPoint:
    """A result of a commit that is not on the baseline branch's first-parent lineage: shown as such,
    never a point of the series' line or a step of it."""

    commit: CommitInfo
    branch: str
    value: float | None
    low: float | None
    high: float | None
    runs: int
    status: str


@dataclass
class Mark:
    """A regression or improvement at one point of a series."""

    index: int  # into Series.points
    kind: str  # regression | improvement
    source: str  # check | step
    ratio: float  # new level / old level (check: the check's oriented ratio)
    text: str

    @property
    def word(self) -> str:
        """What the mark is called: a check's verdict (``regression``), or a step that is ``worse``.

        "regression" is reserved for the PR gate's verdicts: a 6% step is a change worth a look,
        not a regression at the gate's threshold.
        """
        if self.source == "check":
            return self.kind
        return "step: worse" if self.kind == "regression" else "step: better"

    @property
    def summary(self) -> str:
        """``step: worse: +50.0% (52 µs → 78 µs) from 09c0ffee``: the text with what and whence."""
        return f"{self.word}: {self.text}"


@dataclass
class Series:
    machine: MachineInfo
    benchmark: str
    impl: str
    params: dict[str, Any]
    params_key: str
    metric: str
    unit: str
    direction: str
    gated: bool
    points: list[Point] = field(default_factory=list)  # results with a value, oldest first
    failures: list[Point] = field(default_factory=list)  # failed results (no value)
    others: list[OtherPoint] = field(default_factory=list)  # commits off the baseline's lineage
    marks: list[Mark] = field(default_factory=list)

    @property
    def page_key(self) -> tuple[str, str]:
        return (self.benchmark, self.params_key)

    @property
    def other_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "impl"}

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points if p.value is not None]

    @property
    def last_mark(self) -> Mark | None:
        return self.marks[-1] if self.marks else None


def page_slug(benchmark: str, params: dict[str, Any], params_key: str) -> str:
    """A file name that is safe anywhere, readable, and unique (the hash settles collisions)."""
    words = [
        formatting.benchmark_label(benchmark),
        str(params.get("impl", "")),
        formatting.params_label(params),
    ]
    stem = re.sub(r"[^a-z0-9]+", "-", " ".join(words).lower()).strip("-")[:80] or "benchmark"
    digest = hashlib.sha1(f"{benchmark}\0{params_key}".encode()).hexdigest()[:8]
    return f"{stem}-{digest}"


#: z(0.975) x the median's standard error in IQR units: 1.96 x 1.2533 / 1.349.
CI_IQR_FACTOR = 1.96 * 1.2533 / 1.349
CI_LABEL = "≈95% CI"


def median_interval(
    value: float | None, q25: float | None, q75: float | None, n: int
) -> tuple[float, float] | None:
    """Approximate 95% confidence interval of a median from its quartiles and sample count."""
    if value is None or q25 is None or q75 is None or n < 2:
        return None
    half = CI_IQR_FACTOR * (q75 - q25) / math.sqrt(n)
    return value - half, value + half


def assemble(
    stored: Iterable[StoredSeries],
    machines: Iterable[StoredMachine] = (),
    lineage: Lineage | None = None,
) -> tuple[list[MachineInfo], list[Series]]:
    """Machines with their ordered commits, and every series with its points (no marks yet).

    ``stored`` comes from ``Store.series``; ``machines`` (``Store.machines()``) only adds each
    machine's kind.  A machine's x axis is every commit any of its series was measured at on the
    baseline branch's ``lineage`` (its first parents: every commit when it is unknown); a point of
    another commit (a branch measured by ``perfguard run``) is kept apart in ``Series.others``,
    never a step of the series (issue 30).
    """
    kinds = {m.key: m.kind for m in machines}
    stored = list(stored)
    others: dict[tuple[str, str, str], list[SeriesPoint]] = {}
    if lineage is not None:
        lineage = lineage.of(p.sha for st in stored for p in st.points)
    if lineage is not None and lineage.shas is not None:
        kept = []
        for st in stored:
            off = [p for p in st.points if lineage.on(p.sha) is False]
            if off:
                others[(st.machine_key, st.benchmark, st.params_key)] = off
                st = replace(st, points=tuple(p for p in st.points if lineage.on(p.sha) is not False))
            kept.append(st)
        stored = kept
    infos: dict[str, MachineInfo] = {}
    commits_of: dict[str, dict[str, CommitInfo]] = defaultdict(dict)
    for st in stored:
        if st.machine_key not in infos:
            infos[st.machine_key] = MachineInfo(
                st.machine_key, st.machine_label, kinds.get(st.machine_key, "")
            )
        known = commits_of[st.machine_key]
        for p in st.points:
            if p.sha not in known:
                known[p.sha] = CommitInfo(p.sha, p.committed_at, p.subject)
    for key, machine in infos.items():
        machine.commits = sorted(commits_of[key].values(), key=lambda c: (c.date, c.sha))
        machine.position = {c.sha: i for i, c in enumerate(machine.commits)}

    out: list[Series] = []
    for st in stored:
        machine = infos[st.machine_key]
        series = Series(
            machine=machine,
            benchmark=st.benchmark,
            impl=st.impl,
            params=dict(st.params),
            params_key=st.params_key,
            metric=st.metric,
            unit=st.unit,
            direction=st.direction,
            gated=st.gated,
        )
        for p in st.points:
            position = machine.position[p.sha]
            interval = median_interval(p.value, p.q25, p.q75, p.n_samples)
            point = Point(
                position=position,
                commit=machine.commits[position],
                value=p.value,
                low=interval[0] if interval else None,
                high=interval[1] if interval else None,
                interval=CI_LABEL if interval else "",
                n=p.n_samples,
                method=p.method,
                status=p.status,
                runs=p.n_runs,
            )
            if p.status == "ok" and p.value is not None and math.isfinite(p.value):
                series.points.append(point)
            elif p.status == "failed":
                series.failures.append(point)
        for p in others.get((st.machine_key, st.benchmark, st.params_key), []):
            interval = median_interval(p.value, p.q25, p.q75, p.n_samples)
            series.others.append(
                OtherPoint(
                    CommitInfo(p.sha, p.committed_at, p.subject),
                    p.branch or "",
                    p.value if p.status == "ok" else None,
                    interval[0] if interval else None,
                    interval[1] if interval else None,
                    p.n_runs,
                    p.status,
                )
            )
        out.append(series)
    out.sort(key=lambda s: (s.impl, s.benchmark, formatting.natural_key(s.other_params), s.machine.key))
    return sorted(infos.values(), key=lambda m: m.key), out


def _worse(direction: str, old: float, new: float) -> bool:
    return new > old if direction != "higher" else new < old


def _steps(payload: tuple[list[float], list[float]]) -> list[tuple[int, int, float, float]]:
    """asv's piecewise-constant fit of one series: ``(left, right, level, error)`` per segment.

    ``asv.step_detect.solve_potts_approx`` with asv's default penalty, the linear-time solver
    that ``detect_steps`` refines by searching the penalty; the search costs 6-8x more and found
    the same steps on our test series (steps of 5-50% under 2% noise).  A top-level function, so
    a process pool can run it.
    """
    from asv.step_detect import solve_potts_approx

    values, weights = payload
    if min(values) == max(values):
        # Constant (peak memory usually is): no step, and asv's default penalty would be 0 here,
        # which makes its merge step quadratic.
        return [(0, len(values), values[0], 0.0)]
    right, levels, dists = solve_potts_approx(values, weights)
    out = []
    left = 0
    for r, level, dist in zip(right, levels, dists, strict=True):
        out.append((left, r, level, abs(dist / (r - left))))
        left = r
    return out


def _weights(points: Sequence[Point]) -> list[float]:
    """asv's weighting: 1 / interval width, normalised by the median; no interval -> median weight."""
    raw = [
        1.0 / (p.high - p.low) if p.low is not None and p.high is not None and p.high > p.low else None
        for p in points
    ]
    known = sorted(w for w in raw if w is not None)
    if not known:
        return [1.0] * len(points)
    middle = known[len(known) // 2]
    return [1.0 if w is None else w / middle for w in raw]


def mark_steps(series: Sequence[Series], *, threshold: float, workers: int | None = None) -> None:
    """Add ``step`` marks to every series; many long series are fitted in parallel processes."""
    todo = [s for s in series if len(s.points) >= 3]
    payloads = []
    for s in todo:
        values = [p.value for p in s.points]
        payloads.append((values, _weights(s.points)))
    total = sum(len(v) for v, _ in payloads)
    n_workers = workers if workers is not None else min(os.cpu_count() or 1, 8)
    if n_workers > 1 and total >= 20_000 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            fits = list(pool.map(_steps, payloads, chunksize=max(1, len(payloads) // (4 * n_workers))))
    else:
        fits = [_steps(p) for p in payloads]
    for s, steps in zip(todo, fits, strict=False):
        for (_, _, v0, e0), (left, _, v1, e1) in itertools.pairwise(steps):
            if v0 <= 0:
                continue
            if abs(v1 - v0) <= max(e0, e1, threshold * abs(v0)):
                continue
            kind = "regression" if _worse(s.direction, v0, v1) else "improvement"
            ratio = v1 / v0
            at = s.points[left].commit
            s.marks.append(
                Mark(
                    index=left,
                    kind=kind,
                    source="step",
                    ratio=ratio,
                    text=(
                        f"{formatting.format_change(ratio)} "
                        f"({units.format_value(v0, s.unit)} → {units.format_value(v1, s.unit)}) "
                        f"from {at.short}"
                    ),
                )
            )


def mark_checks(series: Sequence[Series], marks: Iterable[VerdictMark]) -> None:
    """Add ``check`` marks: stored verdicts whose head commit is a point of the series."""
    by_key: dict[tuple[str, str, str], Series] = {
        (s.machine.key, s.benchmark, s.params_key): s for s in series
    }
    for m in marks:
        s = by_key.get((m.machine_key, m.benchmark, m.params_key))
        if s is None or m.head_sha not in s.machine.position:
            continue
        pos = s.machine.position[m.head_sha]
        index = next((i for i, p in enumerate(s.points) if p.position == pos), None)
        if index is None:
            continue
        s.marks.append(
            Mark(
                index=index,
                kind=m.verdict,
                source="check",
                ratio=m.ratio if m.ratio is not None else float("nan"),
                text=(
                    f"check #{m.check_id}: {formatting.format_ratio(m.ratio)} "
                    f"CI {formatting.format_interval(m.ci_low, m.ci_high)} "
                    f"vs base {formatting.short_sha(m.base_sha)}"
                ),
            )
        )
    for s in series:
        s.marks.sort(key=lambda mk: (mk.index, mk.source))
