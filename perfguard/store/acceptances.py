"""Acceptances: the records, and the queries behind their ``Store`` methods.

An **acceptance** says "this regression is intended": a scope (implementation glob, benchmark glob,
optionally a metric and parameter globs), a ratio ceiling (the largest accepted ratio, > 1 =
worse), a reason, who wrote it and whether it is *trusted* (a maintainer's ``perfguard accept``, or
a ``Perfguard-Accept:`` trailer that a maintainer approved).  It belongs to a commit, and applies to
any check or step whose commit range contains that commit.

The scope rule (:meth:`AcceptanceRecord.covers`) lives here, with the record, because the store
applies it too: an acceptance recorded at a flagged commit marks that commit's change points as
accepted in the same transaction (:mod:`perfguard.store.change_points`).
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

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfguard.metrics import NAMES
from perfguard.store.models import Acceptance, ChangePoint, Commit
from perfguard.store.record_checks import RecordError, check_record, require_aware, require_json, require_text
from perfguard.store.records import CommitRecord
from perfguard.store.rows import dialect_insert

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
        if self.metric is not None and self.metric not in NAMES:
            raise RecordError(f"acceptance metric is {self.metric!r}; expected one of {', '.join(NAMES)}")
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
    revoked_at: datetime | None = None  # ``perfguard accept --revoke``: it accepts nothing since
    revoked_by: str | None = None
    revoked_reason: str | None = None

    @property
    def counts(self) -> bool:
        """Whether it accepts anything: trusted, and not revoked."""
        return self.trusted and self.revoked_at is None

    @property
    def revocation(self) -> str:
        """``revoked by Mae: 'undone in #12'`` ("" when it was not)."""
        if self.revoked_at is None:
            return ""
        why = self.revoked_reason or ""
        return f"revoked by {self.revoked_by or '?'} on {self.revoked_at:%Y-%m-%d}: {why!r}"


def validate_acceptances(
    commit: CommitRecord, acceptances: Sequence[AcceptanceRecord], created_at: datetime
) -> None:
    """Every value of an acceptance write, before it starts: a bad one is a StoreError naming it."""
    check_record("commit", commit.validate)
    check_record("created_at", lambda: require_aware("created_at", created_at))
    for i, record in enumerate(acceptances, start=1):
        check_record(f"acceptance {i} of {len(acceptances)}", record.validate)


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
            dialect_insert(dialect, Acceptance)
            .values(**values, **_acceptance_values(record))
            .on_conflict_do_nothing(index_elements=["commit_id", "identity"])
        )
        row_id, revoked_by = session.execute(
            select(Acceptance.id, Acceptance.revoked_by).where(
                Acceptance.commit_id == commit_id, Acceptance.identity == identity
            )
        ).one()
        if revoked_by is not None:  # the same terms, revoked: it must not quietly count again
            from perfguard.errors import UsageError

            raise UsageError(
                f"this acceptance was recorded before as #{row_id} and revoked by {revoked_by}",
                hint="record it with another reason or ceiling (saying why it holds again)",
            )
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
    return [stored_acceptance(row, sha) for row, sha in session.execute(stmt)]


_ACCEPTANCE_FIELDS = tuple(f.name for f in fields(AcceptanceRecord))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _acceptance_values(record: AcceptanceRecord) -> dict[str, Any]:
    values = {name: getattr(record, name) for name in _ACCEPTANCE_FIELDS}
    values["params"] = dict(record.params)
    values["ceiling"] = float(record.ceiling)
    return values


def stored_acceptance(row: Acceptance, sha: str) -> StoredAcceptance:
    return StoredAcceptance(
        id=row.id,
        sha=sha,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
        revoked_reason=row.revoked_reason,
        **{name: getattr(row, name) for name in _ACCEPTANCE_FIELDS},
    )


def revoke_acceptance(
    session: Session, acceptance_id: int, *, by: str, reason: str, revoked_at: datetime
) -> Acceptance | None:
    """Mark one acceptance revoked (None: there is none with that id; a revoked one is left as it was).

    The steps it accepted go back to flagged, unless another counting acceptance of the same commit
    covers them within its ceiling.  One transaction with the caller's: nothing or all of it.
    """
    row = session.get(Acceptance, acceptance_id)
    if row is None or row.revoked_at is not None:
        return row
    row.revoked_at, row.revoked_by, row.revoked_reason = revoked_at, by, reason
    others = [
        a
        for a in session.scalars(select(Acceptance).where(Acceptance.commit_id == row.commit_id)).all()
        if a.id != row.id and a.trusted and a.revoked_at is None
    ]
    for point in session.scalars(select(ChangePoint).where(ChangePoint.acceptance_id == row.id)).all():
        cover = next(
            (
                a
                for a in others
                if _terms(a).covers(point.impl, point.benchmark, point.metric, point.params)
                and point.ratio <= a.ceiling
            ),
            None,
        )
        point.acceptance_id = cover.id if cover is not None else None
    return row


def _terms(row: Acceptance) -> AcceptanceTerms:
    return AcceptanceTerms(
        impl=row.impl,
        benchmark=row.benchmark,
        ceiling=row.ceiling,
        reason=row.reason,
        metric=row.metric,
        params=dict(row.params),
    )
