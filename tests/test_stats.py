"""perfguard.stats against definitions: numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from perfguard import stats


def lognormal_rounds(rng: np.random.Generator, k: int, n: int, *, level: float = 1.0, call=0.1, round_=0.03):
    return [level * rng.lognormal(rng.normal(0.0, round_), call, n) for _ in range(k)]


# --- one side ------------------------------------------------------------------------------


def test_side_drops_non_finite_samples_and_empty_rounds() -> None:
    side = stats.Samples.of([[3.0, np.nan, 1.0, 2.0], [np.inf, np.nan], [], [4.0]])
    assert side.k == 2
    assert side.n == 4
    assert [r.tolist() for r in side.rounds] == [[1.0, 2.0, 3.0], [4.0]]
    assert side.median == 2.5
    assert side.round_medians == (2.0, 4.0)


def test_empty_side_has_nan_median() -> None:
    side = stats.Samples.of([])
    assert side.n == 0 and math.isnan(side.median)
    assert side.noise == stats.Noise(0.0, None)


def test_noise_measures_match_numpy() -> None:
    rng = np.random.default_rng(3)
    rounds = [rng.lognormal(0.0, s, 57) for s in (0.02, 0.2, 0.05)]
    noise = stats.noise(rounds)
    iqrs = [(np.percentile(r, 75) - np.percentile(r, 25)) / np.median(r) for r in rounds]
    assert noise.iqr_ratio == pytest.approx(max(iqrs), rel=1e-12)
    medians = np.array([np.median(r) for r in rounds])
    assert noise.round_cv == pytest.approx(np.std(medians, ddof=1) / np.mean(medians), rel=1e-12)


def test_noise_of_one_round_has_no_round_cv_and_single_samples_no_iqr() -> None:
    assert stats.noise([[1.0, 2.0, 3.0, 4.0]]).round_cv is None
    assert stats.noise([[5.0], [5.0]]) == stats.Noise(0.0, 0.0)


def test_worst_noise_takes_the_larger_of_each_measure() -> None:
    a, b = stats.Noise(0.1, None), stats.Noise(0.05, 0.2)
    assert stats.Noise.worst(a, b) == stats.Noise(0.1, 0.2)
    assert stats.Noise.worst(a, a).round_cv is None


# --- ratio, rank test, Holm ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "head", "direction", "expected"),
    [
        (1.0, 2.0, "lower", 2.0),  # slower
        (2.0, 1.0, "higher", 2.0),  # half the throughput
        (0.0, 0.0, "lower", 1.0),
        (0.0, 3.0, "lower", math.inf),
        (4.0, 1.0, "lower", 0.25),
    ],
)
def test_oriented_ratio(base: float, head: float, direction: str, expected: float) -> None:
    assert stats.oriented_ratio(base, head, direction) == expected  # type: ignore[arg-type]


def test_unknown_direction_is_an_error() -> None:
    with pytest.raises(ValueError, match="direction"):
        stats.oriented_ratio(1.0, 1.0, "up")  # type: ignore[arg-type]


# --- the test over rounds ----------------------------------------------------------------------


def test_rounds_test_is_welchs_t_on_log_round_medians() -> None:
    """The estimate is the ratio of the geometric means of the round medians, the p-value scipy's
    two-sided Welch test on their logs, the interval its confidence interval, exponentiated."""
    base = np.exp([-0.1, 0.03, 0.1, 0.05, -0.05])
    head = 1.3 * np.exp([-0.2, 0.0, 0.25])
    test = stats.rounds_test(base, head)
    welch = sps.ttest_ind(np.log(head), np.log(base), equal_var=False)
    assert test.log_ratio == pytest.approx(np.mean(np.log(head)) - np.mean(np.log(base)))
    assert stats.rounds_test(head, base, "higher").log_ratio == pytest.approx(test.log_ratio)
    assert test.p == pytest.approx(welch.pvalue)
    low, high = welch.confidence_interval(0.95)
    assert test.interval(0.95) == pytest.approx((math.exp(low), math.exp(high)))
    assert test.df == pytest.approx(welch.df)


def test_rounds_test_p_and_interval_agree() -> None:
    """p < 1 - confidence exactly when the interval excludes 1: one test, two readings."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        base, head = rng.lognormal(0, 0.1, 4), rng.lognormal(rng.normal(0, 0.15), 0.1, 3)
        test = stats.rounds_test(base, head)
        low, high = test.interval(0.95)
        assert (test.p < 0.05) == (low > 1 or high < 1)
        assert low <= math.exp(test.log_ratio) <= high


def test_rounds_test_needs_two_rounds_a_side_and_positive_medians() -> None:
    assert stats.rounds_test([1.0], [2.0, 2.1]) is stats.UNTESTABLE
    assert stats.rounds_test([1.0, 0.0], [2.0, 2.1]) is stats.UNTESTABLE
    with pytest.raises(ValueError, match="direction"):
        stats.rounds_test([1.0, 1.1], [2.0, 2.1], "up")  # type: ignore[arg-type]
    assert stats.UNTESTABLE.p == 1.0 and all(map(math.isnan, stats.UNTESTABLE.interval(0.95)))


def test_rounds_that_repeat_exactly_know_the_ratio() -> None:
    same = stats.rounds_test([1.0, 1.0], [1.0, 1.0, 1.0])
    assert (same.p, same.interval(0.95)) == (1.0, (1.0, 1.0))
    doubled = stats.rounds_test([1.0, 1.0], [2.0, 2.0])
    assert (doubled.p, doubled.interval(0.95)) == (0.0, (2.0, 2.0))


def test_a_prior_measurements_spread_widens_the_interval_not_the_estimate() -> None:
    base, head = [1.0, 1.01, 0.99, 1.005, 0.995], [1.5, 1.51, 1.49, 1.505, 1.495]
    alone = stats.rounds_test(base, head)
    pooled = stats.rounds_test(base, head, prior_base=[1.0, 2.2, 1.0], prior_head=[2.2, 1.0, 2.2])
    assert pooled.log_ratio == alone.log_ratio
    assert pooled.se > 5 * alone.se and pooled.p > alone.p
    # a prior of one round carries no spread
    assert stats.rounds_test(base, head, prior_base=[9.0]) == alone
