"""Acceptances and change points: the records, and the queries behind their ``Store`` methods.

An **acceptance** says "this regression is intended": a scope (implementation glob, benchmark glob,
optionally a metric and parameter globs), a ratio ceiling (the largest accepted ratio, > 1 =
worse), a reason, who wrote it and whether it is *trusted* (a maintainer's ``perfguard accept``, or
a ``Perfguard-Accept:`` trailer that a maintainer approved).  It belongs to a commit, and applies to
any check or step whose commit range contains that commit.

A **change point** is a step of one series (machine key x benchmark x params) between two recorded
commits of the baseline branch: ``previous`` (the commit recorded before it) and ``commit``.  It is
*flagged* unless a trusted acceptance covers it (``acceptance``).  ``cause`` names a software change
(torch, driver, CUDA, cuDNN) between the two runs when there is one.

The scope rule (:meth:`AcceptanceRecord.covers`) lives here, with the record, because the store
applies it too: an acceptance recorded at a flagged commit marks that commit's change points as
accepted in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from perfguard.store.models import Acceptance, ChangePoint, Commit, Machine
from perfguard.store.records import (
    DIRECTIONS,
    METRICS,
    RecordError,
    params_key,
    require_json,
    require_text,
)

ACCEPTANCE_SOURCES = ("command", "trailer")


def short_benchmark(benchmark: str) -> str:
    """``bench_attention.Forward.track_time`` -> ``Forward.track_time`` (asv's module dropped)."""
    return benchmark.split(".", 1)[1] if benchmark.count(".") >= 2 else benchmark


@dataclass(frozen=True, kw_only=True)
class AcceptanceTerms:
    """What an acceptance says, before anyone signs it: scope, ceiling, reason.

    ``perfguard accept``'s arguments and a ``Perfguard-Accept`` trailer parse into this
    (:func:`perfguard.accept.parse_tokens`); signed (:meth:`record`), it is an
    :class:`AcceptanceRecord`.  It lives in the store, not in :mod:`perfguard.accept`, because the
    store applies the scope rule too and comes earlier in the data flow.

    ``impl`` and ``benchmark`` are shell globs (``*``, ``multihead_*``, ``Forward*``); the benchmark
    glob is matched against the name with and without asv's module.  ``metric``: one metric, or
    None for every metric of the scope.  ``params``: ``{name: glob}``, every one must match the
    item's parameter's text.  ``ceiling``: the largest ratio accepted (1.35 = up to 35% worse).
    """

    impl: str
    benchmark: str
    ceiling: float
    reason: str
    metric: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)

    def covers(self, impl: str, benchmark: str, metric: str, params: Mapping[str, Any]) -> bool:
        """Whether an item (implementation, benchmark, metric, parameters) is within the scope."""
        if not fnmatchcase(impl, self.impl):
            return False
        if not (
            fnmatchcase(short_benchmark(benchmark), self.benchmark) or fnmatchcase(benchmark, self.benchmark)
        ):
            return False
        if self.metric is not None and metric != self.metric:
            return False
        for name, glob in self.params.items():
            if name not in params or not fnmatchcase(_text(params[name]), glob):
                return False
        return True

    def scope(self) -> str:
        """The scope as written in a trailer: ``improved Forward.track_time seq_len=4096``."""
        parts = [self.impl, self.benchmark]
        if self.metric is not None:
            parts.append(f"metric={self.metric}")
        parts += [f"{k}={v}" for k, v in sorted(self.params.items())]
        return " ".join(parts)

    def record(
        self, *, source: str, author: str, trusted: bool, approved_by: str | None = None
    ) -> AcceptanceRecord:
        """These terms signed: who wrote them, and whether they count."""
        terms = {f.name: getattr(self, f.name) for f in fields(AcceptanceTerms)}
        return AcceptanceRecord(
            **{**terms, "params": dict(self.params)},
            source=source,
            author=author,
            trusted=trusted,
            approved_by=approved_by,
        )


@dataclass(frozen=True, kw_only=True)
class AcceptanceRecord(AcceptanceTerms):
    """An intended regression: its terms, author and trust (see the module docstring).

    ``approved_by``: the maintainer whose approval makes a trailer trusted.
    """

    source: str
    author: str
    trusted: bool
    approved_by: str | None = None

    def validate(self) -> None:
        require_text("acceptance impl", self.impl, 128)
        require_text("acceptance benchmark", self.benchmark, 255)
        if self.metric is not None and self.metric not in METRICS:
            raise RecordError(f"acceptance metric is {self.metric!r}; expected one of {', '.join(METRICS)}")
        require_json("acceptance params", self.params, mapping=True)
        for name, glob in self.params.items():
            if not isinstance(name, str) or not name or not isinstance(glob, str) or not glob:
                raise RecordError(
                    f"acceptance params must map names to non-empty globs, not {name!r}: {glob!r}"
                )
        if isinstance(self.ceiling, bool) or not isinstance(self.ceiling, (int, float)):
            raise RecordError(f"acceptance ceiling must be a number, not {self.ceiling!r}")
        if not math.isfinite(self.ceiling) or self.ceiling <= 1.0:
            raise RecordError(
                f"acceptance ceiling {self.ceiling!r} accepts nothing: it must be a ratio above 1"
            )
        require_text("acceptance reason", self.reason, 10_000)
        if not self.reason.strip():
            raise RecordError("acceptance reason is empty: say why the regression is intended")
        if self.source not in ACCEPTANCE_SOURCES:
            raise RecordError(
                f"acceptance source is {self.source!r}; expected one of {', '.join(ACCEPTANCE_SOURCES)}"
            )
        require_text("acceptance author", self.author, 255)
        if not isinstance(self.trusted, bool):
            raise RecordError(f"acceptance trusted must be True or False, not {self.trusted!r}")
        if self.approved_by is not None:
            require_text("acceptance approved_by", self.approved_by, 255)
        if self.source == "trailer" and self.trusted and not self.approved_by:
            raise RecordError("a trailer acceptance is trusted only with the maintainer who approved it")


@dataclass(frozen=True, kw_only=True)
class StoredAcceptance(AcceptanceRecord):
    """A stored acceptance with the commit it belongs to."""

    id: int
    sha: str
    created_at: datetime


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
        if self.metric not in METRICS:
            raise RecordError(f"metric is {self.metric!r}; expected one of {', '.join(METRICS)}")
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


# --- queries (called by perfguard.store.store.Store inside its transactions) -------------------------


def insert_acceptances(
    session: Session,
    commit_id: int,
    records: Sequence[AcceptanceRecord],
    created_at: datetime,
    dialect: str,
) -> list[int]:
    """Insert the acceptances of one commit (an identical one already stored is reused); their ids.

    ``INSERT .. ON CONFLICT DO NOTHING`` on (commit, identity): two writers recording the same
    acceptance at the same moment store it once.  A trusted acceptance also accepts the flagged
    change points of the same commit that it covers within its ceiling (a maintainer acknowledging
    a step after the fact).
    """
    ids = []
    for record in records:
        identity = acceptance_identity(record)
        values = {"commit_id": commit_id, "identity": identity, "created_at": created_at}
        session.execute(
            _insert(dialect, Acceptance)
            .values(**values, **_acceptance_values(record))
            .on_conflict_do_nothing(index_elements=["commit_id", "identity"])
        )
        row_id = session.scalars(
            select(Acceptance.id).where(Acceptance.commit_id == commit_id, Acceptance.identity == identity)
        ).one()
        ids.append(row_id)
        if record.trusted:
            flagged = session.scalars(
                select(ChangePoint).where(
                    ChangePoint.commit_id == commit_id, ChangePoint.acceptance_id.is_(None)
                )
            ).all()
            for point in flagged:
                if record.covers(point.impl, point.benchmark, point.metric, point.params) and (
                    point.ratio <= record.ceiling
                ):
                    point.acceptance_id = row_id
    return ids


def acceptance_identity(record: AcceptanceRecord) -> str:
    """SHA-256 of the record's fields as canonical JSON: equal records, equal identity.

    Frozen in migration ``0004``, which computed it for the rows stored before: change both or
    neither.
    """
    text = json.dumps(_acceptance_values(record), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _insert(dialect: str, model: type[Any]) -> Any:
    """The dialect's ``INSERT`` (with ``on_conflict_do_*``); imported here, as in rows._upsert."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as sql
    else:
        from sqlalchemy.dialects import sqlite as sql  # type: ignore[no-redef]
    return sql.insert(model)


def acceptances(
    session: Session,
    *,
    shas: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    trusted_only: bool,
) -> list[StoredAcceptance]:
    """Acceptances of the given commits (all when None), oldest first."""
    stmt = select(Acceptance, Commit.sha).join(Commit, Acceptance.commit_id == Commit.id)
    if shas is not None:
        stmt = stmt.where(Commit.sha.in_(list(shas)))
    if ids is not None:
        stmt = stmt.where(Acceptance.id.in_(list(ids)))
    if trusted_only:
        stmt = stmt.where(Acceptance.trusted.is_(True))
    stmt = stmt.order_by(Acceptance.created_at, Acceptance.id)
    return [_stored_acceptance(row, sha) for row, sha in session.execute(stmt)]


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
        insert = _insert(dialect, ChangePoint).values(
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


# --- plumbing ------------------------------------------------------------------------------------------

# The columns of each table that hold a record's fields: every field of the record.
_ACCEPTANCE_FIELDS = tuple(f.name for f in fields(AcceptanceRecord))
_CHANGE_POINT_FIELDS = tuple(f.name for f in fields(ChangePointRecord))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _acceptance_values(record: AcceptanceRecord) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in _ACCEPTANCE_FIELDS}
    values["params"] = dict(record.params)
    values["ceiling"] = float(record.ceiling)
    return values


def _stored_acceptance(row: Acceptance, sha: str) -> StoredAcceptance:
    return StoredAcceptance(
        id=row.id,
        sha=sha,
        created_at=row.created_at,
        **{name: getattr(row, name) for name in _ACCEPTANCE_FIELDS},
    )


def _change_point_values(record: Any) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in _CHANGE_POINT_FIELDS}
    values["params"] = dict(record.params)
    values["software_changes"] = {k: list(v) for k, v in dict(record.software_changes).items()}
    for name in ("before", "after", "ratio", "threshold"):
        values[name] = float(values[name])
    return values
