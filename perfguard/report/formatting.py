"""Words and numbers of the reports: benchmark labels, ratios, intervals, p-values, short shas.

Values in their unit come from :mod:`perfguard.units` (one formatter for every output); this
module holds what only reports say: how a benchmark is named, how a ratio or an interval reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from perfguard import units
from perfguard.engine.suite import short_name

#: How a reader names a benchmark (asv name without its module -> words).  Work metrics (issue 12):
#: ``Work.track_<pass>_<metric>``.
BENCHMARK_LABELS = {
    "Forward.track_time": "forward time",
    "ForwardBackward.track_time": "forward+backward time",
    "PeakMemory.track_forward": "forward peak memory",
    "PeakMemory.track_forward_backward": "forward+backward peak memory",
    "Throughput.track_tokens_per_second": "forward tokens/s",
    "Throughput.track_tflops": "forward TFLOP/s",
    "Work.track_forward_flops": "forward FLOPs",
    "Work.track_forward_backward_flops": "forward+backward FLOPs",
    "Work.track_forward_ops": "forward aten ops",
    "Work.track_forward_backward_ops": "forward+backward aten ops",
    "Work.track_forward_kernels": "forward CUDA kernels",
    "Work.track_forward_backward_kernels": "forward+backward CUDA kernels",
    "Work.track_forward_allocated": "forward bytes allocated",
    "Work.track_forward_backward_allocated": "forward+backward bytes allocated",
    # the distributed suite (bench_distributed): seconds per call spent communicating
    "Communication.track_forward": "forward communication",
    "Communication.track_forward_backward": "forward+backward communication",
    # the accuracy of one call against the float64 reference (perfguard.engine.accuracy)
    "Accuracy.track_output_error": "output error",
    "Accuracy.track_q_error": "q gradient error",
    "Accuracy.track_k_error": "k gradient error",
    "Accuracy.track_v_error": "v gradient error",
    "Accuracy.track_output_error_causal": "causal output error",
    "Accuracy.track_q_error_causal": "causal q gradient error",
    "Accuracy.track_k_error_causal": "causal k gradient error",
    "Accuracy.track_v_error_causal": "causal v gradient error",
    # a declared implementation's forward on each of its kernels (params: backend), reported
    "Backends.track_time": "per-kernel forward time",
}
#: Reported numbers computed from another benchmark's samples.  Mirrors
#: ``perfguard.compare.DERIVED_FROM`` (not imported: compare pulls scipy into every report;
#: tests/test_report_verdicts.py holds the two equal).
DERIVED_FROM = {
    "Throughput.track_tokens_per_second": "Forward.track_time",
    "Throughput.track_tflops": "Forward.track_time",
}


def count(n: int, noun: str) -> str:
    """``1 commit``, ``12 commits``: a count with its noun (plural by an ``s``)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def format_ratio(ratio: float | None) -> str:
    """Ratio of medians as ``×1.23`` (the verdict engine orients it so that > 1 is worse)."""
    return "–" if ratio is None else f"×{ratio:.3f}" if ratio < 10 else f"×{ratio:.1f}"


def format_change(ratio: float | None) -> str:
    """The same ratio as a signed percentage: ``×1.234`` -> ``+23.4%``."""
    if ratio is None:
        return "–"
    return f"{(ratio - 1) * 100:+.1f}%"


def format_interval(low: float | None, high: float | None) -> str:
    """A confidence interval of a ratio, ``[1.10, 1.35]``."""
    if low is None or high is None:
        return "–"
    return f"[{low:.3f}, {high:.3f}]"


def format_p(p: float | None) -> str:
    """A p-value as the item's reason states it (:func:`perfguard.units.format_p`), ``–`` for none."""
    return "–" if p is None else units.format_p(p)


def format_percent(x: float | None) -> str:
    """A fraction such as the noise measure (IQR / median) as a percentage."""
    return "–" if x is None else f"{x * 100:.1f}%"


def format_threshold(t: float) -> str:
    return f"{t * 100:g}%"


def short_sha(sha: str | None) -> str:
    """First 8 hex digits; a dirty work tree keeps its ``+dirty`` marker."""
    if not sha:
        return "–"
    head, _, dirty = sha.partition("+")
    return head[:8] + ("+dirty" if dirty else "")


def format_date(when: datetime | None) -> str:
    return "–" if when is None else when.strftime("%Y-%m-%d %H:%M")


def _param_order(key: str) -> tuple[int, str]:
    return (0, "") if key == "seq_len" else (1, key)


def params_label(params: Mapping[str, Any], *, skip: tuple[str, ...] = ("impl",)) -> str:
    """``{"impl": "ring", "seq_len": 4096, "dtype": "float16"}`` -> ``seq_len=4096 dtype=float16``.

    ``seq_len`` first: it is the parameter people scan for.
    """
    return " ".join(f"{k}={params[k]}" for k in sorted(params, key=_param_order) if k not in skip)


def natural_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort parameter sets so that seq_len 512 < 4096 < 65536 (numbers as numbers)."""
    out: list[Any] = []
    for k in sorted(params, key=_param_order):
        v = params[k]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        out.append((k, 0, float(v), "") if number else (k, 1, 0.0, str(v)))
    return tuple(out)


def benchmark_label(benchmark: str) -> str:
    """asv name without its module: ``bench_attention.Forward.track_time`` -> ``Forward.track_time``."""
    return short_name(benchmark)


def metric_label(benchmark: str) -> str:
    """What the benchmark measures, in words: ``bench_attention.Forward.track_time`` -> ``forward time``.

    Unknown benchmarks keep their asv name (without the module).
    """
    parts = benchmark.split(".")
    return BENCHMARK_LABELS.get(".".join(parts[-2:]), benchmark_label(benchmark))


def derived_source(benchmark: str) -> str | None:
    """The benchmark a derived one is computed from, in the same asv module (None: not derived)."""
    parts = benchmark.split(".")
    source = DERIVED_FROM.get(".".join(parts[-2:]))
    return None if source is None else ".".join([*parts[:-2], source])
