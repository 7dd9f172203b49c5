"""Issue 27, item 4: a pull request cannot ship its own history store.

A PR force-adds ``.perfguard/history.db`` (git-ignored, but tracked once added with ``-f``) holding
fake runs of main's commit with eight times the work.  Checked out, it stands where perfguard's
default store is.  Then:

- every command refuses a store that git tracks (exit 2, saying how to untrack it or where else to
  keep the store), and writes nothing to it;
- ``perfguard check --untrusted`` without ``--db``/``PERFGUARD_DB`` (the PR workflow on a runner
  without a baseline store) never opens the default store inside the work tree under review: the
  baseline is measured, so the PR's 4x work is a regression (exit 1), not "an improvement" read
  from its own baselines (exit 0).

SQLite only: a PostgreSQL store cannot be inside a work tree.  Work metrics only (exact), one round.
"""

from __future__ import annotations

import hashlib
import shutil
from datetime import datetime, timezone
from pathlib import Path

from perfguard.measuring import commit_record
from perfguard.profiles import SUITE_VERSION
from perfguard.store import MachineRecord, ResultRecord, RunRecord, Store
from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, planted, project_repo

NO_DB = {"PERFGUARD_DB": "", "PERFGUARD_RESULTS_DB": ""}


def plant_slow_main(store_url: str, repo: Path, sha: str) -> None:
    """Ten trusted runs of ``sha`` with eight times the work of the one stored there."""
    with Store.open(store_url) as store:
        [run] = store.runs_for(store.machines()[0].key, sha, "quick")
        key = store.machines()[0].key
        stored = store.results_for(key, sha, "quick")
        now = datetime.now(timezone.utc)
        results = [
            ResultRecord(benchmark=r.benchmark, impl=r.impl, params=dict(r.params), metric=r.metric,
                         unit=r.unit, direction=r.direction, gated=r.gated, method=r.method,
                         info=dict(r.info), samples=[s * 8.0 for s in (r.samples or [r.value])])
            for rounds in stored.values() for r in rounds[:1] if r.status == "ok"
        ]  # fmt: skip
        runs = [RunRecord(profile="quick", purpose="run", round=i, trusted=True, results=results,
                          settings=dict(run.settings), started_at=now, finished_at=now)
                for i in range(10)]  # fmt: skip
        assert run.settings["suite_version"] == SUITE_VERSION
        store.record_runs(MachineRecord(key=key, kind="cpu", label=key), commit_record(repo, sha), runs)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_store_shipped_by_a_pull_request_is_never_read(tmp_path: Path) -> None:
    repo = project_repo(tmp_path / "repo")
    main = git(repo, "rev-parse", "HEAD")
    shipped = tmp_path / "shipped.db"
    recorded = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=f"sqlite:///{shipped}")
    assert recorded.returncode == 0, recorded.stderr
    plant_slow_main(f"sqlite:///{shipped}", repo, main)

    git(repo, "checkout", "-q", "-b", "pr")
    append_commit(repo, "attention/registry.py", planted(4), "four times the work")
    store = repo / ".perfguard" / "history.db"
    store.parent.mkdir()
    shutil.copy(shipped, store)
    git(repo, "add", "-f", ".perfguard/history.db")
    git(repo, "commit", "-qm", "ship a history store")
    before = digest(store)

    # a maintainer's local check, run, history: refused, nothing written
    args = ("--bench", WORK_BENCH, "--rounds", "1", "--no-verify")
    for command in (("check", "--baseline", "main", *args), ("run", "--bench", WORK_BENCH), ("history",)):
        refused = perfguard(repo, *command, db="", env=NO_DB)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "is tracked by git" in refused.stderr, refused.stderr
        assert "rm --cached history.db" in refused.stderr and "PERFGUARD_DB" in refused.stderr
    # also when named explicitly
    named = perfguard(repo, "history", db=f"sqlite:///{store}")
    assert named.returncode == 2 and "is tracked by git" in named.stderr, named.stderr
    assert digest(store) == before

    # the PR job on a runner without a baseline store: the shipped one is not opened
    results = tmp_path / "results.db"
    untrusted = ("--untrusted", "--results-db", f"sqlite:///{results}")
    check = perfguard(repo, "check", "--baseline", "main", *args, *untrusted, db="", env=NO_DB)
    assert check.returncode == 1, check.stdout + check.stderr  # 4x the work: a regression
    assert "an untrusted check never reads" in check.stderr and "measuring it" in check.stderr
    assert digest(store) == before
