"""The history store's schema: SQLAlchemy 2 typed models.

One row per machine *class* (the baseline key: GPU name x count, or CPU model), per commit, per
run (one asv invocation on one commit on one machine, written in one transaction), per result
(benchmark x params of a run; its raw samples in ``result_data``), per check and per check item
(one verdict).
Software versions and the full fingerprint are stored with every run, not in the key, so a
comparison across different software can say so.  The schema is versioned by Alembic
(``perfguard/migrations``); change a model only together with a new migration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import Boolean, ForeignKey, Index, MetaData, UniqueConstraint, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from perfguard.metrics import DIRECTIONS, NAMES
from perfguard.store.columns import (
    StoredFloat,
    StoredInt,
    StoredJSON,
    StoredLongText,
    StoredText,
    UTCDateTime,
    name_columns,
)
from perfguard.store.records import RESULT_STATUSES

# Named constraints, so that later migrations can drop or alter them by name on every backend
# (SQLite's batch mode needs names; PostgreSQL would otherwise invent its own).
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: StoredJSON(dict),
        list[Any]: StoredJSON(list),
        list[float]: StoredJSON(list, samples=True),
        list[str]: StoredJSON(list),
        datetime: UTCDateTime(),
    }


class Machine(Base):
    """A hardware class: results are only ever compared within one machine key."""

    __tablename__ = "machines"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(StoredText(255), unique=True)
    kind: Mapped[str] = mapped_column(StoredText(16))  # "cuda" | "cpu"
    label: Mapped[str] = mapped_column(StoredText(255))
    attributes: Mapped[dict[str, Any]]
    first_seen: Mapped[datetime]

    runs: Mapped[list[Run]] = relationship(back_populates="machine")


class Commit(Base):
    """A commit, or a dirty work tree measured as ``<sha>+dirty.<diff hash>`` (never a baseline)."""

    __tablename__ = "commits"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha: Mapped[str] = mapped_column(StoredText(96), unique=True)
    base_sha: Mapped[str] = mapped_column(StoredText(40), index=True)
    dirty: Mapped[bool] = mapped_column(Boolean, default=False)
    branch: Mapped[str | None] = mapped_column(StoredText(255))
    parents: Mapped[list[str]]
    subject: Mapped[str] = mapped_column(StoredLongText(), default="")
    author: Mapped[str | None] = mapped_column(StoredText(255))
    committed_at: Mapped[datetime]

    runs: Mapped[list[Run]] = relationship(back_populates="commit")


class Run(Base):
    """One asv invocation on one commit on one machine; committed whole or not at all."""

    __tablename__ = "runs"
    # What compare asks for: the runs of one commit on one machine key and profile.
    __table_args__ = (Index(None, "machine_id", "commit_id", "profile"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    machine_id: Mapped[int] = mapped_column(ForeignKey("machines.id"))
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"), index=True)
    profile: Mapped[str] = mapped_column(StoredText(32))
    purpose: Mapped[str] = mapped_column(StoredText(16))  # run | baseline | head | retry | calibrate
    round: Mapped[int] = mapped_column(StoredInt(minimum=0), default=0)
    software: Mapped[dict[str, Any]]  # torch, cuda, cudnn, triton, driver, python, asv, perfguard
    fingerprint: Mapped[dict[str, Any]]  # everything read, including metadata (uuid, hostname)
    settings: Mapped[dict[str, Any]]  # pinned timing settings: SDPA backend, TF32, cuDNN, warm-up
    command: Mapped[str] = mapped_column(StoredLongText(), default="")
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(StoredText(16), default="complete")
    # Whether a trusted context measured it (the baseline branch's workflow, a maintainer's
    # `perfguard run`), as opposed to one that ran pull-request code.  Only trusted runs are
    # baselines (docs/ci.md, "Trust model").  The server default is false: a row written by
    # anything but the store (raw SQL) is untrusted unless it says otherwise.
    trusted: Mapped[bool] = mapped_column(Boolean, server_default=false())

    machine: Mapped[Machine] = relationship(back_populates="runs")
    commit: Mapped[Commit] = relationship(back_populates="runs")
    results: Mapped[list[Result]] = relationship(back_populates="run", cascade="all, delete-orphan")


class Result(Base):
    """One benchmark x params of a run: the median and how it was measured (samples: ResultData)."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("run_id", "benchmark", "params_key"),
        Index(None, "benchmark", "params_key"),  # one series; its prefix serves a benchmark filter
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # No index of its own: the unique constraint (run_id, benchmark, params_key) serves lookups by run.
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    benchmark: Mapped[str] = mapped_column(StoredText(255))  # asv name
    impl: Mapped[str] = mapped_column(StoredText(128), index=True)
    params_key: Mapped[str] = mapped_column(StoredText(512))  # canonical "k=v,k=v" (sorted)
    params: Mapped[dict[str, Any]]
    metric: Mapped[str] = mapped_column(StoredText(32, choices=NAMES))  # time | memory | flops | ...
    unit: Mapped[str] = mapped_column(StoredText(32))  # seconds | bytes | tokens/s | TFLOP/s
    direction: Mapped[str] = mapped_column(StoredText(8, choices=DIRECTIONS))  # lower | higher (is better)
    gated: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(StoredText(16, choices=RESULT_STATUSES))  # ok | failed | skipped
    value: Mapped[float | None] = mapped_column(StoredFloat(measured=True))
    n_samples: Mapped[int] = mapped_column(StoredInt(minimum=0), default=0)
    q25: Mapped[float | None] = mapped_column(StoredFloat(measured=True))
    q75: Mapped[float | None] = mapped_column(StoredFloat(measured=True))
    method: Mapped[str | None] = mapped_column(StoredText(32))  # cuda-graph | cuda-events | cpu-wall
    benchmark_version: Mapped[str | None] = mapped_column(StoredText(128))
    error: Mapped[str | None] = mapped_column(StoredLongText())

    run: Mapped[Run] = relationship(back_populates="results")
    data: Mapped[ResultData] = relationship(back_populates="result", cascade="all, delete-orphan")


class ResultData(Base):
    """The bulky part of a result, kept out of ``results``: its raw samples and timing details.

    A result row is ~200 bytes without them and 1-3 KB with them; the history (every result of
    every commit, never the samples) scans ``results`` only, ten times fewer pages.  Compare reads
    both in one join.
    """

    __tablename__ = "result_data"

    result_id: Mapped[int] = mapped_column(ForeignKey("results.id", ondelete="CASCADE"), primary_key=True)
    samples: Mapped[list[float] | None]
    info: Mapped[dict[str, Any]]  # eager median, warm-up, NVML readings per round, settings

    result: Mapped[Result] = relationship(back_populates="data")


class Check(Base):
    """One ``perfguard check``: head against the merge-base of a baseline ref, on one machine."""

    __tablename__ = "checks"

    id: Mapped[int] = mapped_column(primary_key=True)
    machine_id: Mapped[int] = mapped_column(ForeignKey("machines.id"), index=True)
    head_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    base_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    baseline_ref: Mapped[str] = mapped_column(StoredText(255))
    profile: Mapped[str] = mapped_column(StoredText(32))
    threshold: Mapped[float] = mapped_column(StoredFloat())
    verdict: Mapped[str] = mapped_column(StoredText(16))  # pass | regression | broken
    exit_code: Mapped[int] = mapped_column(StoredInt(minimum=0))
    summary: Mapped[dict[str, Any]]  # counts per verdict, durations, retries
    environment: Mapped[dict[str, Any]]  # software of both sides and what differs
    config: Mapped[dict[str, Any]]  # thresholds in force
    command: Mapped[str] = mapped_column(StoredLongText(), default="")
    created_at: Mapped[datetime]

    machine: Mapped[Machine] = relationship()
    head_commit: Mapped[Commit] = relationship(foreign_keys=[head_commit_id])
    base_commit: Mapped[Commit] = relationship(foreign_keys=[base_commit_id])
    items: Mapped[list[CheckItem]] = relationship(back_populates="check", cascade="all, delete-orphan")


class CheckItem(Base):
    """One verdict of a check: a benchmark x params, or an implementation that is new/missing/broken."""

    __tablename__ = "check_items"

    id: Mapped[int] = mapped_column(primary_key=True)
    check_id: Mapped[int] = mapped_column(ForeignKey("checks.id", ondelete="CASCADE"), index=True)
    benchmark: Mapped[str] = mapped_column(StoredText(255))
    impl: Mapped[str] = mapped_column(StoredText(128))
    params: Mapped[dict[str, Any]]
    params_key: Mapped[str] = mapped_column(StoredText(512))
    metric: Mapped[str] = mapped_column(StoredText(32, choices=NAMES))
    unit: Mapped[str] = mapped_column(StoredText(32))
    direction: Mapped[str] = mapped_column(StoredText(8, choices=DIRECTIONS))
    gated: Mapped[bool] = mapped_column(Boolean)
    verdict: Mapped[str] = mapped_column(StoredText(16))
    base_value: Mapped[float | None] = mapped_column(StoredFloat())
    head_value: Mapped[float | None] = mapped_column(StoredFloat())
    ratio: Mapped[float | None] = mapped_column(StoredFloat())
    ci_low: Mapped[float | None] = mapped_column(StoredFloat())
    ci_high: Mapped[float | None] = mapped_column(StoredFloat())
    p_value: Mapped[float | None] = mapped_column(StoredFloat())
    noise: Mapped[float | None] = mapped_column(StoredFloat())
    threshold: Mapped[float] = mapped_column(StoredFloat())
    method: Mapped[str | None] = mapped_column(StoredText(32))
    retried: Mapped[bool] = mapped_column(Boolean, default=False)
    base_n: Mapped[int] = mapped_column(StoredInt(minimum=0), default=0)
    head_n: Mapped[int] = mapped_column(StoredInt(minimum=0), default=0)
    reason: Mapped[str] = mapped_column(StoredLongText(), default="")

    check: Mapped[Check] = relationship(back_populates="items")


class Acceptance(Base):
    """An intended regression, accepted at a commit: scope, ratio ceiling, reason, who, and trust.

    Written by ``perfguard accept`` (a maintainer), or from a ``Perfguard-Accept:`` trailer that a
    maintainer approved.  Only ``trusted`` rows turn a regression into ``accepted``
    (docs/living-with-regressions.md); the rest are kept to show what was asked for.
    """

    __tablename__ = "acceptances"
    __table_args__ = (Index("uq_acceptances_commit_id_identity", "commit_id", "identity", unique=True),)

    id: Mapped[int] = mapped_column(primary_key=True)
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"), index=True)
    # SHA-256 of every field below (acceptances.acceptance_identity): with the commit, the unique
    # key that makes recording the same acceptance twice, even at the same moment, store it once
    identity: Mapped[str] = mapped_column(StoredText(64), server_default="")
    impl: Mapped[str] = mapped_column(StoredText(128))  # shell glob
    benchmark: Mapped[str] = mapped_column(StoredText(255))  # shell glob on the name without asv's module
    metric: Mapped[str | None] = mapped_column(StoredText(32))  # None: every metric
    params: Mapped[dict[str, Any]]  # {name: glob on the value's text}
    ceiling: Mapped[float] = mapped_column(StoredFloat(finite=True))  # largest accepted ratio (> 1 = worse)
    reason: Mapped[str] = mapped_column(StoredLongText())
    source: Mapped[str] = mapped_column(StoredText(16))  # command | trailer
    author: Mapped[str] = mapped_column(StoredText(255))  # who wrote it (the trailer's commit author)
    approved_by: Mapped[str | None] = mapped_column(StoredText(255))  # the maintainer who approved a trailer
    trusted: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime]
    # ``perfguard accept --revoke``: when, by whom and why it stopped counting (None: it counts)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_by: Mapped[str | None] = mapped_column(StoredText(255), default=None)
    revoked_reason: Mapped[str | None] = mapped_column(StoredLongText(), default=None)

    commit: Mapped[Commit] = relationship()


class ChangePoint(Base):
    """A step between two recorded commits of one series on one machine key (the baseline branch).

    ``perfguard changes`` records one row per benchmark x params whose value at ``commit`` moved
    beyond its threshold from ``previous`` (the commit recorded before it on the first-parent
    history).  ``acceptance_id`` is set when a trusted acceptance covers the step; otherwise the
    step is *flagged*.  ``cause`` names a software change between the two runs when there is one.
    """

    __tablename__ = "change_points"
    __table_args__ = (UniqueConstraint("machine_id", "commit_id", "benchmark", "params_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    machine_id: Mapped[int] = mapped_column(ForeignKey("machines.id"), index=True)
    commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"), index=True)
    previous_commit_id: Mapped[int] = mapped_column(ForeignKey("commits.id"))
    profile: Mapped[str] = mapped_column(StoredText(32))
    benchmark: Mapped[str] = mapped_column(StoredText(255))
    impl: Mapped[str] = mapped_column(StoredText(128))
    params: Mapped[dict[str, Any]]
    params_key: Mapped[str] = mapped_column(StoredText(512))
    metric: Mapped[str] = mapped_column(StoredText(32, choices=NAMES))
    unit: Mapped[str] = mapped_column(StoredText(32))
    direction: Mapped[str] = mapped_column(StoredText(8, choices=DIRECTIONS))
    before: Mapped[float] = mapped_column(StoredFloat(finite=True))  # the previous commit's median
    after: Mapped[float] = mapped_column(StoredFloat(finite=True))  # this commit's median
    ratio: Mapped[float] = mapped_column(StoredFloat())  # oriented: > 1 is worse
    threshold: Mapped[float] = mapped_column(StoredFloat())
    reason: Mapped[str] = mapped_column(StoredLongText(), default="")
    cause: Mapped[str | None] = mapped_column(StoredLongText())  # "torch 2.12.0 → 2.13.0" (software)
    software_changes: Mapped[dict[str, Any]]  # {name: [before, after]}
    acceptance_id: Mapped[int | None] = mapped_column(ForeignKey("acceptances.id"))
    detected_at: Mapped[datetime]

    machine: Mapped[Machine] = relationship()
    commit: Mapped[Commit] = relationship(foreign_keys=[commit_id])
    previous_commit: Mapped[Commit] = relationship(foreign_keys=[previous_commit_id])
    acceptance: Mapped[Acceptance | None] = relationship()


# Each checked column learns its name and nullability, for the message about a value it refuses.
name_columns(Base.metadata)
