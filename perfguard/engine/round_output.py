"""What a round's worker writes, read back: JSON lines in, validated result records out.

The worker (:mod:`perfguard.engine.round_worker`) writes one JSON line per event (``plan``, ``start``,
``result``, ``done``; docs/design.md, "Rounds").  The parent (:class:`perfguard.engine.rounds.RoundRunner`)
reads them while the worker runs (:func:`read_events_at`: progress) and after it ended
(:func:`read_events`).  Every ``result`` line is validated before it becomes a record
(:func:`to_records`): numbers finite and within a float, samples a list of numbers, info a bounded
JSON object; a bad value fails that benchmark with a clear error, never perfguard.  A forward time
also yields its derived tokens/s and TFLOP/s (reported, never gated).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfguard.engine.suite import EFFICIENCY, THROUGHPUT, kind_of
from perfguard.store.records import RecordError, ResultRecord
from perfguard.store.result_info import ResultInfo
from perfguard.units import format_value

_MAX_INFO_BYTES = 256 * 1024
_MAX_SAMPLES = 1_000_000


def read_events(path: Path, offset: int) -> list[dict[str, Any]]:
    """Complete JSON lines of ``path`` from byte ``offset`` (a half-written last line is left)."""
    return read_events_at(path, offset)[0]


def read_events_at(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """(complete JSON lines from byte ``offset``, the offset after the last complete line)."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].split(b"\n")[:-1]:
        try:
            event = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError:
            continue  # a line the worker did not write whole (it died mid-write)
        if isinstance(event, dict):
            events.append(event)
    return events, offset + end


def step_totals(results: Iterable[ResultRecord]) -> dict[str, float]:
    """Seconds per measuring step (first call, memory, work, capture, timing, profile), all cases.

    Each result carries its pass's running totals (``info.steps_s``); the largest per pass is its
    total, and the passes add up.
    """
    per_pass: dict[tuple[str, str], dict[str, float]] = {}
    for r in results:
        steps = ResultInfo.from_json(r.info).steps_s
        if steps is None:
            continue
        key = (
            r.params_key,
            "forward_backward" if "Backward" in r.benchmark or "backward" in r.benchmark else "forward",
        )
        seen = per_pass.setdefault(key, {})
        for step, value in steps.items():
            seen[step] = max(seen.get(step, 0.0), value)
    totals: dict[str, float] = {}
    for steps in per_pass.values():
        for step, value in steps.items():
            totals[step] = round(totals.get(step, 0.0) + value, 3)
    return totals


def progress_text(event: Mapping[str, Any]) -> str:
    label = str(event.get("label", ""))
    short = label.split(".", 1)[-1] if "." in label else label
    status = event.get("status")
    if status != "ok":
        return f"{short} {status}"
    value = event.get("value")
    unit = event.get("unit")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"{short} {format_value(value, str(unit or ''))}".rstrip()
    return short


class _Invalid(ValueError):
    """A value in the worker's output that cannot be stored as it is."""


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"{what} is {type(value).__name__}, not a number")
    try:
        number = float(value)
    except OverflowError:
        raise _Invalid(f"{what} has {len(str(value))} digits: too large for a float") from None
    if not math.isfinite(number):
        raise _Invalid(f"{what} is {number}, not a finite number")
    return number


def _samples(value: Any) -> list[float] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Invalid(f"samples are {type(value).__name__}, not a list")
    if len(value) > _MAX_SAMPLES:
        raise _Invalid(f"{len(value)} samples (at most {_MAX_SAMPLES})")
    return [_sample(s, i) for i, s in enumerate(value)]


def _sample(value: Any, i: int) -> float:
    """A sample as a float; NaN and infinities pass (the record drops and counts them, as
    docs/verdicts.md promises), anything else that is not a finite number fails the benchmark."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    return _number(value, f"sample {i}")


def _info(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"info is {type(value).__name__}, not an object")
    try:
        text = json.dumps(value, allow_nan=False, default=None)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _Invalid(f"info is not plain JSON ({exc})") from None
    if len(text) > _MAX_INFO_BYTES:
        raise _Invalid(f"info is {len(text)} bytes (at most {_MAX_INFO_BYTES})")
    return json.loads(text)


def _params(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Invalid("params are not an object with string keys")
    out = {}
    for k, v in value.items():
        if isinstance(v, (str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (int, float)):
            out[k] = v if isinstance(v, int) and abs(v) < 2**63 else _number(v, f"parameter {k}")
        else:
            raise _Invalid(f"parameter {k} is {type(v).__name__}")
    return out


def to_records(event: Mapping[str, Any], label: str) -> list[ResultRecord]:
    """The store records of one result line: the result itself (and tokens/s, TFLOP/s of a forward)."""
    name = label.split("(", 1)[0]
    benchmark = event.get("benchmark") if isinstance(event.get("benchmark"), str) else name
    try:
        params = _params(event.get("params", {}))
        invalid = None
    except _Invalid as exc:
        params, invalid = {"label": label}, f"the benchmark process wrote an invalid result: {exc}"
    kind = kind_of(benchmark, event.get("unit") if isinstance(event.get("unit"), str) else None)
    impl = str(params.get("impl") or benchmark)
    base: dict[str, Any] = {
        "benchmark": benchmark,
        "impl": impl,
        "params": params,
        "metric": kind.metric,
        "unit": kind.unit,
        "direction": kind.direction,
        "gated": kind.gated,
    }
    status = event.get("status")
    error = event.get("error") if isinstance(event.get("error"), str) else None
    if invalid is not None:
        return [ResultRecord(**base, status="failed", error=invalid)]
    if status == "skipped":
        return [ResultRecord(**base, status="skipped", error=(error or "skipped")[-2000:])]
    if status != "ok":
        return [ResultRecord(**base, status="failed", error=(error or "failed (no message)")[-4000:])]
    try:
        if event.get("value_mismatch") is not None:
            raise _Invalid(f"asv got {event['value_mismatch'][0]!r} but the recorded outcome says "
                           f"{event['value_mismatch'][1]!r}")  # fmt: skip
        value = _number(event.get("value"), "the value")
        samples = _samples(event.get("samples"))
        info = _info(event.get("info"))
        method = event.get("method")
        if method is not None and (not isinstance(method, str) or len(method) > 32):
            raise _Invalid("method is not a short string")
    except _Invalid as exc:
        why = f"the benchmark process wrote an invalid result: {exc}"
        return [ResultRecord(**base, status="failed", error=why)]
    if samples is not None and not samples:
        samples = None
    record = ResultRecord(**base, value=value, samples=samples, method=method, info=info)
    try:  # what the store would refuse (a sample <= 0, nothing but NaN) fails this benchmark only
        record.validate()
    except RecordError as exc:
        why = f"the benchmark process wrote an invalid result: {exc}"
        return [ResultRecord(**base, status="failed", error=why)]
    out = [record]
    if kind.metric == "time" and benchmark.endswith("Forward.track_time") and record.samples:
        out.extend(_derived(benchmark, base, record.samples, method, info))
    return out


def _derived(
    name: str, base: Mapping[str, Any], samples: Sequence[float], method: str | None, info: Mapping[str, Any]
) -> Iterable[ResultRecord]:
    """tokens/s and attended-pair TFLOP/s from the forward samples and the case's work per call."""
    module = name.split(".", 1)[0]
    read = ResultInfo.from_json(info)
    tokens, flops = read.tokens, read.forward_flops
    positive = [s for s in samples if s > 0]
    if not positive:
        return
    keep = {"derived_from": name, "config": info.get("config")}
    for work, kind, method_name in (
        (tokens, THROUGHPUT, "track_tokens_per_second"),
        (flops / 1e12 if flops is not None else None, EFFICIENCY, "track_tflops"),
    ):
        if work is None or work <= 0:
            continue
        yield ResultRecord(
            **{
                **base,
                "benchmark": f"{module}.Throughput.{method_name}",
                "metric": kind.metric,
                "unit": kind.unit,
                "direction": kind.direction,
                "gated": kind.gated,
            },
            samples=[work / s for s in positive],
            method=method,
            info=keep,
        )
