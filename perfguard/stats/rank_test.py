"""The rank test of a change and what goes with it: one-sided Mann-Whitney p-values, Holm's
adjustment over a family of them, and the Hodges-Lehmann ratio estimate (information only).

The p-value is a *necessary* condition next to the effect-size threshold, never a verdict on its
own (per-call samples are autocorrelated: ``docs/verdicts.md``, "p").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from perfguard.stats.ratio import Direction, check_direction
from perfguard.stats.samples import FloatArray


def _worse_alternative(direction: str) -> Literal["greater", "less"]:
    """scipy's ``alternative`` for "the first argument (head) is worse than the second (base)"."""
    check_direction(direction)
    return "greater" if direction == "lower" else "less"


def mann_whitney_worse(base: ArrayLike, head: ArrayLike, direction: Direction = "lower") -> float:
    """One-sided Mann-Whitney U p-value of "head is worse than base" (stochastically).

    Uses :func:`scipy.stats.mannwhitneyu` (exact for small samples without ties, normal
    approximation with tie correction otherwise).  Returns 1.0 when either side is empty or the
    test is undefined (all values identical): no evidence of a change.

    Per-call samples are autocorrelated, so the p-value is anti-conservative (an A/A comparison
    of hundreds of samples reached p = 0.0015; gpu_timing.md §6.2): it is a *necessary* condition
    next to the effect-size threshold, never a verdict on its own.
    """
    h = np.asarray(head, dtype=np.float64)
    b = np.asarray(base, dtype=np.float64)
    if h.size == 0 or b.size == 0:
        return 1.0
    p = float(stats.mannwhitneyu(h, b, alternative=_worse_alternative(direction)).pvalue)
    return p if math.isfinite(p) else 1.0


def mann_whitney_worse_many(
    pairs: Sequence[tuple[FloatArray, FloatArray]], directions: Sequence[Direction] | Direction = "lower"
) -> FloatArray:
    """:func:`mann_whitney_worse` for many (base, head) pairs, one scipy call per shape.

    ``scipy.stats.mannwhitneyu`` costs ~0.5 ms a call but vectorises along an axis, so pairs with
    the same sample counts and direction (the usual case: a suite's benchmarks take the same
    number of samples) are stacked and tested in one call.
    """
    n = len(pairs)
    dirs: list[Direction] = [directions] * n if isinstance(directions, str) else list(directions)
    if len(dirs) != n:
        raise ValueError(f"{n} pairs but {len(dirs)} directions")
    out = np.ones(n)
    groups: dict[tuple[int, int, Direction], list[int]] = {}
    for i, (b, h) in enumerate(pairs):
        if len(b) and len(h):
            groups.setdefault((len(b), len(h), dirs[i]), []).append(i)
    for (_, _, d), idx in groups.items():
        if len(idx) == 1:
            b, h = pairs[idx[0]]
            out[idx[0]] = mann_whitney_worse(b, h, d)
            continue
        bb = np.stack([np.asarray(pairs[i][0], dtype=np.float64) for i in idx])
        hh = np.stack([np.asarray(pairs[i][1], dtype=np.float64) for i in idx])
        p = stats.mannwhitneyu(hh, bb, alternative=_worse_alternative(d), axis=1).pvalue
        out[idx] = np.where(np.isfinite(p), p, 1.0)
    return out


def holm(pvalues: ArrayLike) -> FloatArray:
    """Holm's step-down adjustment: rejecting ``adjusted < alpha`` keeps the family-wise error <= alpha.

    Why Holm and not Benjamini-Hochberg: one false "regression" fails the whole pull request, so
    the error that matters is the chance of *any* false alarm in the suite (family-wise), which
    Holm controls and BH (the false discovery *rate*) does not.  Holm is uniformly more powerful
    than Bonferroni, and a real 20% regression measured over ~100 samples a side has p ~ 1e-20, so
    it costs no power where it matters.  NaN p-values count as 1.
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    p = np.where(np.isfinite(p), p, 1.0)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def _thin(sorted_values: FloatArray, at_most: int) -> FloatArray:
    """At most ``at_most`` evenly spaced order statistics of a sorted sample (its quantiles)."""
    if sorted_values.size <= at_most:
        return sorted_values
    return sorted_values[np.linspace(0, sorted_values.size - 1, at_most).round().astype(np.int64)]


def hodges_lehmann_ratio(
    base: ArrayLike, head: ArrayLike, direction: Direction = "lower", *, at_most: int = 200
) -> float:
    """exp(median of all pairwise log(head) - log(base)), oriented (> 1 = worse).

    The rank-based shift estimate that goes with the Mann-Whitney test (gpu_timing.md §6.2).  It
    takes all n_base x n_head differences, so a side with more than ``at_most`` samples is first
    thinned to ``at_most`` evenly spaced quantiles (the estimate moves by well under 0.1% for
    timing data; it is information, not part of the rule).  NaN when a side is empty or not
    strictly positive.
    """
    check_direction(direction)
    b = np.sort(np.asarray(base, dtype=np.float64).ravel())
    h = np.sort(np.asarray(head, dtype=np.float64).ravel())
    if b.size == 0 or h.size == 0 or b[0] <= 0 or h[0] <= 0:
        return math.nan
    b, h = _thin(b, at_most), _thin(h, at_most)
    d = float(np.median(np.log(h)[:, None] - np.log(b)[None, :]))
    return math.exp(d if direction == "lower" else -d)
