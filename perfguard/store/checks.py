"""Checks and their items: the checks before a write, the write, and reading a check back.

Session-level functions behind :meth:`Store.record_check` and :meth:`Store.get_check`.  A check's
own columns are the fields of :class:`StoredCheck` besides its id, machine, commits and items; an
item's are :data:`perfguard.store.records.CHECK_ITEM_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session, joinedload, selectinload

from perfguard.store.models import Check, CheckItem
from perfguard.store.record_checks import RecordError, check_record, require_aware, require_json, require_text
from perfguard.store.records import (
    CHECK_ITEM_COLUMNS,
    CheckItemRecord,
    CommitRecord,
    MachineRecord,
    StoredCheck,
    StoredCheckItem,
)
from perfguard.store.rows import stored_commit, stored_machine

#: The ``checks`` columns besides the machine and the two commits.
CHECK_COLUMNS = tuple(
    f.name for f in fields(StoredCheck) if f.name not in ("id", "machine", "head", "base", "items")
)


def validate_check(
    machine: MachineRecord,
    head: CommitRecord,
    base: CommitRecord,
    values: Mapping[str, Any],
    items: Sequence[CheckItemRecord],
) -> None:
    """Every value of a check write, before it starts: a bad one is a StoreError naming it."""
    check_record("machine", machine.validate)
    check_record("head commit", head.validate)
    check_record("base commit", base.validate)

    def validate() -> None:
        require_text("baseline_ref", values["baseline_ref"], 255)
        require_text("profile", values["profile"], 32)
        require_text("verdict", values["verdict"], 16)
        threshold = values["threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold != threshold:
            raise RecordError(f"threshold must be a number, not {threshold!r}")
        exit_code = values["exit_code"]
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            raise RecordError(f"exit_code must be an int, not {exit_code!r}")
        for name in ("summary", "environment", "config"):
            require_json(name, values[name], mapping=True)
        if not isinstance(values["command"], str):
            raise RecordError("command must be text")
        require_aware("created_at", values["created_at"])

    check_record("check", validate)
    for i, item in enumerate(items, start=1):
        check_record(f"check item {i} of {len(items)} ({item.benchmark}({item.params_key}))", item.validate)


def insert_check(
    session: Session,
    *,
    machine_id: int,
    head_id: int,
    base_id: int,
    values: Mapping[str, Any],
    items: Sequence[CheckItemRecord],
) -> int:
    """Insert a validated check and its items; its id."""
    columns = {name: values[name] for name in CHECK_COLUMNS}
    columns["threshold"] = float(columns["threshold"])
    for name in ("summary", "environment", "config"):
        columns[name] = dict(columns[name])
    check = Check(machine_id=machine_id, head_commit_id=head_id, base_commit_id=base_id, **columns)
    session.add(check)
    session.flush()
    if items:
        session.execute(
            insert(CheckItem),
            [
                {"check_id": check.id, **{name: getattr(item, name) for name in CHECK_ITEM_COLUMNS}}
                for item in items
            ],
        )
    return check.id


def get_check(session: Session, check_id: int) -> StoredCheck | None:
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
    check = session.scalars(stmt).unique().one_or_none()
    if check is None:
        return None
    return StoredCheck(
        id=check.id,
        machine=stored_machine(check.machine),
        head=stored_commit(check.head_commit),
        base=stored_commit(check.base_commit),
        items=tuple(
            StoredCheckItem(id=item.id, **{name: getattr(item, name) for name in CHECK_ITEM_COLUMNS})
            for item in sorted(check.items, key=lambda item: item.id)
        ),
        **{name: getattr(check, name) for name in CHECK_COLUMNS},
    )
