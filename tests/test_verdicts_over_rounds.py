"""Issue 30: timings are decided over rounds, the unit of independence, by one rule both ways.

Stored rounds are constructed (seeded, so every number is fixed) and pushed through the real
comparison, as ``perfguard check`` does it: ``Measurement.from_results`` of the store's records,
stage 1 (``compare_suite``), the interleaved re-measurement of the suspects (``apply_retry``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfguard import stats
from perfguard.compare import Measurement, SuiteComparison, Verdict, apply_retry, compare_suite
from perfguard.config import Config
from perfguard.store.records import ResultRecord

FB = "bench_attention.ForwardBackward.track_time"
FWD = "bench_attention.Forward.track_time"
TOKENS = "bench_attention.Throughput.track_tokens_per_second"
PARAMS = {"impl": "multihead_ring", "seq_len": 1024, "dtype": "float32"}
CONFIG = Config()


def result(benchmark: str, samples: np.ndarray, **kw: object) -> ResultRecord:
    return ResultRecord(
        benchmark=benchmark,
        impl=PARAMS["impl"],
        params=dict(PARAMS),
        metric=str(kw.pop("metric", "time")),
        unit=str(kw.pop("unit", "seconds")),
        direction=str(kw.pop("direction", "lower")),
        gated=bool(kw.pop("gated", True)),
        status="ok",
        samples=[float(x) for x in samples],
        method="cpu-time",
    )


def rounds(
    factor: float, levels: list[float], seed: int, n: int = 60, call: float = 0.12
) -> list[np.ndarray]:
    """Per-call samples of each round: 10 ms x factor x the round's level x log-normal call noise
    (sigma ``call``, within-round IQR/median ~16%: noisy, as on a busy 2-core VM)."""
    rng = np.random.default_rng(seed)
    return [0.01 * factor * level * rng.lognormal(0.0, call, n) for level in levels]


def side(benchmark: str, data: list[np.ndarray]) -> Measurement:
    return Measurement.from_results([result(benchmark, r) for r in data])


def check(factor: float, seed: int, benchmark: str = FB) -> SuiteComparison:
    """Stage 1 on two sessions of 3 rounds whose same-code processes land up to ~1.5x apart (the
    issue's 1.48x), then the re-measurement, 5 + 5 rounds interleaved, as spread."""
    rng = np.random.default_rng([seed, 30])
    level = lambda k: list(np.exp(rng.normal(0.0, 0.15, k)))  # noqa: E731 - round CV ~15%
    first = compare_suite(
        [side(benchmark, rounds(1.0, level(3), seed * 4 + 1))],
        [side(benchmark, rounds(factor, level(3), seed * 4 + 2))],
        CONFIG,
    )
    if not first.suspects:
        return first
    return apply_retry(
        first,
        [side(benchmark, rounds(1.0, level(5), seed * 4 + 3))],
        [side(benchmark, rounds(factor, level(5), seed * 4 + 4))],
        CONFIG,
    )


def test_a_consistent_slowdown_beyond_the_threshold_in_both_stages_fails() -> None:
    """The issue's case: multihead_ring forward+backward at 1K, x1.78 in both measurements, the same
    code's rounds 1.48x apart in the first.  It used to be "unstable; never fails" (the re-measurement
    needed its interval above 1.48 x 1.10); over rounds it is a regression."""
    first = compare_suite(
        [side(FB, rounds(1.0, [1.0, 1.48, 1.2], 1))],
        [side(FB, rounds(1.783, [1.1, 1.0, 1.3], 2))],
        CONFIG,
    )
    [stage1] = first.items
    assert stage1.round_spread is not None and stage1.round_spread > 1.4
    assert first.suspects == (stage1,)
    final = apply_retry(
        first,
        [side(FB, rounds(1.0, [1.0, 1.3, 1.1, 1.25, 1.05], 3))],
        [side(FB, rounds(1.783, [1.15, 1.0, 1.3, 1.05, 1.2], 4))],
        CONFIG,
    )
    [item] = final.items
    assert item.verdict is Verdict.REGRESSION and item.fails and final.exit_code == 1
    assert item.retried and item.ratio == pytest.approx(1.78, rel=0.05)
    assert item.ci_low is not None and item.ci_low > 1.2  # the interval over rounds clears the threshold
    assert item.reason.startswith("confirmed on re-measurement (5+5 rounds): forward+backward time 1.")


def test_the_same_rule_claims_a_consistent_speed_up() -> None:
    final = check(1 / 1.783, seed=7)
    [item] = final.items
    assert item.verdict is Verdict.IMPROVEMENT and item.retried and not item.fails


def test_aa_stays_clean_and_a_planted_2x_is_caught_under_the_same_noise() -> None:
    """20 A/A checks and 20 checks of a 2x slowdown, each side's rounds scattered ~15% (CV) and
    ~16% within a round: no A/A check claims anything, every 2x fails (seeded: fixed outcomes)."""
    aa = [check(1.0, seed).items[0] for seed in range(20)]
    assert [i.verdict for i in aa if i.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)] == []
    planted = [check(2.0, seed).items[0] for seed in range(20)]
    assert sum(i.verdict is Verdict.REGRESSION for i in planted) == 20


def test_every_p_and_interval_shown_is_the_one_the_verdict_used() -> None:
    """The stored p and interval are the test over the round medians, and the reason states them."""
    final = check(2.0, seed=3)
    [item] = final.items
    base, head = item.round_medians
    assert item.first is not None
    again = stats.rounds_test(
        base, head, prior_base=item.first.round_medians[0], prior_head=item.first.round_medians[1]
    )
    assert item.ratio == pytest.approx(math.exp(again.log_ratio))
    assert item.p_value == pytest.approx(again.p)  # a family of one
    assert (item.ci_low, item.ci_high) == pytest.approx(again.interval(CONFIG.confidence))
    assert f"95% CI {item.ci_low:.2f}–{item.ci_high:.2f}, rounds p=" in item.reason


def test_a_derived_row_stores_its_own_p() -> None:
    """tokens/s follows its forward time's verdict, but its p and interval are its own rounds' test,
    adjusted over the family its source was (two gated timings here: x2)."""
    base_fwd = rounds(1.0, [1.0, 1.2, 1.1], 11)
    head_fwd = rounds(2.0, [1.1, 1.0, 1.25], 12)
    tokens = dict(metric="throughput", unit="tokens/s", direction="higher", gated=False)
    # tokens/s from each sample, plus its own noise: its rounds are not the timing's mirror image
    rng = np.random.default_rng(13)
    per_second = lambda data: [1024 / r * rng.lognormal(0, 0.05, r.size) for r in data]  # noqa: E731
    other = dict(PARAMS, impl="dilated")

    def measurements(fwd: list[np.ndarray], seed: int) -> list[Measurement]:
        return [
            Measurement.from_results([result(FWD, r) for r in fwd]),
            Measurement.from_results([result(TOKENS, r, **tokens) for r in per_second(fwd)]),
            Measurement(FWD, other, rounds=rounds(1.0, [1.0, 1.1, 1.05], seed)),
        ]

    items = {(i.impl, i.benchmark): i for i in compare_suite(
        measurements(base_fwd, 14), measurements(head_fwd, 15), CONFIG
    ).items}  # fmt: skip
    source = items[("multihead_ring", FWD)]
    derived = items[("multihead_ring", TOKENS)]
    assert derived.verdict is source.verdict
    own = stats.rounds_test(*derived.round_medians, "higher")
    assert derived.p_value == pytest.approx(min(1.0, 2 * own.p))
    assert derived.p_value != source.p_value
    assert (derived.ci_low, derived.ci_high) == pytest.approx(own.interval(CONFIG.confidence))
