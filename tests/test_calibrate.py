"""``perfguard calibrate``: asv's rule, the planted slowdown, the noise table and the real command.

The end-to-end test runs the real CLI in a subprocess on a temporary git repository built from the
project's tracked files, as ``tests/test_workflows_pr_run.py`` does: the registry trimmed to
``dilated`` and the benchmarks to its forward time at 512 tokens, so each round measures one number.
Its ``pyproject.toml`` asks for 3 re-measurement rounds a side instead of 5 (the rule is the same;
the CI machine's time is not): a planted +100% is a suspect and re-measured, and so is a +10% whose
first measurement lands above 1.15, which happens on a noisy 2-core machine.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from perfguard import calibrate as cal
from perfguard.cli import main
from perfguard.config import Config
from perfguard.store import ResultRecord, RunRecord, Store

ROOT = Path(__file__).resolve().parents[1]
BENCH_REGEX = r"Forward\.track_time\('dilated', 512,"
WORK_REGEX = r"Work\.track_forward_ops\('dilated', 512,"  # one exact count: a round costs seconds
TRIMMED_REGISTRY = """

# --- test fixture (tests/test_calibrate.py): a project with one implementation ---
import types as _fixture_types

REGISTRY = _fixture_types.MappingProxyType({k: v for k, v in REGISTRY.items() if k == "dilated"})
"""
FEWER_RETRY_ROUNDS = """

# --- test fixture (tests/test_calibrate.py): shorter re-measurements on the CI machine ---
[tool.perfguard.retry]
rounds = 3
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "perfguard test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "perfguard test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository holding the project's tracked files (one implementation), committed."""
    repo = tmp_path_factory.mktemp("calibrate") / "project"
    repo.mkdir()
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in (f for f in out.decode().split("\0") if f and (ROOT / f).is_file()):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(TRIMMED_REGISTRY)
    with (repo / "pyproject.toml").open("a") as fh:
        fh.write(FEWER_RETRY_ROUNDS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def perfguard(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --------------------------------------------------------------------------------------------
# asv's rule, against hand-computed cases (research/asv.md §4.1)
# --------------------------------------------------------------------------------------------


def test_asv_track_rule_is_the_factor_alone() -> None:
    worse = cal.asv_rule([1.0], [1.21], factor=1.2)
    assert (worse.worse, worse.mark, worse.test, worse.significant) == (True, "+", "factor only", None)
    assert worse.ratio == pytest.approx(1.21)
    # strictly greater: exactly 1.2 times is not flagged
    assert not cal.asv_rule([1.0], [1.2], factor=1.2).worse
    # several rounds a side: the median of each side's round values (1.0 and 1.25)
    rounds = cal.asv_rule([1.0, 1.1, 0.9], [1.3, 1.19, 1.25], factor=1.2)
    assert rounds.worse and rounds.ratio == pytest.approx(1.25)
    # a noisy A/A pair that asv flags and perfguard's statistics would not: the factor is all it has
    assert cal.asv_rule([1.0, 1.0, 1.0], [0.9, 1.3, 1.25], factor=1.2).worse
    better = cal.asv_rule([1.0], [0.8], factor=1.2)  # 0.8 < 1 / 1.2
    assert (better.worse, better.better, better.mark) == (False, True, "-")
    assert cal.asv_rule([], [1.0]).mark == "n/a"
    assert cal.asv_rule([1.0, math.nan], [1.5, math.inf], factor=1.2).ratio == pytest.approx(1.5)


def test_asv_rule_with_samples_uses_mann_whitney_only_when_it_can_reach_p_002() -> None:
    base7 = [1.00, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06]
    head7 = [2.00, 2.01, 2.02, 2.03, 2.04, 2.05, 2.06]
    # 7 vs 7 fully separated: two-sided exact p = 2 / C(14, 7) = 2 / 3432 = 5.8e-4 < 0.002
    seven = cal.asv_rule(base7, head7, factor=1.2, samples=True)
    assert (seven.worse, seven.significant, seven.test, seven.mark) == (True, True, "mann-whitney", "+")
    # 6 vs 6: p_min = 1 / C(12, 6) = 1/924 < 0.002, so asv runs the test, but fully separated
    # samples give p = 2/924 = 0.00216 (two-sided): not significant; a 2x change is only "~"
    six = cal.asv_rule(base7[:6], head7[:6], factor=1.2, samples=True)
    assert (six.worse, six.significant, six.test, six.mark) == (False, False, "mann-whitney", "~")


def test_asv_rule_with_few_samples_uses_the_99_percent_intervals() -> None:
    # 3 vs 3: p_min = 1/20; asv_runner's CI of the median: 1.01 +- 0.046 and 2.01 +- 0.046 apart
    apart = cal.asv_rule([1.0, 1.01, 1.02], [2.0, 2.01, 2.02], factor=1.2, samples=True)
    assert (apart.worse, apart.test, apart.significant) == (True, "99% CI overlap", True)
    # medians 2.0 and 2.5 (ratio 1.25 > 1.2) but the intervals (-2.6..6.6, -2.1..7.1) overlap
    overlap = cal.asv_rule([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], factor=1.2, samples=True)
    assert overlap.ratio == pytest.approx(1.25)
    assert (overlap.worse, overlap.significant, overlap.mark) == (False, False, "~")
    # one sample on a side: asv skips the statistics and the factor decides
    single = cal.asv_rule([1.0], [1.5, 1.6], factor=1.2, samples=True)
    assert (single.worse, single.test) == (True, "factor only")


def test_asv_rule_agrees_with_asv_compare_itself() -> None:
    """The same decision as asv 0.6.6's own ``_is_result_better`` on varied data."""
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    gen = torch.Generator().manual_seed(7)
    for n_a, n_b, shift, noise in [(3, 3, 1.3, 0.05), (5, 5, 1.25, 0.02), (8, 8, 1.22, 0.01),
                                   (12, 10, 1.1, 0.2), (20, 20, 1.3, 0.3), (6, 9, 0.7, 0.05)]:  # fmt: skip
        for _ in range(5):
            a = (1 + noise * torch.randn(n_a, generator=gen)).abs().tolist()
            b = (shift * (1 + noise * torch.randn(n_b, generator=gen))).abs().tolist()
            value_a, stats_a = compute_stats(a, 1)
            value_b, stats_b = compute_stats(b, 1)
            expected = _is_result_better(value_a, value_b, (stats_a, a), (stats_b, b), 1.2)
            assert cal.asv_rule(a, b, factor=1.2, samples=True).worse == expected


# --------------------------------------------------------------------------------------------
# inputs and the planted slowdown
# --------------------------------------------------------------------------------------------


def test_parse_fractions() -> None:
    assert cal.parse_fractions("0.1,0.2, 0.25,1") == (0.1, 0.2, 0.25, 1.0)
    assert cal.parse_fractions("") == ()
    for bad, words in [("0.1,abc", "'abc' is not a number"), ("0", "above 0"), ("-0.1", "above 0"),
                       ("20", "not 10 for 10%"), ("0.1,0.1", "twice"), ("0.1,,0.2", "empty"),
                       ("nan", "above 0")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            cal.parse_fractions(bad)


def test_forward_selection_keeps_only_forward_times_within_the_users_selection() -> None:
    import re

    def label(bench: str, impl: str, n: int) -> str:
        return f"bench_attention.{bench}({impl!r}, {n!r}, 'float32')"

    (everything,) = cal.forward_selection(())
    assert re.search(everything, label("Forward.track_time", "ring", 512))
    assert not re.search(everything, label("ForwardBackward.track_time", "ring", 512))
    assert not re.search(everything, "bench_attention.Forward.track_time")  # asv's bare name
    (mine,) = cal.forward_selection([BENCH_REGEX.replace("Forward", "Forward(Backward)?")])
    assert re.search(mine, label("Forward.track_time", "dilated", 512))
    assert not re.search(mine, label("ForwardBackward.track_time", "dilated", 512))
    assert not re.search(mine, label("Forward.track_time", "dilated", 1024))
    (anchored,) = cal.forward_selection(["^bench_attention.Forward.track_time.'ring'"])
    assert re.search(anchored, label("Forward.track_time", "ring", 512))
    assert not re.search(anchored, label("Forward.track_time", "dilated", 512))


class _Spin(torch.nn.Module):
    """A module whose forward takes about 4 ms of process CPU time."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        until = time.process_time() + 0.004
        while time.process_time() < until:
            pass
        return q


class _Spec:
    """Stands in for a registry entry (``attention.registry.ImplSpec``, ``perfguard.declare.Implementation``):
    the plant wraps the ``build`` of every entry's class."""

    def build(self, *args: Any, **kwargs: Any) -> torch.nn.Module:
        return _Spin()


def test_planted_source_slows_every_built_forward_by_the_fraction_of_its_own_cpu_time() -> None:
    namespace: dict[str, Any] = {"IMPLEMENTATIONS": {"spin": _Spec()}}  # any declared registry name
    exec(compile(cal.planted_source(0.5, "IMPLEMENTATIONS"), "registry.py", "exec"), namespace)
    module = _Spec().build("bench")
    x = torch.zeros(1)
    module(x, x, x)  # the first call measures the module's own time (never timed by perfguard)
    costs = []
    for _ in range(5):
        started = time.process_time()
        module(x, x, x)
        costs.append(time.process_time() - started)
    assert sorted(costs)[2] == pytest.approx(0.004 * 1.5, rel=0.1)
    assert "a known slowdown of +50%" in cal.planted_source(0.5)


def test_the_plant_goes_into_the_registry_module_the_repository_declares(tmp_path: Path) -> None:
    """Issue 29: calibrate works for any declared package, not only this repository's attention/."""
    from perfguard.calibrate.planting import planted_clone

    repo = tmp_path / "repo"
    registry = repo / "src" / "flashdil" / "perfguard_registry.py"
    registry.parent.mkdir(parents=True)
    (registry.parent / "__init__.py").write_text("")
    registry.write_text("IMPLEMENTATIONS = []\n")
    (repo / "pyproject.toml").write_text(
        '[tool.perfguard]\npackage = "flashdil"\nregistry = "flashdil.perfguard_registry:IMPLEMENTATIONS"\n'
        'source = "src"\n'
    )
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("-c", "user.name=t", "-c", "user.email=t@t",
                                                              "commit", "-qm", "base")):  # fmt: skip
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    with planted_clone(repo, head.stdout.strip(), 0.25, tmp_path / "clones") as planted:
        text = (planted.path / "src" / "flashdil" / "perfguard_registry.py").read_text()
        assert text.startswith("IMPLEMENTATIONS = []") and "a known slowdown of +25%" in text
        assert "registry = IMPLEMENTATIONS" in text
    assert registry.read_text() == "IMPLEMENTATIONS = []\n"  # the user's repository is untouched


# --------------------------------------------------------------------------------------------
# the noise table
# --------------------------------------------------------------------------------------------


def _round(value: float, samples: list[float], *, impl: str = "dilated") -> ResultRecord:
    return ResultRecord(
        benchmark="bench_attention.Forward.track_time",
        impl=impl,
        params={"impl": impl, "seq_len": 512, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        value=value,
        samples=[value * s for s in samples],
        method="cpu-time",
    )


def test_process_noise_flags_gated_timings_whose_processes_disagree_by_more_than_one_percent() -> None:
    within = [0.98, 0.99, 1.0, 1.01, 1.02]
    rounds = [[_round(v, within), _round(v / 40, within, impl="ring")] for v in (2e-3, 2.1e-3, 1.9e-3)]
    rows = {r.impl: r for r in cal.process_noise(rounds, Config())}
    dilated = rows["dilated"]
    assert dilated.median == pytest.approx(2e-3)
    assert dilated.process_cv == pytest.approx(0.05)  # std 1e-4 / mean 2e-3
    assert dilated.spread == pytest.approx(2.1 / 1.9)
    assert dilated.iqr_median == pytest.approx(0.02)
    assert dilated.flagged and "process CV 5.0% > 1%" in dilated.note
    assert dilated.method == "cpu-time" and dilated.rounds == 3 and dilated.samples_per_round == 5
    # the same spread under 0.1 ms is not flagged (launch-bound sizes are the override's business)
    assert rows["ring"].process_cv == pytest.approx(0.05) and not rows["ring"].flagged


# --------------------------------------------------------------------------------------------
# the protocol, over a synthetic machine
# --------------------------------------------------------------------------------------------


class SyntheticMachine:
    """A :class:`perfguard.calibrate.Measurer` whose rounds are drawn, not measured.

    Two implementations x forward / forward+backward; every round 20 samples of
    ``base x (1 + f) x exp(N(0, 2%))`` with a per-process shift of N(0, 1%); a planted side is
    ``f`` slower in forward only.  ``calls`` records what was asked for.
    """

    BENCHMARKS = ("Forward.track_time", "ForwardBackward.track_time")

    def __init__(self) -> None:
        self.gen = torch.Generator().manual_seed(3)
        self.calls: list[tuple[tuple[str, ...], int, tuple[str, ...] | None, str]] = []

    def _round(self, key: str, bench: Sequence[str] | None) -> RunRecord:
        import re
        from datetime import datetime, timedelta, timezone

        fraction = float(key.split(":", 1)[1]) if key.startswith("planted:") else 0.0
        results = []
        for benchmark in self.BENCHMARKS:
            for impl, base in (("dilated", 5e-3), ("ring", 2e-2)):
                name = f"bench_attention.{benchmark}"
                label = f"{name}({impl!r}, 512, 'float32')"
                if bench and not any(re.search(r, label) for r in bench):
                    continue
                slower = 1 + fraction if benchmark == "Forward.track_time" else 1.0
                process = math.exp(0.01 * float(torch.randn(1, generator=self.gen)))
                noise = torch.exp(0.02 * torch.randn(20, generator=self.gen))
                results.append(
                    ResultRecord(
                        benchmark=name, impl=impl, params={"impl": impl, "seq_len": 512, "dtype": "float32"},
                        metric="time", unit="seconds", direction="lower", gated=True,
                        samples=(base * slower * process * noise).tolist(), method="cpu-time",
                        info={"param_names": ["impl", "seq_len", "dtype"]},
                    )
                )  # fmt: skip
        start = datetime(2026, 1, 1, tzinfo=timezone.utc)
        return RunRecord(profile="quick", purpose="calibrate", started_at=start,
                         finished_at=start + timedelta(seconds=2), results=results)  # fmt: skip

    def __call__(
        self, sides: Sequence[str], rounds: int, *, bench: Sequence[str] | None, phase: str
    ) -> list[list[RunRecord]]:
        self.calls.append((tuple(sides), rounds, tuple(bench) if bench is not None else None, phase))
        return [[self._round(key, bench) for _ in range(rounds)] for key in sides]


def test_the_protocol_counts_false_alarms_and_detections_as_check_decides_them() -> None:
    machine = SyntheticMachine()
    plan = cal.Plan(rounds=3, aa=2, planted=(0.1, 0.5), repeats=2, asv=True)
    clock = cal.PhaseClock()
    findings = cal.Calibrator(machine, plan, Config(), clock).run()

    # what was measured: A/A twice, planted twice (forward only), re-measurements of suspects
    measured = [(sides, rounds, phase) for sides, rounds, _, phase in machine.calls]
    assert measured[:2] == [(("head", "head"), 3, cal._MEASURE_AA)] * 2
    planted_calls = [c for c in machine.calls if c[3] == cal._MEASURE_PLANTED]
    assert [c[0] for c in planted_calls] == [("head", "planted:0.1", "planted:0.5")] * 2
    assert all(c[2] == (r"\.Forward\.track_time\(",) for c in planted_calls)
    retries = [c for c in machine.calls if c[3] == cal._RETRY_PLANTED]
    assert retries and all(c[0] == ("head", "planted:0.5") and c[1] == 5 for c in retries)
    assert all(r.startswith("^") and r.endswith("$") and "Forward" in r for c in retries for r in c[2] or ())

    # process noise over the 12 A/A rounds; A/A: 4 gated comparisons a repetition, no false alarm
    assert findings.noise_rounds == 12 and {r.rounds for r in findings.noise} == {12}
    assert len(findings.aa) == 2 and sum(len(c.outcomes) for c in findings.aa) == 8
    assert not any(o.flagged for c in findings.aa for o in c.outcomes)
    # planted: forward only (2 comparisons a repetition), +50% found on re-measurement, +10% not
    calibration = cal.Calibration(
        meta={"device": "cpu"}, plan=plan, config=Config(), findings=findings, clock=clock, wall_s=30.0
    )
    tallies = {t.label: t for t in calibration.tallies()}
    assert tallies["planted +50%"].comparisons == 4 and tallies["planted +50%"].flagged == 4
    assert tallies["planted +50%"].suspects == 4
    assert tallies["planted +50%"].median_final_ratio == pytest.approx(1.5, rel=0.03)
    assert tallies["planted +10%"].flagged == 0
    assert tallies["planted +50%"].asv_flagged == 4 and tallies["planted +10%"].asv_flagged == 0
    assert all(o.retried and o.first == "regression" for c in findings.planted if c.fraction == 0.5
               for o in c.outcomes)  # fmt: skip

    # the report
    report = json.loads(json.dumps(calibration.to_json(), allow_nan=False))
    assert report["schema"] == "perfguard-calibration/1"
    assert report["aa"]["comparisons"] == 8 and report["aa"]["false_alarms"] == 0
    assert [f["fraction"] for f in report["planted"]["fractions"]] == [0.1, 0.5]
    assert report["planted"]["fractions"][1]["rate"] == 1.0
    assert report["time"]["rounds"] == sum(p.rounds for p in clock.phases.values()) > 12
    markdown = calibration.to_markdown()
    assert "| planted +50% | 4 | 4/4 (100%) |" in markdown
    assert "## Process-to-process noise: 12 rounds of HEAD" in markdown


def test_planted_only_calibration_measures_no_a_a_and_reports_the_noise_of_the_planted_rounds() -> None:
    """``--aa 0``: the planted comparisons alone (a device-time budget spent on detection rates)."""
    machine = SyntheticMachine()
    plan = cal.Plan(rounds=3, aa=0, planted=(0.5,), repeats=2, asv=False)
    clock = cal.PhaseClock()
    findings = cal.Calibrator(machine, plan, Config(), clock).run()

    assert {c[3] for c in machine.calls} == {cal._MEASURE_PLANTED, cal._RETRY_PLANTED}
    assert findings.aa == [] and findings.planted_skipped is None
    # the noise of HEAD's 6 planted-phase rounds, forward only (what was measured)
    assert findings.noise_rounds == 6 and {r.rounds for r in findings.noise} == {6}
    assert {r.benchmark for r in findings.noise} == {"bench_attention.Forward.track_time"}
    calibration = cal.Calibration(
        meta={"device": "cpu"}, plan=plan, config=Config(), findings=findings, clock=clock, wall_s=10.0
    )
    assert [t.label for t in calibration.tallies()] == ["planted +50%"]
    report = json.loads(json.dumps(calibration.to_json(), allow_nan=False))
    assert report["aa"] is None
    assert report["planted"]["fractions"][0]["comparisons"] == 4
    assert report["planted"]["fractions"][0]["detected"] == 4
    markdown = calibration.to_markdown()
    assert "A/A (false alarms)" not in markdown and "| planted +50% | 4 | 4/4 (100%) |" in markdown
    assert "No A/A (--aa 0)." in markdown and "A/A: HEAD against itself" not in markdown
    assert "## Process-to-process noise: 6 rounds of HEAD" in markdown


def test_no_a_a_and_no_plants_is_refused_with_exit_2(project: Path) -> None:
    proc = perfguard(project, "calibrate", "--profile", "quick", "--aa", "0", "--planted", "")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nothing to measure" in proc.stderr and "hint:" in proc.stderr


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("planted", ["0.1,abc", "-0.2", "0.1,0.1", "15"])
def test_bad_planted_values_exit_2(planted: str) -> None:
    result = CliRunner().invoke(main, ["calibrate", "--planted", planted])
    assert result.exit_code == 2, result.output
    assert "--planted" in result.output and "hint:" in result.output


def test_a_dirty_work_tree_is_refused_with_exit_2(project: Path, tmp_path: Path) -> None:
    clone = tmp_path / "dirty"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    with (clone / "README.md").open("a") as fh:
        fh.write("\nan uncommitted edit\n")
    proc = perfguard(clone, "calibrate", "--profile", "quick", "--aa", "1", "--planted", "")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "uncommitted changes" in proc.stderr and "README.md" in proc.stderr
    assert "commit or stash" in proc.stderr
    assert "round" not in proc.stderr  # refused before anything was measured


def test_a_store_inside_the_work_tree_is_not_a_change(project: Path, tmp_path: Path) -> None:
    """D8: ``--db sqlite:///relative.db`` in the work tree was refused as uncommitted changes.

    run and check leave the store's own files out of the dirty state; calibrate did not, neither
    before measuring (an existing store: exit 2) nor after (the store it wrote: "the work tree
    changed" warning).  One cheap calibration (a work metric, one round a side, no plants).
    """
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    Store.open(f"sqlite:///{clone / 'relative.db'}").close()  # a store from an earlier calibration
    out = tmp_path / "out.json"
    proc = perfguard(clone, "calibrate", "--profile", "quick", "--bench", WORK_REGEX, "--rounds", "1",
                     "--aa", "1", "--planted", "", "--no-asv", "--db", "sqlite:///relative.db",
                     "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert json.loads(out.read_text())["warnings"] == []
    with sqlite3.connect(clone / "relative.db") as db:
        stored = db.execute("SELECT purpose, count(*) FROM runs GROUP BY purpose").fetchall()
    assert stored == [("calibrate", 2)]  # HEAD as A and as B, one round each


#: Rounds a side in the end-to-end calibration: 2 (the fewest that give every number of the report:
#: a process CV over the A/A's 2 + 2 rounds); 3 cost 15 round processes instead of 10.
E2E_ROUNDS = 2


@pytest.mark.slow
def test_calibrate_end_to_end(project: Path, tmp_path: Path) -> None:
    out, md = tmp_path / "out.json", tmp_path / "calibration.md"
    args = ["calibrate", "--profile", "quick", "--bench", BENCH_REGEX, "--rounds", str(E2E_ROUNDS),
            "--aa", "1", "--planted", "0.1,1.0", "--repeats", "1", "--json", str(out),
            "--markdown", str(md)]  # fmt: skip
    proc = perfguard(project, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["schema"] == "perfguard-calibration/1"
    assert report["device"] == "cpu" and report["profile"] == "quick"
    assert report["warnings"] == []

    # 1. process noise: the forward time at 512 tokens, timed as process CPU time, in all A/A rounds
    noise = report["process_noise"]
    (row,) = [r for r in noise["benchmarks"] if r["benchmark"].endswith("Forward.track_time")]
    assert row["params"] == {"impl": "dilated", "seq_len": 512, "dtype": "float32"}
    assert row["method"] == "cpu-time" and row["rounds"] == 2 * E2E_ROUNDS and row["status"] == "ok"
    assert row["median"] > 0 and row["process_cv"] is not None

    # 2. A/A and 3. planted slowdowns.  What a comparison measured and whether it was flagged depend
    # on how quiet the machine is (on a busy 2-core CI box fresh processes of the same code have
    # landed 1.5x apart, issue 12), so the test asserts what does not: every comparison was made
    # and measured a ratio.  That a plant costs its fraction is tested on its own, in CPU time
    # (test_planted_source_slows_every_built_forward_by_the_fraction_of_its_own_cpu_time).
    aa = report["aa"]
    assert aa["comparisons"] >= 1 and 0 <= aa["false_alarms"] <= aa["comparisons"]
    assert aa["median_ratio"] > 0
    planted = {f["fraction"]: f for f in report["planted"]["fractions"]}
    assert planted[1.0]["comparisons"] == 1 and planted[0.1]["comparisons"] == 1
    assert planted[1.0]["median_ratio"] > 0 and planted[0.1]["median_ratio"] > 0
    assert planted[1.0]["detected"] in (0, 1) and planted[0.1]["detected"] in (0, 1)
    assert len({f["commit"] for f in report["planted"]["fractions"]}) == 2
    assert "diluted" in report["planted"]["note"]

    # 4. time per phase; 5. asv's column next to perfguard's
    phases = {p["phase"]: p for p in report["time"]["phases"]}
    assert phases["A/A + process noise: measure HEAD as A and B"]["rounds"] == 2 * E2E_ROUNDS
    assert phases["planted: measure HEAD and planted commits"]["rounds"] == 3 * E2E_ROUNDS  # HEAD + 2 plants
    assert report["time"]["wall_s"] >= report["time"]["rounds_s"] > 0
    assert isinstance(aa["asv"]["flagged"], int) and aa["asv"]["factor"] == pytest.approx(1.2)
    assert planted[1.0]["asv"]["flagged"] in (0, 1)
    for row in report["summary"]:
        assert {"flagged", "rate", "asv_flagged", "asv_rate"} <= set(row)

    # the report on stdout and in Markdown; nothing left behind in the project
    assert "False alarms and detection: perfguard against asv" in proc.stdout
    assert "asv -f 1.2 (track_)" in md.read_text() and "| planted +100% |" in md.read_text()
    assert git(project, "status", "--porcelain") == ""
    assert not (project / ".perfguard").exists()  # a temporary store unless --db
    assert "planted" not in git(project, "worktree", "list")
