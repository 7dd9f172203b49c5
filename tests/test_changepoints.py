"""``perfguard changes``: steps on the baseline branch, flagged unless accepted, with their likely cause.

The history is written through the store API (runs with real per-call samples and work counts, and
the ``software`` each run recorded) for commits of a real git repository; ``perfguard changes`` and
``python -m perfguard.github changes`` run as the baseline workflow runs them.  The last test
records two real commits with ``perfguard run`` (a doubled forward planted on ``main``, no check in
between) and flags the step from the work metrics.

``main``'s history here (time of dilated's forward, its aten ops, torch):

====  =======  =====  ======  ==============================================================
c0-3  10 ms    433    2.12.0  steady
c4    5 ms     433    2.12.0  a fast blip (one lucky run)
c5    10 ms    433    2.12.0  back to normal: not a step (the recent history's median is 10 ms)
c6    20 ms    866    2.13.0  the step, with a torch update: flagged, cause named
c7    20 ms    866    2.13.0  steady after the step: not flagged again
c8    20 ms    1732   2.13.0  ops double again, with an approved ``Perfguard-Accept`` trailer
c9    –        –      –       not recorded (a burst of pushes)
c10   20 ms    3464   2.13.0  a step across the gap: the bisect command is suggested
====  =======  =====  ======  ==============================================================
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from perfguard.measuring import commit_record
from perfguard.store import MachineRecord, ResultRecord, RunRecord, Store
from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, planted, project_repo

KEY = "cpu:Test CPU x2"
MACHINE = MachineRecord(key=KEY, kind="cpu", label="Test CPU (2 cores)")
FWD = "bench_attention.Forward.track_time"
OPS = "bench_attention.Work.track_forward_ops"
PARAMS = {"impl": "dilated", "seq_len": 512, "dtype": "float32"}
TRAILER = 'Perfguard-Accept: dilated Work.* <=2.1 "the exact pass, on purpose"'
#: The baseline workflow's runs are trusted (issue 13's ``RunRecord.trusted``, where the store has it).
TRUSTED = {"trusted": True} if "trusted" in RunRecord.__dataclass_fields__ else {}
# (time in ms or None: not recorded, aten ops, torch version, message)
HISTORY = [
    (10, 433, "2.12.0", "c0"),
    (10, 433, "2.12.0", "c1"),
    (10, 433, "2.12.0", "c2"),
    (10, 433, "2.12.0", "c3"),
    (5, 433, "2.12.0", "c4 lucky"),
    (10, 433, "2.12.0", "c5"),
    (20, 866, "2.13.0", "c6 doubled"),
    (20, 866, "2.13.0", "c7"),
    (20, 1732, "2.13.0", f"c8 exact pass\n\n{TRAILER}\n"),
    (None, 0, "", "c9 unrecorded"),
    (20, 3464, "2.13.0", "c10"),
]


def runs(ms: float, ops: int, torch: str, seed: int) -> list[RunRecord]:
    """Three rounds: 60 forward samples each (1% noise) and the exact aten-op count."""
    rng = np.random.default_rng(seed)
    started = datetime(2026, 11, 1, tzinfo=timezone.utc) + timedelta(hours=seed)
    out = []
    for r in range(3):
        samples = [float(x) for x in ms / 1000 * np.exp(rng.normal(0, 0.01, 60))]
        results = [
            ResultRecord(benchmark=FWD, impl="dilated", params=PARAMS, metric="time", unit="seconds",
                         direction="lower", gated=True, samples=samples, method="cpu-process-time"),
            ResultRecord(benchmark=OPS, impl="dilated", params=PARAMS, metric="ops", unit="aten ops",
                         direction="lower", gated=True, value=float(ops), samples=[float(ops)]),
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
                **TRUSTED,
            )
        )
    return out


@dataclass
class Main:
    repo: Path
    db: str
    shas: list[str]


@pytest.fixture(scope="module")
def main(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Main]:
    base = tmp_path_factory.mktemp("changes")
    repo = base / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    db = f"sqlite:///{base / 'history.db'}"
    shas = []
    with Store.open(db) as store:
        for n, (ms, ops, torch, message) in enumerate(HISTORY):
            (repo / "code.py").write_text(f"# version {n}\n")
            git(repo, "add", "code.py")
            git(repo, "commit", "-q", "-m", message)
            sha = git(repo, "rev-parse", "HEAD")
            shas.append(sha)
            if ms is not None:
                store.record_runs(MACHINE, commit_record(repo, sha), runs(ms, ops, torch, seed=n))
    yield Main(repo, db, shas)


def changes(main: Main, n: int, *args: str, out: Path) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    result = perfguard(main.repo, "changes", "--commit", main.shas[n], "--machine", KEY, "--profile", "quick",
                       "--json", str(out / f"c{n}.json"), "--markdown", str(out / f"c{n}.md"), *args,
                       db=main.db)  # fmt: skip
    document = json.loads((out / f"c{n}.json").read_text()) if (out / f"c{n}.json").exists() else {}
    return result, document


def test_a_step_with_a_torch_update_is_flagged_and_the_update_named(main: Main, tmp_path: Path) -> None:
    result, document = changes(main, 6, "--exit-code", out=tmp_path)
    assert result.returncode == 1, result.stderr  # --exit-code: a flagged step
    assert document["previous"] == main.shas[5] and document["between"] == 1
    assert document["cause"] == "torch 2.12.0 → 2.13.0"
    steps = {s["benchmark"]: s for s in document["steps"]}
    assert set(steps) == {FWD, OPS} and document["flagged"] == 2
    assert steps[OPS]["ratio"] == 2.0 and steps[OPS]["before"] == 433 and steps[OPS]["after"] == 866
    assert 1.9 < steps[FWD]["ratio"] < 2.1
    assert all(s["flagged"] and s["cause"] == "torch 2.12.0 → 2.13.0" for s in steps.values())
    markdown = (tmp_path / "c6.md").read_text()
    assert markdown.startswith(f"### perfguard: 2 unaccepted step(s) at `{main.shas[6][:10]}` on {KEY}")
    assert "**Software changed between the two runs: torch 2.12.0 → 2.13.0** — the likely cause." in markdown
    assert "🔴 flagged" in markdown and "perfguard accept --commit" in markdown
    # stored for the site
    with Store.open(main.db) as store:
        stored = store.change_points(machine_key=KEY, sha=main.shas[6])
    assert {p.benchmark for p in stored} == {FWD, OPS} and all(p.flagged for p in stored)
    assert all(
        p.previous_sha == main.shas[5] and p.software_changes == {"torch": ["2.12.0", "2.13.0"]}
        for p in stored
    )
    # the job summary and the annotations, as the workflow step writes them
    summary = tmp_path / "summary.md"
    (tmp_path / "changes.json").write_text((tmp_path / "c6.json").read_text())
    (tmp_path / "changes.md").write_text(markdown)
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
    gh = subprocess.run([sys.executable, "-m", "perfguard.github", "changes", "--report-dir", str(tmp_path)],
                        capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert gh.returncode == 0, gh.stderr
    warnings = [line for line in gh.stdout.splitlines() if line.startswith("::warning")]
    assert len(warnings) == 2
    assert any("title=perfguard%3A dilated Work.track_forward_ops 2.00x worse at" in w for w in warnings)
    assert all("likely cause: torch 2.12.0 → 2.13.0" in w for w in warnings)
    assert summary.read_text() == markdown


def test_steady_commits_and_a_blip_are_not_steps(main: Main, tmp_path: Path) -> None:
    for n in (1, 5, 7):  # steady; back to normal after a fast blip; steady after the step
        result, document = changes(main, n, "--exit-code", out=tmp_path)
        assert result.returncode == 0, (n, result.stdout, result.stderr)
        assert document["steps"] == [] and document["flagged"] == 0, n
    # c5 against c4 alone would be a 2x step: the recent history's median (10 ms) says it is not
    assert (tmp_path / "c5.md").read_text().startswith("### perfguard: no step beyond the threshold")
    result, document = changes(main, 0, out=tmp_path)
    assert result.returncode == 0 and document["previous"] is None
    assert "first commit recorded" in document["note"]


def test_an_unrecorded_commit_is_a_usage_error(main: Main, tmp_path: Path) -> None:
    result, _ = changes(main, 9, out=tmp_path)
    assert result.returncode == 2 and "has no recorded run on machine key" in result.stderr
    assert "perfguard run --commit" in result.stderr


def test_a_maintainers_acceptance_after_the_fact_accepts_the_flag(main: Main, tmp_path: Path) -> None:
    changes(main, 7, out=tmp_path)  # (no step at c7)
    result, _ = changes(main, 6, out=tmp_path)
    assert result.returncode == 0
    why = "torch 2.13 runs the reference path"
    accepted = perfguard(main.repo, "accept", "--commit", main.shas[6], "dilated", "*", "--max", "2.2",
                         "--reason", why, "--by", "Mae", db=main.db)  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    assert "it accepts 2 flagged step(s)" in accepted.stderr
    with Store.open(main.db) as store:
        assert store.change_points(machine_key=KEY, sha=main.shas[6], flagged_only=True) == []
    # running the detection again keeps one row per series, still accepted (the acceptance is in range)
    result, document = changes(main, 6, "--exit-code", out=tmp_path)
    assert result.returncode == 0 and document["accepted"] == 2 and document["flagged"] == 0
    assert all(s["acceptance"]["author"] == "Mae" for s in document["steps"])
    assert "✅ accepted" in (tmp_path / "c6.md").read_text()
    with Store.open(main.db) as store:
        assert len(store.change_points(machine_key=KEY, sha=main.shas[6])) == 2
    listed = perfguard(main.repo, "changes", "--list", db=main.db)
    assert listed.returncode == 0 and "accepted by Mae" in listed.stdout


def test_a_trailer_counts_on_the_baseline_branch_only_when_approved(main: Main, tmp_path: Path) -> None:
    result, document = changes(main, 8, "--exit-code", out=tmp_path)
    assert result.returncode == 1 and document["flagged"] == 1
    [ignored] = document["ignored_acceptances"]
    assert ignored["sha"] == main.shas[8] and "not approved by a maintainer" in ignored["why"]
    result, document = changes(main, 8, "--exit-code", "--accept-approved-by", "maint", out=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [step] = document["steps"]
    assert step["benchmark"] == OPS and not step["flagged"]
    assert step["acceptance"]["approved_by"] == "maint" and step["acceptance"]["source"] == "trailer"
    assert step["acceptance"]["sha"] == main.shas[8] and step["acceptance"]["ceiling"] == 2.1
    with Store.open(main.db) as store:  # stored for the site, at the commit that brought it in
        [acceptance] = [a for a in store.acceptances([main.shas[8]]) if a.source == "trailer"]
    assert acceptance.trusted and acceptance.reason == "the exact pass, on purpose"
    assert acceptance.author == "Pat Author <pat@example.invalid>"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_an_approval_covers_only_the_commits_of_the_pull_request_it_approved(
    tmp_path: Path, db_url: str
) -> None:
    """Issue 27: the approval of the PR merged as M must not approve a trailer merged before it.

    main: c0 (recorded) -> c1, a squashed PR whose trailer nobody approved (``* * <=100``; its
    baseline run was lost) -> M, the merge of an approved PR whose branch commit b1 carries a
    trailer for the forward time only, and which doubles the aten ops.  ``changes`` at M with
    the approval compares M with c0, so c1 lies in the range; its trailer stays unapproved, the
    ops step stays flagged, and only b1's trailer is stored as approved.
    """
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "code.py").write_text("# c0\n")
    git(repo, "add", "code.py")
    git(repo, "commit", "-q", "-m", "c0")
    c0 = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "feature.py").write_text("# b1\n")
    git(repo, "add", "feature.py")
    git(repo, "commit", "-q", "-m", 'b1\n\nPerfguard-Accept: dilated Forward.* <=1.1 "the approved one"')
    b1 = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    (repo / "code.py").write_text("# c1\n")
    git(repo, "commit", "-q", "-am", 'c1 (#1)\n\nPerfguard-Accept: * * <=100 "nobody approved this"')
    c1 = git(repo, "rev-parse", "HEAD")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge pull request #2 from feature", "feature")
    merge = git(repo, "rev-parse", "HEAD")
    with Store.open(db_url) as store:
        store.record_runs(MACHINE, commit_record(repo, c0), runs(10, 433, "2.13.0", seed=0))
        store.record_runs(MACHINE, commit_record(repo, merge), runs(10, 866, "2.13.0", seed=1))
    result = perfguard(repo, "changes", "--commit", merge, "--machine", KEY, "--profile", "quick",
                       "--json", str(tmp_path / "m.json"), "--exit-code", "--accept-approved-by", "maint",
                       db=db_url)  # fmt: skip
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["previous"] == c0 and document["between"] == 2
    assert result.returncode == 1, result.stdout + result.stderr  # the ops step is not accepted
    [step] = document["steps"]
    assert step["benchmark"] == OPS and step["flagged"] and step["acceptance"] is None
    [ignored] = document["ignored_acceptances"]
    assert ignored["sha"] == c1 and ignored["text"].startswith("* * <=100")
    assert "maint's approval covers the commits of the pull request they approved" in ignored["why"]
    with Store.open(db_url) as store:
        stored = store.acceptances([c0, c1, b1, merge])
    assert [(a.sha, a.reason, a.approved_by, a.trusted) for a in stored] == [
        (merge, "the approved one", "maint", True)
    ]


def test_a_step_across_unrecorded_commits_suggests_the_bisection(main: Main, tmp_path: Path) -> None:
    result, document = changes(main, 10, out=tmp_path)
    assert result.returncode == 0
    assert document["previous"] == main.shas[8] and document["between"] == 2
    assert document["flagged"] == 1 and document["cause"] is None
    hint = document["bisect"]
    assert hint.startswith(f"perfguard bisect --good {main.shas[8][:12]} --bad {main.shas[10][:12]} --bench ")
    assert "Find the commit inside the gap" in (tmp_path / "c10.md").read_text()


@pytest.mark.slow
def test_a_planted_step_recorded_on_main_without_a_check_is_flagged(tmp_path: Path) -> None:
    """Two real ``perfguard run`` of main, the second after a doubled forward was pushed unchecked."""
    repo = project_repo(tmp_path / "project")
    db = f"sqlite:///{tmp_path / 'history.db'}"
    first = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db)
    assert first.returncode == 0, first.stderr
    quiet = perfguard(repo, "changes", "--json", str(tmp_path / "first.json"), db=db)
    assert quiet.returncode == 0, quiet.stderr
    assert "nothing to compare" in json.loads((tmp_path / "first.json").read_text())["note"]
    append_commit(repo, "attention/registry.py", planted(2), "registry: run the exact pass twice")
    second = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db)
    assert second.returncode == 0, second.stderr
    flagged = perfguard(repo, "changes", "--exit-code", "--json", str(tmp_path / "c.json"), db=db)
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    document = json.loads((tmp_path / "c.json").read_text())
    steps = document["steps"]
    assert {(s["impl"], s["metric"]) for s in steps} == {
        ("dilated", m) for m in ("flops", "ops", "allocated")
    }
    assert all(s["flagged"] and s["ratio"] == pytest.approx(2.0, rel=1e-9) for s in steps)
    assert document["cause"] is None  # the same software: the code is the cause
    assert "unaccepted step(s)" in flagged.stdout
