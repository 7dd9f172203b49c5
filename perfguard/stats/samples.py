"""One side of a comparison: its rounds of samples, cleaned and sorted once, and how noisy it is.

A *side* (the baseline or the head of one benchmark x params) is a list of *rounds*; a round is
the per-call samples measured in one fresh process (see :mod:`perfguard.stats`, "Data model").
:class:`Samples` keeps the sorted arrays that the median, the quartiles and the round medians (what
the test over rounds, :mod:`~perfguard.stats.rounds_test`, reads) come from;
:class:`Noise` is what the noise gate of the rule reads (``docs/verdicts.md``, "Noise measures").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def _quantile_sorted(s: FloatArray, q: float) -> float:
    """numpy's default ('linear') quantile of an already sorted, non-empty array."""
    pos = q * (s.size - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, s.size - 1)
    return float(s[lo] + (pos - lo) * (s[hi] - s[lo]))


@dataclass(frozen=True)
class Noise:
    """How noisy one side is.

    ``iqr_ratio``: the largest within-round (q75 - q25) / median (torch.utils.benchmark warns
    above 0.10); 0 when no round has two samples.  ``round_cv``: coefficient of variation
    (sample std / mean) of the round medians, the process-to-process noise; ``None`` with fewer
    than two rounds, where it cannot be seen.  ``round_spread``: largest / smallest round median
    (1.0 with fewer than two rounds): how far apart fresh processes of the *same code* landed.
    """

    iqr_ratio: float
    round_cv: float | None
    round_spread: float = 1.0

    @staticmethod
    def worst(a: Noise, b: Noise) -> Noise:
        """The larger of each measure over two sides (``round_cv`` None only if both are)."""
        cvs = [c for c in (a.round_cv, b.round_cv) if c is not None]
        return Noise(
            max(a.iqr_ratio, b.iqr_ratio), max(cvs) if cvs else None, max(a.round_spread, b.round_spread)
        )


@dataclass(frozen=True, eq=False)
class Samples:
    """One side of a comparison: finite samples per round, each round sorted, and the pool.

    Build it with :meth:`Samples.of`, which drops non-finite samples (asv writes NaN for a sample it
    could not take) and rounds left empty.  ``Samples.of([])`` is a side with no samples
    (``n == 0``, ``median`` NaN).
    """

    rounds: tuple[FloatArray, ...]
    pooled: FloatArray  # all samples, sorted
    median: float  # median of the pooled samples (NaN if none)
    round_medians: tuple[float, ...]
    noise: Noise

    @classmethod
    def of(cls, rounds: Iterable[ArrayLike]) -> Samples:
        clean: list[FloatArray] = []
        for r in rounds:
            a = np.asarray(r, dtype=np.float64).ravel()
            a = np.sort(a[np.isfinite(a)])
            if a.size:
                clean.append(a)
        pooled = np.sort(np.concatenate(clean)) if clean else np.empty(0)
        median = _quantile_sorted(pooled, 0.5) if pooled.size else math.nan
        medians = tuple(_quantile_sorted(r, 0.5) for r in clean)
        return cls(tuple(clean), pooled, median, medians, _noise(clean, medians))

    @property
    def n(self) -> int:
        """Number of samples over all rounds."""
        return int(self.pooled.size)

    @property
    def k(self) -> int:
        """Number of rounds that have samples."""
        return len(self.rounds)


def _ratio(num: float, den: float) -> float:
    """Scalar num / den with 0/0 = 1 and x/0 = inf (see :func:`perfguard.stats.ratio.safe_ratio`)."""
    if den == 0:
        return 1.0 if num == 0 else math.copysign(math.inf, num)
    return num / den


def _noise(rounds: Sequence[FloatArray], medians: Sequence[float]) -> Noise:
    iqr = 0.0
    for r, med in zip(rounds, medians, strict=True):
        if r.size >= 2:
            iqr = max(iqr, _ratio(_quantile_sorted(r, 0.75) - _quantile_sorted(r, 0.25), abs(med)))
    cv: float | None = None
    spread = 1.0
    if len(medians) >= 2:
        mean = math.fsum(medians) / len(medians)
        var = math.fsum((m - mean) ** 2 for m in medians) / (len(medians) - 1)
        cv = _ratio(math.sqrt(var), abs(mean))
        spread = _ratio(max(medians), min(medians)) if min(medians) > 0 else math.inf
    return Noise(iqr_ratio=iqr, round_cv=cv, round_spread=spread)


def noise(rounds: Iterable[ArrayLike]) -> Noise:
    """Noise measures of one side given as rounds of samples (see :class:`Noise`)."""
    return Samples.of(rounds).noise
