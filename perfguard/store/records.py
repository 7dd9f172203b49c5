"""Plain values that go into the store and come out of it.

The rest of perfguard never touches ORM objects: it hands the store ``*Record`` values and gets
``Stored*`` values back (frozen dataclasses, safe to keep after the session is gone).  Each record
is validated completely *before* anything is written (its ``validate()``, through the checks of
:mod:`perfguard.store.record_checks`), so that a bad value aborts the whole run or check with nothing
written, and so that SQLite (which would accept almost anything) and PostgreSQL (which enforces
column lengths) behave the same.  The JSON a record carries is read through one typed reader each:
a result's ``info`` (:class:`perfguard.store.result_info.ResultInfo`) and a check's ``summary``
(:class:`perfguard.store.check_summary.CheckSummary`).
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from perfguard.metrics import DIRECTIONS, NAMES, ZERO_VALID_METRICS
from perfguard.store.record_checks import (
    RecordError,
    as_float,
    choice,
    clean_samples,
    is_hex,
    is_number,
    require_aware,
    require_json,
    require_measured,
    require_text,
    show,
)
from perfguard.store.result_info import IGNORED_SAMPLES, ResultInfo

RESULT_STATUSES = ("ok", "failed", "skipped")
PURPOSES = ("run", "baseline", "head", "retry", "calibrate")
# The purposes that are ordinary measurements of a commit: the default of the check-side queries.
# ``retry`` (interleaved re-measurements of one check) and ``calibrate`` are only returned on request.
MEASUREMENT_PURPOSES = ("run", "baseline", "head")


def params_key(params: Mapping[str, Any]) -> str:
    """The canonical key of a parameter set: ``k=v`` sorted by name and joined by commas.

    Strings appear as they are, everything else as JSON (``seq_len=256``, ``causal=true``), so the
    key is the same whichever module builds it and whatever order the parameters came in.
    """
    parts = []
    for name in sorted(params):
        value = params[name]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
        parts.append(f"{name}={text}")
    return ",".join(parts)


# --- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MachineRecord:
    """A machine class: ``key`` is what baselines are stored under (GPU name x count, or CPU model)."""

    key: str
    kind: str  # "cuda" | "cpu"
    label: str
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        require_text("machine key", self.key, 255)
        require_text("machine kind", self.kind, 16)
        require_text("machine label", self.label, 255, allow_empty=True)
        require_json("machine attributes", self.attributes, mapping=True)


@dataclass(frozen=True, kw_only=True)
class CommitRecord:
    """A commit, or a dirty work tree stored as ``<sha>+dirty.<12 hex of the diff>`` with ``dirty=True``."""

    sha: str
    base_sha: str
    committed_at: datetime
    dirty: bool = False
    branch: str | None = None
    parents: Sequence[str] = ()
    subject: str = ""
    author: str | None = None

    def validate(self) -> None:
        require_text("commit sha", self.sha, 96)
        require_text("commit base_sha", self.base_sha, 40)
        if not is_hex(self.base_sha):
            raise RecordError(f"commit base_sha {self.base_sha!r} is not a hexadecimal git object name")
        if self.dirty:
            if not self.sha.startswith(self.base_sha + "+dirty."):
                raise RecordError(
                    f"dirty commit sha {self.sha!r} must look like '{self.base_sha}+dirty.<diff hash>'"
                )
        elif self.sha != self.base_sha:
            raise RecordError(f"clean commit sha {self.sha!r} differs from its base_sha {self.base_sha!r}")
        if self.branch is not None:
            require_text("commit branch", self.branch, 255)
        if self.author is not None:
            require_text("commit author", self.author, 255, allow_empty=True)
        if not isinstance(self.subject, str):
            raise RecordError(f"commit subject must be a string, not {type(self.subject).__name__}")
        require_text("commit subject", self.subject, len(self.subject), allow_empty=True)
        if isinstance(self.parents, str) or not all(isinstance(p, str) and is_hex(p) for p in self.parents):
            raise RecordError(f"commit parents must be a list of hexadecimal shas, not {self.parents!r}")
        require_aware("commit committed_at", self.committed_at)


@dataclass(frozen=True, kw_only=True)
class ResultRecord:
    """One benchmark x params of a run, mirroring the ``results`` table.

    ``params_key`` is derived from ``params`` when left empty; ``n_samples`` always is.  For an
    ``ok`` result with samples, a missing ``value`` is their median and missing ``q25``/``q75``
    their quartiles.
    """

    benchmark: str  # asv name, e.g. "bench_attention.Forward.track_time"
    impl: str
    params: Mapping[str, Any]  # includes "impl"
    metric: str  # time | memory | throughput | efficiency
    unit: str  # seconds | bytes | tokens/s | TFLOP/s
    direction: str  # lower | higher (is better)
    gated: bool
    status: str = "ok"  # ok | failed | skipped
    value: float | None = None
    samples: Sequence[float] | None = None
    q25: float | None = None
    q75: float | None = None
    method: str | None = None  # cuda-graph | cuda-events | cpu-wall
    info: Mapping[str, Any] = field(default_factory=dict)  # JSON; read through ResultInfo.from_json
    error: str | None = None
    benchmark_version: str | None = None
    params_key: str = ""
    n_samples: int = field(init=False)

    def __post_init__(self) -> None:
        _fill_params_key(self)
        for name in ("value", "q25", "q75"):
            number = as_float(getattr(self, name))
            if number is not None:
                object.__setattr__(self, name, number)
        samples = self.samples
        if samples is not None and not isinstance(samples, (str, bytes)) and isinstance(samples, Sequence):
            converted, ignored = clean_samples(samples)
            object.__setattr__(self, "samples", converted)
            if ignored:
                # docs/verdicts.md: NaN and infinite samples are ignored.  They are dropped here, so
                # the store never holds them (JSON has no NaN), and counted where a reader sees it.
                info = dict(self.info) if isinstance(self.info, Mapping) else {}
                info[IGNORED_SAMPLES] = ResultInfo.from_json(info).ignored_samples + ignored
                object.__setattr__(self, "info", info)
            wants_value = self.value is None
            wants_quartiles = self.q25 is None and self.q75 is None and len(converted) >= 2
            if (
                self.status == "ok"
                and converted
                and (wants_value or wants_quartiles)
                and all(type(s) is float and s > 0 for s in converted)  # else validate() says why
            ):
                if wants_value:
                    object.__setattr__(self, "value", statistics.median(converted))
                if wants_quartiles:
                    q25, _, q75 = statistics.quantiles(converted, n=4, method="inclusive")
                    object.__setattr__(self, "q25", q25)
                    object.__setattr__(self, "q75", q75)
        object.__setattr__(self, "n_samples", len(self.samples) if isinstance(self.samples, list) else 0)

    @property
    def key(self) -> tuple[str, str]:
        """``(benchmark, params_key)``: what results are compared by."""
        return (self.benchmark, self.params_key)

    def describe(self) -> str:
        return f"{self.benchmark}({self.params_key})"

    def validate(self) -> None:
        require_text("benchmark", self.benchmark, 255)
        require_text("impl", self.impl, 128)
        require_json("params", self.params, mapping=True)
        if "impl" in self.params and self.params["impl"] != self.impl:
            raise RecordError(f"params impl={self.params['impl']!r} differs from impl={self.impl!r}")
        if self.params_key != params_key(self.params):
            raise RecordError(
                f"params_key {self.params_key!r} is not the canonical key {params_key(self.params)!r}"
            )
        require_text("params_key", self.params_key, 512, allow_empty=True)
        choice("metric", self.metric, NAMES)
        require_text("unit", self.unit, 32)
        choice("direction", self.direction, DIRECTIONS)
        if not isinstance(self.gated, bool):
            raise RecordError(f"gated must be True or False, not {self.gated!r}")
        choice("status", self.status, RESULT_STATUSES)
        if self.samples is not None:
            if not isinstance(self.samples, list):
                raise RecordError(f"samples must be a list of numbers, not {type(self.samples).__name__}")
            for i, sample in enumerate(self.samples):
                if type(sample) is not float or not math.isfinite(sample):
                    raise RecordError(f"sample {i} is {show(sample)}, not a number")
                if sample < 0 or (sample == 0 and self.metric not in ZERO_VALID_METRICS):
                    raise RecordError(
                        f"sample {i} is {sample!r}: a {self.metric} sample is a positive amount "
                        f"of {self.unit}"
                    )
                require_measured(f"sample {i}", sample, self.unit)
            if self.status == "ok" and not self.samples:
                ignored = ResultInfo.from_json(self.info).ignored_samples
                if ignored:
                    raise RecordError(f"all {ignored} samples are NaN or infinite: nothing was measured")
                raise RecordError("samples is an empty list; pass None when the benchmark records no samples")
        for name in ("value", "q25", "q75"):
            number = getattr(self, name)
            if number is None:
                continue
            if type(number) is not float or not math.isfinite(number):
                raise RecordError(f"{name} is {show(number)}, not a finite number")
            if number < 0 or (number == 0 and self.metric not in ZERO_VALID_METRICS):
                raise RecordError(
                    f"{name} is {number!r}: a {self.metric} is a positive amount of {self.unit}"
                )
            require_measured(name, number, self.unit)
        if self.status == "ok" and self.value is None:
            raise RecordError("an 'ok' result needs a value (or samples to take the median of)")
        if self.status == "failed" and not self.error:
            raise RecordError("a 'failed' result needs the error text")
        if self.method is not None:
            require_text("method", self.method, 32)
        require_json("info", self.info, mapping=True)
        if self.error is not None and not isinstance(self.error, str):
            raise RecordError(f"error must be text, not {type(self.error).__name__}")
        if self.benchmark_version is not None:
            require_text("benchmark_version", self.benchmark_version, 128)


@dataclass(frozen=True, kw_only=True)
class RunFields:
    """What one run (one round of one measurement) was measured as: the ``runs`` columns a writer
    fills, shared by :class:`RunRecord` (written) and :class:`StoredRun` (read back)."""

    profile: str
    purpose: str = "run"
    round: int = 0
    software: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    command: str = ""
    started_at: datetime
    finished_at: datetime
    # Measured by a trusted context: the baseline branch's workflow or a maintainer's own command,
    # never a job that ran pull-request code (docs/ci.md, "Trust model").  Only trusted runs are
    # baselines (the reads' ``trusted_only``).  False unless the writer says so: fail closed.
    trusted: bool = False


@dataclass(frozen=True, kw_only=True)
class RunRecord(RunFields):
    """One run with its results, as ``Store.record_runs`` takes it."""

    results: Sequence[ResultRecord] = ()

    def validate(self) -> None:
        require_text("profile", self.profile, 32)
        if not isinstance(self.trusted, bool):
            raise RecordError(f"trusted must be True or False, not {self.trusted!r}")
        if self.purpose not in PURPOSES:
            raise RecordError(f"purpose is {self.purpose!r}; expected one of {', '.join(PURPOSES)}")
        if not isinstance(self.round, int) or isinstance(self.round, bool) or self.round < 0:
            raise RecordError(f"round must be a count from 0, not {self.round!r}")
        for name in ("software", "fingerprint", "settings"):
            require_json(name, getattr(self, name), mapping=True)
        if not isinstance(self.command, str):
            raise RecordError("command must be text")
        require_aware("started_at", self.started_at)
        require_aware("finished_at", self.finished_at)
        if self.finished_at < self.started_at:
            raise RecordError(f"finished_at {self.finished_at} is before started_at {self.started_at}")
        if not self.results:
            raise RecordError("a run needs at least one result")


@dataclass(frozen=True, kw_only=True)
class CheckItemRecord:
    """One verdict of a check (a benchmark x params, or an implementation new / missing / broken).

    Its fields are the ``check_items`` columns (:data:`CHECK_ITEM_COLUMNS`), in the order the check
    reports show them; :class:`perfguard.compare.Item` is this record plus what a comparison knows
    and does not store.
    """

    benchmark: str
    impl: str
    params: Mapping[str, Any]
    params_key: str = ""
    metric: str
    unit: str
    direction: str
    gated: bool
    verdict: str
    base_value: float | None = None
    head_value: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    noise: float | None = None
    threshold: float
    method: str | None = None
    retried: bool = False
    base_n: int = 0
    head_n: int = 0
    reason: str = ""

    def __post_init__(self) -> None:
        _fill_params_key(self)

    def validate(self) -> None:
        require_text("benchmark", self.benchmark, 255)
        require_text("impl", self.impl, 128)
        require_json("params", self.params, mapping=True)
        require_text("params_key", self.params_key, 512, allow_empty=True)
        choice("metric", self.metric, NAMES)
        require_text("unit", self.unit, 32)
        choice("direction", self.direction, DIRECTIONS)
        require_text("verdict", self.verdict, 16)
        for name in (
            "threshold",
            "base_value",
            "head_value",
            "ratio",
            "ci_low",
            "ci_high",
            "p_value",
            "noise",
        ):
            number = getattr(self, name)
            if number is None and name != "threshold":
                continue
            # SQLite silently stores NaN as NULL; refuse it so both backends hold the same thing.
            if not is_number(number) or math.isnan(number):
                raise RecordError(f"{name} is {number!r}, not a number (use None for 'no value')")
        for name in ("gated", "retried"):
            if not isinstance(getattr(self, name), bool):
                raise RecordError(f"{name} must be True or False")
        for name in ("base_n", "head_n"):
            count = getattr(self, name)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise RecordError(f"{name} must be a count, not {count!r}")
        if self.method is not None:
            require_text("method", self.method, 32)
        if not isinstance(self.reason, str):
            raise RecordError("reason must be text")


#: Where a result's fields are stored: ``result_data`` holds the bulky ones (the history scans never
#: read them), ``results`` every other field of :class:`ResultRecord` (``n_samples`` included).
RESULT_DATA_COLUMNS = ("samples", "info")
RESULT_COLUMNS = tuple(f.name for f in fields(ResultRecord) if f.name not in RESULT_DATA_COLUMNS)
#: The ``runs`` columns a writer fills: every field of :class:`RunFields`.
RUN_COLUMNS = tuple(f.name for f in fields(RunFields))
#: The ``check_items`` columns: every field of :class:`CheckItemRecord`.
CHECK_ITEM_COLUMNS = tuple(f.name for f in fields(CheckItemRecord))


# --- outputs -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StoredMachine(MachineRecord):
    id: int
    first_seen: datetime


@dataclass(frozen=True, kw_only=True)
class StoredCommit(CommitRecord):
    id: int

    @property
    def short(self) -> str:
        return self.sha[:10] + ("+dirty" if self.dirty else "")


@dataclass(frozen=True, kw_only=True)
class StoredRun(RunFields):
    """A stored run (without its results): where and when, and how many results it holds."""

    id: int
    machine_key: str
    sha: str
    status: str
    n_results: int


@dataclass(frozen=True, kw_only=True)
class StoredResult(ResultRecord):
    """A stored result with the run it came from: one round of samples of one benchmark x params."""

    id: int
    run_id: int
    round: int
    purpose: str
    started_at: datetime
    trusted: bool


@dataclass(frozen=True, kw_only=True)
class StoredCheckItem(CheckItemRecord):
    id: int


@dataclass(frozen=True, kw_only=True)
class StoredCheck:
    """A stored check with its items; ``summary`` is the JSON column as stored (read it through
    :meth:`perfguard.store.check_summary.CheckSummary.from_json`)."""

    id: int
    machine: StoredMachine
    head: StoredCommit
    base: StoredCommit
    baseline_ref: str
    profile: str
    threshold: float
    verdict: str
    exit_code: int
    summary: Mapping[str, Any]
    environment: Mapping[str, Any]
    config: Mapping[str, Any]
    command: str
    created_at: datetime
    items: tuple[StoredCheckItem, ...]


# --- checks ------------------------------------------------------------------------------------


def _fill_params_key(record: Any) -> None:
    """Derive ``params_key`` when not given (left empty if params cannot be keyed; validate() says why)."""
    if not record.params_key and isinstance(record.params, Mapping):
        with contextlib.suppress(TypeError, ValueError):
            object.__setattr__(record, "params_key", params_key(record.params))
