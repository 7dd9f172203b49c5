"""The statistics behind a verdict: ratio of medians, the test over rounds, noise.

Every function here is pure (numbers in, numbers out) and knows nothing about benchmarks,
configuration or the store; :mod:`perfguard.compare` turns these numbers into verdicts.  The
choices follow ``research/gpu_timing.md`` §6 and are explained for users in ``docs/verdicts.md``.

Data model.  One *side* of a comparison (the baseline or the head of one benchmark x params) is a
list of *rounds*; a round is the per-call samples measured in one fresh process.  Rounds matter
because the process is the dominant noise term on a GPU (gpu_timing.md §9-§11: eager medians move
10-140% from one process to the next while the samples inside one process agree within a few %).
:class:`Samples` holds one side cleaned (no NaN/inf) and sorted once, so its median, quartiles and
round medians are computed once.

Orientation.  Every ratio here is oriented so that **R > 1 means worse**: ``head / base`` for a
metric where lower is better (time, memory), ``base / head`` where higher is better (tokens/s).

API
---
``Samples.of(rounds)``                           one side: sorted rounds, pooled samples, median
``oriented_ratio(base, head, direction)``        R (> 1 = worse); 0/0 = 1, x/0 = inf
``rounds_test(base_medians, head_medians, R)``   the test of R over the round medians: p, interval
``noise(rounds)`` / ``Samples.noise``            max within-round IQR/median, CV of round medians

Modules: :mod:`~perfguard.stats.samples` (one side: its rounds, pooled samples, median and
noise), :mod:`~perfguard.stats.ratio` (the direction and the oriented ratio of two sides),
:mod:`~perfguard.stats.rounds_test` (the test of a ratio over rounds: its p-value and interval).
"""

from __future__ import annotations

from perfguard.stats.ratio import Direction, oriented_ratio
from perfguard.stats.rounds_test import UNTESTABLE, RoundsTest, rounds_test
from perfguard.stats.samples import FloatArray, Noise, Samples, noise

__all__ = [
    "UNTESTABLE",
    "Direction",
    "FloatArray",
    "Noise",
    "RoundsTest",
    "Samples",
    "noise",
    "oriented_ratio",
    "rounds_test",
]
