"""Machines and commits inside a write, every stored machine, and ORM rows turned into ``Stored*`` records.

Every write (a run, a check, an acceptance, a change point) creates its machine and commits in the
same transaction when they are new.  They are upserted with ``INSERT ... ON CONFLICT DO NOTHING``
followed by a read, which is safe when two runners record the same commit at the same moment; an
existing row is never changed.
"""

from __future__ import annotations

from dataclasses import fields
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

# The columns that hold a machine's and a commit's record: every field of the record.
_MACHINE_COLUMNS = tuple(f.name for f in fields(MachineRecord))
_COMMIT_COLUMNS = tuple(f.name for f in fields(CommitRecord))


def upsert_machine(session: Session, record: MachineRecord, dialect: str) -> int:
    """The id of the machine with ``record.key``, inserted if new."""
    values = {name: getattr(record, name) for name in _MACHINE_COLUMNS}
    values["attributes"] = dict(record.attributes)
    values["first_seen"] = datetime.now(timezone.utc)
    return _upsert(session, Machine, "key", values, dialect)


def upsert_commit(session: Session, record: CommitRecord, dialect: str) -> int:
    """The id of the commit with ``record.sha``, inserted if new."""
    values = {name: getattr(record, name) for name in _COMMIT_COLUMNS}
    values["parents"] = list(record.parents)
    return _upsert(session, Commit, "sha", values, dialect)


def _upsert(session: Session, model: type[Any], column: str, values: dict[str, Any], dialect: str) -> int:
    """The id of the row whose unique ``column`` is ``values[column]``; inserted if there is none
    (``ON CONFLICT DO NOTHING``: another runner may insert it at the same moment)."""
    key = getattr(model, column) == values[column]
    existing = session.scalar(select(model.id).where(key))
    if existing is not None:
        return int(existing)
    # Imported here: the PostgreSQL dialect package costs ~30 ms to import, paid by every
    # `perfguard check` on SQLite otherwise (docs/perf/check.md).
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as sql
    else:
        from sqlalchemy.dialects import sqlite as sql  # type: ignore[no-redef]
    session.execute(sql.insert(model).values(**values).on_conflict_do_nothing(index_elements=[column]))
    return int(session.scalars(select(model.id).where(key)).one())


def machines(session: Session) -> list[StoredMachine]:
    """Every machine key in the store, by key."""
    return [stored_machine(m) for m in session.scalars(select(Machine).order_by(Machine.key))]


def stored_machine(machine: Machine) -> StoredMachine:
    return StoredMachine(**{name: getattr(machine, name) for name in ("id", "first_seen", *_MACHINE_COLUMNS)})


def stored_commit(commit: Commit) -> StoredCommit:
    values = {name: getattr(commit, name) for name in ("id", *_COMMIT_COLUMNS)}
    values["parents"] = tuple(commit.parents)
    return StoredCommit(**values)


def stored_run(run: Run, *, machine_key: str, sha: str, n_results: int) -> StoredRun:
    values = {name: getattr(run, name) for name in RUN_COLUMNS}
    for name in ("started_at", "finished_at"):  # a row just written still holds the writer's time zone
        values[name] = values[name].astimezone(timezone.utc)
    return StoredRun(
        id=run.id, machine_key=machine_key, sha=sha, status=run.status, n_results=n_results, **values
    )


def dialect_insert(dialect: str, model: type[Any]) -> Any:
    """The dialect's ``INSERT`` (with ``on_conflict_do_*``); imported here, as in _upsert."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as sql
    else:
        from sqlalchemy.dialects import sqlite as sql  # type: ignore[no-redef]
    return sql.insert(model)
