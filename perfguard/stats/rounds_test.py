"""Significance over rounds: the unit of independence (issue 30).

Samples inside one round (one fresh process) share its clock, thermal and load state, so a test
over pooled samples treats hundreds of dependent values as independent: an improvement "p=4e-61"
came from two sessions run under different load.  Rounds are the independent units, so an
improvement is tested on the round medians: Welch's t-test on their logarithms (a ratio of
medians is a difference of logs; Welch because the two sides' process spreads differ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from perfguard.stats.ratio import Direction, check_direction


def rounds_better(
    base_medians: Sequence[float], head_medians: Sequence[float], direction: Direction = "lower"
) -> float:
    """One-sided p of "head is better than base" over the round medians (Welch's t on their logs).

    1.0 (no evidence) with fewer than two rounds on either side, a non-positive median, or round
    medians that do not vary on either side (a timing whose rounds repeat exactly cannot be
    tested this way; its interval decides).
    """
    check_direction(direction)
    b = np.asarray(base_medians, dtype=np.float64)
    h = np.asarray(head_medians, dtype=np.float64)
    if b.size < 2 or h.size < 2 or not (np.all(b > 0) and np.all(h > 0)):
        return 1.0
    ref = float(b[0])  # logs of ratios to one value: the same p in any unit (a power-of-two scale is exact)
    lb, lh = np.log(b / ref), np.log(h / ref)
    if np.ptp(lb) == 0 or np.ptp(lh) == 0:
        return 1.0
    alternative = "less" if direction == "lower" else "greater"  # head's times lower, or rates higher
    p = float(stats.ttest_ind(lh, lb, equal_var=False, alternative=alternative).pvalue)
    return p if math.isfinite(p) else 1.0
