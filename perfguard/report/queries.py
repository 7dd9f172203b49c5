"""The reports' read-only view of the history store.

Reports never write: everything here is a ``SELECT``.  The queries return plain rows (not ORM
objects) for the history site, because a site of 1,000 commits x 200 series reads 200,000 results
and ORM identity-map bookkeeping would cost more than the rendering.  The check report works on
the ORM ``Check`` (the object ``perfguard check`` already holds).

``open_session`` accepts what callers have at hand: a SQLAlchemy ``Session``, an ``Engine``, a
``perfguard.store.Store`` (its engine), or a URL.  A URL is opened read-only (SQLite
``mode=ro``): rendering a report can never create or migrate a database.

This module reads the models directly instead of through ``Store.series``: the site needs every
point's raw samples (for its confidence interval) and the latest run of a commit (not the median
of runs), at 200,000 rows in a couple of seconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Engine, Text, cast, create_engine, select
from sqlalchemy.exc import NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, aliased, joinedload, selectinload

from perfguard.errors import StoreError
from perfguard.store.models import Check, CheckItem, Commit, Machine, Result, Run
from perfguard.store.url import resolve

#: Run purposes that make up the history of the baseline branch.  ``head`` and ``retry`` runs
#: belong to a pull request's check, ``calibrate`` runs to calibration; none is a point of history.
HISTORY_PURPOSES: tuple[str, ...] = ("run", "baseline")

#: Check verdicts drawn on the history charts.
MARKED_VERDICTS: tuple[str, ...] = ("regression", "improvement")


class HistoryRun(NamedTuple):
    """A run that belongs to the history, with its machine and commit."""

    run_id: int
    started_at: datetime
    machine_id: int
    machine_key: str
    machine_label: str
    machine_kind: str
    commit_id: int
    sha: str
    committed_at: datetime
    subject: str


class HistoryRow(NamedTuple):
    """One stored result of a history run: a point of some series.

    ``params`` and ``samples`` arrive as JSON *text*: parsing them is left to the caller, which
    parses ``params`` once per series and ``samples`` once per point (200,000 rows of
    SQLAlchemy-side JSON processing cost more than the whole rendering).
    """

    run_id: int
    benchmark: str
    impl: str
    params_json: str
    params_key: str
    metric: str
    unit: str
    direction: str
    gated: bool
    status: str
    value: float | None
    samples_json: str | None
    q25: float | None
    q75: float | None
    n_samples: int
    method: str | None


class VerdictMark(NamedTuple):
    """A stored check verdict (regression / improvement) to draw at its head commit."""

    check_id: int
    machine_id: int
    head_commit_id: int
    base_sha: str
    benchmark: str
    params_key: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None


@contextlib.contextmanager
def open_session(source: Any) -> Iterator[Session]:
    """A session on ``source`` (Session, Engine, store object with ``session()``, or URL)."""
    if isinstance(source, Session):
        yield source
        return
    if isinstance(source, Engine):
        with Session(source) as session:
            yield session
        return
    engine = getattr(source, "engine", None)  # perfguard.store.Store
    if isinstance(engine, Engine):
        with Session(engine) as session:
            yield session
        return
    if isinstance(source, (str, Path)):
        engine = read_only_engine(str(source))
        try:
            with Session(engine) as session:
                yield session
        finally:
            engine.dispose()
        return
    raise TypeError(f"cannot read a store from {type(source).__name__}; pass a Session, Engine or URL")


def read_only_engine(url: str | None) -> Engine:
    """An engine that cannot change the database: SQLite opened ``mode=ro``; a missing file is an error.

    ``url`` is resolved as every perfguard command does (``--db``, else ``PERFGUARD_DB``, else the
    repository's ``.perfguard/history.db``; :func:`perfguard.store.resolve`), but unlike
    ``Store.open`` nothing is created or migrated: rendering a report only reads.
    """
    store_url = resolve(url)
    path = store_url.sqlite_path
    if store_url.dialect == "sqlite":
        if path is None:
            raise StoreError(
                f"{store_url.masked} is not a SQLite file", hint="pass the store's file URL to --db"
            )
        if not path.is_file():
            raise StoreError(
                f"no history store at {path}",
                hint="run `perfguard run` or `perfguard check` first, or pass --db / PERFGUARD_DB",
            )
        return create_engine(f"sqlite:///file:{path.resolve().as_posix()}?mode=ro&uri=true")
    try:
        return create_engine(store_url.url, connect_args={"connect_timeout": 10})
    except (NoSuchModuleError, ImportError) as exc:
        raise StoreError(
            f"cannot open {store_url.masked}: {exc}",
            hint="install the database driver (pip install 'perfguard[postgres]') or fix --db",
        ) from exc


def _query_error(exc: OperationalError) -> StoreError:
    return StoreError(
        f"could not read the history store: {exc.orig}",
        hint="check --db / PERFGUARD_DB; run `perfguard db upgrade` if the schema is older than perfguard",
    )


def load_check(session: Session, check_id: int) -> Check:
    """A stored check with everything its report needs already loaded."""
    stmt = (
        select(Check)
        .where(Check.id == check_id)
        .options(
            selectinload(Check.items),
            joinedload(Check.machine),
            joinedload(Check.head_commit),
            joinedload(Check.base_commit),
        )
    )
    try:
        check = session.scalars(stmt).unique().one_or_none()
    except OperationalError as exc:
        raise _query_error(exc) from exc
    if check is None:
        latest = session.scalar(select(Check.id).order_by(Check.id.desc()).limit(1))
        raise StoreError(
            f"no check with id {check_id} in the store",
            hint=f"the latest check is {latest}" if latest is not None else "no check is stored yet",
        )
    return check


def side_runs(session: Session, check: Check) -> tuple[Run | None, Run | None]:
    """The runs whose software both sides of ``check`` were measured with.

    Prefers the run made for this check (purpose ``baseline`` / ``head``, the latest one that
    started before the check was stored) and falls back to any run of that commit on that machine.
    """

    def pick(commit_id: int, purposes: Sequence[str]) -> Run | None:
        stmt = (
            select(Run)
            .where(Run.machine_id == check.machine_id, Run.commit_id == commit_id)
            .order_by(Run.purpose.in_(purposes).desc(), Run.started_at.desc())
        )
        runs = list(session.scalars(stmt))
        before = [
            r for r in runs if check.created_at is None or _naive(r.started_at) <= _naive(check.created_at)
        ]
        return (before or runs or [None])[0]

    return pick(check.base_commit_id, ("baseline", "run")), pick(check.head_commit_id, ("head",))


def _naive(when: datetime) -> datetime:
    """SQLite drops time zones; compare stored datetimes without them."""
    return when.replace(tzinfo=None)


def _history_runs_stmt(purposes: Sequence[str]) -> Any:
    return (
        select(Run.id)
        .join(Commit, Run.commit_id == Commit.id)
        .where(Run.purpose.in_(purposes), Commit.dirty.is_(False), Run.status == "complete")
    )


def history_runs(session: Session, purposes: Sequence[str] = HISTORY_PURPOSES) -> list[HistoryRun]:
    """The runs that make up the history: history purposes, clean commits, completed."""
    stmt = (
        select(
            Run.id,
            Run.started_at,
            Machine.id,
            Machine.key,
            Machine.label,
            Machine.kind,
            Commit.id,
            Commit.sha,
            Commit.committed_at,
            Commit.subject,
        )
        .join(Commit, Run.commit_id == Commit.id)
        .join(Machine, Run.machine_id == Machine.id)
        .where(Run.id.in_(_history_runs_stmt(purposes)))
    )
    try:
        return [HistoryRun(*row) for row in session.execute(stmt)]
    except OperationalError as exc:
        raise _query_error(exc) from exc


def history_rows(session: Session, purposes: Sequence[str] = HISTORY_PURPOSES) -> list[HistoryRow]:
    """Every result of the history runs (see :func:`history_runs`), JSON columns as text."""
    stmt = select(
        Result.run_id,
        Result.benchmark,
        Result.impl,
        cast(Result.params, Text),
        Result.params_key,
        Result.metric,
        Result.unit,
        Result.direction,
        Result.gated,
        Result.status,
        Result.value,
        cast(Result.samples, Text),
        Result.q25,
        Result.q75,
        Result.n_samples,
        Result.method,
    ).where(Result.run_id.in_(_history_runs_stmt(purposes)))
    try:
        return [HistoryRow._make(row) for row in session.execute(stmt)]
    except OperationalError as exc:
        raise _query_error(exc) from exc


def verdict_marks(session: Session) -> list[VerdictMark]:
    """Stored check verdicts worth drawing on a history chart (regressions and improvements)."""
    base = aliased(Commit)
    stmt = (
        select(
            Check.id,
            Check.machine_id,
            Check.head_commit_id,
            base.sha,
            CheckItem.benchmark,
            CheckItem.params_key,
            CheckItem.verdict,
            CheckItem.ratio,
            CheckItem.ci_low,
            CheckItem.ci_high,
            CheckItem.p_value,
        )
        .join(CheckItem, CheckItem.check_id == Check.id)
        .join(base, Check.base_commit_id == base.id)
        .where(CheckItem.verdict.in_(MARKED_VERDICTS))
        .order_by(Check.created_at, Check.id)
    )
    try:
        return [VerdictMark(*row) for row in session.execute(stmt)]
    except OperationalError as exc:
        raise _query_error(exc) from exc
