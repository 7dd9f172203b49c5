"""``perfguard accept`` names what was measured, and ``perfguard accept --revoke ID`` takes one back.

Issue 30: ``accept rnig Forwrd.track_time --max 1.5 --reason x`` stored an acceptance that matched
nothing (exit 0), and there was no way to revoke one.  Real CLI, real git repository, real SQLite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from helpers.series import MACHINE, store_series

from perfguard.accept import find_acceptances
from perfguard.store import ChangePointRecord, CommitRecord, Store

ROOT = Path(__file__).resolve().parents[1]
FWD = "bench_attention.Forward.track_time"
OPS = "bench_attention.Work.track_forward_ops"


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "Mae", "GIT_AUTHOR_EMAIL": "mae@example.invalid", "GIT_COMMITTER_NAME": "Mae",
           "GIT_COMMITTER_EMAIL": "mae@example.invalid", "PATH": "/usr/bin:/bin"}  # fmt: skip
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def accept(repo: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PERFGUARD_DB", "PERFGUARD_UNTRUSTED")}
    env.update({"PERFGUARD_DB": db, "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-m", "perfguard", "accept", *args], cwd=repo, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Mae Maintainer")
    git(path, "config", "user.email", "mae@example.invalid")
    for k in range(2):
        git(path, "commit", "-q", "--allow-empty", "-m", f"c{k}")
    return path


def test_a_scope_that_names_no_stored_series_is_refused_with_the_known_names(
    repo: Path, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    blind = accept(repo, db, "ring", "Forward.track_time", "--max", "1.5", "--reason", "x")
    assert blind.returncode == 2 and "holds no measured series" in blind.stderr, blind.stderr
    store_series(db, git(repo, "rev-parse", "HEAD"), [("ring", FWD), ("dilated", FWD), ("dilated", OPS)])
    for args, message, hint in (
        (("rnig", "Forward.track_time"), "no stored implementation matches 'rnig'", "did you mean 'ring'?"),
        (("ring", "Forwrd.track_time"), "no stored benchmark matches 'Forwrd.track_time'",
         "did you mean 'Forward.track_time'?"),
        (("ring", "Work.*"), "'ring' has no stored benchmark matching 'Work.*'", "Forward.track_time"),
    ):  # fmt: skip
        refused = accept(repo, db, *args, "--max", "1.5", "--reason", "x")
        assert refused.returncode == 2, (args, refused.stderr)
        assert message in refused.stderr and hint in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    listed = accept(repo, db, "rnig", "Forward.track_time", "--max", "1.5", "--reason", "x").stderr
    assert "dilated, ring" in listed  # every stored implementation, sorted
    with Store.open(db) as store:
        assert store.acceptances() == []  # nothing written by a refused command
    # globs and the name with asv's module both match, as a check matches them
    for args in (("ring", FWD), ("*", "Work.track_forward_*"), ("dil*", "Forward.track_time")):
        done = accept(repo, db, *args, "--max", "1.5", "--reason", "intended")
        assert done.returncode == 0, (args, done.stderr)


def test_revoke_records_who_and_why_and_the_acceptance_stops_counting(repo: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    c0, c1 = git(repo, "rev-list", "--reverse", "HEAD").split()
    store_series(db, c0, [("dilated", OPS)])
    with Store.open(db) as store:  # a step at c1 that `perfguard changes` flagged
        step = ChangePointRecord(benchmark=OPS, impl="dilated", params={"impl": "dilated"}, metric="ops",
                                 unit="aten ops", direction="lower", before=1.0, after=2.0, ratio=2.0,
                                 threshold=0.2, reason="2x", cause="", software_changes={})  # fmt: skip
        now = datetime.now(timezone.utc)
        store.record_change_points(MACHINE, CommitRecord(sha=c1, base_sha=c1, committed_at=now),
                                   CommitRecord(sha=c0, base_sha=c0, committed_at=now), profile="quick",
                                   points=[step])  # fmt: skip
    recorded = accept(
        repo, db, "dilated", "Work.*", "--max", "2.5", "--reason", "an extra pass", "--commit", c1
    )
    assert recorded.returncode == 0, recorded.stderr
    with Store.open(db) as store:
        [acceptance] = store.acceptances()
        [point] = store.change_points()
        assert point.acceptance is not None and point.acceptance.id == acceptance.id  # it accepts the step

    for args, message in (
        (("--revoke", str(acceptance.id)), "needs a reason"),
        (("--revoke", "999", "--reason", "x"), "no acceptance #999"),
        (
            ("--revoke", str(acceptance.id), "dilated", "--reason", "x"),
            "--revoke takes an id and a reason only",
        ),
    ):
        refused = accept(repo, db, *args)
        assert refused.returncode == 2 and message in refused.stderr, (args, refused.stderr)

    revoked = accept(
        repo, db, "--revoke", str(acceptance.id), "--reason", "the pass was removed", "--by", "Lee"
    )
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked acceptance #{acceptance.id}" in revoked.stderr
    assert "revoked by Lee on " in revoked.stderr and "'the pass was removed'" in revoked.stderr
    with Store.open(db) as store:
        [stored] = store.acceptances()
        assert (stored.revoked_by, stored.revoked_reason) == ("Lee", "the pass was removed")
        assert stored.revoked_at is not None and not stored.counts
        [point] = store.change_points()
        assert point.acceptance is None and point.flagged  # the step it accepted is flagged again
        found = find_acceptances(repo, store, c0, c1)
    assert found.trusted == () and [i.why for i in found.ignored] == [stored.revocation]
    listed = accept(repo, db, "--list")
    assert listed.returncode == 0 and "revoked by Lee" in listed.stdout

    again = accept(repo, db, "--revoke", str(acceptance.id), "--reason", "twice")
    assert again.returncode == 2 and "already revoked" in again.stderr
    same = accept(repo, db, "dilated", "Work.*", "--max", "2.5", "--reason", "an extra pass", "--commit", c1)
    assert same.returncode == 2 and "revoked by Lee" in same.stderr, same.stderr
    with Store.open(db) as store:  # neither refusal wrote anything
        [stored_again] = store.acceptances()
        assert stored_again == stored and store.change_points()[0].flagged
