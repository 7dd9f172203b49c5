"""What perfguard reads from a result's ``info``, typed (perfguard.store.result_info.ResultInfo).

The keys as the suite, the round worker and the timer write them read back typed, also from a real
SQLite store; a result stored without them (an older perfguard, another suite) reads as absent; a
value of the wrong type reads as absent instead of failing the reader.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from perfguard.compare.paths import path_changes
from perfguard.engine.suite import selected, suspect_selection
from perfguard.store import CommitRecord, MachineRecord, ResultRecord, RunRecord, Store
from perfguard.store.result_info import Breakdown, CodePath, ResultInfo

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
CPU = MachineRecord(key="cpu:Test CPU x2", kind="cpu", label="Test CPU")
SHA = "c" * 40

#: ``info`` as a timed result carries it (the round worker, the timer, the suite).
WRITTEN = {
    "param_names": ["seq_len", "dtype", "impl"],
    "settings": {"warmup_s": 0.1, "repeat": 20},
    "path": {"kind": "aten ops", "digest": "0123456789abcdef", "names": ["aten::bmm", "aten::softmax"]},
    "breakdown": {"kind": "aten ops", "counts": {"aten::bmm": 2, "aten::softmax": 1}},
    "underneath": {
        "kind": "aten ops",
        "source": "torch.profiler, one eager call",
        "rows": {"aten::bmm": [2, 0.5], "aten::softmax": [1, 0.125]},
    },
    "steps_s": {"timing": 1.5, "memory": 0.25},
    "tokens": 4096,
    "forward_flops": 1.5e9,
    "config": {"segment_lengths": [256, 512]},  # for people: not part of the view
    "graph_error": "capture failed",  # for people: not part of the view
}


def result(info: dict[str, object], **overrides: object) -> ResultRecord:
    values: dict[str, object] = dict(
        benchmark="bench_attention.Forward.track_time",
        impl="dilated",
        params={"impl": "dilated", "seq_len": 512, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        samples=[1e-3, 1.1e-3, 0.9e-3],
        method="cpu-wall",
        info=info,
    )
    values.update(overrides)
    return ResultRecord(**values)  # type: ignore[arg-type]


def test_the_written_keys_read_back_typed_through_a_real_store(tmp_path: Path) -> None:
    expected = ResultInfo(
        param_names=("seq_len", "dtype", "impl"),
        settings={"warmup_s": 0.1, "repeat": 20},
        path=CodePath("aten ops", "0123456789abcdef", ("aten::bmm", "aten::softmax")),
        breakdown=Breakdown("aten ops", "", {"aten::bmm": 2, "aten::softmax": 1}),
        underneath=Breakdown(
            "aten ops",
            "torch.profiler, one eager call",
            {"aten::bmm": 2, "aten::softmax": 1},
            {"aten::bmm": 0.5, "aten::softmax": 0.125},
        ),
        steps_s={"timing": 1.5, "memory": 0.25},
        tokens=4096.0,
        forward_flops=1.5e9,
    )
    assert ResultInfo.from_json(WRITTEN) == expected
    assert expected.underneath is not None and expected.underneath.timed
    assert expected.breakdown is not None and not expected.breakdown.timed
    derived = result(
        {"derived_from": "bench_attention.Forward.track_time", "config": {}},
        benchmark="bench_attention.Throughput.track_tokens_per_second",
        metric="throughput",
        unit="tokens/s",
        direction="higher",
        gated=False,
        samples=[1e6, float("nan"), 1.1e6],
    )
    with Store.open(f"sqlite:///{tmp_path / 'history.db'}") as store:
        commit = CommitRecord(sha=SHA, base_sha=SHA, committed_at=T0)
        store.record_runs(CPU, commit, [RunRecord(
            profile="quick", started_at=T0, finished_at=T0 + timedelta(seconds=1), trusted=True,
            results=[result(WRITTEN), derived],
        )])  # fmt: skip
        found = store.results_for(CPU.key, SHA, "quick")
    timed, rate = (found[r.key][0] for r in (result(WRITTEN), derived))
    assert ResultInfo.from_json(timed.info) == expected
    rate_info = ResultInfo.from_json(rate.info)
    assert rate_info.derived_from == "bench_attention.Forward.track_time" and rate_info.ignored_samples == 1


def test_a_result_without_the_keys_reads_as_absent() -> None:
    assert ResultInfo.from_json({}) == ResultInfo() == ResultInfo.from_json(None) == ResultInfo.from_json([1])
    bare = result({})
    assert ResultInfo.from_json(bare.info).ignored_samples == 0
    # the readers behave as for a result an older perfguard stored: the params in their own order
    own, suite = "('dilated', 512, 'float32')", "(512, 'float32', 'dilated')"
    assert selected(bare, ["^" + re.escape(f"bench_attention.Forward.track_time{own}")])
    assert suspect_selection([bare], [[bare]]) == [
        "^" + re.escape(f"bench_attention.Forward.track_time{own}") + "$"
    ]
    ordered = result({"param_names": ["seq_len", "dtype", "impl"]})
    assert suspect_selection([ordered], [[ordered]]) == [
        "^" + re.escape(f"bench_attention.Forward.track_time{suite}") + "$"
    ]
    assert path_changes([[bare]], [[bare]]) == []


def test_values_of_the_wrong_type_read_as_absent() -> None:
    info = ResultInfo.from_json(
        {
            "derived_from": 5,
            "param_names": "seq_len",
            "settings": ["warmup"],
            "path": {"kind": "aten ops", "digest": 123, "names": ["x"]},
            "breakdown": {"kind": 3, "counts": {"aten::add": "2", "aten::mm": 1.0}},
            "underneath": {"rows": {"aten::add": [1], "aten::mm": ["1", 0.5], "aten::bmm": [2, 0.25]}},
            "steps_s": {"timing": "1", "memory": True, "work": 2},
            "ignored_samples": "3",
            "tokens": True,
            "forward_flops": "1e9",
        }
    )
    assert (info.derived_from, info.param_names, info.settings, info.path) == (None, None, None, None)
    assert info.breakdown == Breakdown("", "", {"aten::add": 0, "aten::mm": 1})
    assert info.underneath == Breakdown("", "", {"aten::bmm": 2}, {"aten::bmm": 0.25})
    assert info.steps_s == {"work": 2.0} and info.ignored_samples == 0
    assert info.tokens is None and info.forward_flops is None
    assert ResultInfo.from_json({"path": {"digest": "d", "names": "x"}}).path == CodePath("", "d", ())
    assert ResultInfo.from_json({"breakdown": "counts", "underneath": 3}) == ResultInfo()
