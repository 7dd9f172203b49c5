"""One round's samples: the :class:`Timing` a timer returns, the distribution-free interval of
their median (the CUDA timer's stopping rule), and garbage collection paused while they are taken.
"""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    """Per-call samples (seconds) of one round, how they were taken, and what was seen meanwhile."""

    samples: list[float]
    method: str  # cuda-graph | cuda-events | cpu-time
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def median_interval(samples: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval of the median from order statistics.

    With ``n`` samples the ranks ``n/2 ± z·sqrt(n)/2`` (normal approximation of the binomial)
    bound the median with the given confidence, whatever the distribution.
    """
    ordered = sorted(samples)
    n = len(ordered)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(ordered), ordered[lo], ordered[hi]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Garbage collection off while samples are taken (as timeit does).

    What the warm-up left behind is young: a collection of the young generations clears it.  A
    full one walks every object of torch's compiler stack (0.27 s each, 14 s of a production round
    on an H100: py-spy, docs/perf/check.md); :func:`perfguard.engine.passes.release` does that once per case.
    """
    enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
