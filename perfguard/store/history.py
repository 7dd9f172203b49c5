"""History queries: each benchmark x params as a series over commits, per machine key.

A *series* is one (machine key, benchmark, params_key); its *points* are the commits it was
measured at, oldest first, ordered by commit date.  A commit measured several times (rounds,
a baseline measured again by a later check) is one point: the median of its runs' values (and of
their quartiles), with the number of runs and samples behind it.  Dirty work trees are left out
unless asked for, and so are ``retry`` and ``calibrate`` runs (they measure one check, not the
commit's history); ``trusted_only`` also leaves out runs of untrusted contexts.

The queries read only the light columns (never the sample arrays) and let the database cut each
series to its newest ``last`` commits with a window function, so the site and ``perfguard
history`` stay fast on large stores.  :func:`distinct` lists the stored implementations, benchmarks
and machine keys (for "did you mean" messages).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import Select, Text, cast, func, select
from sqlalchemy.orm import Session

from perfguard.store.models import Commit, Machine, Result, Run
from perfguard.store.records import MEASUREMENT_PURPOSES

Match = Literal["exact", "contains"]


class SeriesPoint(NamedTuple):
    """One commit of a series (a named tuple: there can be a hundred thousand of them)."""

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
class StoredSeries:
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

    def to_json(self) -> dict[str, Any]:
        """The series as plain JSON types (``perfguard history --json``): every field, points without
        their run ids, dates in ISO 8601."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["params"] = dict(self.params)
        out["points"] = [
            {
                **{name: getattr(p, name) for name in SeriesPoint._fields if name != "run_ids"},
                "committed_at": p.committed_at.isoformat(),
            }
            for p in self.points
        ]
        return out


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
    trusted_only: bool = False,
) -> list[StoredSeries]:
    """The stored series matching the filters, sorted by machine, benchmark and params.

    ``machine`` and ``benchmark`` match exactly, or as case-insensitive substrings with
    ``match="contains"``; ``impl``, ``params_key``, ``profile`` and ``branch`` always match exactly.
    ``last`` keeps the newest N commits of each series.  ``trusted_only`` leaves out the runs of
    untrusted contexts (jobs that ran pull-request code; docs/ci.md, "Trust model").
    """
    if last is not None and last < 1:
        raise ValueError(f"last must be at least 1, not {last}")
    filters = _Filters(
        machine=machine,
        benchmark=benchmark,
        impl=impl,
        params_key=params_key,
        profile=profile,
        branch=branch,
        purposes=tuple(purposes),
        include_dirty=include_dirty,
        match=match,
        trusted_only=trusted_only,
    )
    stmt = filters.apply(select(*_POINT_COLUMNS))
    if last is not None:
        # Rank narrow rows (ids and keys only), then read the wide rows of the kept ids: the sort
        # behind the window function stays small enough for memory on every backend.
        rank = func.dense_rank().over(
            partition_by=(Run.machine_id, Result.benchmark, Result.params_key),
            order_by=(Commit.committed_at.desc(), Commit.id.desc()),
        )
        ranked = filters.apply(select(Result.id.label("result_id"), rank.label("rank"))).subquery()
        stmt = stmt.where(Result.id.in_(select(ranked.c.result_id).where(ranked.c.rank <= last)))
    stmt = stmt.order_by(
        Machine.key, Result.benchmark, Result.params_key, Commit.committed_at, Commit.id, Run.id
    )
    return _group(session.connection().execute(stmt))


def latest(session: Session, **filters: Any) -> list[StoredSeries]:
    """Each matching series cut to its newest commit: the latest value per implementation x machine."""
    return series(session, last=1, **filters)


def distinct(session: Session, column: str) -> list[str]:
    """Stored values of ``impl``, ``benchmark`` or ``machine`` (for 'did you mean' messages)."""
    target = {"impl": Result.impl, "benchmark": Result.benchmark, "machine": Machine.key}[column]
    return list(session.scalars(select(target).distinct().order_by(target)))


def series_names(session: Session) -> list[tuple[str, str]]:
    """Stored (implementation, benchmark) pairs, sorted (what ``perfguard accept`` checks names against)."""
    stmt = select(Result.impl, Result.benchmark).distinct().order_by(Result.impl, Result.benchmark)
    return [(impl, benchmark) for impl, benchmark in session.execute(stmt)]


_POINT_COLUMNS = (
    Machine.key.label("machine_key"),
    Machine.label.label("machine_label"),
    Result.benchmark,
    Result.impl,
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
    # as text, decoded once per series rather than once per row
    cast(Result.params, Text).label("params_text"),
)


@dataclass(frozen=True)
class _Filters:
    machine: str | None
    benchmark: str | None
    impl: str | None
    params_key: str | None
    profile: str | None
    branch: str | None
    purposes: tuple[str, ...]
    include_dirty: bool
    match: Match
    trusted_only: bool = False

    def apply(self, stmt: Select[Any]) -> Select[Any]:
        """The joins from results to their run, commit and machine, and the filters."""
        stmt = (
            stmt.join_from(Result, Run, Result.run_id == Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .where(Run.status == "complete", Run.purpose.in_(self.purposes))
        )
        if not self.include_dirty:
            stmt = stmt.where(Commit.dirty.is_(False))
        if self.trusted_only:
            stmt = stmt.where(Run.trusted.is_(True))
        for column, wanted in ((Machine.key, self.machine), (Result.benchmark, self.benchmark)):
            if wanted is None:
                continue
            if self.match == "contains":
                stmt = stmt.where(column.icontains(wanted, autoescape=True))
            else:
                stmt = stmt.where(column == wanted)
        for column, wanted in (
            (Result.impl, self.impl),
            (Result.params_key, self.params_key),
            (Run.profile, self.profile),
            (Commit.branch, self.branch),
        ):
            if wanted is not None:
                stmt = stmt.where(column == wanted)
        return stmt


def _group(rows: Any) -> list[StoredSeries]:
    """Fold rows (ordered by series, commit, run) into series of one point per commit.

    Written for speed (it sees every row of the history): plain tuples, one pass, and the
    common case of one run per commit taken without computing medians.
    """
    result: list[StoredSeries] = []
    points: list[SeriesPoint] = []
    commit_rows: list[Any] = []
    previous: Any = None
    for row in rows:
        if previous is not None:
            new_series = (
                row[_PARAMS_KEY] != previous[_PARAMS_KEY]
                or row[_BENCHMARK] != previous[_BENCHMARK]
                or row[_MACHINE_KEY] != previous[_MACHINE_KEY]
            )
            if new_series or row[_COMMIT_ID] != previous[_COMMIT_ID]:
                points.append(_make_point(commit_rows))
                commit_rows = []
            if new_series:
                result.append(_make_series(previous, points))
                points = []
        commit_rows.append(row)
        previous = row
    if previous is not None:
        points.append(_make_point(commit_rows))
        result.append(_make_series(previous, points))
    return result


# Positions in the row of _points_query (a tuple, for speed).
(
    _MACHINE_KEY,
    _MACHINE_LABEL,
    _BENCHMARK,
    _IMPL,
    _PARAMS_KEY,
    _METRIC,
    _UNIT,
    _DIRECTION,
    _GATED,
    _STATUS,
    _VALUE,
    _Q25,
    _Q75,
    _N_SAMPLES,
    _METHOD,
    _ERROR,
    _COMMIT_ID,
    _SHA,
    _COMMITTED_AT,
    _BRANCH,
    _SUBJECT,
    _DIRTY,
    _RUN_ID,
    _PARAMS_TEXT,
) = range(24)


#: ``results.params``'s type: decodes the text of ``params_text`` and checks it (perfguard.store.columns).
_PARAMS = Result.__table__.c.params.type


def _make_series(newest: Any, points: list[SeriesPoint]) -> StoredSeries:
    params = newest[_PARAMS_TEXT]
    return StoredSeries(
        machine_key=newest[_MACHINE_KEY],
        machine_label=newest[_MACHINE_LABEL],
        benchmark=newest[_BENCHMARK],
        impl=newest[_IMPL],
        params=_PARAMS.decode(params),
        params_key=newest[_PARAMS_KEY],
        metric=newest[_METRIC],
        unit=newest[_UNIT],
        direction=newest[_DIRECTION],
        gated=newest[_GATED],
        points=tuple(points),
    )


def _make_point(rows: list[Any]) -> SeriesPoint:
    """One commit's point from its runs' rows (oldest first): the medians of the ``ok`` ones, else
    the newest row's failure.

    One used row, the usual case, keeps its numbers as they are: no median to take, and every point
    of a whole-store history goes through here (docs/perf/store.md).
    """
    newest = rows[-1]
    ok_rows = [r for r in rows if r[_STATUS] == "ok" and r[_VALUE] is not None]
    used = ok_rows or [newest]
    if len(used) == 1:
        only = used[0]
        value, q25, q75 = (only[_VALUE], only[_Q25], only[_Q75]) if ok_rows else (None, None, None)
        n_samples = only[_N_SAMPLES]
        run_ids: tuple[int, ...] = (only[_RUN_ID],)
    else:
        value, q25, q75 = (_median([r[column] for r in ok_rows]) for column in (_VALUE, _Q25, _Q75))
        n_samples = sum(r[_N_SAMPLES] for r in used)
        run_ids = tuple(r[_RUN_ID] for r in used)
    return SeriesPoint(
        newest[_SHA],
        newest[_COMMITTED_AT],
        newest[_BRANCH],
        newest[_SUBJECT],
        newest[_DIRTY],
        "ok" if ok_rows else newest[_STATUS],
        value,
        q25,
        q75,
        len(used),
        n_samples,
        used[-1][_METHOD],
        None if ok_rows else newest[_ERROR],
        run_ids,
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
