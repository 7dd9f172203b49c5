"""The metric vocabulary lives in one table (perfguard.metrics, issue 28).

Before, the list of metric names, the work metrics, the deterministic ones, the verdict words and
the report columns were written out in about ten modules; adding a metric meant finding them all.
These tests hold the derived views to the table and that no module keeps a list of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from perfguard import metrics
from perfguard.compare import compare_sides
from perfguard.compare.model import Measurement
from perfguard.config import Config
from perfguard.engine.suite import kind_of
from perfguard.store.records import ResultRecord

PACKAGE = Path(__file__).resolve().parents[1] / "perfguard"
SPELLED = {"time", "memory", "throughput", "efficiency", "flops", "ops", "kernels", "allocated", "error"}


def test_every_suite_benchmark_takes_unit_and_direction_from_its_metric() -> None:
    for benchmark in ("Forward.track_time", "PeakMemory.track_forward", "Work.track_forward_kernels",
                      "Work.track_forward_backward_allocated", "Communication.track_forward"):  # fmt: skip
        kind = kind_of(f"bench_attention.{benchmark}", None)
        m = metrics.metric(kind.metric)
        assert (kind.unit, kind.direction) == (m.unit, m.direction), benchmark
    assert kind_of("bench_attention.Communication.track_forward", None).gated is False  # reported timing


def test_the_derived_sets_follow_the_table() -> None:
    assert metrics.NAMES[:2] == ("time", "memory") and set(metrics.NAMES) == SPELLED
    assert {"flops", "ops", "kernels", "allocated"} == metrics.WORK_METRICS
    assert metrics.WORK_METRICS | {"memory", "error"} == metrics.DETERMINISTIC_METRICS
    assert metrics.WORK_METRICS | {"error"} == metrics.ZERO_VALID_METRICS  # zero: nothing counted, exact
    assert metrics.in_family("accuracy") == ("error",)
    assert {"throughput", "efficiency"} == metrics.REPORTED_METRICS
    assert metrics.in_family("time") == ("time", "throughput", "efficiency")
    assert len(metrics.COLUMN_WORDS) == len(metrics.NAMES)


def test_the_verdict_words_and_the_store_choices_come_from_the_table() -> None:
    def kernels(value: float) -> Measurement:
        return Measurement("Work.track_forward_kernels", {"impl": "ring", "seq_len": 1024},
                           value=value, metric="kernels", unit="kernels")  # fmt: skip

    item = compare_sides(kernels(10), kernels(20), Config())
    assert "10 kernels → 20 kernels" in item.reason
    record = ResultRecord(benchmark="bench_attention.Work.track_forward_kernels", impl="ring",
                          params={"seq_len": 1024}, metric="kernels", unit="kernels", direction="lower",
                          value=0.0, samples=[0.0], status="ok", gated=True)  # fmt: skip
    record.validate()  # zero is a count of work


def test_no_module_spells_the_metric_list_out_again() -> None:
    """A tuple or set literal holding three or more metric names is a second vocabulary."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in SPELLED}
                if len(words) >= 3:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found
