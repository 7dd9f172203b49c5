"""History queries: each benchmark x params as a series over commits, per machine key.

A *series* is one (machine key, benchmark, params_key); its *points* are the commits it was
measured at, oldest first, ordered by commit date.  A commit measured several times (rounds,
a baseline measured again by a later check) is one point: the median of its runs' values (and of
their quartiles), with the number of runs and samples behind it.  Dirty work trees are left out
unless asked for, and so are ``retry`` and ``calibrate`` runs (they measure one check, not the
commit's history).

The queries read only the light columns (never the sample arrays) and let the database cut each
series to its newest ``last`` commits with a window function, so the site and ``perfguard
history`` stay fast on large stores.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from perfguard.store.models import Commit, Machine, Result, Run
from perfguard.store.records import MEASUREMENT_PURPOSES

Match = Literal["exact", "contains"]


@dataclass(frozen=True, kw_only=True)
class SeriesPoint:
    """One commit of a series."""

    sha: str
    committed_at: datetime
    branch: str | None
    subject: str
    dirty: bool
    status: str  # ok when any run of the commit has a value; else the newest run's status
    value: float | None  # median over the commit's runs
    q25: float | None
    q75: float | None
    n_runs: int
    n_samples: int
    method: str | None
    error: str | None
    run_ids: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Series:
    """One benchmark x params on one machine key, over commits (oldest first)."""

    machine_key: str
    machine_label: str
    benchmark: str
    impl: str
    params: Mapping[str, Any]
    params_key: str
    metric: str
    unit: str
    direction: str
    gated: bool
    points: tuple[SeriesPoint, ...]

    @property
    def latest(self) -> SeriesPoint:
        return self.points[-1]


def series(
    session: Session,
    *,
    machine: str | None = None,
    benchmark: str | None = None,
    impl: str | None = None,
    params_key: str | None = None,
    profile: str | None = None,
    branch: str | None = None,
    purposes: Sequence[str] = MEASUREMENT_PURPOSES,
    include_dirty: bool = False,
    last: int | None = None,
    match: Match = "exact",
) -> list[Series]:
    """The stored series matching the filters, sorted by machine, benchmark and params.

    ``machine`` and ``benchmark`` match exactly, or as case-insensitive substrings with
    ``match="contains"``; ``impl``, ``params_key``, ``profile`` and ``branch`` always match exactly.
    ``last`` keeps the newest N commits of each series.
    """
    if last is not None and last < 1:
        raise ValueError(f"last must be at least 1, not {last}")
    stmt = _points_query(
        machine=machine,
        benchmark=benchmark,
        impl=impl,
        params_key=params_key,
        profile=profile,
        branch=branch,
        purposes=purposes,
        include_dirty=include_dirty,
        match=match,
    )
    if last is None:
        stmt = stmt.order_by(
            Machine.key, Result.benchmark, Result.params_key, Commit.committed_at, Commit.id, Run.id
        )
    else:
        rank = func.dense_rank().over(
            partition_by=(Run.machine_id, Result.benchmark, Result.params_key),
            order_by=(Commit.committed_at.desc(), Commit.id.desc()),
        )
        ranked = stmt.add_columns(rank.label("rank")).subquery()
        c = ranked.c
        stmt = (
            select(*(column for column in c if column.key != "rank"))
            .where(c.rank <= last)
            .order_by(c.machine_key, c.benchmark, c.params_key, c.committed_at, c.commit_id, c.run_id)
        )
    return _group(session.execute(stmt).mappings())


def latest(session: Session, **filters: Any) -> list[Series]:
    """Each matching series cut to its newest commit: the latest value per implementation x machine."""
    return series(session, last=1, **filters)


def _points_query(
    *,
    machine: str | None,
    benchmark: str | None,
    impl: str | None,
    params_key: str | None,
    profile: str | None,
    branch: str | None,
    purposes: Sequence[str],
    include_dirty: bool,
    match: Match,
) -> Select[Any]:
    stmt = (
        select(
            Machine.key.label("machine_key"),
            Machine.label.label("machine_label"),
            Result.benchmark,
            Result.impl,
            Result.params,
            Result.params_key,
            Result.metric,
            Result.unit,
            Result.direction,
            Result.gated,
            Result.status,
            Result.value,
            Result.q25,
            Result.q75,
            Result.n_samples,
            Result.method,
            Result.error,
            Commit.id.label("commit_id"),
            Commit.sha,
            Commit.committed_at,
            Commit.branch,
            Commit.subject,
            Commit.dirty,
            Run.id.label("run_id"),
        )
        .join_from(Result, Run, Result.run_id == Run.id)
        .join(Commit, Run.commit_id == Commit.id)
        .join(Machine, Run.machine_id == Machine.id)
        .where(Run.status == "complete", Run.purpose.in_(list(purposes)))
    )
    if not include_dirty:
        stmt = stmt.where(Commit.dirty.is_(False))
    for column, wanted in ((Machine.key, machine), (Result.benchmark, benchmark)):
        if wanted is None:
            continue
        if match == "contains":
            stmt = stmt.where(column.icontains(wanted, autoescape=True))
        else:
            stmt = stmt.where(column == wanted)
    for column, wanted in (
        (Result.impl, impl),
        (Result.params_key, params_key),
        (Run.profile, profile),
        (Commit.branch, branch),
    ):
        if wanted is not None:
            stmt = stmt.where(column == wanted)
    return stmt


def _group(rows: Any) -> list[Series]:
    """Fold rows (ordered by series, commit, run) into series of one point per commit."""
    result: list[Series] = []
    series_rows: list[Mapping[str, Any]] = []
    for row in rows:
        if series_rows and _series_key(series_rows[-1]) != _series_key(row):
            result.append(_make_series(series_rows))
            series_rows = []
        series_rows.append(row)
    if series_rows:
        result.append(_make_series(series_rows))
    return result


def _series_key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return (row["machine_key"], row["benchmark"], row["params_key"])


def _make_series(rows: list[Mapping[str, Any]]) -> Series:
    points: list[SeriesPoint] = []
    commit_rows: list[Mapping[str, Any]] = []
    for row in rows:
        if commit_rows and commit_rows[-1]["commit_id"] != row["commit_id"]:
            points.append(_make_point(commit_rows))
            commit_rows = []
        commit_rows.append(row)
    points.append(_make_point(commit_rows))
    newest = rows[-1]
    return Series(
        machine_key=newest["machine_key"],
        machine_label=newest["machine_label"],
        benchmark=newest["benchmark"],
        impl=newest["impl"],
        params=newest["params"],
        params_key=newest["params_key"],
        metric=newest["metric"],
        unit=newest["unit"],
        direction=newest["direction"],
        gated=newest["gated"],
        points=tuple(points),
    )


def _make_point(rows: list[Mapping[str, Any]]) -> SeriesPoint:
    ok = [r for r in rows if r["status"] == "ok" and r["value"] is not None]
    newest = rows[-1]
    used = ok or [newest]
    return SeriesPoint(
        sha=newest["sha"],
        committed_at=newest["committed_at"],
        branch=newest["branch"],
        subject=newest["subject"],
        dirty=newest["dirty"],
        status="ok" if ok else newest["status"],
        value=_median([r["value"] for r in ok]),
        q25=_median([r["q25"] for r in ok]),
        q75=_median([r["q75"] for r in ok]),
        n_runs=len(used),
        n_samples=sum(r["n_samples"] for r in used),
        method=used[-1]["method"],
        error=None if ok else newest["error"],
        run_ids=tuple(r["run_id"] for r in used),
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
