"""Numbers as people read them: one formatter for every value perfguard prints (issue 28).

The terminal, the PR comment (Markdown), the HTML report, the history site, ``perfguard run``,
``history``, ``changes`` and ``calibrate`` all print a stored value through :func:`format_value`,
so the same number is the same string everywhere: ``1.5 GiB``, never ``1536.0 MiB`` in one place
and ``1.50 GiB`` in another; a byte count is never shown as ``1.25M``.  Three significant digits:
enough to see a 20% change, few enough to scan a table.  Counts of work (aten ops, kernels) are
exact integers with thousands separators.  A leaf module (no perfguard import): the comparison
rules, which must not depend on the report package, use it too.
"""

from __future__ import annotations

import math

_TIME_STEPS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTE_STEPS = ((1024.0**4, "TiB"), (1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB"), (1.0, "B"))
_SI_STEPS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
#: TFLOP/s below 1 reads better as GFLOP/s ("12.3 GFLOP/s", not "0.0123 TFLOP/s").
_TFLOPS_STEPS = ((1.0, "TFLOP/s"), (1e-3, "GFLOP/s"), (1e-6, "MFLOP/s"), (1e-9, "kFLOP/s"))
#: Work counted per call (issue 12): shown as exact integers with thousands separators.
COUNT_UNITS = frozenset({"aten ops", "kernels"})
#: The accuracy metric's unit (perfguard.metrics): errors span 1e-8 (float32) to 1e-2 (bfloat16),
#: so they print in scientific notation with three significant digits ("1.23e-07").
ERROR_UNIT = "relative error"
#: What a missing value prints as.
MISSING = "–"


def sig3(x: float) -> str:
    """Three significant digits without scientific notation for everyday magnitudes."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"  # 999.6 -> "1000" with 0 decimals: still three significant digits


def unit_scale(unit: str, magnitude: float) -> tuple[float, str]:
    """The divisor and suffix that show ``magnitude`` (in ``unit``) with a readable prefix.

    Charts call this once with their largest value, so every tick label shares one suffix.
    """
    m = abs(magnitude)
    if unit == "seconds":
        return _first(_TIME_STEPS, m, (1e-9, "ns"))
    if unit == "bytes":
        return _first(_BYTE_STEPS, m, (1.0, "B"))
    if unit == "TFLOP/s":
        return _first(_TFLOPS_STEPS, m, (1e-9, "kFLOP/s"))
    if unit == "tokens/s":
        factor, prefix = _first(_SI_STEPS, m, (1.0, ""))
        return factor, f"{prefix} tok/s".strip()
    if unit == "FLOP":
        factor, prefix = _first(_SI_STEPS, m, (1.0, ""))
        return factor, f"{prefix}FLOP"
    return 1.0, unit


def _first(steps: tuple[tuple[float, str], ...], m: float, smallest: tuple[float, str]) -> tuple[float, str]:
    for factor, suffix in steps:
        if m >= factor:
            return factor, suffix
    return smallest


def format_value(value: float | None, unit: str) -> str:
    """``0.00123, "seconds"`` -> ``"1.23 ms"``; ``1610612736, "bytes"`` -> ``"1.50 GiB"``; None -> –."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if unit in COUNT_UNITS:
        return f"{round(value):,} {unit}"
    if unit == ERROR_UNIT:
        return f"{value:.2e}"
    factor, suffix = unit_scale(unit, value)
    return f"{sig3(value / factor)} {suffix}".strip()


def format_delta(delta: float, unit: str) -> str:
    """A signed difference in the value's unit: ``+1.50 GiB``, ``-12 aten ops``, ``+0.310 ms``."""
    sign = "-" if delta < 0 else "+"
    return sign + format_value(abs(delta), unit)


def format_amount(value: float | None, unit: str) -> str:
    """A value whose unit its label names: counts bare (``1,658``), the rest as :func:`format_value`."""
    if value is not None and unit in COUNT_UNITS:
        return f"{round(value):,}"
    return format_value(value, unit)


class ValueFormatter:
    """:func:`format_value` with the unit prefix and decimals fixed once for a whole series.

    A chart's read-outs then share one suffix and one number of decimals ("52.2 ms", "78.3 ms"),
    and formatting 200,000 points costs one f-string each.
    """

    def __init__(self, unit: str, reference: float) -> None:
        self.factor, self.suffix = unit_scale(unit, reference)
        scaled = abs(reference) / self.factor if reference else 1.0
        self.decimals = max(0, 2 - math.floor(math.log10(scaled))) if scaled > 0 else 2

    def number(self, value: float | None) -> str:
        if value is not None and self.suffix == ERROR_UNIT:
            return f"{value:.2e}"
        return MISSING if value is None else f"{value / self.factor:.{self.decimals}f}"

    def __call__(self, value: float | None) -> str:
        if value is not None and self.suffix == ERROR_UNIT:
            return f"{value:.2e}"
        return MISSING if value is None else f"{value / self.factor:.{self.decimals}f} {self.suffix}".rstrip()


def format_p(p: float) -> str:
    """A p-value as every rendering and every reason text shows it: ``3e-6``, ``0.012``, ``0.5``.

    One formatter (issue 30): the reason of an item and the p column beside it print the same
    string for the same number.
    """
    if p >= 0.001:
        return f"{p:.2g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"
