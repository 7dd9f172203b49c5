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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import select
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
    session: Session, commit_id: int, records: Sequence[AcceptanceRecord], created_at: datetime
) -> list[int]:
    """Insert the acceptances of one commit (an identical one already stored is reused); their ids.

    A trusted acceptance also accepts the flagged change points of the same commit that it covers
    within its ceiling (a maintainer acknowledging a step after the fact).
    """
    ids = []
    for record in records:
        existing = session.scalars(
            select(Acceptance).where(
                Acceptance.commit_id == commit_id,
                Acceptance.impl == record.impl,
                Acceptance.benchmark == record.benchmark,
                Acceptance.ceiling == float(record.ceiling),
                Acceptance.reason == record.reason,
                Acceptance.source == record.source,
                Acceptance.trusted == record.trusted,
            )
        ).all()
        same = [a for a in existing if _record_of(a) == record]
        if same:
            ids.append(same[0].id)
            continue
        row = Acceptance(commit_id=commit_id, created_at=created_at, **_acceptance_values(record))
        session.add(row)
        session.flush()
        ids.append(row.id)
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
                    point.acceptance_id = row.id
    return ids


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
) -> list[int]:
    """Insert the change points of one commit, or update the ones found again (a re-run is idempotent)."""
    ids = []
    for record in points:
        row = session.scalars(
            select(ChangePoint).where(
                ChangePoint.machine_id == machine_id,
                ChangePoint.commit_id == commit_id,
                ChangePoint.benchmark == record.benchmark,
                ChangePoint.params_key == record.params_key,
            )
        ).one_or_none()
        values = _change_point_values(record)
        if row is None:
            row = ChangePoint(
                machine_id=machine_id,
                commit_id=commit_id,
                previous_commit_id=previous_commit_id,
                profile=profile,
                detected_at=detected_at,
                **values,
            )
            session.add(row)
        else:
            keep = row.acceptance_id
            for name, value in values.items():
                setattr(row, name, value)
            row.previous_commit_id = previous_commit_id
            row.profile = profile
            row.acceptance_id = values["acceptance_id"] if values["acceptance_id"] is not None else keep
        session.flush()
        ids.append(row.id)
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


def _record_of(row: Acceptance) -> AcceptanceRecord:
    return AcceptanceRecord(**{name: getattr(row, name) for name in _ACCEPTANCE_FIELDS})


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
