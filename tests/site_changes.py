"""A baseline branch with steps and acceptances, as the baseline workflow leaves it (for the site tests).

A real git repository; each commit's runs are written through ``perfguard.store.Store`` (trusted
``run`` rounds with real per-call samples and the exact aten-op count, and the ``software`` each
run recorded), then the real ``perfguard changes`` runs after every recorded commit, as the
baseline workflow runs it (``--accept-approved-by`` where the merged pull request was approved),
and a maintainer records one ``perfguard accept``.  ``dilated``'s history:

====  =======  =====  ======  ================================================================
c0-3  10 ms    433    2.12.0  steady
c4    20 ms    866    2.13.0  the step, with a torch update: flagged, the update named
c5    20 ms    866    2.13.0  steady after the step
c6    20 ms    1732   2.13.0  ops double again, with a ``Perfguard-Accept`` trailer that ``maint``
                              approved: that step is accepted
c7    20 ms    1732   2.13.0  ``perfguard accept`` at c7 for dilated's forward time (no step)
====  =======  =====  ======  ================================================================

``improved`` stays at 8 ms and 300 ops throughout (no step, no flag).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from perfguard.measuring import commit_record
from perfguard.store import MachineRecord, ResultRecord, RunRecord, Store
from tests.helpers.project import git, perfguard

KEY = "cpu:Site CPU x2"
MACHINE = MachineRecord(key=KEY, kind="cpu", label="Site CPU (2 cores)")
FWD = "bench_attention.Forward.track_time"
OPS = "bench_attention.Work.track_forward_ops"
TRAILER_REASON = "the exact reference pass, on purpose"
TRAILER = f'Perfguard-Accept: dilated Work.* <=2.1 "{TRAILER_REASON}"'
COMMAND_REASON = "masking costs a pass; measured on an H100 too"
# (dilated ms, dilated ops, torch, message)
HISTORY = [
    (10, 433, "2.12.0", "c0"),
    (10, 433, "2.12.0", "c1"),
    (10, 433, "2.12.0", "c2"),
    (10, 433, "2.12.0", "c3"),
    (20, 866, "2.13.0", "c4 torch update"),
    (20, 866, "2.13.0", "c5"),
    (20, 1732, "2.13.0", f"c6 exact pass\n\n{TRAILER}\n"),
    (20, 1732, "2.13.0", "c7"),
]
FLAGGED_AT = 4
TRAILER_AT = 6
ACCEPT_AT = 7


def params(impl: str) -> dict[str, object]:
    return {"impl": impl, "seq_len": 512, "dtype": "float32"}


def runs(ms: float, ops: int, torch: str, seed: int) -> list[RunRecord]:
    """Three rounds: 60 forward samples each (1% noise) and the exact aten-op count, both impls."""
    rng = np.random.default_rng(seed)
    started = datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(hours=seed)
    out = []
    for r in range(3):
        results = []
        for impl, impl_ms, impl_ops in (("dilated", ms, ops), ("improved", 8, 300)):
            samples = [float(x) for x in impl_ms / 1000 * np.exp(rng.normal(0, 0.01, 60))]
            results += [
                ResultRecord(benchmark=FWD, impl=impl, params=params(impl), metric="time", unit="seconds",
                             direction="lower", gated=True, samples=samples, method="cpu-process-time"),
                ResultRecord(benchmark=OPS, impl=impl, params=params(impl), metric="ops", unit="aten ops",
                             direction="lower", gated=True, value=float(impl_ops), samples=[float(impl_ops)]),
            ]  # fmt: skip
        out.append(
            RunRecord(
                profile="quick",
                purpose="run",
                round=r,
                software={"torch": torch, "python": "3.11.2"},
                settings={"suite_version": 2},
                started_at=started + timedelta(minutes=r),
                finished_at=started + timedelta(minutes=r, seconds=30),
                results=results,
                trusted=True,
            )
        )
    return out


@dataclass
class BaselineBranch:
    repo: Path
    url: str
    shas: list[str]
    changes: list[dict[str, object]] = field(default_factory=list)  # perfguard changes --json, per commit


def build_baseline_branch(base: Path) -> BaselineBranch:
    """The history above: recorded, ``perfguard changes`` after each commit, one ``perfguard accept``."""
    repo = base / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    url = f"sqlite:///{base / 'history.db'}"
    branch = BaselineBranch(repo, url, [])
    for n, (ms, ops, torch, message) in enumerate(HISTORY):
        (repo / "code.py").write_text(f"# version {n}\n")
        git(repo, "add", "code.py")
        git(repo, "commit", "-q", "-m", message)
        sha = git(repo, "rev-parse", "HEAD")
        branch.shas.append(sha)
        with Store.open(url) as store:
            store.record_runs(MACHINE, commit_record(repo, sha), runs(ms, ops, torch, seed=n))
        if n == 0:
            continue
        report = base / f"changes-{n}.json"
        approval = ["--accept-approved-by", "maint"] if n == TRAILER_AT else []
        result = perfguard(repo, "changes", "--commit", sha, "--machine", KEY, "--profile", "quick",
                           "--json", str(report), *approval, db=url)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        branch.changes.append(json.loads(report.read_text()))
    accepted = perfguard(
        repo, "accept", "dilated", "Forward.track_time", "--max", "1.5", "--reason", COMMAND_REASON,
        "--commit", branch.shas[ACCEPT_AT], db=url,
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    return branch
