"""Machines and commits inside a write, and ORM rows turned into ``Stored*`` records.

Every write (a run, a check, an acceptance, a change point) creates its machine and commits in the
same transaction when they are new.  They are upserted with ``INSERT ... ON CONFLICT DO NOTHING``
followed by a read, which is safe when two runners record the same commit at the same moment; an
existing row is never changed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfguard.store.models import Commit, Machine, Run
from perfguard.store.records import (
    RUN_COLUMNS,
    CommitRecord,
    MachineRecord,
    StoredCommit,
    StoredMachine,
    StoredRun,
)


def upsert_machine(session: Session, record: MachineRecord, dialect: str) -> int:
    """The id of the machine with ``record.key``, inserted if new."""
    existing = session.scalar(select(Machine.id).where(Machine.key == record.key))
    if existing is not None:
        return existing
    values = {
        "key": record.key,
        "kind": record.kind,
        "label": record.label,
        "attributes": dict(record.attributes),
        "first_seen": datetime.now(timezone.utc),
    }
    _insert_ignoring_conflict(session, Machine, values, dialect)
    return session.scalars(select(Machine.id).where(Machine.key == record.key)).one()


def upsert_commit(session: Session, record: CommitRecord, dialect: str) -> int:
    """The id of the commit with ``record.sha``, inserted if new."""
    existing = session.scalar(select(Commit.id).where(Commit.sha == record.sha))
    if existing is not None:
        return existing
    values = {
        "sha": record.sha,
        "base_sha": record.base_sha,
        "dirty": record.dirty,
        "branch": record.branch,
        "parents": list(record.parents),
        "subject": record.subject,
        "author": record.author,
        "committed_at": record.committed_at,
    }
    _insert_ignoring_conflict(session, Commit, values, dialect)
    return session.scalars(select(Commit.id).where(Commit.sha == record.sha)).one()


def _insert_ignoring_conflict(
    session: Session, model: type[Any], values: dict[str, Any], dialect: str
) -> None:
    # Imported here: the PostgreSQL dialect package costs ~30 ms to import, paid by every
    # `perfguard check` on SQLite otherwise (docs/perf/check.md).
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as sql
    else:
        from sqlalchemy.dialects import sqlite as sql  # type: ignore[no-redef]
    column = "key" if model is Machine else "sha"
    session.execute(sql.insert(model).values(**values).on_conflict_do_nothing(index_elements=[column]))


def stored_machine(machine: Machine) -> StoredMachine:
    return StoredMachine(
        id=machine.id,
        key=machine.key,
        kind=machine.kind,
        label=machine.label,
        attributes=machine.attributes,
        first_seen=machine.first_seen,
    )


def stored_commit(commit: Commit) -> StoredCommit:
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


def stored_run(run: Run, *, machine_key: str, sha: str, n_results: int) -> StoredRun:
    values = {name: getattr(run, name) for name in RUN_COLUMNS}
    for name in ("started_at", "finished_at"):  # a row just written still holds the writer's time zone
        values[name] = values[name].astimezone(timezone.utc)
    return StoredRun(
        id=run.id, machine_key=machine_key, sha=sha, status=run.status, n_results=n_results, **values
    )
