"""The round worker's spec and events (perfguard.engine.round_protocol): what crosses the process
boundary round-trips, and what does not fit is refused where it is read — a bad spec stops the
worker with exit 2 and the field it names, a bad event line never crashes the parent, and a result
whose values cannot be stored fails that benchmark with a message saying which value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfguard.engine import round_output
from perfguard.engine.round_protocol import (
    INVALID_RESULT,
    MAX_INFO_BYTES,
    DoneEvent,
    PlanEvent,
    PlannedItem,
    ProtocolError,
    ResultEvent,
    StartEvent,
    WorkerSpec,
    event_from_json,
    event_line,
)

ROOT = Path(__file__).resolve().parents[1]
LABEL = "bench_attention.Forward.track_time('dilated', 512, 'float32')"
BENCHMARK = "bench_attention.Forward.track_time"
PARAMS = {"impl": "dilated", "seq_len": 512, "dtype": "float32"}


def spec_json(**changes: Any) -> dict[str, Any]:
    """A spec as perfguard.engine.rounds writes it, with ``changes``."""
    spec = {
        "benchmark_dir": "/shim/asv_benchmarks",
        "bench": [r"Forward\.track_time"],
        "only": None,
        "profile": [],
        "device": "cpu",
        "output": "/shim/round.jsonl",
        "suite": None,
        "exclude_suites": ["bench_distributed"],
        "exclude_benchmarks": ["Backends.track_time"],
    }
    spec.update(changes)
    return spec


def result_json(**changes: Any) -> dict[str, Any]:
    """An ``ok`` result line as the worker writes it, with ``changes``."""
    line = {"event": "result", "label": LABEL, "benchmark": BENCHMARK, "params": PARAMS, "status": "ok",
            "seconds": 0.5, "value": 1.5e-3, "unit": "seconds", "samples": [1.4e-3, 1.5e-3, 1.6e-3],
            "method": "cpu-time", "info": {"tokens": 512}}  # fmt: skip
    line.update(changes)
    return line


def parsed(line: dict[str, Any]) -> ResultEvent:
    """``line`` through the parent's gate, as it reads it from the file."""
    event = event_from_json(json.loads(json.dumps(line, allow_nan=True)))
    assert isinstance(event, ResultEvent)
    return event


# ----------------------------------------------------------------------------------------------
# the spec


def test_the_spec_round_trips_and_keeps_the_format_on_disk() -> None:
    spec = WorkerSpec.from_json(spec_json())
    assert spec.bench == (r"Forward\.track_time",) and spec.only is None and spec.suite is None
    assert spec.benchmark_dir == Path("/shim/asv_benchmarks") and spec.output == Path("/shim/round.jsonl")
    assert spec.to_json() == spec_json()
    restart = WorkerSpec.from_json(spec_json(only=[LABEL], suite="bench_distributed", exclude_suites=[]))
    assert restart.only == (LABEL,) and restart.suite == "bench_distributed"
    assert WorkerSpec.from_json(json.loads(json.dumps(restart.to_json()))) == restart


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([1, 2], "the spec is list, not an object"),
        ({k: v for k, v in spec_json().items() if k != "output"}, "the spec has no output"),
        (spec_json(extra=1), "the spec has unknown field(s) extra"),
        (spec_json(benchmark_dir=3), "benchmark_dir is int, not a string"),
        (spec_json(device=None), "device is NoneType, not a string"),
        (spec_json(bench="Forward"), "bench is not a list of strings"),
        (spec_json(bench=["(unclosed"]), "bench[0] '(unclosed' is not a regular expression"),
        (spec_json(profile=[r"ok", "*bad"]), "profile[1] '*bad' is not a regular expression"),
        (spec_json(only=[LABEL, 7]), "only is not a list of strings"),
        (spec_json(suite=["bench_distributed"]), "suite is list, not a string"),
        (spec_json(exclude_suites=None), "exclude_suites is not a list of strings"),
        (spec_json(exclude_benchmarks={"a": 1}), "exclude_benchmarks is not a list of strings"),
    ],
)
def test_a_malformed_spec_names_what_is_wrong(spec: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        WorkerSpec.from_json(spec)
    assert message in str(caught.value)


def _worker(spec: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    return subprocess.run([sys.executable, "-m", "perfguard.engine.round_worker", str(spec)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_the_worker_refuses_a_malformed_spec_with_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "round.jsonl"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_json(output=str(output), bench=["(unclosed"])))
    done = _worker(spec)
    assert done.returncode == 2, done.stderr
    assert (
        "not a round spec" in done.stderr
        and "bench[0] '(unclosed' is not a regular expression" in done.stderr
    )
    assert "Traceback" not in done.stderr and not output.exists()
    spec.write_text("{not json")
    done = _worker(spec)
    assert done.returncode == 2 and f"cannot read the spec {spec}" in done.stderr, done.stderr


# ----------------------------------------------------------------------------------------------
# the events


def test_every_event_round_trips_through_a_line() -> None:
    item = PlannedItem(LABEL, BENCHMARK, PARAMS)
    events = [
        PlanEvent(
            (
                item,
                PlannedItem(
                    "x.Work.track_forward_ops('a', 1)",
                    "x.Work.track_forward_ops",
                    {"impl": "a", "seq_len": 1},
                ),
            ),
            discovery_s=1.25,
            ranks=2,
        ),
        StartEvent(LABEL),
        ResultEvent(
            LABEL,
            BENCHMARK,
            PARAMS,
            "ok",
            seconds=0.5,
            value=1.5e-3,
            unit="seconds",
            samples=(1.4e-3, 1.6e-3),
            method="cpu-time",
            info={"tokens": 512, "config": {"w": [1, 2]}},
            underneath={"kind": "aten ops", "rows": [["aten::mm", 2, 1e-4]]},
        ),
        item.skipped("no CUDA"),
        item.failed("RuntimeError: boom", seconds=0.25),
        DoneEvent(12.5),
    ]
    for event in events:
        line = event_line(event)
        assert line.endswith("\n") and line.count("\n") == 1
        assert event_from_json(json.loads(line)) == event


def test_the_plan_line_keeps_its_total_labels_and_items() -> None:
    plan = PlanEvent((PlannedItem(LABEL, BENCHMARK, PARAMS),), discovery_s=0.5)
    assert json.loads(event_line(plan)) == {
        "event": "plan", "total": 1, "labels": [LABEL], "discovery_s": 0.5, "ranks": 1,
        "items": [{"label": LABEL, "benchmark": BENCHMARK, "params": PARAMS}],
    }  # fmt: skip


def test_scalars_of_torch_are_written_as_numbers() -> None:
    import torch

    event = ResultEvent(LABEL, BENCHMARK, PARAMS, "ok", value=torch.tensor(2.5), unit="seconds")  # type: ignore[arg-type]
    assert parsed(json.loads(event_line(event))).value == 2.5


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ([1], "an event is an object, not list"),
        ({"event": "finish"}, "unknown event 'finish'"),
        ({"event": ["plan"]}, "unknown event ['plan']"),
        ({"event": "start"}, "a start has no label"),
        ({"event": "start", "label": 3}, "the start's label is int, not a string"),
        ({"event": "done", "seconds": "soon"}, "the done's seconds is str, not a number"),
        ({"event": "done", "seconds": float("inf")}, "the done's seconds is inf, not a finite number"),
        ({"event": "result", "status": "ok"}, "a result without a label"),
        ({"event": "plan", "total": 0, "labels": [], "items": {}}, "the plan's items are dict, not a list"),
        ({"event": "plan", "total": 1, "labels": ["other"],
          "items": [{"label": LABEL, "benchmark": BENCHMARK, "params": PARAMS}]},
         "the plan's labels are not those of its items"),
        ({"event": "plan", "total": 2, "labels": [LABEL],
          "items": [{"label": LABEL, "benchmark": BENCHMARK, "params": PARAMS}]},
         "the plan's total is 2, not its 1 items"),
        ({"event": "plan", "total": 1, "labels": [LABEL], "items": [{"label": LABEL}]},
         "a plan item has no benchmark, params"),
        ({"event": "plan", "total": 0, "labels": [], "items": [], "ranks": -1}, "ranks is -1, not a count"),
    ],
)  # fmt: skip
def test_an_event_line_that_names_no_benchmark_is_refused(line: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        event_from_json(json.loads(json.dumps(line)))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"value": 10**400}, "the value has 401 digits: too large for a float"),
        ({"value": "fast"}, "the value is str, not a number"),
        ({"value": True}, "the value is bool, not a number"),
        ({"value": float("nan")}, "the value is nan, not a finite number"),
        ({"value": None}, "the value is NoneType, not a number"),
        ({"samples": [10**400, 1.0]}, "sample 0 has 401 digits: too large for a float"),
        ({"samples": "1,2,3"}, "samples are str, not a list"),
        ({"samples": [1.0, "2"]}, "sample 1 is str, not a number"),
        ({"info": "x"}, "info is str, not an object"),
        ({"info": {"ratio": float("nan")}}, "info is not plain JSON"),
        ({"info": {"blob": "x" * MAX_INFO_BYTES}}, f"bytes (at most {MAX_INFO_BYTES})"),
        ({"underneath": [1, 2]}, "the profiler breakdown is list, not an object"),
        ({"method": "m" * 33}, "method is not a short string"),
        ({"method": 3}, "method is not a short string"),
        ({"value_mismatch": [1.0, 2.0]}, "asv got 1.0 but the recorded outcome says 2.0"),
        ({"value_mismatch": 5}, "value_mismatch is 5, not a pair"),
    ],
)
def test_a_result_that_cannot_be_stored_fails_its_benchmark_with_the_reason(
    changes: dict[str, Any], message: str
) -> None:
    event = parsed(result_json(**changes))
    assert (event.label, event.benchmark, dict(event.params)) == (LABEL, BENCHMARK, PARAMS)
    assert event.status == "failed" and event.value is None and event.samples is None
    assert (
        event.error is not None and event.error.startswith(f"{INVALID_RESULT}: ") and message in event.error
    )
    (record,) = round_output.to_records(event)
    assert record.status == "failed" and record.impl == "dilated" and record.error == event.error


def test_too_many_samples_fail_the_benchmark() -> None:
    event = parsed(result_json(samples=[1.0] * 1_000_001))
    assert event.status == "failed" and "1000001 samples (at most 1000000)" in str(event.error)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ([1, 2], "params are not an object with string keys"),
        ({"impl": "dilated", "shape": [1, 2]}, "parameter shape is list"),
        ({"impl": "dilated", "seq_len": 10**400}, "parameter seq_len has 401 digits"),
    ],
)
def test_invalid_params_fail_the_result_whatever_its_status(params: Any, message: str) -> None:
    for status in ("ok", "skipped", "failed"):
        event = parsed(result_json(params=params, status=status))
        assert event.status == "failed" and dict(event.params) == {"label": LABEL}
        assert str(event.error).startswith(f"{INVALID_RESULT}: {message}")


def test_a_skipped_or_failed_result_keeps_its_reason_and_ignores_its_numbers() -> None:
    skipped = parsed(result_json(status="skipped", error="no CUDA", value="garbage", info="x"))
    assert (skipped.status, skipped.error, skipped.value, skipped.info) == ("skipped", "no CUDA", None, None)
    odd = parsed(result_json(status="exploded", error=None))  # any status but ok / skipped is a failure
    assert (odd.status, odd.error) == ("failed", None)
    (record,) = round_output.to_records(odd)
    assert (record.status, record.error) == ("failed", "failed (no message)")
    (record,) = round_output.to_records(parsed(result_json(status="skipped", error=None)))
    assert (record.status, record.error) == ("skipped", "skipped")


def test_a_result_without_its_benchmark_or_unit_takes_them_from_its_label() -> None:
    event = parsed(result_json(benchmark=7, unit=["s"], seconds="long"))
    assert (event.benchmark, event.unit, event.seconds, event.status) == (BENCHMARK, None, None, "ok")


def test_records_carry_the_profiler_breakdown_in_their_info_and_derive_throughput() -> None:
    underneath = {"kind": "aten ops", "rows": [["aten::bmm", 4, 1e-4]]}
    records = round_output.to_records(parsed(result_json(underneath=underneath)))
    assert [r.benchmark.rsplit(".", 1)[-1] for r in records] == ["track_time", "track_tokens_per_second"]
    assert records[0].info == {"tokens": 512, "underneath": underneath}
    assert records[1].samples == pytest.approx([512 / s for s in (1.4e-3, 1.5e-3, 1.6e-3)])


def test_a_sample_the_store_refuses_fails_the_benchmark() -> None:
    (record,) = round_output.to_records(parsed(result_json(samples=[-1.0])))
    assert record.status == "failed" and record.error is not None
    assert record.error.startswith(f"{INVALID_RESULT}: ") and "sample 0 is -1.0" in record.error


def test_the_reader_keeps_whole_events_and_leaves_out_the_rest(tmp_path: Path) -> None:
    """Garbage, a line that is no event and a half-written last line: left out, never an exception."""
    path = tmp_path / "round.jsonl"
    lines = [
        event_line(PlanEvent((PlannedItem(LABEL, BENCHMARK, PARAMS),))),
        "not json at all\n",
        json.dumps({"event": "result", "status": "ok"}) + "\n",  # no label: no benchmark to fail
        "[" * 100_000 + "\n",  # deeper than the JSON decoder goes
        event_line(StartEvent(LABEL)),
        json.dumps(result_json(info="x")) + "\n",
    ]
    path.write_text("".join(lines) + '{"event": "done", "sec')
    events, end = round_output.read_events_at(path, 0)
    assert [type(e).__name__ for e in events] == ["PlanEvent", "StartEvent", "ResultEvent"]
    assert events[-1].status == "failed"  # type: ignore[union-attr]
    assert end == len("".join(lines).encode())
    with path.open("a") as fh:
        fh.write('onds": 3.0}\n')
    assert round_output.read_events(path, end) == [DoneEvent(3.0)]
