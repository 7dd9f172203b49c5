"""The repository the rest of perfguard uses: open a store, write runs and checks, read them back.

See the package docstring (``perfguard.store``) for the API in one place.  Every write is one
transaction that is validated completely before it starts; every read returns frozen dataclasses,
never ORM objects.  Machines and commits are upserted with ``INSERT ... ON CONFLICT DO NOTHING``
followed by a read, which is safe when two runners record the same commit at the same moment.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, insert, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, joinedload, selectinload

from perfguard.errors import StoreError
from perfguard.store import history, regressions, schema
from perfguard.store.engine import NO_SPACE, READ_ONLY_HINT, WRITE_OPTION, create, explain
from perfguard.store.models import Check, CheckItem, Commit, Machine, Result, ResultData, Run
from perfguard.store.records import (
    MEASUREMENT_PURPOSES,
    CheckItemRecord,
    CommitRecord,
    MachineRecord,
    RecordError,
    ResultRecord,
    RunRecord,
    StoredCheck,
    StoredCheckItem,
    StoredCommit,
    StoredMachine,
    StoredResult,
    StoredRun,
    require_aware,
    require_json,
    require_text,
)
from perfguard.store.regressions import (
    AcceptanceRecord,
    ChangePointRecord,
    StoredAcceptance,
    StoredChangePoint,
)
from perfguard.store.url import StoreURL, resolve

ResultsByKey = dict[tuple[str, str], list[StoredResult]]
"""Results grouped by ``(benchmark, params_key)``; each list holds one entry per run (round), oldest first."""

# ResultRecord fields stored in ``results`` (n_samples is derived) and in ``result_data``.
_RESULT_FIELDS = (
    "benchmark",
    "impl",
    "params",
    "params_key",
    "metric",
    "unit",
    "direction",
    "gated",
    "status",
    "value",
    "n_samples",
    "q25",
    "q75",
    "method",
    "error",
    "benchmark_version",
)
_RESULT_DATA_FIELDS = ("samples", "info")
_CHECK_ITEM_FIELDS = (
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
_NOTHING_WRITTEN = "nothing was written to the store"
# The tables perfguard writes (check_writable asks PostgreSQL for INSERT on each, and USAGE of
# their id sequences); alembic_version only matters to migrations.
_WRITTEN_TABLES = ("machines", "commits", "runs", "results", "result_data", "checks", "check_items")
MIN_FREE_BYTES = 16 * 2**20
"""check_writable() refuses a SQLite store on a disk with less free space than this (a run of a
production suite writes about 1 MB; the WAL grows by as much again before a checkpoint)."""
_PROBE_BYTES = 64 * 2**10


class Store:
    """A history store: one database, its schema at this perfguard's newest revision."""

    def __init__(
        self,
        engine: Engine,
        store_url: StoreURL,
        schema_state: schema.SchemaState,
        migrated_from: str | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self._engine = engine
        self._url = store_url
        self.schema_state = schema_state
        # The revision open() found the database at (None: it was empty, or migrate=False).
        self.migrated_from = migrated_from
        # Every write is refused (by perfguard, and by the database: see engine.create).
        self.read_only = read_only

    # --- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | URL | StoreURL | None = None,
        *,
        cwd: Path | None = None,
        migrate: bool = True,
        read_only: bool = False,
    ) -> Store:
        """Connect to ``url`` (None: ``PERFGUARD_DB``, else ``<repo>/.perfguard/history.db``).

        With ``migrate`` (the default) the schema is created or upgraded to this perfguard's
        newest revision.  ``migrate=False`` only reads the schema state (``perfguard db current``).
        ``read_only`` (an untrusted check's baseline store): every write is refused with a
        :class:`StoreError`, by perfguard and by the database itself (SQLite ``mode=ro``,
        PostgreSQL ``default_transaction_read_only``); the store is never created or migrated, so
        it must exist at this perfguard's schema revision.
        ``url`` may also be a :class:`StoreURL` from ``resolve`` / ``resolve_results``.
        Raises :class:`StoreError` for every way this can fail, with the URL's password masked.
        """
        store_url = url if isinstance(url, StoreURL) else resolve(url, cwd=cwd)
        engine = create(store_url, read_only=read_only)
        try:
            if migrate and not read_only:
                before, head = schema.upgrade(engine, store_url)
                return cls(engine, store_url, schema.SchemaState(current=head, head=head), before)
            with engine.connect() as connection:
                state = schema.state(connection, store_url)
            if read_only and migrate and not state.up_to_date:
                raise _not_readable(store_url, state)
            return cls(engine, store_url, state, read_only=read_only)
        except StoreError:
            engine.dispose()
            raise
        except SQLAlchemyError as exc:
            engine.dispose()
            raise explain(exc, store_url, "opening the history store", read_only=read_only) from None

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The URL, password masked: fit for messages and logs."""
        return self._url.masked

    @property
    def dialect(self) -> str:
        return self._url.dialect

    @property
    def files(self) -> tuple[Path, ...]:
        """The files of a SQLite store (database, -wal, -shm, -journal); none for PostgreSQL.

        For the dirty-state check: a store inside the work tree is not a change to the code
        (``perfguard.gitrepo.work_tree(root, ignore=store.files)``).
        """
        return self._url.files

    def check_writable(self, *, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        """Raise :class:`StoreError` when a write would fail, before anything is measured.

        Cheap (milliseconds): a read-only store; on SQLite, a directory that refuses a new file
        (SQLite writes its -wal/-shm/-journal files there), a disk with less than
        ``min_free_bytes`` free or that refuses a small write with "no space left", a file or
        filesystem that is read-only; on PostgreSQL, a read-only session or role and a user
        without INSERT on perfguard's tables.  Each error says which, and what to do.
        """
        if self.read_only:
            raise StoreError(
                f"the history store {self.url} was opened read-only: perfguard will not write to it",
                hint=READ_ONLY_HINT,
            )
        path = self._url.sqlite_path
        if path is not None:
            _probe_directory(path.parent, min_free_bytes)
            if path.exists() and not os.access(path, os.W_OK):
                raise StoreError(
                    f"the history store {path} is not writable by this user",
                    hint=f"make it writable (chmod u+w {path}), or point --db at a store you may write",
                )
        try:
            with self._engine.connect() as connection:
                if self.dialect == "sqlite":
                    connection.execution_options(**{WRITE_OPTION: True})
                    with connection.begin() as transaction:  # BEGIN IMMEDIATE: the write lock
                        connection.execute(text("UPDATE alembic_version SET version_num = version_num"))
                        transaction.rollback()
                elif self.dialect == "postgresql":
                    _probe_postgres(connection, self.url)
        except SQLAlchemyError as exc:
            raise explain(exc, self._url, "writing to") from None

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests, benchmarks and EXPLAIN; not for writing around the API)."""
        return self._engine

    def snapshot(self, target: Path) -> Path:
        """Copy a SQLite store to ``target``: consistent, read-only, readable from any directory.

        For PR runners (docs/ci.md, "Trust model"): the baseline workflow publishes a snapshot
        that PR jobs open with ``read_only=True``.  SQLite's online backup copies a consistent
        state while writers carry on; the copy uses a rollback journal instead of WAL, because a
        WAL database can only be read where SQLite may create its -shm file (a read-only mount
        cannot).  Written under a temporary name and renamed, so a reader never sees half a copy;
        the file is made read-only (0444).  Returns ``target``.
        """
        if self.dialect != "sqlite" or self._url.sqlite_path is None:
            raise StoreError(
                f"{self.url} is not a SQLite file: snapshots are of SQLite stores",
                hint="PR jobs read a PostgreSQL store through a read-only role instead (docs/ci.md)",
            )
        target = Path(target)
        if target.resolve() in {f.resolve() for f in self.files}:
            raise StoreError(
                f"the snapshot {target} would overwrite the store itself", hint="pick another path"
            )
        if not target.parent.is_dir():
            raise StoreError(f"the directory of the snapshot {target} does not exist", hint="create it first")
        partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
        try:
            with self._engine.connect() as connection:
                source = connection.connection.driver_connection
                copy = sqlite3.connect(partial)
                try:
                    source.backup(copy)
                    copy.execute("PRAGMA journal_mode = DELETE")
                finally:
                    copy.close()
            partial.chmod(0o444)
            os.replace(partial, target)
        except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise StoreError(
                f"copying {self.url} to {target} failed: {exc}",
                hint="check that the target's directory is writable and has room",
            ) from None
        return target

    # --- machines and commits --------------------------------------------------------------------

    def get_or_create_machine(
        self, key: str, kind: str, label: str, attributes: Mapping[str, Any]
    ) -> StoredMachine:
        """The machine with this key, created if new (an existing row is returned unchanged)."""
        self._refuse_if_read_only("recording a machine in")
        record = MachineRecord(key=key, kind=kind, label=label, attributes=attributes)
        _check("machine", record.validate)
        with self._writing("recording a machine in") as session:
            machine_id = self._upsert_machine(session, record)
            return _stored_machine(session.get_one(Machine, machine_id))

    def get_or_create_commit(
        self,
        sha: str,
        base_sha: str,
        dirty: bool,
        branch: str | None,
        parents: Sequence[str],
        subject: str,
        author: str | None,
        committed_at: datetime,
    ) -> StoredCommit:
        """The commit with this sha, created if new (an existing row is returned unchanged)."""
        self._refuse_if_read_only("recording a commit in")
        record = CommitRecord(
            sha=sha,
            base_sha=base_sha,
            dirty=dirty,
            branch=branch,
            parents=parents,
            subject=subject,
            author=author,
            committed_at=committed_at,
        )
        _check("commit", record.validate)
        with self._writing("recording a commit in") as session:
            commit_id = self._upsert_commit(session, record)
            return _stored_commit(session.get_one(Commit, commit_id))

    def machines(self) -> list[StoredMachine]:
        """Every machine key in the store, by key."""
        with self._reading("listing the machines of") as session:
            return [_stored_machine(m) for m in session.scalars(select(Machine).order_by(Machine.key))]

    # --- runs --------------------------------------------------------------------------------------

    def record_run(
        self,
        machine: MachineRecord,
        commit: CommitRecord,
        *,
        profile: str,
        purpose: str = "run",
        round: int = 0,
        software: Mapping[str, Any],
        fingerprint: Mapping[str, Any],
        settings: Mapping[str, Any],
        command: str = "",
        started_at: datetime,
        finished_at: datetime,
        results: Sequence[ResultRecord],
        trusted: bool = False,
    ) -> StoredRun:
        """Store one run and all its results in one transaction: all of it, or (on any error) nothing.

        ``machine`` and ``commit`` may be records or the values ``get_or_create_*`` returned; they
        are created in the same transaction if new.  Every record is validated first; a bad one
        raises :class:`StoreError` naming it, before anything is written.
        """
        run = RunRecord(
            profile=profile,
            purpose=purpose,
            round=round,
            software=software,
            fingerprint=fingerprint,
            settings=settings,
            command=command,
            started_at=started_at,
            finished_at=finished_at,
            results=results,
            trusted=trusted,
        )
        return self.record_runs(machine, commit, [run])[0]

    def record_runs(
        self, machine: MachineRecord, commit: CommitRecord, runs: Sequence[RunRecord]
    ) -> list[StoredRun]:
        """Store several runs of one commit (the rounds of one measurement) in one transaction.

        A measurement killed between its rounds therefore leaves nothing behind, and a commit is
        never half measured in the store.  Each run keeps its ``trusted`` flag (False unless the
        writer says so); only trusted runs are baselines.
        """
        self._refuse_if_read_only("recording a run in")
        _check("machine", machine.validate)
        _check("commit", commit.validate)
        if not runs:
            raise StoreError(f"no runs to record; {_NOTHING_WRITTEN}", hint="measure something first")
        for n, run in enumerate(runs, start=1):
            where = "run" if len(runs) == 1 else f"run {n} of {len(runs)}"
            _check(where, run.validate)
            seen: dict[tuple[str, str], int] = {}
            for i, record in enumerate(run.results, start=1):
                _check(f"result {i} of {len(run.results)} ({_describe(record)})", record.validate)
                if record.key in seen:
                    raise StoreError(
                        f"results {seen[record.key]} and {i} of the run are both {record.describe()}; "
                        f"{_NOTHING_WRITTEN}",
                        hint="a run holds one result per benchmark x params",
                    )
                seen[record.key] = i

        stored: list[StoredRun] = []
        with self._writing("recording a run in") as session:
            machine_id = self._upsert_machine(session, machine)
            commit_id = self._upsert_commit(session, commit)
            for record in runs:
                run = Run(
                    machine_id=machine_id,
                    commit_id=commit_id,
                    profile=record.profile,
                    purpose=record.purpose,
                    round=record.round,
                    software=dict(record.software),
                    fingerprint=dict(record.fingerprint),
                    settings=dict(record.settings),
                    command=record.command,
                    started_at=record.started_at,
                    finished_at=record.finished_at,
                    status="complete",
                    trusted=record.trusted,
                )
                session.add(run)
                session.flush()
                ids = session.scalars(
                    insert(Result).returning(Result.id, sort_by_parameter_order=True),
                    [{"run_id": run.id, **_result_values(r)} for r in record.results],
                ).all()
                session.execute(
                    insert(ResultData),
                    [
                        {"result_id": result_id, "samples": r.samples, "info": dict(r.info)}
                        for result_id, r in zip(ids, record.results, strict=True)
                    ],
                )
                stored.append(
                    StoredRun(
                        id=run.id,
                        machine_key=machine.key,
                        sha=commit.sha,
                        profile=record.profile,
                        purpose=record.purpose,
                        round=record.round,
                        software=dict(record.software),
                        fingerprint=dict(record.fingerprint),
                        settings=dict(record.settings),
                        command=record.command,
                        started_at=record.started_at.astimezone(timezone.utc),
                        finished_at=record.finished_at.astimezone(timezone.utc),
                        status="complete",
                        n_results=len(record.results),
                        trusted=record.trusted,
                    )
                )
        return stored

    def runs_for(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> list[StoredRun]:
        """The complete runs of one commit on one machine key and profile, oldest first.

        ``trusted_only``: only runs a trusted context measured (what a baseline may be made of).
        """
        n_results = select(func.count(Result.id)).where(Result.run_id == Run.id).scalar_subquery()
        stmt = (
            select(Run, n_results)
            .join(Commit, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .where(*_run_filter(machine_key, sha, profile, purposes, trusted_only))
            .order_by(Run.started_at, Run.id)
        )
        with self._reading("reading runs from") as session:
            return [
                _stored_run(run, machine_key=machine_key, sha=sha, n_results=count)
                for run, count in session.execute(stmt)
            ]

    def results_for(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> ResultsByKey:
        """All results (with samples) of one commit on one machine key and profile, in one query.

        Grouped by ``(benchmark, params_key)``; each group has one :class:`StoredResult` per run
        (its ``round``, ``run_id``, ``purpose`` and ``trusted`` say which), oldest run first.
        ``trusted_only``: only results of trusted runs (the check's baseline side).
        """
        stmt = (
            select(
                *(getattr(Result, name) for name in _RESULT_FIELDS),
                *(getattr(ResultData, name) for name in _RESULT_DATA_FIELDS),
                Result.id,
                Result.run_id,
                Run.round,
                Run.purpose,
                Run.started_at,
                Run.trusted,
            )
            .join_from(Result, Run, Result.run_id == Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .join(ResultData, ResultData.result_id == Result.id)
            .where(*_run_filter(machine_key, sha, profile, purposes, trusted_only))
            .order_by(Result.benchmark, Result.params_key, Run.started_at, Run.id)
        )
        grouped: ResultsByKey = {}
        with self._reading("reading results from") as session:
            for row in session.connection().execute(stmt).mappings():
                values = {name: row[name] for name in (*_RESULT_FIELDS, *_RESULT_DATA_FIELDS)}
                del values["n_samples"]  # derived from the samples
                stored = StoredResult(
                    **values,
                    id=row["id"],
                    run_id=row["run_id"],
                    round=row["round"],
                    purpose=row["purpose"],
                    started_at=row["started_at"],
                    trusted=row["trusted"],
                )
                grouped.setdefault(stored.key, []).append(stored)
        return grouped

    def has_complete_run(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> bool:
        """Whether this commit has been measured on this machine key with this profile.

        ``trusted_only``: by a trusted context (an untrusted run never stands in for a baseline).
        """
        stmt = (
            select(Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .where(*_run_filter(machine_key, sha, profile, purposes, trusted_only))
            .limit(1)
        )
        with self._reading("reading runs from") as session:
            return session.scalar(stmt) is not None

    # --- checks ------------------------------------------------------------------------------------

    def record_check(
        self,
        machine: MachineRecord,
        head: CommitRecord,
        base: CommitRecord,
        *,
        baseline_ref: str,
        profile: str,
        threshold: float,
        verdict: str,
        exit_code: int,
        summary: Mapping[str, Any],
        environment: Mapping[str, Any],
        config: Mapping[str, Any],
        command: str = "",
        created_at: datetime | None = None,
        items: Sequence[CheckItemRecord],
    ) -> int:
        """Store one check and its verdicts in one transaction; return its id."""
        self._refuse_if_read_only("recording a check in")
        created_at = datetime.now(timezone.utc) if created_at is None else created_at
        _check("machine", machine.validate)
        _check("head commit", head.validate)
        _check("base commit", base.validate)

        def validate_check() -> None:
            require_text("baseline_ref", baseline_ref, 255)
            require_text("profile", profile, 32)
            require_text("verdict", verdict, 16)
            if (
                isinstance(threshold, bool)
                or not isinstance(threshold, (int, float))
                or threshold != threshold
            ):
                raise RecordError(f"threshold must be a number, not {threshold!r}")
            if not isinstance(exit_code, int) or isinstance(exit_code, bool):
                raise RecordError(f"exit_code must be an int, not {exit_code!r}")
            for name, value in (("summary", summary), ("environment", environment), ("config", config)):
                require_json(name, value, mapping=True)
            if not isinstance(command, str):
                raise RecordError("command must be text")
            require_aware("created_at", created_at)

        _check("check", validate_check)
        for i, item in enumerate(items, start=1):
            _check(f"check item {i} of {len(items)} ({item.benchmark}({item.params_key}))", item.validate)

        with self._writing("recording a check in") as session:
            check = Check(
                machine_id=self._upsert_machine(session, machine),
                head_commit_id=self._upsert_commit(session, head),
                base_commit_id=self._upsert_commit(session, base),
                baseline_ref=baseline_ref,
                profile=profile,
                threshold=float(threshold),
                verdict=verdict,
                exit_code=exit_code,
                summary=dict(summary),
                environment=dict(environment),
                config=dict(config),
                command=command,
                created_at=created_at,
            )
            session.add(check)
            session.flush()
            if items:
                session.execute(
                    insert(CheckItem),
                    [
                        {"check_id": check.id, **{name: getattr(item, name) for name in _CHECK_ITEM_FIELDS}}
                        for item in items
                    ],
                )
            return check.id

    def get_check(self, check_id: int) -> StoredCheck | None:
        """A stored check with its machine, both commits and all items; None if there is none."""
        stmt = (
            select(Check)
            .where(Check.id == check_id)
            .options(
                joinedload(Check.machine),
                joinedload(Check.head_commit),
                joinedload(Check.base_commit),
                selectinload(Check.items),
            )
        )
        with self._reading("reading a check from") as session:
            check = session.scalars(stmt).unique().one_or_none()
            if check is None:
                return None
            return StoredCheck(
                id=check.id,
                machine=_stored_machine(check.machine),
                head=_stored_commit(check.head_commit),
                base=_stored_commit(check.base_commit),
                baseline_ref=check.baseline_ref,
                profile=check.profile,
                threshold=check.threshold,
                verdict=check.verdict,
                exit_code=check.exit_code,
                summary=check.summary,
                environment=check.environment,
                config=check.config,
                command=check.command,
                created_at=check.created_at,
                items=tuple(
                    StoredCheckItem(id=item.id, **{name: getattr(item, name) for name in _CHECK_ITEM_FIELDS})
                    for item in sorted(check.items, key=lambda item: item.id)
                ),
            )

    # --- acceptances and change points (perfguard.accept, perfguard.changepoints) -----------------

    def record_acceptances(
        self,
        commit: CommitRecord,
        acceptances: Sequence[AcceptanceRecord],
        *,
        created_at: datetime | None = None,
    ) -> list[StoredAcceptance]:
        """Store acceptances of one commit in one transaction (an identical stored one is reused).

        A trusted acceptance also accepts the flagged change points of that commit that it covers
        within its ceiling: a maintainer acknowledging a step on the baseline branch after the fact.
        """
        created_at = datetime.now(timezone.utc) if created_at is None else created_at
        _check("commit", commit.validate)
        _check("created_at", lambda: require_aware("created_at", created_at))
        for i, record in enumerate(acceptances, start=1):
            _check(f"acceptance {i} of {len(acceptances)}", record.validate)
        with self._writing("recording an acceptance in") as session:
            commit_id = self._upsert_commit(session, commit)
            ids = regressions.insert_acceptances(session, commit_id, acceptances, created_at)
        with self._reading("reading acceptances from") as session:
            stored = {a.id: a for a in regressions.acceptances(session, ids=ids, trusted_only=False)}
        return [stored[i] for i in ids]

    def acceptances(
        self, shas: Sequence[str] | None = None, *, trusted_only: bool = False
    ) -> list[StoredAcceptance]:
        """The acceptances of these commits (every commit when None), oldest first.

        A check reads the trusted ones of the commits between its baseline and HEAD; the site shows
        all of them at their commit (``trusted`` says which ones count).
        """
        with self._reading("reading acceptances from") as session:
            return regressions.acceptances(session, shas=shas, trusted_only=trusted_only)

    def record_change_points(
        self,
        machine: MachineRecord,
        commit: CommitRecord,
        previous: CommitRecord,
        *,
        profile: str,
        points: Sequence[ChangePointRecord],
        detected_at: datetime | None = None,
    ) -> list[StoredChangePoint]:
        """Store the steps found at ``commit`` (against ``previous``) in one transaction.

        Finding the same step again updates it (values, cause, acceptance), so running the
        detection twice for one commit leaves one row per series.
        """
        detected_at = datetime.now(timezone.utc) if detected_at is None else detected_at
        _check("machine", machine.validate)
        _check("commit", commit.validate)
        _check("previous commit", previous.validate)
        _check("profile", lambda: require_text("profile", profile, 32))
        _check("detected_at", lambda: require_aware("detected_at", detected_at))
        for i, point in enumerate(points, start=1):
            _check(
                f"change point {i} of {len(points)} ({point.benchmark}({point.params_key}))", point.validate
            )
        if not points:
            return []
        with self._writing("recording change points in") as session:
            ids = regressions.upsert_change_points(
                session,
                machine_id=self._upsert_machine(session, machine),
                commit_id=self._upsert_commit(session, commit),
                previous_commit_id=self._upsert_commit(session, previous),
                profile=profile,
                points=points,
                detected_at=detected_at,
            )
        with self._reading("reading change points from") as session:
            stored = {p.id: p for p in regressions.change_points(session, ids=ids)}
        return [stored[i] for i in ids]

    def change_points(
        self,
        *,
        machine_key: str | None = None,
        sha: str | None = None,
        benchmark: str | None = None,
        params_key: str | None = None,
        flagged_only: bool = False,
    ) -> list[StoredChangePoint]:
        """Stored steps of the baseline branch, oldest commit first (for the site and the job summary).

        ``flagged_only``: only the steps that no trusted acceptance covers.
        """
        with self._reading("reading change points from") as session:
            return regressions.change_points(
                session,
                machine_key=machine_key,
                sha=sha,
                benchmark=benchmark,
                params_key=params_key,
                flagged_only=flagged_only,
            )

    def measured_shas(
        self,
        machine_key: str,
        profile: str,
        shas: Sequence[str],
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> set[str]:
        """Which of ``shas`` have a complete run on this machine key and profile (one query)."""
        if not shas:
            return set()
        stmt = (
            select(Commit.sha)
            .join(Run, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .where(
                Machine.key == machine_key,
                Commit.sha.in_(list(shas)),
                Run.profile == profile,
                Run.purpose.in_(list(purposes)),
                Run.status == "complete",
                *([Run.trusted.is_(True)] if trusted_only else []),
            )
            .distinct()
        )
        with self._reading("reading runs from") as session:
            return set(session.scalars(stmt))

    # --- history -----------------------------------------------------------------------------------

    def series(self, **filters: Any) -> list[history.Series]:
        """Series over commits per (machine, benchmark, params_key); see :func:`history.series`.

        ``trusted_only=True`` leaves out runs of untrusted contexts (the published history site).
        """
        with self._reading("reading history from") as session:
            return history.series(session, **filters)

    def latest(self, **filters: Any) -> list[history.Series]:
        """The newest point of every matching series; see :func:`history.latest`."""
        with self._reading("reading history from") as session:
            return history.latest(session, **filters)

    def distinct(self, column: str) -> list[str]:
        """Stored values of ``impl``, ``benchmark`` or ``machine`` (for 'did you mean' messages)."""
        target = {"impl": Result.impl, "benchmark": Result.benchmark, "machine": Machine.key}[column]
        with self._reading("reading history from") as session:
            return list(session.scalars(select(target).distinct().order_by(target)))

    # --- plumbing ----------------------------------------------------------------------------------

    def _refuse_if_read_only(self, doing: str) -> None:
        if self.read_only:
            raise StoreError(
                f"{doing} {self.url} refused: the store was opened read-only; {_NOTHING_WRITTEN}",
                hint=READ_ONLY_HINT,
            )

    @contextmanager
    def _writing(self, doing: str) -> Iterator[Session]:
        """One write transaction (SQLite: holding the write lock from its first statement)."""
        self._refuse_if_read_only(doing)
        try:
            with Session(self._engine, expire_on_commit=False) as session:
                session.connection(execution_options={WRITE_OPTION: True})
                yield session
                session.commit()
        except SQLAlchemyError as exc:
            error = explain(exc, self._url, doing, read_only=self.read_only)
            raise StoreError(f"{error.message}; {_NOTHING_WRITTEN}", hint=error.hint) from exc

    @contextmanager
    def _reading(self, doing: str) -> Iterator[Session]:
        try:
            with Session(self._engine) as session:
                yield session
        except SQLAlchemyError as exc:
            raise explain(exc, self._url, doing, read_only=self.read_only) from exc

    def _insert_ignoring_conflict(self, session: Session, model: type[Any], values: dict[str, Any]) -> None:
        # Imported here: the PostgreSQL dialect package costs ~30 ms to import, paid by every
        # `perfguard check` on SQLite otherwise (docs/perf/check.md).
        if self.dialect == "postgresql":
            from sqlalchemy.dialects import postgresql as dialect
        else:
            from sqlalchemy.dialects import sqlite as dialect
        column = "key" if model is Machine else "sha"
        session.execute(
            dialect.insert(model).values(**values).on_conflict_do_nothing(index_elements=[column])
        )

    def _upsert_machine(self, session: Session, record: MachineRecord) -> int:
        existing = session.scalar(select(Machine.id).where(Machine.key == record.key))
        if existing is not None:
            return existing
        self._insert_ignoring_conflict(
            session,
            Machine,
            {
                "key": record.key,
                "kind": record.kind,
                "label": record.label,
                "attributes": dict(record.attributes),
                "first_seen": datetime.now(timezone.utc),
            },
        )
        return session.scalars(select(Machine.id).where(Machine.key == record.key)).one()

    def _upsert_commit(self, session: Session, record: CommitRecord) -> int:
        existing = session.scalar(select(Commit.id).where(Commit.sha == record.sha))
        if existing is not None:
            return existing
        self._insert_ignoring_conflict(
            session,
            Commit,
            {
                "sha": record.sha,
                "base_sha": record.base_sha,
                "dirty": record.dirty,
                "branch": record.branch,
                "parents": list(record.parents),
                "subject": record.subject,
                "author": record.author,
                "committed_at": record.committed_at,
            },
        )
        return session.scalars(select(Commit.id).where(Commit.sha == record.sha)).one()


def _check(what: str, validate: Any) -> None:
    try:
        validate()
    except RecordError as exc:
        raise StoreError(
            f"{what} cannot be stored: {exc}; {_NOTHING_WRITTEN}",
            hint="the value came from perfguard itself or a benchmark suite; fix it there (or report a bug)",
        ) from None


def _describe(record: ResultRecord) -> str:
    try:
        return record.describe()
    except Exception:
        return "malformed record"


def _run_filter(
    machine_key: str, sha: str, profile: str, purposes: Sequence[str], trusted_only: bool
) -> list[Any]:
    where = [
        Machine.key == machine_key,
        Commit.sha == sha,
        Run.profile == profile,
        Run.purpose.in_(list(purposes)),
        Run.status == "complete",
    ]
    if trusted_only:
        where.append(Run.trusted.is_(True))
    return where


def _not_readable(store_url: StoreURL, state: schema.SchemaState) -> StoreError:
    """A read-only store must already be at this perfguard's schema: it is never created or migrated."""
    if state.current is None:
        return StoreError(
            f"{store_url.masked} holds no perfguard history store (no schema), and a read-only store "
            "is never created",
            hint="point --db at the baseline store that the baseline workflow (perfguard run) writes",
        )
    return StoreError(
        f"the history store {store_url.masked} is at schema revision {state.current}; this perfguard "
        f"reads {state.head}, and a read-only store is never migrated",
        hint="migrate it with a role that may write (perfguard db upgrade --db URL): the baseline "
        "workflow does so on its next run of this perfguard version",
    )


def _probe_directory(directory: Path, min_free_bytes: int) -> None:
    """The directory of a SQLite store takes a new file and has room: else a StoreError saying which."""
    try:
        read_only_fs = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        raise StoreError(
            f"cannot reach the directory of the history store {directory}: {exc.strerror or exc}",
            hint="create it, or fix the path in --db (or PERFGUARD_DB)",
        ) from None
    if read_only_fs:  # before the free space: a read-only mount reports none available
        raise _not_writable(directory, os.strerror(errno.EROFS))
    if free < min_free_bytes:
        wanted = f"{min_free_bytes / 2**20:.0f} MiB"
        raise _no_space(directory, f"only {free / 2**20:.1f} MiB free (perfguard wants {wanted})")
    try:
        handle, name = tempfile.mkstemp(prefix=".perfguard-probe-", dir=directory)
        try:
            os.write(handle, b"\0" * _PROBE_BYTES)
            os.fsync(handle)
        finally:
            os.close(handle)
            os.unlink(name)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            detail = f"a {_PROBE_BYTES // 1024} KiB test write failed: {exc.strerror}"
            raise _no_space(directory, detail) from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise _not_writable(directory, exc.strerror or str(exc)) from None
        raise StoreError(f"cannot write to the directory of the history store {directory}: {exc}") from None


def _not_writable(directory: Path, why: str) -> StoreError:
    return StoreError(
        f"the directory of the history store {directory} is not writable ({why}): SQLite writes the "
        "database and its -wal/-shm/-journal files there",
        hint="make the directory writable by this user, or point --db (or PERFGUARD_DB) at another place",
    )


def _no_space(directory: Path, detail: str) -> StoreError:
    return StoreError(
        f"{NO_SPACE} for the history store in {directory}: {detail}",
        hint=f"free space on that disk (df -h {directory}), or point --db (or PERFGUARD_DB) at another disk",
    )


def _probe_postgres(connection: Any, where: str) -> None:
    """A PostgreSQL session that may write: not read-only, INSERT on every table perfguard writes."""
    if connection.execute(text("SHOW transaction_read_only")).scalar() == "on":
        raise StoreError(
            f"the PostgreSQL session for {where} is read-only (default_transaction_read_only is on for "
            "this role or database, or the server is a standby)",
            hint="a trusted job needs the role that may write; a PR job's read-only role is "
            "meant for --db with --untrusted (docs/ci.md, 'Trust model')",
        )
    insert_granted = "has_table_privilege(CAST(:t AS text), 'INSERT')"
    sequence_granted = "has_sequence_privilege(pg_get_serial_sequence(CAST(:t AS text), 'id'), 'USAGE')"
    missing = []
    for table in _WRITTEN_TABLES:
        # result_data is keyed by its result: no id sequence of its own
        check = insert_granted if table == "result_data" else f"{insert_granted} AND {sequence_granted}"
        if not connection.execute(text(f"SELECT {check}"), {"t": table}).scalar():
            missing.append(table)
    if missing:
        raise StoreError(
            f"the PostgreSQL user of {where} may not write to {', '.join(missing)}",
            hint="GRANT INSERT (and USAGE on their id sequences) to the role a trusted job uses; "
            "a PR job's read-only role is meant for --db with --untrusted (docs/ci.md)",
        )


def _result_values(record: ResultRecord) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in _RESULT_FIELDS}
    values["params"] = dict(record.params)
    return values


def _stored_machine(machine: Machine) -> StoredMachine:
    return StoredMachine(
        id=machine.id,
        key=machine.key,
        kind=machine.kind,
        label=machine.label,
        attributes=machine.attributes,
        first_seen=machine.first_seen,
    )


def _stored_commit(commit: Commit) -> StoredCommit:
    return StoredCommit(
        id=commit.id,
        sha=commit.sha,
        base_sha=commit.base_sha,
        dirty=commit.dirty,
        branch=commit.branch,
        parents=tuple(commit.parents),
        subject=commit.subject,
        author=commit.author,
        committed_at=commit.committed_at,
    )


def _stored_run(run: Run, *, machine_key: str, sha: str, n_results: int) -> StoredRun:
    return StoredRun(
        id=run.id,
        machine_key=machine_key,
        sha=sha,
        profile=run.profile,
        purpose=run.purpose,
        round=run.round,
        software=run.software,
        fingerprint=run.fingerprint,
        settings=run.settings,
        command=run.command,
        started_at=run.started_at,
        finished_at=run.finished_at,
        status=run.status,
        n_results=n_results,
        trusted=run.trusted,
    )
