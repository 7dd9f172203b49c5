"""Runs and their results: the checks before a write, the write, and the reads for compare.

Session-level functions behind :meth:`Store.record_runs`, :meth:`Store.runs_for`,
:meth:`Store.results_for`, :meth:`Store.has_complete_run` and :meth:`Store.measured_shas`; the
``Store`` opens the transaction, these say what goes into it.  Each read is one query (no N+1): a
check reads thousands of results with their samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from perfguard.errors import StoreError
from perfguard.store.models import Commit, Machine, Result, ResultData, Run
from perfguard.store.record_checks import NOTHING_WRITTEN, check_record
from perfguard.store.records import (
    RESULT_COLUMNS,
    RESULT_DATA_COLUMNS,
    RUN_COLUMNS,
    CommitRecord,
    MachineRecord,
    ResultRecord,
    RunRecord,
    StoredResult,
    StoredRun,
)
from perfguard.store.rows import stored_run

ResultsByKey = dict[tuple[str, str], list[StoredResult]]
"""Results grouped by ``(benchmark, params_key)``; each list holds one entry per run (round), oldest first."""


def validate_runs(machine: MachineRecord, commit: CommitRecord, runs: Sequence[RunRecord]) -> None:
    """Every record of a write, before it starts: a bad one is a StoreError naming it."""
    check_record("machine", machine.validate)
    check_record("commit", commit.validate)
    if not runs:
        raise StoreError(f"no runs to record; {NOTHING_WRITTEN}", hint="measure something first")
    for n, run in enumerate(runs, start=1):
        check_record("run" if len(runs) == 1 else f"run {n} of {len(runs)}", run.validate)
        seen: dict[tuple[str, str], int] = {}
        for i, record in enumerate(run.results, start=1):
            check_record(f"result {i} of {len(run.results)} ({_describe(record)})", record.validate)
            if record.key in seen:
                raise StoreError(
                    f"results {seen[record.key]} and {i} of the run are both {record.describe()}; "
                    f"{NOTHING_WRITTEN}",
                    hint="a run holds one result per benchmark x params",
                )
            seen[record.key] = i


def insert_runs(
    session: Session,
    machine_id: int,
    commit_id: int,
    *,
    machine_key: str,
    sha: str,
    runs: Sequence[RunRecord],
) -> list[StoredRun]:
    """Insert validated runs with their results (``results`` and ``result_data``)."""
    stored: list[StoredRun] = []
    for record in runs:
        run = Run(machine_id=machine_id, commit_id=commit_id, status="complete", **_run_values(record))
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
        stored.append(stored_run(run, machine_key=machine_key, sha=sha, n_results=len(record.results)))
    return stored


def runs_for(
    session: Session, machine_key: str, sha: str, profile: str, purposes: Sequence[str], trusted_only: bool
) -> list[StoredRun]:
    """The complete runs of one commit on one machine key and profile, oldest first."""
    n_results = select(func.count(Result.id)).where(Result.run_id == Run.id).scalar_subquery()
    stmt = (
        select(Run, n_results)
        .join(Commit, Run.commit_id == Commit.id)
        .join(Machine, Run.machine_id == Machine.id)
        .where(*_run_filter(machine_key, Commit.sha == sha, profile, purposes, trusted_only))
        .order_by(Run.started_at, Run.id)
    )
    return [
        stored_run(run, machine_key=machine_key, sha=sha, n_results=count)
        for run, count in session.execute(stmt)
    ]


def results_for(
    session: Session, machine_key: str, sha: str, profile: str, purposes: Sequence[str], trusted_only: bool
) -> ResultsByKey:
    """All results (with samples) of one commit on one machine key and profile, in one query."""
    stmt = (
        select(
            *(getattr(Result, name) for name in RESULT_COLUMNS),
            *(getattr(ResultData, name) for name in RESULT_DATA_COLUMNS),
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
        .where(*_run_filter(machine_key, Commit.sha == sha, profile, purposes, trusted_only))
        .order_by(Result.benchmark, Result.params_key, Run.started_at, Run.id)
    )
    grouped: ResultsByKey = {}
    for row in session.connection().execute(stmt).mappings():
        values = {name: row[name] for name in (*RESULT_COLUMNS, *RESULT_DATA_COLUMNS) if name != "n_samples"}
        stored = StoredResult(
            **values,  # n_samples is derived from the samples
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
    session: Session, machine_key: str, sha: str, profile: str, purposes: Sequence[str], trusted_only: bool
) -> bool:
    stmt = (
        select(Run.id)
        .join(Commit, Run.commit_id == Commit.id)
        .join(Machine, Run.machine_id == Machine.id)
        .where(*_run_filter(machine_key, Commit.sha == sha, profile, purposes, trusted_only))
        .limit(1)
    )
    return session.scalar(stmt) is not None


def measured_shas(
    session: Session,
    machine_key: str,
    profile: str,
    shas: Sequence[str],
    purposes: Sequence[str],
    trusted_only: bool,
) -> set[str]:
    """Which of ``shas`` have a complete run on this machine key and profile (one query)."""
    stmt = (
        select(Commit.sha)
        .join(Run, Run.commit_id == Commit.id)
        .join(Machine, Run.machine_id == Machine.id)
        .where(*_run_filter(machine_key, Commit.sha.in_(list(shas)), profile, purposes, trusted_only))
        .distinct()
    )
    return set(session.scalars(stmt))


def _run_filter(
    machine_key: str, commits: Any, profile: str, purposes: Sequence[str], trusted_only: bool
) -> list[Any]:
    """Complete runs of ``commits`` (a condition on ``Commit.sha``) on this machine key and profile."""
    where = [
        Machine.key == machine_key,
        commits,
        Run.profile == profile,
        Run.purpose.in_(list(purposes)),
        Run.status == "complete",
    ]
    if trusted_only:
        where.append(Run.trusted.is_(True))
    return where


def _run_values(record: RunRecord) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in RUN_COLUMNS}
    for name in ("software", "fingerprint", "settings"):
        values[name] = dict(values[name])
    return values


def _result_values(record: ResultRecord) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in RESULT_COLUMNS}
    values["params"] = dict(record.params)
    return values


def _describe(record: ResultRecord) -> str:
    try:
        return record.describe()
    except Exception:
        return "malformed record"
