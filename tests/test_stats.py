"""perfguard.stats against definitions: scipy, brute force and a plain Monte Carlo bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from perfguard import stats
from perfguard.stats import bootstrap


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


def test_mann_whitney_is_one_sided_in_the_direction_of_worse() -> None:
    rng = np.random.default_rng(0)
    base = rng.lognormal(0.0, 0.05, 40)
    slower = base * 1.3
    assert stats.mann_whitney_worse(base, slower, "lower") < 1e-6
    assert stats.mann_whitney_worse(slower, base, "lower") > 0.99
    # higher is better: a smaller head value is worse
    assert stats.mann_whitney_worse(slower, base, "higher") < 1e-6
    expected = sps.mannwhitneyu(slower, base, alternative="greater").pvalue
    assert stats.mann_whitney_worse(base, slower) == pytest.approx(expected)


def test_mann_whitney_of_identical_or_empty_samples_is_one() -> None:
    assert stats.mann_whitney_worse([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0
    assert stats.mann_whitney_worse([], [1.0]) == 1.0


def test_batched_mann_whitney_equals_one_call_per_pair() -> None:
    rng = np.random.default_rng(1)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    dirs: list[stats.Direction] = []
    for i in range(30):
        n_b, n_h = (20, 20) if i % 3 else (7, 11)
        pairs.append((rng.normal(10, 1, n_b), rng.normal(10 + (i % 5) * 0.3, 1, n_h)))
        dirs.append("lower" if i % 2 else "higher")
    pairs.append((np.array([]), np.array([1.0])))
    dirs.append("lower")
    batched = stats.mann_whitney_worse_many(pairs, dirs)
    single = [stats.mann_whitney_worse(b, h, d) for (b, h), d in zip(pairs, dirs, strict=True)]  # type: ignore[arg-type]
    np.testing.assert_allclose(batched, single, rtol=1e-12)


def _holm_by_definition(p: list[float]) -> list[float]:
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=0, max_size=40))
@settings(max_examples=200, deadline=None)
def test_holm_matches_its_definition(p: list[float]) -> None:
    np.testing.assert_allclose(stats.holm(p), _holm_by_definition(p), rtol=0, atol=1e-15)
    adjusted = stats.holm(p)
    assert all(a >= raw for a, raw in zip(adjusted, p, strict=True))


def test_holm_known_values_and_nan() -> None:
    np.testing.assert_allclose(stats.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(stats.holm([np.nan, 0.01]), [1.0, 0.02])


def test_hodges_lehmann_ratio() -> None:
    base = np.array([1.0, 1.1, 0.9, 1.05])
    assert stats.hodges_lehmann_ratio(base, base * 2.0) == pytest.approx(2.0)
    assert stats.hodges_lehmann_ratio(base * 2.0, base, "higher") == pytest.approx(2.0)
    assert math.isnan(stats.hodges_lehmann_ratio([0.0, 1.0], [1.0]))


# --- hierarchical bootstrap --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n"),
    [(1, 25), (1, 120), (3, 20), (3, 70), (5, 30), (2, 150), (7, 24)],
)
def test_exact_law_bootstrap_matches_monte_carlo(k: int, n: int) -> None:
    """The cheap exact-law path gives the distribution a brute-force bootstrap converges to."""
    rng = np.random.default_rng(k * 1000 + n)
    rounds = [np.round(r, 4) for r in lognormal_rounds(rng, k, n)]  # ties, as real timers give
    rounds[0] = rounds[0][: n - 3]  # unequal round sizes
    side = stats.Samples.of(rounds)
    reference = bootstrap._bootstrap_medians_mc(side.rounds, 10_000, np.random.default_rng(7))
    u = (np.arange(10_000) + 0.5) / 10_000
    exact = bootstrap._bootstrap_median_draws([side], u[None, :], [[1]])[0]
    q = [0.025, 0.1, 0.5, 0.9, 0.975]
    ref_q, exact_q = np.quantile(reference, q), np.quantile(exact, q)
    width = ref_q[-1] - ref_q[0]
    assert np.max(np.abs(ref_q - exact_q)) < 0.12 * width


def test_small_rounds_use_monte_carlo_and_still_give_an_interval() -> None:
    lo, hi = stats.bootstrap_ratio_ci([[1.0, 1.1, 0.9]], [[2.0, 2.2, 1.8]])
    assert 1.6 <= lo <= 2.0 <= hi <= 2.5


def test_interval_is_reproducible_and_independent_of_the_batch() -> None:
    rng = np.random.default_rng(5)
    shapes = [
        (3, 80, 1.0),
        (3, 80, 1.3),
        (3, 80, 2.0),
        (7, 30, 1.1),
        (1, 30, 1.2),
        (2, 8, 1.0),
        (3, 120, 0.8),
    ]
    of = stats.Samples.of
    pairs = [
        (of(lognormal_rounds(rng, k, n)), of(lognormal_rounds(rng, k, n, level=f))) for k, n, f in shapes
    ]
    seeds = list(range(11, 11 + len(pairs)))
    together = stats.bootstrap_ratio_cis(pairs, seeds=seeds)
    alone = [stats.bootstrap_ratio_ci(b, h, seed=s) for (b, h), s in zip(pairs, seeds, strict=True)]
    np.testing.assert_array_equal(together, np.array(alone))
    reversed_batch = stats.bootstrap_ratio_cis(pairs[::-1], seeds=seeds[::-1])
    np.testing.assert_array_equal(reversed_batch[::-1], together)


def test_interval_contains_a_planted_ratio_and_respects_direction() -> None:
    rng = np.random.default_rng(6)
    base = lognormal_rounds(rng, 3, 100)
    head = lognormal_rounds(rng, 3, 100, level=2.0)
    lo, hi = stats.bootstrap_ratio_ci(base, head)
    assert lo < 2.0 < hi and hi - lo < 0.3
    lo2, hi2 = stats.bootstrap_ratio_ci(head, base, "higher")  # same data read as throughput
    assert lo2 < 2.0 < hi2


def test_interval_widens_when_rounds_disagree() -> None:
    """Hierarchical: the between-round spread is part of the interval, not only the per-call noise."""
    rng = np.random.default_rng(8)
    calm = [rng.lognormal(0.0, 0.05, 100) for _ in range(3)]
    shifted = [r * f for r, f in zip(calm, (0.9, 1.0, 1.12), strict=True)]
    head = [rng.lognormal(0.0, 0.05, 100) for _ in range(3)]
    lo_calm, hi_calm = stats.bootstrap_ratio_ci(calm, head)
    lo_shift, hi_shift = stats.bootstrap_ratio_ci(shifted, head)
    assert (hi_shift - lo_shift) > 3 * (hi_calm - lo_calm)
    # the same samples as one round (a plain bootstrap) hide the round-to-round spread
    lo_flat, hi_flat = stats.bootstrap_ratio_ci([np.concatenate(shifted)], [np.concatenate(head)])
    assert (hi_shift - lo_shift) > 2 * (hi_flat - lo_flat)


def test_degenerate_intervals() -> None:
    assert stats.bootstrap_ratio_ci([[1.0] * 30], [[1.0] * 30]) == (1.0, 1.0)
    assert stats.bootstrap_ratio_ci([[2.0]], [[3.0]]) == (1.5, 1.5)
    lo, hi = stats.bootstrap_ratio_ci([[0.0, 0.0, 1.0]], [[1.0, 1.0, 1.0]])  # zeros: x/0 = inf
    assert lo >= 1.0 and hi == math.inf
    with pytest.raises(ValueError, match="no samples"):
        stats.bootstrap_ratio_ci([], [[1.0]])


def test_bootstrap_arguments_are_checked() -> None:
    side = stats.Samples.of([[1.0, 2.0]])
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_ratio_cis([(side, side)], confidence=1.0)
    with pytest.raises(ValueError, match="one seed"):
        stats.bootstrap_ratio_cis([(side, side)], seeds=[1, 2])
    assert stats.bootstrap_ratio_cis([]).shape == (0, 2)


def test_interval_coverage_of_an_aa_comparison_is_near_nominal() -> None:
    """Over many A/A comparisons with round-level noise, the 95% interval covers 1 most of the time.

    With k rounds, resampling rounds under-states their spread by (k-1)/k (a known bias of the
    cluster bootstrap with few clusters): 5 rounds a side reach ~94%, 3 rounds ~90%.  The rule
    leans on the threshold, not on the interval alone (docs/verdicts.md).
    """
    rng = np.random.default_rng(9)
    pairs = [
        (
            stats.Samples.of(lognormal_rounds(rng, 5, 40, round_=0.04)),
            stats.Samples.of(lognormal_rounds(rng, 5, 40, round_=0.04)),
        )
        for _ in range(300)
    ]
    ci = stats.bootstrap_ratio_cis(pairs, resamples=1000)
    coverage = np.mean((ci[:, 0] <= 1.0) & (ci[:, 1] >= 1.0))
    assert 0.82 <= coverage <= 0.99
