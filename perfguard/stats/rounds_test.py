"""Significance and interval over rounds: the unit of independence (issue 30).

Samples inside one round (one fresh process) share its clock, thermal and load state, so a test
over pooled samples treats hundreds of dependent values as independent: an improvement "p=4e-61"
came from two sessions run under different load, and a consistent x1.78 slowdown was waved through
because the same code's processes landed 1.48x apart.  Rounds are the independent units, so a
timing is tested on its round medians, in logarithms (a ratio of medians is a difference of logs;
time is multiplicative):

* the estimate is log R, the oriented difference of the two sides' mean log round medians (R is
  the ratio of the geometric means of the round medians);
* its standard error is the between-round one, ``sqrt(s_b^2 / k_b + s_h^2 / k_h)`` with ``s`` the
  standard deviation of a side's log round medians: everything that moves a round's median
  (within-round sampling, process-to-process noise, load) is in it;
* Welch's degrees of freedom (the two sides' spreads differ: a busier session, a noisier head);
* on a re-measurement, the spread of the same side's rounds in the first measurement pooled into
  each side's variance (how far apart fresh processes of the same code land is a property of the
  benchmark on this machine, seen in both stages);
* the interval ``R * exp(+-q * se)`` with ``q`` Student's quantile, and the two-sided p of
  ``|log R| / se`` (Welch's t-test): the p-value and the interval are the same test, so
  p < 1 - confidence exactly when the interval excludes 1.

Student's t comes from ``scipy.special`` (``stdtr``, ``stdtrit``): the functions ``scipy.stats.t``'s
``sf`` and ``ppf`` call, without importing ``scipy.stats`` (~0.6 CPU s more in every ``perfguard
check``), and imported at the first test that needs them (~0.3 CPU s more in a process that only
reads stored verdicts or compares exact counts; docs/perf/test_suite.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfguard.stats.ratio import Direction, check_direction


@dataclass(frozen=True)
class RoundsTest:
    """The test of one comparison over its rounds (see the module docstring).

    ``log_ratio``: log R, oriented (> 0 = worse).  ``se``: its between-round standard error (0 when
    every round median repeats exactly on both sides).  ``df``: Welch's degrees of freedom.
    ``p``: two-sided p-value of "no change" (1.0 when the test cannot be made).  ``testable``:
    False with fewer than two rounds on a side (one process shows no process-to-process variance)
    or a non-positive median: then there is no interval and p is 1.
    """

    log_ratio: float
    se: float
    df: float
    p: float
    testable: bool

    def interval(self, confidence: float) -> tuple[float, float]:
        """The ``confidence`` interval of R (oriented), NaN when untestable."""
        if not self.testable:
            return (math.nan, math.nan)
        if self.se == 0:
            r = math.exp(self.log_ratio)
            return (r, r)
        from scipy.special import stdtrit

        q = float(stdtrit(self.df, 0.5 + confidence / 2.0))  # Student's quantile (t.ppf)
        return (math.exp(self.log_ratio - q * self.se), math.exp(self.log_ratio + q * self.se))


UNTESTABLE = RoundsTest(log_ratio=math.nan, se=math.nan, df=math.nan, p=1.0, testable=False)


def _log_variance(medians: np.ndarray, ref: float, prior: Sequence[float]) -> tuple[float, int]:
    """The variance of one side's log round medians and its degrees of freedom, pooled with the
    same side's rounds of an earlier measurement (``prior``, centred on their own mean: another
    session may sit higher or lower as a whole, but its processes scatter as these do)."""
    groups = [np.log(medians / ref)]
    p = np.asarray(prior, dtype=np.float64)
    if p.size >= 2 and np.all(p > 0):
        groups.append(np.log(p / ref))
    squares = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
    df = sum(g.size - 1 for g in groups)
    return squares / df, df


def rounds_test(
    base_medians: Sequence[float],
    head_medians: Sequence[float],
    direction: Direction = "lower",
    *,
    prior_base: Sequence[float] = (),
    prior_head: Sequence[float] = (),
) -> RoundsTest:
    """The test of head against base over their round medians (> 1 = worse, per ``direction``).

    The estimate is the ratio of the geometric means of the round medians, so the estimate and its
    standard error come from the same numbers (a pooled median can jump between the two speeds of
    a bimodal benchmark when one round changes sides, far beyond what the rounds' spread says).
    ``prior_base`` / ``prior_head``: each side's round medians from an earlier measurement of the
    same code (stage 1, when this is the re-measurement): how far apart its fresh processes landed
    is pooled into the variance (never into the estimate), so a re-measurement whose few rounds
    happen to agree cannot hide the spread stage 1 saw.  Untestable (:data:`UNTESTABLE`) with
    fewer than two rounds on a side or a non-positive round median.
    """
    check_direction(direction)
    b = np.asarray(base_medians, dtype=np.float64)
    h = np.asarray(head_medians, dtype=np.float64)
    if b.size < 2 or h.size < 2 or not (np.all(b > 0) and np.all(h > 0)):
        return UNTESTABLE
    ref = float(b[0])  # logs of ratios to one value: the same numbers in any unit
    var_b, df_b = _log_variance(b, ref, prior_base)
    var_h, df_h = _log_variance(h, ref, prior_head)
    vb, vh = var_b / b.size, var_h / h.size
    worse = float(np.mean(np.log(h / ref)) - np.mean(np.log(b / ref)))
    log_ratio = worse if direction == "lower" else -worse
    se = math.sqrt(vb + vh)
    if se == 0:  # every round repeats exactly: the ratio is known as well as it can be
        return RoundsTest(log_ratio, 0.0, math.inf, 1.0 if log_ratio == 0 else 0.0, True)
    df = (vb + vh) ** 2 / (vb**2 / df_b + vh**2 / df_h)
    from scipy.special import stdtr

    p = float(2.0 * stdtr(df, -abs(log_ratio) / se))  # two-sided (t.sf(|t|) = stdtr(df, -|t|))
    return RoundsTest(log_ratio, se, df, min(1.0, p) if math.isfinite(p) else 1.0, True)
