"""Numbers as people read them: values in their unit, ratios, intervals, p-values, short shas.

Every report (Markdown, HTML, site) goes through these functions, so "1.23 ms" in the PR comment
and on the history site is the same string for the same stored number.  Values keep three
significant digits: enough to see a 20% change, few enough to scan a table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from perfguard.suite import short_name

_TIME_STEPS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTE_STEPS = ((1024.0**4, "TiB"), (1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB"), (1.0, "B"))
_SI_STEPS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
#: TFLOP/s below 1 reads better as GFLOP/s ("12.3 GFLOP/s", not "0.0123 TFLOP/s").
_TFLOPS_STEPS = ((1.0, "TFLOP/s"), (1e-3, "GFLOP/s"), (1e-6, "MFLOP/s"), (1e-9, "kFLOP/s"))
#: Work metrics counted per call (issue 12): shown as exact integers with thousands separators.
COUNT_UNITS = frozenset({"aten ops", "kernels"})

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
    # improved's forward on each attention kernel (params: backend), reported
    "Backends.track_time": "per-kernel forward time",
}
#: Reported numbers computed from another benchmark's samples.  Mirrors
#: ``perfguard.compare.DERIVED_FROM`` (not imported: compare pulls scipy into every report;
#: tests/test_report_verdicts.py holds the two equal).
DERIVED_FROM = {
    "Throughput.track_tokens_per_second": "Forward.track_time",
    "Throughput.track_tflops": "Forward.track_time",
}


def sig3(x: float) -> str:
    """Three significant digits without scientific notation for everyday magnitudes."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    text = f"{x:.{digits}f}"
    # 999.6 rounds to "1000" with 0 decimals: still three significant digits, keep it.
    return text


def unit_scale(unit: str, magnitude: float) -> tuple[float, str]:
    """The divisor and suffix that show ``magnitude`` (in ``unit``) with a readable prefix.

    Charts call this once with their largest value, so every tick label shares one suffix.
    """
    m = abs(magnitude)
    if unit == "seconds":
        for factor, suffix in _TIME_STEPS:
            if m >= factor:
                return factor, suffix
        return 1e-9, "ns"
    if unit == "bytes":
        for factor, suffix in _BYTE_STEPS:
            if m >= factor:
                return factor, suffix
        return 1.0, "B"
    if unit == "tokens/s":
        for factor, prefix in _SI_STEPS:
            if m >= factor:
                return factor, f"{prefix} tok/s".strip()
        return 1.0, "tok/s"
    if unit == "TFLOP/s":
        for factor, suffix in _TFLOPS_STEPS:
            if m >= factor:
                return factor, suffix
        return 1e-9, "kFLOP/s"
    if unit == "FLOP":
        for factor, prefix in _SI_STEPS:
            if m >= factor:
                return factor, f"{prefix}FLOP"
        return 1.0, "FLOP"
    return 1.0, unit


def format_value(value: float | None, unit: str) -> str:
    """``0.00123, "seconds"`` -> ``"1.23 ms"``; ``None`` -> an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit in COUNT_UNITS:
        return f"{round(value):,} {unit}"
    factor, suffix = unit_scale(unit, value)
    return f"{sig3(value / factor)} {suffix}".strip()


class ValueFormatter:
    """``format_value`` with the unit prefix and decimals fixed once for a whole series.

    A chart's read-outs then share one suffix and one number of decimals ("52.2 ms", "78.3 ms"),
    and formatting 200,000 points costs one f-string each.
    """

    def __init__(self, unit: str, reference: float) -> None:
        self.factor, self.suffix = unit_scale(unit, reference)
        scaled = abs(reference) / self.factor if reference else 1.0
        self.decimals = max(0, 2 - math.floor(math.log10(scaled))) if scaled > 0 else 2

    def number(self, value: float | None) -> str:
        return "–" if value is None else f"{value / self.factor:.{self.decimals}f}"

    def __call__(self, value: float | None) -> str:
        return "–" if value is None else f"{value / self.factor:.{self.decimals}f} {self.suffix}".rstrip()


def format_amount(value: float | None, unit: str) -> str:
    """A value whose unit the label already names: counts bare (``1,658``), the rest as ``format_value``."""
    if value is not None and unit in COUNT_UNITS:
        return f"{round(value):,}"
    return format_value(value, unit)


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
    """p-values: two significant digits, ``<0.0001`` below that (more digits mean nothing here)."""
    if p is None:
        return "–"
    if p < 1e-4:
        return "<0.0001"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}".rstrip("0").rstrip(".")


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
