"""Issue 27, item 6: untrusted runs stay out of the published history and out of the history store.

- ``perfguard report --out`` draws trusted runs only (docs/ci.md: the published history is trusted):
  three untrusted rounds of main's tip with a hundred times the ops do not move its point;
- ``perfguard check --untrusted --results-db X --db X`` (one store for both) is refused, exit 2,
  before anything is measured, and the store is as it was;
- ``perfguard run`` under ``PERFGUARD_UNTRUSTED=1`` (as ``check --untrusted``): its rounds are
  untrusted runs in the results store; the history store is not written.

Real CLI, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from perfguard.measuring import commit_record
from perfguard.store import MachineRecord, ResultRecord, RunRecord, Store
from tests.helpers.project import WORK_BENCH, git, perfguard, project_repo

KEY = "cpu:History CPU x2"
MACHINE = MachineRecord(key=KEY, kind="cpu", label="History CPU (2 cores)")
OPS = "bench_attention.Work.track_forward_ops"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return str(request.getfixturevalue("postgres_url"))


def table_counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            names = inspect(conn).get_table_names()
            return {n: conn.execute(text(f'SELECT COUNT(*) FROM "{n}"')).scalar_one() for n in names}
    finally:
        engine.dispose()


def ops_runs(ops: float, *, trusted: bool, purpose: str = "run", rounds: int = 1) -> list[RunRecord]:
    now = datetime.now(timezone.utc)
    params = {"impl": "dilated", "seq_len": 512}
    result = ResultRecord(
        benchmark=OPS, impl="dilated", params=params, metric="ops", unit="aten ops", direction="lower",
        gated=True, samples=[ops],
    )  # fmt: skip
    settings = {"suite_version": 2}
    return [
        RunRecord(profile="quick", purpose=purpose, round=r, results=[result], trusted=trusted,
                  settings=settings, started_at=now, finished_at=now)
        for r in range(rounds)
    ]  # fmt: skip


def test_the_site_draws_trusted_runs_only(tmp_path: Path, db: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for n in range(3):
        (repo / "code.py").write_text(f"# version {n}\n")
        git(repo, "add", "code.py")
        git(repo, "commit", "-qm", f"c{n}")
        shas.append(git(repo, "rev-parse", "HEAD"))
        with Store.open(db) as store:
            store.record_runs(MACHINE, commit_record(repo, shas[-1]), ops_runs(433, trusted=True))
    # a check of a pull request measured main's tip next to the PR's code: untrusted baseline rounds
    with Store.open(db) as store:
        store.record_runs(
            MACHINE,
            commit_record(repo, shas[-1]),
            ops_runs(43300, trusted=False, purpose="baseline", rounds=3),
        )
    site = tmp_path / "site"
    result = perfguard(repo, "report", "--out", str(site), db=db)
    assert result.returncode == 0, result.stdout + result.stderr
    [series] = [s for s in json.loads((site / "data" / "history.json").read_text())["series"]
                if s["benchmark"] == OPS]  # fmt: skip
    assert series["points"]["sha"] == shas
    assert series["points"]["value"] == [433.0, 433.0, 433.0]


def test_one_store_for_history_and_results_is_refused(tmp_path: Path, db: str) -> None:
    repo = project_repo(tmp_path / "repo")
    Store.open(db).close()
    before = table_counts(db)
    git(repo, "checkout", "-q", "-b", "pr")
    for command in ("check", "run"):
        args = ("--baseline", "main") if command == "check" else ()
        refused = perfguard(repo, command, *args, "--bench", WORK_BENCH, "--untrusted", "--results-db", db,
                            db=db)  # fmt: skip
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "--results-db and --db name the same store" in refused.stderr and "hint:" in refused.stderr
        assert "round" not in refused.stderr  # refused before anything was measured
    assert table_counts(db) == before


def test_run_under_perfguard_untrusted_never_writes_the_history_store(tmp_path: Path, db: str) -> None:
    repo = project_repo(tmp_path / "repo")
    Store.open(db).close()
    before = table_counts(db)
    results = f"sqlite:///{tmp_path / 'results.db'}"
    env = {"PERFGUARD_UNTRUSTED": "1", "PERFGUARD_RESULTS_DB": results}
    ran = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "as untrusted runs (never a baseline)" in ran.stderr and "results.db" in ran.stderr
    assert table_counts(db) == before
    with Store.open(results) as store:
        sha = git(repo, "rev-parse", "HEAD")
        [run] = store.runs_for(store.machines()[0].key, sha, "quick")
        assert run.trusted is False and run.settings["trust"] == "untrusted"
