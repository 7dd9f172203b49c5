"""What a round's worker writes, read back: JSON lines in, typed events and result records out.

The worker (:mod:`perfguard.engine.round_worker`) writes one JSON line per event (``plan``, ``start``,
``result``, ``done``; :mod:`perfguard.engine.round_protocol`, docs/design.md "Rounds").  The parent
(:class:`perfguard.engine.rounds.RoundRunner`) reads them while the worker runs
(:func:`read_events_at`: progress) and after it ended (:func:`read_events`).  Every line goes
through the protocol's one gate (:func:`~perfguard.engine.round_protocol.event_from_json`): a result
whose values cannot be stored as they are is already ``failed`` with a clear error when it reaches
:func:`to_records`, which fails it once more if the store would refuse it (a sample <= 0, nothing but
NaN): that benchmark fails, never perfguard.  A forward time also yields its derived tokens/s and
TFLOP/s (reported, never gated).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfguard.engine.round_protocol import INVALID_RESULT, Event, ResultEvent, event_from_json
from perfguard.engine.suite import EFFICIENCY, THROUGHPUT, kind_of
from perfguard.store.records import RecordError, ResultRecord
from perfguard.store.result_info import ResultInfo
from perfguard.units import format_value


def read_events(path: Path, offset: int) -> list[Event]:
    """The events of ``path``'s complete lines from byte ``offset`` (a half-written last line is left)."""
    return read_events_at(path, offset)[0]


def read_events_at(path: Path, offset: int) -> tuple[list[Event], int]:
    """(the events of the complete lines from byte ``offset``, the offset after the last of them).

    A line that is not JSON (the worker died mid-write) or not an event the protocol can tie to a
    benchmark is left out.
    """
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].split(b"\n")[:-1]:
        try:
            events.append(event_from_json(json.loads(raw.decode("utf-8", errors="replace"))))
        except (ValueError, RecursionError):  # not JSON, or round_protocol.ProtocolError (a ValueError)
            continue
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


def progress_text(event: ResultEvent) -> str:
    """One finished combination for the progress line: its short label and, when ok, its value."""
    short = event.label.split(".", 1)[-1] if "." in event.label else event.label
    if event.status != "ok":
        return f"{short} {event.status}"
    if event.value is not None and math.isfinite(event.value):
        return f"{short} {format_value(event.value, event.unit or '')}".rstrip()
    return short


def to_records(event: ResultEvent) -> list[ResultRecord]:
    """The store records of one result: the result itself (and tokens/s, TFLOP/s of a forward)."""
    kind = kind_of(event.benchmark, event.unit)
    params = dict(event.params)
    base: dict[str, Any] = {
        "benchmark": event.benchmark,
        "impl": str(params.get("impl") or event.benchmark),
        "params": params,
        "metric": kind.metric,
        "unit": kind.unit,
        "direction": kind.direction,
        "gated": kind.gated,
    }
    if event.status == "skipped":
        return [ResultRecord(**base, status="skipped", error=(event.error or "skipped")[-2000:])]
    if event.status != "ok" or event.value is None:
        return [ResultRecord(**base, status="failed", error=(event.error or "failed (no message)")[-4000:])]
    info = dict(event.info or {})
    if event.underneath is not None:
        info["underneath"] = dict(event.underneath)
    samples = list(event.samples) if event.samples else None
    record = ResultRecord(**base, value=event.value, samples=samples, method=event.method, info=info)
    try:  # what the store would refuse (a sample <= 0, nothing but NaN) fails this benchmark only
        record.validate()
    except RecordError as exc:
        return [ResultRecord(**base, status="failed", error=f"{INVALID_RESULT}: {exc}")]
    out = [record]
    if kind.metric == "time" and event.benchmark.endswith("Forward.track_time") and record.samples:
        out.extend(_derived(event.benchmark, base, record.samples, event.method, info))
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
