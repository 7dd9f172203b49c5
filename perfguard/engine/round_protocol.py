"""What a round's parent and its worker hand each other: the spec in, one JSON line per event out.

:mod:`perfguard.engine.rounds` writes a :class:`WorkerSpec` to ``spec.json`` and starts
``python -m perfguard.engine.round_worker spec.json``; the worker writes one JSON object per line to
the spec's ``output``, flushed as soon as it is known (the parent shows progress from them and, when
the worker dies, knows which combination it died in)::

    {"event": "plan", "total": 2, "labels": [...], "items": [{"label", "benchmark", "params"}, ...],
     "discovery_s": 1.2, "ranks": 1}
    {"event": "start", "label": "bench_attention.Forward.track_time('dilated', 512, 'float32')"}
    {"event": "result", "label": ..., "benchmark": ..., "params": {...}, "status": "ok",
     "seconds": 0.8, "value": ..., "unit": ..., "samples": [...], "method": ..., "info": {...},
     "underneath": {...}}
    {"event": "done", "seconds": 12.3}

Each type is defined here once, with ``to_json`` (what is written) and ``from_json`` (what is read,
checked).  The two directions trust different things:

- The **spec** is written by perfguard and read by the worker: :meth:`WorkerSpec.from_json` checks
  every field and raises :class:`ProtocolError` (the worker exits 2 with the message).
- The **events** are written by the worker, a process that runs the code under test: anything in
  them may be wrong, and nothing in them may crash perfguard.  :func:`event_from_json` is the
  parent's one gate.  A line it cannot tie to a benchmark (an unknown event, a result without a
  label, a plan whose labels and items differ) raises :class:`ProtocolError` and is dropped, like a
  line the worker did not write whole.  A result line with a label always becomes a
  :class:`ResultEvent`: when a value in it cannot be stored as it is (numbers finite and within a
  float, samples a list of numbers, info a JSON object under 256 KiB, params scalars), the event is
  ``failed`` with "the benchmark process wrote an invalid result: ..." and that benchmark fails,
  never perfguard.

The worker builds its :class:`ResultEvent` from what the benchmark handed back without checking it
(the code under test can hand back anything, and may have changed the checks in its own process):
the field types say what the parent accepts, :meth:`ResultEvent.from_json` makes sure of it.
Standard library only: the worker imports this before torch and the suite.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

#: A benchmark parameter as asv names it: a scalar (a label's ``repr`` stands for it).
ParamValue = str | int | float | bool | None
#: What became of one benchmark x params.
Status = Literal["ok", "skipped", "failed"]

MAX_INFO_BYTES = 256 * 1024
MAX_SAMPLES = 1_000_000
#: What a result line whose values cannot be stored says (the benchmark fails with it).
INVALID_RESULT = "the benchmark process wrote an invalid result"


class ProtocolError(ValueError):
    """A spec or an event line that does not have the fields and types its kind must have."""


# --------------------------------------------------------------------------------------------
# the spec: parent -> worker
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """One worker process's job: which suite, which benchmarks of it, and where the events go."""

    benchmark_dir: Path  # the suite, as linked into the round's import shim
    output: Path  # the JSON-lines file the events are appended to
    device: str  # "cpu" or "cuda"
    bench: tuple[str, ...] = ()  # --bench regexes, matched against asv's ``name(params)`` labels
    only: tuple[str, ...] | None = None  # after a crash: the labels still to measure (None: all)
    profile: tuple[str, ...] = ()  # regexes of benchmarks that also get a profiler breakdown
    suite: str | None = None  # the one asv module a distributed round runs
    exclude_suites: tuple[str, ...] = ()  # asv modules this round leaves out
    exclude_benchmarks: tuple[str, ...] = ()  # ``Class.method`` names left out (suite.HISTORY_ONLY)

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark_dir": str(self.benchmark_dir),
            "bench": list(self.bench),
            "only": None if self.only is None else list(self.only),
            "profile": list(self.profile),
            "device": self.device,
            "output": str(self.output),
            "suite": self.suite,
            "exclude_suites": list(self.exclude_suites),
            "exclude_benchmarks": list(self.exclude_benchmarks),
        }

    @classmethod
    def from_json(cls, data: object) -> WorkerSpec:
        """The spec in ``data``; a :class:`ProtocolError` naming the first field that is wrong."""
        fields = _object(data, "the spec", required=_SPEC_FIELDS, closed=True)
        only = fields["only"]
        return cls(
            benchmark_dir=Path(_text(fields["benchmark_dir"], "benchmark_dir")),
            output=Path(_text(fields["output"], "output")),
            device=_text(fields["device"], "device"),
            bench=_regexes(fields["bench"], "bench"),
            only=None if only is None else _texts(only, "only"),
            profile=_regexes(fields["profile"], "profile"),
            suite=None if fields["suite"] is None else _text(fields["suite"], "suite"),
            exclude_suites=_texts(fields["exclude_suites"], "exclude_suites"),
            exclude_benchmarks=_texts(fields["exclude_benchmarks"], "exclude_benchmarks"),
        )

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        """The spec file ``path``; a :class:`ProtocolError` if it is not JSON or not a spec."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ProtocolError(f"cannot read the spec {path}: {exc}") from None
        try:
            return cls.from_json(data)
        except ProtocolError as exc:
            raise ProtocolError(f"{path}: {exc}") from None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()), encoding="utf-8")


_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(WorkerSpec))  # every one, written every time


# --------------------------------------------------------------------------------------------
# the events: worker -> parent
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedItem:
    """One benchmark x params the worker will measure (asv's label, its benchmark and parameters)."""

    label: str
    benchmark: str
    params: Mapping[str, ParamValue]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "benchmark": self.benchmark, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: object) -> PlannedItem:
        fields = _object(data, "a plan item", required=frozenset(("label", "benchmark", "params")))
        label = _text(fields["label"], "the item's label")
        try:
            params = _params(fields["params"])
        except _Invalid:  # its result says why (see ResultEvent.from_json); the label stands for it
            params = {"label": label}
        return cls(label, _text(fields["benchmark"], "the item's benchmark"), params)

    def failed(self, error: str, seconds: float | None = None) -> ResultEvent:
        """This combination's result when it failed (``error`` says why)."""
        return ResultEvent(self.label, self.benchmark, self.params, "failed", error=error, seconds=seconds)

    def skipped(self, reason: str) -> ResultEvent:
        return ResultEvent(self.label, self.benchmark, self.params, "skipped", error=reason)


@dataclass(frozen=True)
class PlanEvent:
    """Every combination the worker will measure, in its order (written once, before the first)."""

    kind: ClassVar[str] = "plan"
    items: tuple[PlannedItem, ...]
    discovery_s: float = 0.0  # the worker's start-up and the suite's discovery
    ranks: int = 1  # processes of the group (1: a single-process round)

    @property
    def labels(self) -> list[str]:
        return [item.label for item in self.items]

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "total": len(self.items),
            "labels": self.labels,
            "items": [item.to_json() for item in self.items],
            "discovery_s": self.discovery_s,
            "ranks": self.ranks,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanEvent:
        fields = _object(data, "the plan", required=frozenset(("event", "total", "labels", "items")))
        if not isinstance(fields["items"], list):
            raise ProtocolError(f"the plan's items are {type(fields['items']).__name__}, not a list")
        items = tuple(PlannedItem.from_json(item) for item in fields["items"])
        plan = cls(
            items,
            discovery_s=_number(fields.get("discovery_s", 0.0), "discovery_s", ProtocolError),
            ranks=_count(fields.get("ranks", 1), "ranks"),
        )
        if _texts(fields["labels"], "the plan's labels") != tuple(plan.labels):
            raise ProtocolError("the plan's labels are not those of its items")
        if _count(fields["total"], "the plan's total") != len(items):
            raise ProtocolError(f"the plan's total is {fields['total']}, not its {len(items)} items")
        return plan


@dataclass(frozen=True)
class StartEvent:
    """The worker starts measuring ``label`` (if it dies before the result, this one is to blame)."""

    kind: ClassVar[str] = "start"
    label: str

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind, "label": self.label}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StartEvent:
        fields = _object(data, "a start", required=frozenset(("event", "label")))
        return cls(_text(fields["label"], "the start's label"))


@dataclass(frozen=True)
class ResultEvent:
    """What became of one benchmark x params: its status and, when ``ok``, what it measured.

    ``value`` is asv's number; ``unit``, ``samples``, ``method`` and ``info`` what the benchmark
    recorded beyond it (:mod:`perfguard.engine.outcomes`); ``underneath`` the profiler breakdown
    the worker took when the spec's ``profile`` asked for it (stored in the record's info under that
    name).  ``value_mismatch`` (asv's number, the recorded outcome's) is set by the worker when the
    two differ: the parent fails the benchmark.  ``error``: why it was skipped or failed.
    """

    kind: ClassVar[str] = "result"
    label: str
    benchmark: str
    params: Mapping[str, ParamValue]
    status: Status
    error: str | None = None
    seconds: float | None = None  # how long the worker spent on it
    value: float | None = None
    unit: str | None = None
    samples: tuple[float, ...] | None = None
    method: str | None = None
    info: Mapping[str, Any] | None = None
    underneath: Mapping[str, Any] | None = None
    value_mismatch: tuple[Any, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "event": self.kind,
            "label": self.label,
            "benchmark": self.benchmark,
            "params": self.params,
            "status": self.status,
        }
        optional = ("error", "seconds", "value", "unit", "samples", "method", "info", "underneath")
        for name in optional:
            value = getattr(self, name)
            if value is not None:  # as the benchmark handed it back: the parent checks it
                out[name] = list(value) if isinstance(value, tuple) else value
        if self.value_mismatch is not None:
            out["value_mismatch"] = list(self.value_mismatch)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResultEvent:
        """The result in ``data``: a :class:`ProtocolError` only when it names no label; any other
        value that cannot be stored as it is makes it a ``failed`` result that says which."""
        if not isinstance(data.get("label"), str):
            raise ProtocolError("a result without a label")
        label: str = data["label"]
        raw = data.get("benchmark")
        benchmark = raw if isinstance(raw, str) else label.split("(", 1)[0]
        unit = data.get("unit") if isinstance(data.get("unit"), str) else None
        seconds = data.get("seconds")
        seconds = float(seconds) if _is_finite_number(seconds) else None
        status: Status = data["status"] if data.get("status") in ("ok", "skipped") else "failed"
        error = data.get("error") if isinstance(data.get("error"), str) else None
        base = {"label": label, "benchmark": benchmark, "unit": unit, "seconds": seconds}
        try:
            params = _params(data.get("params", {}))
        except _Invalid as exc:
            return cls(**base, params={"label": label}, status="failed", error=f"{INVALID_RESULT}: {exc}")
        if status != "ok":
            return cls(**base, params=params, status=status, error=error)
        try:
            mismatch = data.get("value_mismatch")
            if mismatch is not None:
                if not isinstance(mismatch, list) or len(mismatch) != 2:
                    raise _Invalid(f"value_mismatch is {mismatch!r}, not a pair")
                raise _Invalid(f"asv got {mismatch[0]!r} but the recorded outcome says {mismatch[1]!r}")
            value = _number(data.get("value"), "the value")
            samples = _samples(data.get("samples"))
            info = _info(data.get("info"), "info")
            underneath = _info(data.get("underneath"), "the profiler breakdown")
            method = data.get("method")
            if method is not None and (not isinstance(method, str) or len(method) > 32):
                raise _Invalid("method is not a short string")
        except _Invalid as exc:
            return cls(**base, params=params, status="failed", error=f"{INVALID_RESULT}: {exc}")
        return cls(**base, params=params, status="ok", value=value, samples=samples, method=method,
                   info=info, underneath=underneath or None)  # fmt: skip


@dataclass(frozen=True)
class DoneEvent:
    """The worker measured its whole plan (the last line of a round that did not crash)."""

    kind: ClassVar[str] = "done"
    seconds: float  # the worker's time from reading the spec

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DoneEvent:
        fields = _object(data, "the done", required=frozenset(("event", "seconds")))
        return cls(_number(fields["seconds"], "the done's seconds", ProtocolError))


#: Every line the worker writes is one of these.
Event = PlanEvent | StartEvent | ResultEvent | DoneEvent
_KINDS: dict[str, Any] = {kind.kind: kind for kind in (PlanEvent, StartEvent, ResultEvent, DoneEvent)}


def event_from_json(data: object) -> Event:
    """The event in one decoded line; :class:`ProtocolError` if it is none (see the module docstring)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"an event is an object, not {type(data).__name__}")
    name = data.get("event")
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ProtocolError(f"unknown event {data.get('event')!r}")
    event: Event = kind.from_json(data)
    return event


def event_line(event: Event) -> str:
    """``event`` as one line of the worker's output (numpy and torch scalars as numbers; NaN kept:
    the parent, not the worker, decides what a NaN sample means)."""
    return json.dumps(event.to_json(), default=_jsonable, allow_nan=True) + "\n"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


class _Invalid(ValueError):
    """A value in a result that cannot be stored as it is (its benchmark fails with the message)."""


def _object(data: object, what: str, *, required: frozenset[str], closed: bool = False) -> Mapping[str, Any]:
    """``data`` as an object with every ``required`` field; ``closed``: and no other (the spec: a
    field the worker does not know is a perfguard of another version).  An event's other fields
    are ignored: its reader takes what it knows."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} is {type(data).__name__}, not an object")
    missing = sorted(required - set(data))
    if missing:
        raise ProtocolError(f"{what} has no {', '.join(missing)}")
    unknown = sorted(set(data) - required) if closed else []
    if unknown:
        raise ProtocolError(f"{what} has unknown field(s) {', '.join(unknown)}")
    return data


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{what} is {type(value).__name__}, not a string")
    return value


def _texts(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ProtocolError(f"{what} is not a list of strings")
    return tuple(value)


def _regexes(value: object, what: str) -> tuple[str, ...]:
    out = _texts(value, what)
    for i, pattern in enumerate(out):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ProtocolError(f"{what}[{i}] {pattern!r} is not a regular expression: {exc}") from None
    return out


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{what} is {value!r}, not a count")
    return value


def _is_finite_number(value: object) -> bool:
    return _is_number(value) and math.isfinite(float(value))  # type: ignore[arg-type]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, what: str, error: type[ValueError] = _Invalid) -> float:
    if not _is_number(value):
        raise error(f"{what} is {type(value).__name__}, not a number")
    try:
        number = float(value)
    except OverflowError:
        raise error(f"{what} has {len(str(value))} digits: too large for a float") from None
    if not math.isfinite(number):
        raise error(f"{what} is {number}, not a finite number")
    return number


def _samples(value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Invalid(f"samples are {type(value).__name__}, not a list")
    if len(value) > MAX_SAMPLES:
        raise _Invalid(f"{len(value)} samples (at most {MAX_SAMPLES})")
    samples = tuple(_sample(s, i) for i, s in enumerate(value))
    return samples or None


def _sample(value: Any, i: int) -> float:
    """A sample as a float; NaN and infinities pass (the record drops and counts them, as
    docs/verdicts.md promises), anything else that is not a finite number fails the benchmark."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    return _number(value, f"sample {i}")


def _info(value: Any, what: str) -> dict[str, Any]:
    """A JSON object under :data:`MAX_INFO_BYTES` (a fresh copy: nothing the worker shares)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"{what} is {type(value).__name__}, not an object")
    try:
        text = json.dumps(value, allow_nan=False, default=None)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _Invalid(f"{what} is not plain JSON ({exc})") from None
    if len(text) > MAX_INFO_BYTES:
        raise _Invalid(f"{what} is {len(text)} bytes (at most {MAX_INFO_BYTES})")
    return json.loads(text)


def _params(value: Any) -> dict[str, ParamValue]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Invalid("params are not an object with string keys")
    out: dict[str, ParamValue] = {}
    for k, v in value.items():
        if isinstance(v, (str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (int, float)):
            out[k] = v if isinstance(v, int) and abs(v) < 2**63 else _number(v, f"parameter {k}")
        else:
            raise _Invalid(f"parameter {k} is {type(v).__name__}")
    return out
