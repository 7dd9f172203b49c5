"""History series: one benchmark x params on one machine, over the commits of the baseline branch.

Built from :func:`perfguard.report.queries.history_rows`.  Where a commit was measured more than
once on a machine (a baseline re-measured by several checks), the latest run's result is the
point.  Each point carries a 95% confidence interval of its median from the order statistics of
its samples (distribution-free, exact binomial coverage); with fewer than 6 samples no 95%
interval exists that way, and the stored interquartile range is shown instead, labelled as such.

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
import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from perfguard.report import formatting
from perfguard.report.queries import HistoryRow, HistoryRun, VerdictMark


@dataclass
class CommitInfo:
    id: int
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
    id: int
    key: str
    label: str
    kind: str
    commits: list[CommitInfo] = field(default_factory=list)
    position: dict[int, int] = field(default_factory=dict)  # commit id -> index in commits


@dataclass
class Point:
    position: int  # index in the machine's commits (the x axis)
    commit: CommitInfo
    value: float | None
    low: float | None
    high: float | None
    interval: str  # "95% CI" | "IQR" | ""
    n: int
    method: str | None
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
    def summary(self) -> str:
        """``regression (step): +50.0% (52 µs → 78 µs) from 09c0ffee``: the text with what and whence."""
        return f"{self.kind} ({self.source}): {self.text}"


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


@cache
def _median_rank(n: int) -> int:
    """Largest 1-based rank l with P(Binom(n, ½) < l) <= 2.5%: [x_(l), x_(n+1-l)] covers >= 95%."""
    total = 2.0**n
    cumulative = 0.0
    rank = 0
    for k in range(n):
        cumulative += math.comb(n, k) / total
        if cumulative > 0.025:
            break
        rank = k + 1
    return rank


def median_interval(samples: Sequence[float] | None) -> tuple[float, float] | None:
    """Distribution-free 95% confidence interval of the median, or None below 6 samples."""
    if not samples or len(samples) < 6:
        return None
    ordered = sorted(samples)
    rank = _median_rank(len(ordered))
    if rank < 1:
        return None
    return ordered[rank - 1], ordered[len(ordered) - rank]


def _all_samples(texts: list[str | list[float] | None]) -> list[list[float] | None]:
    """Parse every point's samples (JSON text) in one ``json.loads`` call.

    200,000 tiny documents parse several times faster as one array than one call each.  A
    driver that already returns parsed JSON (lists) is taken as it is.
    """
    if all(isinstance(t, str) for t in texts):
        parsed = json.loads("[" + ",".join(texts) + "]")  # type: ignore[arg-type]
    else:
        parsed = [json.loads(t) if isinstance(t, str) else t for t in texts]
    return [p if isinstance(p, list) else None for p in parsed]


def assemble(
    runs: Iterable[HistoryRun], rows: Iterable[HistoryRow]
) -> tuple[list[MachineInfo], list[Series]]:
    """Machines with their ordered commits, and every series with its points (no marks yet)."""
    machines: dict[int, MachineInfo] = {}
    commits_of: dict[int, dict[int, CommitInfo]] = defaultdict(dict)
    run_of: dict[int, HistoryRun] = {}
    for run in runs:
        run_of[run.run_id] = run
        if run.machine_id not in machines:
            machines[run.machine_id] = MachineInfo(
                run.machine_id, run.machine_key, run.machine_label, run.machine_kind
            )
        if run.commit_id not in commits_of[run.machine_id]:
            commits_of[run.machine_id][run.commit_id] = CommitInfo(
                run.commit_id, run.sha, run.committed_at, run.subject
            )
    for mid, machine in machines.items():
        machine.commits = sorted(commits_of[mid].values(), key=lambda c: (c.date.replace(tzinfo=None), c.id))
        machine.position = {c.id: i for i, c in enumerate(machine.commits)}

    # One result per machine x benchmark x params x commit: the latest run's.
    rank = {
        run.run_id: k
        for k, run in enumerate(
            sorted(run_of.values(), key=lambda r: (r.started_at.replace(tzinfo=None), r.run_id))
        )
    }
    latest: dict[tuple[int, str, str, int], tuple[int, int]] = {}  # -> (run rank, row index)
    rows = list(rows)
    for index, row in enumerate(rows):
        run = run_of.get(row.run_id)
        if run is None:
            continue
        key = (run.machine_id, row.benchmark, row.params_key, run.commit_id)
        order = rank[row.run_id]
        seen = latest.get(key)
        if seen is None or seen[0] < order:
            latest[key] = (order, index)
    samples = _all_samples([rows[index].samples_json for _, index in latest.values()])

    series: dict[tuple[int, str, str], Series] = {}
    params_cache: dict[str, dict[str, Any]] = {}
    for k, ((mid, benchmark, params_key, commit_id), (_, index)) in enumerate(latest.items()):
        row = rows[index]
        key = (mid, benchmark, params_key)
        s = series.get(key)
        if s is None:
            raw = row.params_json
            if raw not in params_cache:
                parsed = json.loads(raw) if isinstance(raw, str) else raw
                params_cache[raw if isinstance(raw, str) else params_key] = dict(parsed or {})
            s = series[key] = Series(
                machine=machines[mid],
                benchmark=benchmark,
                impl=row.impl,
                params=params_cache[raw if isinstance(raw, str) else params_key],
                params_key=params_key,
                metric=row.metric,
                unit=row.unit,
                direction=row.direction,
                gated=row.gated,
            )
        machine = machines[mid]
        interval = median_interval(samples[k])
        if interval is not None:
            low, high, label = interval[0], interval[1], "95% CI"
        elif row.q25 is not None and row.q75 is not None:
            low, high, label = row.q25, row.q75, "IQR"
        else:
            low = high = None
            label = ""
        position = machine.position[commit_id]
        point = Point(
            position=position,
            commit=machine.commits[position],
            value=row.value,
            low=low,
            high=high,
            interval=label,
            n=row.n_samples,
            method=row.method,
            status=row.status,
        )
        if row.status == "ok" and row.value is not None and math.isfinite(row.value):
            s.points.append(point)
        elif row.status == "failed":
            s.failures.append(point)
    for s in series.values():
        s.points.sort(key=lambda p: p.position)
        s.failures.sort(key=lambda p: p.position)
    ordered = sorted(
        series.values(),
        key=lambda s: (s.impl, s.benchmark, formatting.natural_key(s.other_params), s.machine.key),
    )
    return sorted(machines.values(), key=lambda m: m.key), ordered


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
                        f"({formatting.format_value(v0, s.unit)} → {formatting.format_value(v1, s.unit)}) "
                        f"from {at.short}"
                    ),
                )
            )


def mark_checks(series: Sequence[Series], marks: Iterable[VerdictMark]) -> None:
    """Add ``check`` marks: stored verdicts whose head commit is a point of the series."""
    by_key: dict[tuple[int, str, str], Series] = {
        (s.machine.id, s.benchmark, s.params_key): s for s in series
    }
    for m in marks:
        s = by_key.get((m.machine_id, m.benchmark, m.params_key))
        if s is None or m.head_commit_id not in s.machine.position:
            continue
        pos = s.machine.position[m.head_commit_id]
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
