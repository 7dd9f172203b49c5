"""Properties of the verdict rule that must hold for any data (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.compare import Measurement, Verdict, compare_sides
from perfguard.config import Config

CONFIG = Config()

sides = st.tuples(
    st.integers(min_value=1, max_value=4),  # rounds
    st.integers(min_value=1, max_value=40),  # samples a round
    st.floats(min_value=0.3, max_value=3.0),  # slowdown of head
    st.floats(min_value=0.0, max_value=0.3),  # per-call sigma
    st.floats(min_value=0.0, max_value=0.2),  # per-round sigma
    st.integers(min_value=0, max_value=2**31),  # seed
)


def draw(spec: tuple[int, int, float, float, float, int], level: float, scale: float = 1.0) -> Measurement:
    k, n, _, call, round_, seed = spec
    rng = np.random.default_rng(seed)
    rounds = [scale * 1e-3 * level * rng.lognormal(rng.normal(0, round_), call, n) for _ in range(k)]
    return Measurement("Forward.track_time", {"impl": "x"}, rounds=rounds)


@given(sides, sides)
@settings(max_examples=60, deadline=None)
def test_verdict_follows_its_definition(a: tuple, b: tuple) -> None:
    """docs/verdicts.md, "The rule for a timing": one rule both ways, over rounds."""
    base, head = draw(a, 1.0), draw(b, b[2])
    item = compare_sides(base, head, CONFIG)
    hi = 1 + CONFIG.threshold
    assert item.ratio is not None
    if min(a[0], b[0]) < 2:  # one round a side: nothing to test over
        assert item.p_value is None and item.ci_low is None and item.ci_high is None
        beyond = item.ratio > hi or item.ratio < 1 / hi
        assert item.verdict is (Verdict.UNSTABLE if beyond else Verdict.UNCHANGED)
        return
    assert item.ci_low is not None and item.ci_high is not None and item.p_value is not None
    assert item.ci_low <= item.ratio <= item.ci_high
    noisy = (item.noise is not None and item.noise > CONFIG.max_iqr_ratio) or (
        item.round_cv is not None and item.round_cv > CONFIG.max_round_cv
    )
    if item.verdict is Verdict.REGRESSION:
        assert item.ratio > hi and item.p_value < CONFIG.alpha
        assert item.ci_low > 1 + CONFIG.threshold / 2
        assert not noisy or item.ci_low > hi
    elif item.verdict is Verdict.IMPROVEMENT:  # the mirror image
        assert item.ratio < 1 / hi and item.p_value < CONFIG.alpha
        assert item.ci_high < 1 / (1 + CONFIG.threshold / 2)
        assert not noisy or item.ci_high < 1 / hi
    elif item.verdict is Verdict.UNCHANGED:  # the interval excludes a move beyond the threshold
        assert item.ci_high <= hi or (not noisy and item.ratio <= hi)
        assert item.ci_low >= 1 / hi or (not noisy and item.ratio >= 1 / hi)
    else:  # unstable: the interval reaches beyond the threshold one way or the other
        assert item.verdict is Verdict.UNSTABLE and (item.ci_high > hi or item.ci_low < 1 / hi)
    assert item.fails == (item.verdict is Verdict.REGRESSION)


@given(sides, sides, st.sampled_from([0.5, 2.0, 1024.0]))
@settings(max_examples=40, deadline=None)
def test_verdict_does_not_depend_on_the_unit(a: tuple, b: tuple, scale: float) -> None:
    """Seconds or milliseconds (an exact power-of-two scale): the same verdict and numbers."""
    one = compare_sides(draw(a, 1.0), draw(b, b[2]), CONFIG)
    other = compare_sides(draw(a, 1.0, scale), draw(b, b[2], scale), CONFIG)
    assert other.verdict is one.verdict
    assert (other.ratio, other.ci_low, other.ci_high, other.p_value) == (
        one.ratio,
        one.ci_low,
        one.ci_high,
        one.p_value,
    )
