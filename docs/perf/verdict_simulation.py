"""False-alarm and detection rates of perfguard's verdict rule under realistic noise models.

This measures a property of the *rule* (perfguard.compare: stage 1 on stored results, then the
re-measurement of suspects), not of any machine: benchmark comparisons are drawn from noise models
calibrated on the measurements in ``research/gpu_timing.md`` §9-§11 and on the CPU ``quick``
profile, with and without a planted slowdown, and pushed through ``compare_suite`` and
``apply_retry`` exactly as ``perfguard check`` does.  It also times ``compare_suite`` on 1,000
benchmark x params with 3 rounds x 100 samples a side.

    python docs/perf/verdict_simulation.py                 # the table in docs/verdicts.md
    python docs/perf/verdict_simulation.py --checks 10     # a quicker look

``tests/test_compare_simulation.py`` imports this file and runs small versions of the same
simulations in CI.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfguard.compare import (
    Item,
    Measurement,
    SuiteComparison,
    Verdict,
    apply_retry,
    compare_suite,
    undecided,
)
from perfguard.config import Config


@dataclass(frozen=True)
class NoiseModel:
    """How one benchmark's samples scatter.

    A sample is ``base_time * factor * exp(session + round + call) * outlier * mode`` where
    ``call ~ N(0, call_sigma)`` per sample (log-normal per-call noise), ``round ~ N(0,
    round_sigma)`` per fresh process, ``session ~ N(0, session_sigma)`` per side of a stage-1
    comparison (stored baseline and head measured at different times; shared by every benchmark of
    that side, like a busy machine would be; zero on the interleaved re-measurement), ``outlier``
    is U(1.5, 3) with probability ``outlier_rate`` and 1 otherwise, and ``mode`` is
    ``mode_ratio`` with probability ``mode_p`` per process (a launch-bound benchmark that runs in
    one of two speeds per process) and 1 otherwise.
    """

    name: str
    what: str
    call_sigma: float
    round_sigma: float
    session_sigma: float
    samples: int
    outlier_rate: float = 0.0
    mode_p: float = 0.0
    mode_ratio: float = 1.0


MODELS: dict[str, NoiseModel] = {
    m.name: m
    for m in (
        NoiseModel(
            "gpu-graph",
            "CUDA-graph replay (§9 probe 2 dilated 4k graph: IQR/median 1.6%, process CV 0.6%)",
            call_sigma=0.012,
            round_sigma=0.006,
            session_sigma=0.005,
            samples=100,
        ),
        NoiseModel(
            "gpu-eager",
            "GPU-bound eager, H200 (§11 65K eager: process CV 4.0%)",
            call_sigma=0.015,
            round_sigma=0.04,
            session_sigma=0.02,
            samples=100,
            outlier_rate=0.01,
        ),
        NoiseModel(
            "gpu-eager-h100",
            "GPU-bound eager, H100 (§11 65K eager: process CV 8.6%, spread 28%)",
            call_sigma=0.02,
            round_sigma=0.086,
            session_sigma=0.03,
            samples=100,
            outlier_rate=0.01,
        ),
        NoiseModel(
            "cpu-quick",
            "CPU quick profile on a shared 2-core runner (IQR/median ~12%, rounds ±3%)",
            call_sigma=0.09,
            round_sigma=0.03,
            session_sigma=0.03,
            samples=30,
            outlier_rate=0.02,
        ),
        NoiseModel(
            "cpu-noisy",
            "CPU, noisier (IQR/median ~20%, rounds ±5%, 5% outliers)",
            call_sigma=0.15,
            round_sigma=0.05,
            session_sigma=0.05,
            samples=20,
            outlier_rate=0.05,
        ),
        NoiseModel(
            "bimodal",
            "launch-bound eager, two speeds per process (§9 probe 2 dilated 4k: 0.19 or ~0.42 ms)",
            call_sigma=0.10,
            round_sigma=0.02,
            session_sigma=0.02,
            samples=100,
            mode_p=0.5,
            mode_ratio=2.2,
        ),
    )
}

FACTORS = (1.0, 1.10, 1.20, 1.25, 1.30, 1.50, 2.0)


def draw_rounds(
    model: NoiseModel, rng: np.random.Generator, factor: float, rounds: int, session: float
) -> list[np.ndarray]:
    """``rounds`` fresh processes of ``model.samples`` samples each (see :class:`NoiseModel`)."""
    out = []
    for _ in range(rounds):
        level = session + rng.normal(0.0, model.round_sigma)
        x = np.exp(level + rng.normal(0.0, model.call_sigma, model.samples)) * factor * 1e-3
        if model.outlier_rate:
            hit = rng.random(model.samples) < model.outlier_rate
            x[hit] *= rng.uniform(1.5, 3.0, hit.sum())
        if model.mode_p and rng.random() < model.mode_p:
            x *= model.mode_ratio
        out.append(x)
    return out


def _side(
    model: NoiseModel, rng: np.random.Generator, factor: float, rounds: int, session: float, n: int
) -> list[Measurement]:
    return [
        Measurement(
            "Forward.track_time",
            {"impl": f"impl{i}", "seq_len": 1024},
            rounds=draw_rounds(model, rng, factor, rounds, session),
            method="simulated",
        )
        for i in range(n)
    ]


@dataclass
class Outcome:
    comparisons: int = 0
    checks: int = 0
    checks_flagged: int = 0  # checks with at least one final regression
    stage1_regressions: int = 0  # what stage 1 alone would have failed
    suspects: int = 0
    regressions: int = 0  # final, after the retry
    unstable: int = 0

    @property
    def rate(self) -> float:
        return self.regressions / max(self.comparisons, 1)


def simulate_check(
    model: NoiseModel,
    factor: float,
    suite_size: int,
    config: Config,
    rng: np.random.Generator,
    *,
    stage1_rounds: int = 3,
) -> tuple[SuiteComparison, SuiteComparison]:
    """One ``perfguard check``: stage 1 on two sessions, then the interleaved re-measurement."""
    base = _side(model, rng, 1.0, stage1_rounds, rng.normal(0.0, model.session_sigma), suite_size)
    head = _side(model, rng, factor, stage1_rounds, rng.normal(0.0, model.session_sigma), suite_size)
    first = compare_suite(base, head, config)
    if not first.suspects:
        return first, first
    k = config.retry.rounds
    rounds: dict[tuple[str, str], tuple[list[np.ndarray], list[np.ndarray]]] = {}

    def measure(items: Sequence[Item]) -> SuiteComparison:
        """``k`` more interleaved rounds a side of ``items``, then every suspect decided on all of its."""
        for item in items:
            base_rounds, head_rounds = rounds.setdefault(item.key, ([], []))
            base_rounds += draw_rounds(model, rng, 1.0, k, 0.0)
            head_rounds += draw_rounds(model, rng, factor, k, 0.0)
        sides = [
            [
                Measurement(i.benchmark, i.params, rounds=rounds[i.key][s], method="simulated")
                for i in first.suspects
            ]
            for s in (0, 1)
        ]
        return apply_retry(first, sides[0], sides[1], config)

    final = measure(first.suspects)  # only the suspects are re-measured, with their own keys
    measured = k
    while (more := undecided(final)) and measured + k <= config.retry.max_rounds:  # as perfguard check
        measured += k
        final = measure(more)
    return first, final


def simulate(
    model: NoiseModel,
    factor: float,
    *,
    checks: int,
    suite_size: int,
    config: Config | None = None,
    seed: int = 0,
) -> Outcome:
    """``checks`` simulated checks of ``suite_size`` benchmarks, all slowed down by ``factor``."""
    config = config or Config()
    rng = np.random.default_rng([seed, int(factor * 1000), sum(map(ord, model.name))])
    out = Outcome()
    for _ in range(checks):
        first, final = simulate_check(model, factor, suite_size, config, rng)
        out.checks += 1
        out.comparisons += len(final.items)
        out.stage1_regressions += sum(i.verdict is Verdict.REGRESSION for i in first.items)
        out.suspects += len(first.suspects)
        flagged = sum(i.verdict is Verdict.REGRESSION for i in final.items)
        out.regressions += flagged
        out.checks_flagged += flagged > 0
        out.unstable += sum(i.verdict is Verdict.UNSTABLE for i in final.items)
    return out


def time_compare(items: int = 1000, rounds: int = 3, samples: int = 100, repeat: int = 5) -> dict[str, float]:
    """Best-of-``repeat`` seconds (wall and CPU) to build the Measurements and to run ``compare_suite``.

    A/A data; the samples start as plain Python lists, as the pipeline reads them from the store
    (building a Measurement cleans and sorts them once).  CPU time is reported next to wall time
    because the machine this runs on is shared: wall time there measures the neighbours too.
    """
    rng = np.random.default_rng(1)
    model = NoiseModel(**{**MODELS["gpu-eager"].__dict__, "samples": samples})
    raw = [
        [[r.tolist() for r in draw_rounds(model, rng, 1.0, rounds, 0.0)] for _ in range(items)]
        for _side in range(2)
    ]

    def build(side: int) -> list[Measurement]:
        return [
            Measurement(
                "Forward.track_time", {"impl": f"impl{i % 9}", "seq_len": 1024 * (1 + i // 9)}, rounds=r
            )
            for i, r in enumerate(raw[side])
        ]

    config = Config()
    best = dict.fromkeys(("build_wall", "build_cpu", "compare_wall", "compare_cpu"), math.inf)
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        base, head = build(0), build(1)
        best["build_wall"] = min(best["build_wall"], time.perf_counter() - wall)
        best["build_cpu"] = min(best["build_cpu"], time.process_time() - cpu)
        wall, cpu = time.perf_counter(), time.process_time()
        compare_suite(base, head, config)
        best["compare_wall"] = min(best["compare_wall"], time.perf_counter() - wall)
        best["compare_cpu"] = min(best["compare_cpu"], time.process_time() - cpu)
    return best


def table(models: Sequence[str], factors: Sequence[float], checks: int, suite_size: int) -> None:
    """Print the Markdown table of flagged regressions, one row per model as it completes."""
    print(
        "| model | " + " | ".join("A/A" if f == 1.0 else f"+{round((f - 1) * 100)}%" for f in factors) + " |"
    )
    print("| --- | " + " | ".join("---" for _ in factors) + " |", flush=True)
    for name in models:
        cells = []
        for f in factors:
            o = simulate(MODELS[name], f, checks=checks, suite_size=suite_size)
            cell = f"{o.regressions}/{o.comparisons}"
            if f == 1.0:
                cell += f" (stage 1 alone: {o.stage1_regressions})"
            else:
                cell += f" ({o.rate:.0%})" if o.rate in (0.0, 1.0) else f" ({o.rate:.1%})"
            cells.append(cell)
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)


def machine() -> str:
    """CPU model, core count and load: the timing below depends on them (the rates do not)."""
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{model}, {os.cpu_count()} CPUs, load average {load}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checks", type=int, default=50, help="simulated checks per model and factor")
    parser.add_argument("--suite-size", type=int, default=40, help="benchmarks per check")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--timing-only", action="store_true", help="only time compare_suite")
    args = parser.parse_args(argv)
    print(f"date {datetime.date.today()}; python {platform.python_version()}, numpy {np.__version__}")
    print(f"machine: {machine()}")
    if not args.timing_only:
        script = "python docs/perf/verdict_simulation.py"
        print(f"command: {script} --checks {args.checks} --suite-size {args.suite_size}")
        print()
        for name in args.models:
            print(f"- `{name}`: {MODELS[name].what}")
        print()
        t = time.perf_counter()
        table(args.models, FACTORS, args.checks, args.suite_size)
        print(f"\n(simulation took {time.perf_counter() - t:.0f} s)\n")
    print(
        "\n| benchmark x params (3 rounds x 100 samples a side) | compare_suite wall | CPU | "
        "building the Measurements wall | CPU |"
    )
    print("| --- | --- | --- | --- | --- |")
    for items in (100, 1000):
        t = time_compare(items)
        print(
            f"| {items} | {t['compare_wall']:.3f} s | {t['compare_cpu']:.3f} s | "
            f"{t['build_wall']:.3f} s | {t['build_cpu']:.3f} s |"
        )
    print("\n(best of 5 repetitions each)")


if __name__ == "__main__":
    main()
