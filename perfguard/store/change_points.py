"""Change points: the records, and the queries behind their ``Store`` methods.

A **change point** is a step of one series (machine key x benchmark x params) between two recorded
commits of the baseline branch: ``previous`` (the commit recorded before it) and ``commit``.  It is
*flagged* unless a trusted acceptance covers it (``acceptance``, :mod:`perfguard.store.acceptances`).
``cause`` names a software change (torch, driver, CUDA, cuDNN) between the two runs when there is one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from perfguard.metrics import DIRECTIONS, NAMES
from perfguard.store.acceptances import StoredAcceptance, acceptances
from perfguard.store.models import ChangePoint, Commit, Machine
from perfguard.store.record_checks import RecordError, check_record, require_aware, require_json, require_text
from perfguard.store.records import CommitRecord, MachineRecord, params_key
from perfguard.store.rows import dialect_insert


@dataclass(frozen=True, kw_only=True)
class ChangePointRecord:
    """One step of one series between the previous recorded commit and this one."""

    benchmark: str
    impl: str
    params: Mapping[str, Any]
    metric: str
    unit: str
    direction: str
    before: float
    after: float
    ratio: float  # oriented: > 1 is worse
    threshold: float
    reason: str = ""
    cause: str | None = None
    software_changes: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    acceptance_id: int | None = None
    params_key: str = ""

    def __post_init__(self) -> None:
        if not self.params_key and isinstance(self.params, Mapping):
            object.__setattr__(self, "params_key", params_key(self.params))

    def validate(self) -> None:
        require_text("benchmark", self.benchmark, 255)
        require_text("impl", self.impl, 128)
        require_json("params", self.params, mapping=True)
        require_text("params_key", self.params_key, 512, allow_empty=True)
        if self.metric not in NAMES:
            raise RecordError(f"metric is {self.metric!r}; expected one of {', '.join(NAMES)}")
        require_text("unit", self.unit, 32)
        if self.direction not in DIRECTIONS:
            raise RecordError(f"direction is {self.direction!r}; expected one of {', '.join(DIRECTIONS)}")
        for name in ("before", "after", "ratio", "threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RecordError(f"{name} is {value!r}, not a finite number")
        if not isinstance(self.reason, str) or (self.cause is not None and not isinstance(self.cause, str)):
            raise RecordError("reason and cause must be text")
        require_json("software_changes", self.software_changes, mapping=True)


@dataclass(frozen=True, kw_only=True)
class StoredChangePoint(ChangePointRecord):
    """A stored change point, with its commits and, when accepted, the acceptance."""

    id: int
    machine_key: str
    profile: str
    sha: str
    subject: str
    committed_at: datetime
    previous_sha: str
    detected_at: datetime
    acceptance: StoredAcceptance | None = None

    @property
    def flagged(self) -> bool:
        """A step beyond the threshold that no trusted acceptance covers."""
        return self.acceptance is None


def validate_change_points(
    machine: MachineRecord,
    commit: CommitRecord,
    previous: CommitRecord,
    profile: str,
    points: Sequence[ChangePointRecord],
    detected_at: datetime,
) -> None:
    """Every value of a change-point write, before it starts: a bad one is a StoreError naming it."""
    check_record("machine", machine.validate)
    check_record("commit", commit.validate)
    check_record("previous commit", previous.validate)
    check_record("profile", lambda: require_text("profile", profile, 32))
    check_record("detected_at", lambda: require_aware("detected_at", detected_at))
    for i, point in enumerate(points, start=1):
        check_record(
            f"change point {i} of {len(points)} ({point.benchmark}({point.params_key}))", point.validate
        )


def upsert_change_points(
    session: Session,
    *,
    machine_id: int,
    commit_id: int,
    previous_commit_id: int,
    profile: str,
    points: Sequence[ChangePointRecord],
    detected_at: datetime,
    dialect: str,
) -> list[int]:
    """Insert the change points of one commit, or update the ones found again (a re-run is idempotent).

    One ``INSERT .. ON CONFLICT DO UPDATE`` per series on its unique key (machine, commit,
    benchmark, params), so two detections of the same commit at the same moment (two runners, a
    re-run) update one row instead of one of them failing on the key.  An acceptance the row
    already has is kept when the new finding carries none.
    """
    ids = []
    key = ("machine_id", "commit_id", "benchmark", "params_key")
    for record in points:
        values = _change_point_values(record)
        insert = dialect_insert(dialect, ChangePoint).values(
            machine_id=machine_id,
            commit_id=commit_id,
            previous_commit_id=previous_commit_id,
            profile=profile,
            detected_at=detected_at,
            **values,
        )
        update = {name: insert.excluded[name] for name in values if name not in key}
        update["acceptance_id"] = func.coalesce(insert.excluded.acceptance_id, ChangePoint.acceptance_id)
        update["previous_commit_id"] = insert.excluded.previous_commit_id
        update["profile"] = insert.excluded.profile
        session.execute(insert.on_conflict_do_update(index_elements=list(key), set_=update))
        row_id = session.scalars(
            select(ChangePoint.id).where(
                ChangePoint.machine_id == machine_id,
                ChangePoint.commit_id == commit_id,
                ChangePoint.benchmark == record.benchmark,
                ChangePoint.params_key == record.params_key,
            )
        ).one()
        ids.append(row_id)
    return ids


def change_points(
    session: Session,
    *,
    machine_key: str | None = None,
    sha: str | None = None,
    benchmark: str | None = None,
    params_key: str | None = None,
    ids: Sequence[int] | None = None,
    flagged_only: bool = False,
) -> list[StoredChangePoint]:
    """Stored change points matching the filters, by commit date then series."""
    previous = aliased(Commit)
    stmt = (
        select(ChangePoint, Machine.key, Commit, previous.sha)
        .join(Machine, ChangePoint.machine_id == Machine.id)
        .join(Commit, ChangePoint.commit_id == Commit.id)
        .join(previous, ChangePoint.previous_commit_id == previous.id)
    )
    for column, wanted in (
        (Machine.key, machine_key),
        (Commit.sha, sha),
        (ChangePoint.benchmark, benchmark),
        (ChangePoint.params_key, params_key),
    ):
        if wanted is not None:
            stmt = stmt.where(column == wanted)
    if ids is not None:
        stmt = stmt.where(ChangePoint.id.in_(list(ids)))
    if flagged_only:
        stmt = stmt.where(ChangePoint.acceptance_id.is_(None))
    stmt = stmt.order_by(Commit.committed_at, Commit.id, ChangePoint.benchmark, ChangePoint.params_key)
    rows = session.execute(stmt).all()
    accepted_ids = sorted({p.acceptance_id for p, *_ in rows if p.acceptance_id is not None})
    by_id = (
        {a.id: a for a in acceptances(session, ids=accepted_ids, trusted_only=False)} if accepted_ids else {}
    )
    return [
        StoredChangePoint(
            id=point.id,
            machine_key=key,
            profile=point.profile,
            sha=commit.sha,
            subject=commit.subject,
            committed_at=commit.committed_at,
            previous_sha=previous_sha,
            detected_at=point.detected_at,
            acceptance=by_id.get(point.acceptance_id) if point.acceptance_id is not None else None,
            **_change_point_values(point),
        )
        for point, key, commit, previous_sha in rows
    ]


_CHANGE_POINT_FIELDS = tuple(f.name for f in fields(ChangePointRecord))


def _change_point_values(record: Any) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in _CHANGE_POINT_FIELDS}
    values["params"] = dict(record.params)
    values["software_changes"] = {k: list(v) for k, v in dict(record.software_changes).items()}
    for name in ("before", "after", "ratio", "threshold"):
        values[name] = float(values[name])
    return values
