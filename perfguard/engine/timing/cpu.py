"""The CPU timer: process CPU time per call, one intra-op thread (``method = "cpu-time"``).

A shared 2-core CI machine steals wall time from a benchmark, not CPU time, so CPU time is the
number that stays put when the machine is busy; the wall-clock median is kept as information.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from perfguard.engine.timing.ranks import agree
from perfguard.engine.timing.samples import Timing, gc_paused
from perfguard.engine.timing.settings import TimerSettings


def _sample_count(per_call_s: float, s: TimerSettings) -> int:
    """CPU samples for one round: enough for ``min_sample_s`` of work, within the settings' bounds."""
    if per_call_s <= 0 or not math.isfinite(per_call_s):
        return s.max_samples
    wanted = math.ceil(s.min_sample_s / per_call_s)
    capped = math.floor(s.max_sample_s / per_call_s)
    return int(max(s.min_samples, min(s.max_samples, wanted, max(capped, s.min_samples))))


def time_cpu(fn: Callable[[], Any], s: TimerSettings) -> Timing:
    """Warm-up for ``s.warmup_s``, then a fixed number of samples (the same count on every rank)."""
    started = time.perf_counter()
    calls = 0
    while agree(float(calls < s.min_warmup_calls or time.perf_counter() - started < s.warmup_s)) > 0:
        fn()
        calls += 1
    warm_wall = time.perf_counter() - started
    per_call = agree(warm_wall / max(calls, 1))
    n = int(agree(_sample_count(per_call, s), "min"))
    samples: list[float] = []
    walls: list[float] = []
    with gc_paused():
        for _ in range(n):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            c1, w1 = time.process_time(), time.perf_counter()
            samples.append(c1 - c0)
            walls.append(w1 - w0)
    return Timing(
        samples,
        "cpu-time",
        {
            "warmup_s": warm_wall,
            "warmup_calls": calls,
            "wall_median": statistics.median(walls),
            "cpu_threads": torch.get_num_threads(),
        },
    )
