"""Which way is worse, and the ratio of two sides oriented so that R > 1 means worse.

``head / base`` for a metric where lower is better (time, memory), ``base / head`` where higher
is better (tokens/s); 0/0 is 1 (nothing changed) and x/0 is inf, so a zero never raises.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from perfguard.stats.samples import FloatArray

Direction = Literal["lower", "higher"]


def safe_ratio(num: ArrayLike, den: ArrayLike) -> FloatArray:
    """num / den with 0/0 = 1 (nothing changed) and x/0 = inf, elementwise."""
    n = np.asarray(num, dtype=np.float64)
    d = np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = n / d
    return np.where((n == 0) & (d == 0), 1.0, r)


def check_direction(direction: str) -> None:
    """Refuse anything but "lower" / "higher" (a typo must not silently read as one of them)."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', not {direction!r}")


def oriented_ratio(base: float, head: float, direction: Direction) -> float:
    """R such that R > 1 means head is worse: head/base if lower is better, else base/head.

    0/0 is 1 (both zero: nothing changed); x/0 is inf.  NaN in, NaN out.
    """
    check_direction(direction)
    num, den = (head, base) if direction == "lower" else (base, head)
    return float(safe_ratio(num, den))
