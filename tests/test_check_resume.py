"""Issue 27, item 8: an interrupted check keeps the rounds it finished, and the next check resumes.

Before: every round of a side was written in one transaction once all were measured, so Ctrl-C in
round 2 discarded round 1 and exited 2, like a usage error.  Now each round is stored the moment it
ends (its own transaction: a complete run of the store), Ctrl-C exits 130 and SIGTERM 143 with a
message naming what was kept, and the next check measures only the rounds each side still lacks.

``double`` makes ``dilated`` do twice the work: its work metrics regress exactly (ratio 2.000),
whatever the machine does, so the resumed check's verdict is certain.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.helpers.project import DOUBLE, append_commit, git, perfguard, project_repo

BENCH = r"Work\.track_forward_(flops|ops)\('dilated', 512,"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = project_repo(tmp_path_factory.mktemp("resume") / "project")
    git(repo, "checkout", "-q", "-b", "double")
    append_commit(repo, "attention/registry.py", DOUBLE, "dilated does twice the work")
    git(repo, "checkout", "-q", "main")
    return repo


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "double", "origin/double")
    return clone


def stored_rounds(db: str) -> dict[tuple[str, str], list[int]]:
    """(purpose, sha) -> the round numbers stored, each a complete run."""
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT r.purpose, c.sha, r.round, r.status FROM runs r JOIN commits c "
                    "ON c.id = r.commit_id ORDER BY r.id"
                )
            ).all()
    finally:
        engine.dispose()
    out: dict[tuple[str, str], list[int]] = {}
    for purpose, sha, round_, status in rows:
        assert status == "complete"
        out.setdefault((purpose, sha), []).append(int(round_))
    return out


def interrupted_then_resumed(repo: Path, db: str, tmp_path: Path, sig: int, code: int) -> None:
    base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "HEAD")
    env = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "perfguard", "check", "--baseline", "main", "--bench", BENCH,
               "--rounds", "3", "--no-verify"]  # fmt: skip
    terminal = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 (as test_check_cli says why)
    proc = subprocess.Popen(command, cwd=repo, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, preexec_fn=terminal)  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # A B B A: both sides finished round 1, HEAD's round 2 starts
        seen.append(line)
        if sum("round 1/3 done" in x for x in seen) == 2:
            break
    proc.send_signal(sig)
    rest = proc.stderr.read()
    log = "".join(seen) + rest
    assert proc.wait(timeout=300) == code, log  # 128 + the signal: never 1 (regression) nor 2 (usage)
    why = "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"
    kept = re.search(rf"interrupted \({why}\): kept the finished rounds \((.*)\); the round in progress", log)
    assert kept, log
    assert "resumes with the kept rounds" in log
    said = {
        part.split(" ", 1)[0]: part.rsplit(" round(s) ", 1)[1].split(", ")
        for part in kept.group(1).split("; ")
    }
    stored = stored_rounds(db)
    # what the message says is exactly what the store holds: round 1 of each side, maybe round 2 of one
    assert stored[("baseline", base)] == [int(r) - 1 for r in said["baseline"]], (stored, log)
    assert stored[("head", head)] == [int(r) - 1 for r in said["HEAD"]], (stored, log)
    assert stored[("baseline", base)][0] == 0 and stored[("head", head)][0] == 0
    kept_total = len(said["baseline"]) + len(said["HEAD"])
    assert 2 <= kept_total < 6

    out = tmp_path / "resumed.json"
    resumed = perfguard(repo, "check", "--baseline", "main", "--bench", BENCH, "--rounds", "3", "--no-verify",
                        "--json", str(out), db=db)  # fmt: skip
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # dilated's work doubled
    # HEAD resumes: only its missing rounds are measured, round numbers continue
    n = len(said["HEAD"])
    assert f"resuming with {n} stored round(s), measuring {3 - n} more" in resumed.stderr, resumed.stderr
    # the baseline's kept rounds were measured beside code that is not on main: stored untrusted
    # (docs/ci.md, "Trust model"), they are never a baseline, so the baseline is measured whole again
    assert "baseline" in resumed.stderr and "has no usable results" in resumed.stderr, resumed.stderr
    assert len(re.findall(r"round \d/3 done", resumed.stderr)) == 3 + (3 - n), resumed.stderr
    stored = stored_rounds(db)
    kept_base = [int(r) - 1 for r in said["baseline"]]
    assert sorted(stored[("baseline", base)]) == sorted([*kept_base, 0, 1, 2]), stored
    assert stored[("head", head)] == [0, 1, 2], stored
    assert 2 <= kept_total < 6
    items = json.loads(out.read_text())["items"]
    assert items and all(i["verdict"] == "regression" and i["ratio"] == pytest.approx(2.0) for i in items), (
        items
    )
    assert all(i["base_n"] == 3 and i["head_n"] == 3 for i in items), items  # 3 rounds a side, compared


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_an_interrupted_check_keeps_its_rounds_and_the_next_resumes_on_sqlite(
    repo: Path, tmp_path: Path, sig: int, code: int
) -> None:
    interrupted_then_resumed(repo, f"sqlite:///{tmp_path / 'history.db'}", tmp_path, sig, code)


@pytest.mark.slow
@pytest.mark.postgres
def test_an_interrupted_check_keeps_its_rounds_and_the_next_resumes_on_postgresql(
    repo: Path, tmp_path: Path, postgres_url: str
) -> None:
    interrupted_then_resumed(repo, postgres_url, tmp_path, signal.SIGINT, 130)
