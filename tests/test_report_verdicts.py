"""One verdict per measurement: tokens/s and TFLOP/s carry their forward timing's verdict.

asvrun derives both from the forward samples (tokens or attended-pair FLOPs / sample), so they are
the same measurement seen through a constant.  A verdict of their own (their own p-value, no Holm
adjustment, no re-measurement) could only contradict the timing's: issue 14 saw a forward time
``unstable`` after its re-measurement while its tokens/s said ``regression`` from the first one.
"""

from __future__ import annotations

import numpy as np

from perfguard.compare import Measurement, Verdict, apply_retry, compare_suite, derived_source
from perfguard.config import Config

FWD = "bench_attention.Forward.track_time"
TOKENS = "bench_attention.Throughput.track_tokens_per_second"
TFLOPS = "bench_attention.Throughput.track_tflops"
CONFIG = Config()


def side(
    impl: str, factor: float, *, seed: int, rounds: int = 3, n: int = 40, call: float = 0.02
) -> list[Measurement]:
    """The forward timing of one implementation and the two numbers asvrun derives from it."""
    rng = np.random.default_rng([seed, int(factor * 1000), sum(map(ord, impl))])
    data = [1e-3 * factor * rng.lognormal(rng.normal(0.0, 0.01), call, n) for _ in range(rounds)]
    params = {"impl": impl, "seq_len": 512, "dtype": "float32"}
    tokens, flops = 512.0, 3.2e9
    return [
        Measurement(FWD, params, rounds=data),
        Measurement(
            TOKENS,
            params,
            rounds=[tokens / r for r in data],
            metric="throughput",
            unit="tokens/s",
            direction="higher",
            gated=False,
        ),
        Measurement(
            TFLOPS,
            params,
            rounds=[flops / 1e12 / r for r in data],
            metric="efficiency",
            unit="TFLOP/s",
            direction="higher",
            gated=False,
        ),
    ]


def suite(factors: dict[str, float], *, seed: int) -> list[Measurement]:
    return [m for impl, f in factors.items() for m in side(impl, f, seed=seed + len(impl))]


def by_impl(items) -> dict[str, dict[str, Verdict]]:
    out: dict[str, dict[str, Verdict]] = {}
    for i in items:
        out.setdefault(i.impl, {})[i.benchmark] = i.verdict
    return out


def test_derived_source_keeps_the_module() -> None:
    assert derived_source(TOKENS) == FWD
    assert derived_source("Throughput.track_tflops") == "Forward.track_time"
    assert derived_source(FWD) is None


def test_derived_items_follow_a_verdict_changed_by_the_re_measurement() -> None:
    """Stage 1 sees 1.8x (suspect); the interleaved re-measurement sees no change."""
    impls = ("dilated", "improved", "ring", "hilbert_ring")
    base = suite(dict.fromkeys(impls, 1.0), seed=1)
    head = suite({**dict.fromkeys(impls, 1.0), "improved": 1.8}, seed=2)
    first = compare_suite(base, head, CONFIG)
    assert by_impl(first.items)["improved"] == dict.fromkeys((FWD, TOKENS, TFLOPS), Verdict.REGRESSION)
    assert [s.impl for s in first.suspects] == ["improved"]  # derived items are never suspects

    retry_base = suite(dict.fromkeys(impls, 1.0), seed=3)
    retry_head = suite(dict.fromkeys(impls, 1.0), seed=4)
    final = apply_retry(first, retry_base, retry_head, CONFIG)
    verdicts = by_impl(final.items)["improved"]
    assert verdicts == dict.fromkeys((FWD, TOKENS, TFLOPS), Verdict.UNCHANGED), verdicts
    derived = [i for i in final.items if i.impl == "improved" and i.benchmark != FWD]
    forward = next(i for i in final.items if i.impl == "improved" and i.benchmark == FWD)
    for item in derived:
        # Its numbers are the re-measurement's too: no 1.8x beside a forward time of 1.0x.
        assert item.retried and abs(item.ratio - forward.ratio) < 0.02, (item.ratio, forward.ratio)
        assert "verdict of forward time: unchanged" in item.reason
        assert not item.gated and not item.fails
    assert final.exit_code == 0


def test_every_derived_item_has_its_timings_verdict() -> None:
    """Many suites with changes around the threshold: never a derived verdict of its own."""
    impls = ("dilated", "improved", "ring", "hilbert_ring", "block_sparse_ring", "multihead_ring")
    for seed in range(12):
        rng = np.random.default_rng(seed)
        factors = {impl: float(rng.choice([1.0, 1.15, 1.22, 1.3, 0.8])) for impl in impls}
        base = suite(dict.fromkeys(impls, 1.0), seed=100 + seed)
        head = [
            m
            for impl, f in factors.items()
            for m in side(impl, f, seed=200 + seed, rounds=2, n=12, call=0.12)
        ]
        for impl, verdicts in by_impl(compare_suite(base, head, CONFIG).items).items():
            assert verdicts[TOKENS] == verdicts[TFLOPS] == verdicts[FWD], (seed, impl, verdicts)


def test_report_and_compare_agree_on_what_is_derived() -> None:
    """The report keeps its own copy (compare imports scipy); the two must never drift apart."""
    from perfguard.compare import DERIVED_FROM
    from perfguard.report import formatting

    assert formatting.DERIVED_FROM == DERIVED_FROM
    for name in DERIVED_FROM:
        assert formatting.derived_source(f"bench_attention.{name}") == derived_source(
            f"bench_attention.{name}"
        )
