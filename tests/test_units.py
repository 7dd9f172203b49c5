"""One formatter for every number perfguard prints (issue 28): perfguard.units.

The issue's cases: 1.5 GiB printed as "1.50 GiB", "1536.0 MiB" or "1.5 GiB" depending on the
command, and the bytes allocated by a call shown as "1.25M → 3.61M" in the terminal but
"1.19 MiB → 3.45 MiB" in the Markdown.  Every output now calls :func:`perfguard.units.format_value`;
no module keeps a formatter of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfguard.compare import compare_sides
from perfguard.compare.model import Measurement
from perfguard.config import Config
from perfguard.engine.round_output import progress_text
from perfguard.engine.round_protocol import ResultEvent
from perfguard.units import ValueFormatter, format_amount, format_delta, format_value

PACKAGE = Path(__file__).resolve().parents[1] / "perfguard"
GiB = 1024**3
MiB = 1024**2


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1.5 * GiB, "bytes", "1.50 GiB"),
        (1.25 * MiB, "bytes", "1.25 MiB"),
        (512, "bytes", "512 B"),
        (0.00123, "seconds", "1.23 ms"),
        (1.02e-5, "seconds", "10.2 µs"),
        (52.4, "seconds", "52.4 s"),
        (3.2e9, "FLOP", "3.20 GFLOP"),
        (1658, "aten ops", "1,658 aten ops"),
        (4, "kernels", "4 kernels"),
        (0.0123, "TFLOP/s", "12.3 GFLOP/s"),
        (69830.0, "tokens/s", "69.8 k tok/s"),
        (None, "seconds", "–"),
    ],
)
def test_a_value_reads_the_same_in_every_output(value: float | None, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_signed_differences_and_amounts_use_the_same_digits() -> None:
    assert format_delta(200 * MiB, "bytes") == "+200 MiB"
    assert format_delta(-1.5 * GiB, "bytes") == "-1.50 GiB"
    assert format_delta(-12, "aten ops") == "-12 aten ops"
    assert format_amount(1658, "aten ops") == "1,658"
    assert format_amount(1.5 * GiB, "bytes") == format_value(1.5 * GiB, "bytes")
    series = ValueFormatter("seconds", 0.0522)
    assert (series(0.0522), series(0.0783)) == ("52.2 ms", "78.3 ms")


def test_the_terminal_reason_of_a_byte_count_is_in_bytes_like_the_markdown() -> None:
    """The comparison's reason (the terminal shows it) and the tables both print bytes as bytes."""

    def allocated(value: float) -> Measurement:
        return Measurement("Work.track_forward_allocated", {"impl": "ring", "seq_len": 1024},
                           value=value, metric="allocated", unit="bytes")  # fmt: skip

    item = compare_sides(allocated(1.19 * MiB), allocated(3.45 * MiB), Config())
    assert f"{format_value(1.19 * MiB, 'bytes')} → {format_value(3.45 * MiB, 'bytes')}" in item.reason
    assert "1.19 MiB → 3.45 MiB" in item.reason and "M →" not in item.reason


def test_progress_lines_print_values_through_the_same_formatter() -> None:
    line = {"label": "bench_attention.Forward.track_time('ring', 1024)", "status": "ok",
            "value": 1.02e-5, "unit": "seconds"}  # fmt: skip
    event = ResultEvent.from_json(line)
    assert progress_text(event) == "Forward.track_time('ring', 1024) 10.2 µs"


def test_no_module_keeps_a_value_formatter_of_its_own() -> None:
    """A second formatter is how "1536.0 MiB" and "1.50 GiB" came to stand for one number."""
    names = {"format_value", "_fmt_bytes", "_fmt_count"}
    others = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "units.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                others.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert not others, others
