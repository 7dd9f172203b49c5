"""Verdicts of perfguard.compare on constructed data: every verdict, the rule's edges, the retry."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sqlalchemy import inspect

from perfguard.compare import (
    Item,
    Measurement,
    SuiteComparison,
    Verdict,
    apply_retry,
    compare_sides,
    compare_suite,
    decide_after_retry,
    geometric_mean_ratio,
    params_key,
)
from perfguard.config import Config, Override, parse_config
from perfguard.errors import EXIT_FAILED, EXIT_OK
from perfguard.store.models import CheckItem
from perfguard.store.records import CheckItemRecord, ResultRecord
from perfguard.store.records import params_key as store_params_key

FWD = "Forward.track_time"
CONFIG = Config()


def timing(
    factor: float = 1.0,
    *,
    impl: str = "dilated",
    seq_len: int = 1024,
    benchmark: str = FWD,
    rounds: int = 3,
    n: int = 60,
    call: float = 0.02,
    round_: float = 0.01,
    seed: int = 0,
    **kw,
) -> Measurement:
    """Log-normal samples around ``factor`` ms: per-call sigma ``call``, per-round sigma ``round_``."""
    rng = np.random.default_rng([seed, seq_len, int(factor * 1000), sum(map(ord, impl))])
    data = [1e-3 * factor * rng.lognormal(rng.normal(0.0, round_), call, n) for _ in range(rounds)]
    return Measurement(benchmark, {"impl": impl, "seq_len": seq_len, "dtype": "float32"}, rounds=data, **kw)


def memory(value: float, *, impl: str = "ring", **kw) -> Measurement:
    return Measurement(
        "PeakMemory.track_forward",
        {"impl": impl, "seq_len": 1024},
        value=value,
        metric="memory",
        unit="bytes",
        **kw,
    )


MiB = 1024 * 1024


# --- the item is a check_items row -------------------------------------------------------------


def test_item_fields_are_exactly_the_check_items_columns() -> None:
    columns = {c.key for c in inspect(CheckItem).columns} - {"id", "check_id"}
    item = compare_sides(timing(), timing(1.5, seed=1), CONFIG)
    row = item.as_row()
    assert set(row) == columns
    assert isinstance(row["verdict"], str) and row["verdict"] == "regression"
    CheckItem(**row)  # constructs without complaint


def test_verdict_is_a_string_enum() -> None:
    assert Verdict.REGRESSION == "regression"
    assert str(Verdict.UNSTABLE) == "unstable"
    assert [v.value for v in Verdict] == [
        "regression",
        "improvement",
        "unchanged",
        "unstable",
        "new",
        "missing",
        "broken",
        "failed",
        "skipped",
        "accepted",
        "not affected",
    ]


def test_params_key_is_the_stores() -> None:
    assert params_key({"seq_len": 256, "impl": "ring", "dtype": "bf16"}) == "dtype=bf16,impl=ring,seq_len=256"
    m = Measurement(FWD, {"seq_len": 256, "impl": "ring"}, value=1.0)
    assert (m.impl, m.key) == ("ring", "impl=ring,seq_len=256")
    for params in (
        {"impl": "ring", "causal": True, "scale": 0.125, "seq_len": 256},
        {"impl": "x", "window": None, "sizes": [1, 2], "opts": {"b": 1, "a": 2}},
        {},
    ):
        assert params_key(params) == store_params_key(params)


def test_every_kind_of_item_is_a_valid_store_record() -> None:
    base = [
        timing(impl="same"),
        timing(impl="slow"),
        memory(100 * MiB),
        timing(impl="gone"),
        timing(impl="bad"),
    ]
    head = [
        timing(impl="same", seed=1),
        timing(2.0, impl="slow", seed=1),
        memory(300 * MiB),
        timing(impl="fresh"),
        Measurement(FWD, timing(impl="bad").params, status="failed", error="boom"),
    ]
    result = compare_suite(base, head, CONFIG, broken_impls={"never_ran"})
    kinds = {i.verdict for i in result.items}
    assert {
        Verdict.UNCHANGED,
        Verdict.REGRESSION,
        Verdict.NEW,
        Verdict.MISSING,
        Verdict.FAILED,
        Verdict.BROKEN,
    } <= kinds
    for item in result.items:
        CheckItemRecord(**item.as_row()).validate()


def test_measurement_from_stored_rounds() -> None:
    def record(samples: list[float] | None, status: str = "ok", **kw: object) -> ResultRecord:
        return ResultRecord(
            benchmark=FWD,
            impl="ring",
            params={"impl": "ring", "seq_len": 256},
            metric="time",
            unit="seconds",
            direction="lower",
            gated=True,
            status=status,
            samples=samples,
            method="cpu-wall",
            **kw,  # type: ignore[arg-type]
        )

    m = Measurement.from_results([record([1.0, 2.0, 3.0]), record([4.0, 5.0]), record(None, value=9.0)])
    assert (m.status, m.side.k, m.side.n, m.key, m.method) == (
        "ok",
        3,
        6,
        "impl=ring,seq_len=256",
        "cpu-wall",
    )
    flaky = Measurement.from_results([record([1.0]), record(None, status="failed", error="CUDA error")])
    assert (flaky.status, flaky.error) == ("failed", "CUDA error")
    skipped = Measurement.from_results([record(None, status="skipped", error="needs CUDA")])
    assert (skipped.status, skipped.error) == ("skipped", "needs CUDA")
    with pytest.raises(ValueError, match="at least one round"):
        Measurement.from_results([])


def test_bad_measurement_fields_are_errors() -> None:
    with pytest.raises(ValueError, match="status"):
        Measurement(FWD, {"impl": "x"}, status="crashed")
    with pytest.raises(ValueError, match="direction"):
        Measurement(FWD, {"impl": "x"}, direction="up")  # type: ignore[arg-type]


# --- timing rule -------------------------------------------------------------------------------


def test_twice_the_work_is_a_regression_with_a_readable_reason() -> None:
    item = compare_sides(timing(), timing(2.0, seed=1), CONFIG)
    assert item.verdict is Verdict.REGRESSION and item.fails
    assert item.ratio == pytest.approx(2.0, rel=0.03)
    assert item.ci_low is not None and item.ci_high is not None and item.ratio is not None
    assert item.ci_low < item.ratio < item.ci_high
    assert item.p_value is not None and item.p_value < 1e-4  # 3 + 3 rounds: the units of the test
    assert (item.base_n, item.head_n, item.base_rounds, item.head_rounds) == (180, 180, 3, 3)
    assert re.fullmatch(
        r"forward time [12]\.\d\d× slower "
        r"\(95% CI \d\.\d\d–\d\.\d\d, rounds p=\d(\.\d)?e-\d+\), threshold 1\.20",
        item.reason,
    ), item.reason


@pytest.mark.parametrize("factor", [1.0, 1.05, 1.10, 0.95])
def test_small_changes_are_unchanged(factor: float) -> None:
    item = compare_sides(timing(), timing(factor, seed=2), CONFIG)
    assert item.verdict is Verdict.UNCHANGED and not item.fails


def test_a_stable_30_percent_slowdown_fails_and_a_speedup_is_an_improvement() -> None:
    assert compare_sides(timing(), timing(1.3, seed=3), CONFIG).verdict is Verdict.REGRESSION
    faster = compare_sides(timing(), timing(0.6, seed=3), CONFIG)
    assert faster.verdict is Verdict.IMPROVEMENT and not faster.fails
    assert faster.reason.startswith("forward time 1.6") and "faster" in faster.reason


def test_the_stored_p_value_is_the_one_the_reason_states() -> None:
    """Issue 30: an improvement's reason said p=4e-61 while its p column (p of "worse") said 1."""
    from perfguard.units import format_p

    base = [timing(impl=impl, seed=5) for impl in ("a", "b", "c")]
    head = [timing(0.6, impl="a", seed=6), timing(1.4, impl="b", seed=6), timing(0.95, impl="c", seed=6)]
    items = {i.impl: i for i in compare_suite(base, head, CONFIG).items}
    faster, slower, same = items["a"], items["b"], items["c"]
    assert (faster.verdict, slower.verdict, same.verdict) == (
        Verdict.IMPROVEMENT, Verdict.REGRESSION, Verdict.UNCHANGED,
    )  # fmt: skip
    for item in (faster, slower, same):  # one test both ways: the p the verdict used, stored and shown
        assert item.p_value is not None
        shown = re.search(r"rounds p=([^),]+)", item.reason)
        assert shown is not None and format_p(item.p_value) == shown.group(1), (item.p_value, item.reason)
    assert faster.p_value < CONFIG.alpha and slower.p_value < CONFIG.alpha


def test_threshold_comes_from_the_config_and_its_overrides() -> None:
    base, head = timing(), timing(1.3, seed=4)
    assert compare_sides(base, head, CONFIG.with_threshold(0.5)).verdict is Verdict.UNCHANGED
    config = parse_config({"override": [{"impl": "dilated", "threshold": 0.5, "note": "launch-bound"}]})
    item = compare_sides(base, head, config)
    assert item.verdict is Verdict.UNCHANGED and item.threshold == 0.5
    assert "launch-bound" in item.reason and "override #1" in item.rule_source


def test_gate_false_reports_but_never_fails() -> None:
    config = Config(overrides=(Override(impl="dilated", gate=False),))
    item = compare_sides(timing(), timing(2.0, seed=5), config)
    assert item.verdict is Verdict.REGRESSION and not item.gated and not item.fails


def test_throughput_is_oriented_and_reported_only() -> None:
    def tput(value: float, seed: int) -> Measurement:
        rng = np.random.default_rng(seed)
        rounds = [value * rng.lognormal(0, 0.02, 50) for _ in range(3)]
        return Measurement(
            "Throughput.track_tokens_per_second",
            {"impl": "ring"},
            rounds=rounds,
            metric="throughput",
            unit="tokens/s",
            direction="higher",
            gated=False,
        )

    worse = compare_sides(tput(1e6, 1), tput(0.5e6, 2), CONFIG)
    assert worse.ratio == pytest.approx(2.0, rel=0.03)  # > 1 = worse, though the number fell
    assert worse.verdict is Verdict.REGRESSION and not worse.gated and not worse.fails
    assert "throughput 2.0" in worse.reason and "lower" in worse.reason
    better = compare_sides(tput(1e6, 1), tput(2e6, 3), CONFIG)
    assert better.verdict is Verdict.IMPROVEMENT
    gated = compare_sides(
        tput(1e6, 1), tput(0.5e6, 2), Config(overrides=(Override(metric="throughput", gate=True),))
    )
    assert gated.fails


def test_noise_gate_does_not_hide_a_large_regression() -> None:
    """CPU-like noise (per-call IQR/median ~20%, rounds +-5%) and twice the work: still a regression."""
    base = timing(call=0.15, round_=0.05, n=30)
    head = timing(2.0, call=0.15, round_=0.05, n=30, seed=6)
    item = compare_sides(base, head, CONFIG)
    assert item.noise is not None and item.noise > CONFIG.max_iqr_ratio
    assert item.verdict is Verdict.REGRESSION


def test_noisy_and_undecided_is_unstable_not_a_failure() -> None:
    """Rounds that disagree by +-10% with a 25% shift: the interval straddles 1.20."""
    base = timing(call=0.15, round_=0.10, n=30, seed=7)
    head = timing(1.25, call=0.15, round_=0.10, n=30, seed=8)
    item = compare_sides(base, head, CONFIG)
    assert item.ci_low is not None and item.ci_high is not None
    assert item.ci_low < 1.2 < item.ci_high
    assert item.verdict is Verdict.UNSTABLE and not item.fails
    assert "too noisy to decide" in item.reason


def test_noisy_aa_whose_interval_stays_under_the_threshold_is_unchanged() -> None:
    item = compare_sides(timing(call=0.15, n=40, seed=9), timing(call=0.15, n=40, seed=10), CONFIG)
    assert item.noise is not None and item.noise > CONFIG.max_iqr_ratio
    assert item.verdict is Verdict.UNCHANGED
    assert "noisy" in item.reason


def spread_rounds(centre: float, spread: float, impl: str = "x") -> Measurement:
    """Three rounds of one sample at centre * exp(-spread, 0, +spread): the ratio of the pooled
    medians is then exactly the ratio of the geometric means, and the test is Welch's t on logs."""
    return Measurement(FWD, {"impl": impl}, rounds=[[centre * math.exp(e)] for e in (-spread, 0.0, spread)])


def test_a_regression_needs_significance_over_rounds() -> None:
    """The p-value is Welch's two-sided t-test of the log round medians (the rounds are the
    units): 1.5x with rounds 35% apart on each side is not significant over 3 + 3 rounds."""
    base, head = spread_rounds(1.0, 0.3), spread_rounds(1.5, 0.3)
    item = compare_sides(base, head, CONFIG)
    welch = scipy_stats.ttest_ind(
        np.log(head.side.round_medians), np.log(base.side.round_medians), equal_var=False
    )
    assert item.ratio == pytest.approx(1.5)
    assert item.p_value == pytest.approx(welch.pvalue) and item.p_value > CONFIG.alpha
    assert item.verdict is Verdict.UNSTABLE and not item.fails


def test_single_samples_never_fail() -> None:
    item = compare_sides(
        Measurement(FWD, {"impl": "x"}, value=1.0), Measurement(FWD, {"impl": "x"}, value=3.0), CONFIG
    )
    assert item.verdict is not Verdict.REGRESSION and not item.fails


def test_identical_values_are_unchanged() -> None:
    same = Measurement(FWD, {"impl": "x"}, rounds=[[1e-3] * 20] * 3)
    item = compare_sides(same, same, CONFIG)
    assert item.verdict is Verdict.UNCHANGED
    assert (item.ratio, item.ci_low, item.ci_high, item.p_value) == (1.0, 1.0, 1.0, 1.0)


def test_nan_samples_are_ignored_and_all_nan_head_failed() -> None:
    base = timing()
    rounds = [np.append(r, np.nan) for r in timing(2.0, seed=11).rounds]
    item = compare_sides(base, Measurement(FWD, base.params, rounds=rounds), CONFIG)
    assert item.verdict is Verdict.REGRESSION and item.head_n == 180
    empty = compare_sides(base, Measurement(FWD, base.params, rounds=[[np.nan, np.nan]]), CONFIG)
    assert empty.verdict is Verdict.FAILED and empty.fails and "no finite samples" in empty.reason


def test_non_positive_medians() -> None:
    zero = Measurement(FWD, {"impl": "x"}, rounds=[[0.0] * 10])
    one = Measurement(FWD, {"impl": "x"}, rounds=[[1.0] * 10])
    assert compare_sides(one, zero, CONFIG).verdict is Verdict.FAILED
    assert compare_sides(zero, one, CONFIG).verdict is Verdict.NEW


# --- memory ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "head", "verdict"),
    [
        (100 * MiB, 300 * MiB, Verdict.REGRESSION),  # 3x and +200 MiB
        (1 * MiB, 30 * MiB, Verdict.UNCHANGED),  # 30x but only +29 MiB: under the floor
        (1000 * MiB, 1150 * MiB, Verdict.UNCHANGED),  # +150 MiB but only 1.15x
        (1000 * MiB, 1250 * MiB, Verdict.REGRESSION),
        (300 * MiB, 100 * MiB, Verdict.IMPROVEMENT),
        (0, 100 * MiB, Verdict.REGRESSION),  # from nothing
        (0, 0, Verdict.UNCHANGED),
    ],
)
def test_memory_rule(base: float, head: float, verdict: Verdict) -> None:
    item = compare_sides(memory(base), memory(head), CONFIG)
    assert item.verdict is verdict
    assert item.fails == (verdict is Verdict.REGRESSION)
    assert item.p_value is None and item.ci_low is None


def test_memory_reason_and_thresholds() -> None:
    item = compare_sides(memory(100 * MiB), memory(300 * MiB), CONFIG)
    assert item.reason == "forward peak memory +200 MiB (3.00×), over threshold 1.20 and the 64.0 MiB floor"
    config = parse_config({"memory_threshold": 0.5, "memory_floor_bytes": "1 GiB"})
    assert compare_sides(memory(1000 * MiB), memory(1400 * MiB), config).verdict is Verdict.UNCHANGED
    assert compare_sides(memory(2000 * MiB), memory(4000 * MiB), config).verdict is Verdict.REGRESSION


# --- structural verdicts -------------------------------------------------------------------------


def test_new_missing_failed_skipped() -> None:
    base = [timing(impl="dilated"), timing(impl="gone"), timing(impl="crashes"), timing(impl="skips")]
    head = [
        timing(impl="dilated", seed=1),
        timing(impl="fresh"),
        Measurement(FWD, timing(impl="crashes").params, status="failed", error="RuntimeError: CUDA OOM"),
        Measurement(FWD, timing(impl="skips").params, status="skipped", error="needs CUDA"),
    ]
    result = compare_suite(base, head, CONFIG)
    by_impl = {i.impl: i for i in result.items}
    assert [i.impl for i in result.items] == ["dilated", "fresh", "crashes", "skips", "gone"]
    assert by_impl["dilated"].verdict is Verdict.UNCHANGED
    assert by_impl["fresh"].verdict is Verdict.NEW and not by_impl["fresh"].fails
    assert by_impl["gone"].verdict is Verdict.MISSING and not by_impl["gone"].fails
    crashed = by_impl["crashes"]
    assert crashed.verdict is Verdict.FAILED and crashed.fails and "CUDA OOM" in crashed.reason
    assert by_impl["skips"].verdict is Verdict.SKIPPED and "needs CUDA" in by_impl["skips"].reason
    assert result.exit_code == EXIT_FAILED
    assert [i.impl for i in result.failing] == ["crashes"]
    assert result.counts()["missing"] == 1 and sum(result.counts().values()) == 5


def test_failure_only_fails_when_the_baseline_worked() -> None:
    params = timing().params
    failed = Measurement(FWD, params, status="failed", error="boom")
    both = compare_sides(Measurement(FWD, params, status="failed", error="old"), failed, CONFIG)
    assert both.verdict is Verdict.FAILED and not both.fails
    new_failing = compare_sides(None, failed, CONFIG)
    assert new_failing.verdict is Verdict.FAILED and not new_failing.fails
    fixed = compare_sides(Measurement(FWD, params, status="failed"), timing(), CONFIG)
    assert fixed.verdict is Verdict.NEW and not fixed.fails
    base_skipped = compare_sides(Measurement(FWD, params, status="skipped"), timing(), CONFIG)
    assert base_skipped.verdict is Verdict.SKIPPED


def test_broken_implementation_fails_every_item_and_without_benchmarks() -> None:
    base = [timing(impl="ring"), memory(100 * MiB, impl="ring")]
    head = [timing(impl="ring", seed=1), memory(100 * MiB, impl="ring")]
    result = compare_suite(base, head, CONFIG, broken_impls={"ring", "hilbert_ring"})
    verdicts = [(i.impl, i.benchmark, i.verdict) for i in result.items]
    assert verdicts == [
        ("ring", FWD, Verdict.BROKEN),
        ("ring", "PeakMemory.track_forward", Verdict.BROKEN),
        ("hilbert_ring", "perfguard verify", Verdict.BROKEN),
    ]
    assert all(i.fails for i in result.items) and result.exit_code == EXIT_FAILED
    CheckItem(**result.items[-1].as_row())


def test_duplicate_keys_are_an_error() -> None:
    with pytest.raises(ValueError, match="merge their rounds"):
        compare_suite([timing(), timing()], [timing()], CONFIG)
    with pytest.raises(ValueError, match="different benchmarks"):
        compare_sides(timing(impl="a"), timing(impl="b"), CONFIG)
    with pytest.raises(ValueError, match="at least one side"):
        compare_sides(None, None, CONFIG)


# --- the suite: Holm, suspects, exit code ------------------------------------------------------


def test_significance_is_bonferroni_adjusted_over_the_suite() -> None:
    """1.22x over rounds 4% apart: p = 0.004 alone, a regression; one of ten gated timings, p x 10."""
    base, head = spread_rounds(1.0, 0.04), spread_rounds(math.exp(0.2), 0.04)
    alone = compare_sides(base, head, CONFIG)
    assert alone.p_value is not None and 0.002 < alone.p_value < 0.005
    assert alone.verdict is Verdict.REGRESSION
    same = [timing(impl=f"aa{i}") for i in range(9)]  # identical on both sides
    result = compare_suite([base, *same], [head, *same], CONFIG)
    item = result.items[0]
    assert item.p_raw == pytest.approx(alone.p_value)
    assert item.p_value == pytest.approx(10 * alone.p_value)
    assert item.verdict is Verdict.UNSTABLE and not item.fails
    assert "not significant over 3+3 rounds (p >= 0.01 after Bonferroni over 10)" in item.reason


def test_ci_of_an_item_does_not_depend_on_the_rest_of_the_suite() -> None:
    base, head = timing(), timing(1.4, seed=1)
    alone = compare_sides(base, head, CONFIG)
    within = compare_suite([timing(impl="z"), base], [timing(impl="z", seed=2), head], CONFIG).items[1]
    assert (alone.ci_low, alone.ci_high) == (within.ci_low, within.ci_high)


def test_suspects_are_gated_timings_near_or_over_the_threshold_worst_first() -> None:
    base = [
        timing(impl="double"),
        timing(impl="close"),
        timing(impl="same"),
        memory(100 * MiB, impl="mem"),
        timing(impl="report", gated=False),
    ]
    head = [
        timing(2.0, impl="double", seed=1),
        timing(1.17, impl="close", seed=1),
        timing(impl="same", seed=1),
        memory(300 * MiB, impl="mem"),
        timing(2.0, impl="report", gated=False, seed=1),
    ]
    result = compare_suite(base, head, CONFIG)
    assert [i.impl for i in result.suspects] == ["double", "close"]
    assert result.suspect_keys[0] == (FWD, "dtype=float32,impl=double,seq_len=1024")
    assert {i.impl: i.verdict for i in result.items}["close"] is Verdict.UNCHANGED
    assert result.exit_code == EXIT_FAILED  # stage 1 alone: 'double' and 'mem'


# --- stage 2: the retry ----------------------------------------------------------------------------


def test_retry_confirms_a_real_regression() -> None:
    first = compare_suite(
        [timing(impl="a"), timing(impl="b")],
        [timing(2.0, impl="a", seed=1), timing(impl="b", seed=1)],
        CONFIG,
    )
    assert [i.impl for i in first.suspects] == ["a"]
    final = apply_retry(
        first, [timing(impl="a", rounds=5, seed=3)], [timing(2.0, impl="a", rounds=5, seed=4)], CONFIG
    )
    a = final.items[0]
    assert a.verdict is Verdict.REGRESSION and a.retried and a.fails
    assert a.reason.startswith("confirmed on re-measurement (5+5 rounds): forward time")
    assert a.first is first.items[0] and (a.base_rounds, a.head_rounds) == (5, 5)
    assert final.items[1] is first.items[1] and not final.items[1].retried
    assert final.suspects == () and final.exit_code == EXIT_FAILED


def test_retry_clears_a_shift_that_was_the_machine() -> None:
    """Stage 1 saw 1.5x because the head session ran on a busy machine; interleaved, it is gone."""
    first = compare_suite([timing()], [timing(1.5, seed=1)], CONFIG)
    assert first.items[0].verdict is Verdict.REGRESSION and first.exit_code == EXIT_FAILED
    final = apply_retry(first, [timing(rounds=5, seed=5)], [timing(rounds=5, seed=6)], CONFIG)
    item = final.items[0]
    assert item.verdict is Verdict.UNCHANGED and item.retried and not item.fails
    assert item.reason.startswith("not confirmed on re-measurement (5+5 rounds)")
    assert "first measurement 1.5" in item.reason
    assert final.exit_code == EXIT_OK


def test_retry_without_a_remeasurement_keeps_the_first_verdict() -> None:
    first = compare_suite([timing()], [timing(2.0, seed=1)], CONFIG)
    final = apply_retry(first, [], [], CONFIG)
    assert final.items[0].verdict is Verdict.REGRESSION and not final.items[0].retried
    assert final.items[0].reason.endswith("suspect, but not re-measured")


def test_retry_failure_in_head_is_a_failure() -> None:
    first = compare_suite([timing()], [timing(2.0, seed=1)], CONFIG)
    crashed = Measurement(FWD, timing().params, status="failed", error="segfault")
    final = apply_retry(first, [timing(rounds=5)], [crashed], CONFIG)
    assert (
        final.items[0].verdict is Verdict.FAILED and final.items[0].retried and final.exit_code == EXIT_FAILED
    )


def test_decide_after_retry_checks_the_key() -> None:
    a = compare_sides(timing(impl="a"), timing(impl="a"), CONFIG)
    b = compare_sides(timing(impl="b"), timing(impl="b"), CONFIG)
    with pytest.raises(ValueError, match="retry of"):
        decide_after_retry(a, b)


def test_suite_summary_helpers() -> None:
    result = SuiteComparison(items=())
    assert result.exit_code == EXIT_OK and result.counts()["regression"] == 0
    items = [
        compare_sides(timing(impl=i), timing(f, impl=i, seed=1), CONFIG) for i, f in (("a", 1.0), ("b", 2.0))
    ]
    gm = geometric_mean_ratio(items)
    assert gm is not None and gm == pytest.approx(np.sqrt(2.0), rel=0.03)
    assert geometric_mean_ratio([]) is None
    assert isinstance(items[0], Item)


def test_the_first_measurements_spread_widens_the_re_measurements_interval() -> None:
    """A launch-bound benchmark: processes land ~2.2x apart at random.  The re-measurement's rounds
    happened to agree within 0.4%, 1.4x apart; alone that is a regression.  How far apart the same
    code's processes landed in the first measurement is pooled into each side's variance, so the
    interval widens to cover 1.20 and the item is unstable: the spread is evidence about the
    benchmark, not a veto (issue 30)."""
    fast = 1.0e-3 * (1 + 0.01 * np.arange(40) / 40)
    slow = 2.2 * fast
    first = compare_suite(
        [Measurement(FWD, {"impl": "x"}, rounds=[fast, slow, fast])],
        [Measurement(FWD, {"impl": "x"}, rounds=[slow, fast, slow])],
        CONFIG,
    )
    assert first.items[0].round_spread == pytest.approx(2.2) and first.suspects
    retry_base = Measurement(FWD, {"impl": "x"}, rounds=[fast * (1 + 0.001 * i) for i in range(5)])
    retry_head = Measurement(FWD, {"impl": "x"}, rounds=[1.4 * fast * (1 + 0.001 * i) for i in range(5)])
    alone = compare_sides(retry_base, retry_head, CONFIG)
    assert alone.verdict is Verdict.REGRESSION  # the re-measurement alone looks clean
    final = apply_retry(first, [retry_base], [retry_head], CONFIG).items[0]
    assert final.verdict is Verdict.UNSTABLE and final.retried and not final.fails
    assert final.ratio == alone.ratio  # the estimate is the re-measurement's; only its spread is pooled
    assert final.ci_low is not None and alone.ci_low is not None and final.ci_low < 1.2 < alone.ci_low


def test_retry_fails_a_change_far_larger_than_the_first_measurements_spread() -> None:
    fast = 1.0e-3 * (1 + 0.01 * np.arange(40) / 40)
    first = compare_suite(
        [Measurement(FWD, {"impl": "x"}, rounds=[fast, 1.3 * fast, fast])],
        [Measurement(FWD, {"impl": "x"}, rounds=[3 * fast, 3.9 * fast, 3 * fast])],
        CONFIG,
    )
    assert first.items[0].round_spread == pytest.approx(1.3)
    final = apply_retry(
        first,
        [Measurement(FWD, {"impl": "x"}, rounds=[fast * (1 + 0.01 * i) for i in range(5)])],
        [Measurement(FWD, {"impl": "x"}, rounds=[3 * fast * (1 + 0.01 * i) for i in range(5)])],
        CONFIG,
    ).items[0]
    assert final.verdict is Verdict.REGRESSION and final.fails
