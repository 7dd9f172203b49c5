"""Issue 27, item 2: a maintainer's local check of a pull request cannot poison the history store.

``perfguard check --baseline main`` without ``--untrusted`` runs the branch's code in its own rounds,
next to the merge-base's git worktree.  Two rules (docs/ci.md, "Trust model"):

- **each side's tree is checked after every round**: a branch whose code rewrites the merge-base's
  worktree (here: makes ``improved`` do twice the work there) stops the check with exit 2, naming
  the file, and nothing of it is stored;
- **a check whose HEAD is not on the baseline branch stores nothing trusted**: its rounds, the
  baseline's included, are untrusted runs (never a baseline), so the next check measures the
  merge-base again; an A/A check on the baseline branch stores trusted runs as before.

Real CLI, real git repositories, SQLite and PostgreSQL; the work metrics only (exact), one or two
rounds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, planted, project_repo

#: Appended to the branch's registry: imported in HEAD's round (the work tree, not a worktree), it
#: makes every other worktree of the repository (the merge-base's, beside it) do twice the work in
#: ``improved``, after making the file writable again.
POISON = f"""

# --- tests/test_side_isolation.py: a pull request that rewrites the baseline beside it ---
import os as _poison_os
import subprocess as _poison_sp
from pathlib import Path as _PoisonPath

_poison_here = _PoisonPath(__file__).resolve().parents[1]
if _poison_os.environ.get("PERFGUARD_PROFILE") and not (_poison_here / ".git").is_file():
    _poison_list = _poison_sp.run(
        ["git", "-C", str(_poison_here), "worktree", "list", "--porcelain"],
        capture_output=True, text=True, check=False,
    ).stdout
    for _poison_line in _poison_list.splitlines():
        if not _poison_line.startswith("worktree "):
            continue
        _poison_tree = _PoisonPath(_poison_line[len("worktree "):])
        if _poison_tree.resolve() == _poison_here:
            continue
        _poison_file = _poison_tree / "attention" / "registry.py"
        if _poison_file.is_file() and "_planted_2poison" not in _poison_file.read_text():
            _poison_file.chmod(0o644)
            with _poison_file.open("a") as _poison_fh:
                _poison_fh.write({planted(2, "poison", impls=("improved",))!r})
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return str(request.getfixturevalue("postgres_url"))


def runs_by_sha(db: str) -> dict[str, list[tuple[str, bool]]]:
    """(purpose, trusted) of every stored run, by commit sha."""
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT c.sha, r.purpose, r.trusted FROM runs r JOIN commits c ON c.id = r.commit_id")
            ).all()
    finally:
        engine.dispose()
    found: dict[str, list[tuple[str, bool]]] = {}
    for sha, purpose, trusted in rows:
        found.setdefault(sha, []).append((purpose, bool(trusted)))
    return found


@pytest.mark.slow
def test_a_branch_that_rewrites_the_baseline_beside_it_stops_the_check(tmp_path: Path, db: str) -> None:
    repo = project_repo(tmp_path / "repo")
    main = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "pr")
    append_commit(repo, "attention/registry.py", POISON, "a pull request")
    result = perfguard(repo, "check", "--baseline", "main", "--bench", WORK_BENCH, "--rounds", "2",
                       "--no-verify", db=db)  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "changed while this check measured it" in result.stderr
    assert f"baseline {main[:10]}" in result.stderr and "attention/registry.py" in result.stderr
    assert "nothing measured since the last round is stored" in result.stderr and "hint:" in result.stderr
    # rounds are stored as they end (issue 27 item 8): only the baseline's first round, checked
    # unchanged when it ended, and untrusted (measured beside a branch); nothing of HEAD's round
    # after which the baseline's tree had changed, and nothing trusted
    assert runs_by_sha(db) in ({}, {main: [("baseline", False)]}), runs_by_sha(db)
    # and the worktree perfguard made is gone, read-only files and all
    assert git(repo, "worktree", "list").count("\n") == 0


# SQLite only: which runs are trusted is decided by the check, and the flag is stored and read back
# by the store, tested on both backends (tests/test_store_trust.py); this flow's PostgreSQL twin cost
# ~30-50 s of the suite's 2 cores (docs/perf/test_suite.md).  The test above still runs on both.
@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_local_check_of_a_branch_stores_nothing_trusted(tmp_path: Path, db: str) -> None:
    repo = project_repo(tmp_path / "repo")
    main = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    feature = append_commit(repo, "attention/registry.py", planted(2), "twice the work")
    args = ("--bench", WORK_BENCH, "--rounds", "1", "--no-verify")
    first = perfguard(repo, "check", "--baseline", "main", *args, db=db)
    assert first.returncode == 1, first.stdout + first.stderr  # dilated: twice the work
    assert "is not on main" in first.stderr and "stored untrusted, never a baseline" in first.stderr
    stored = runs_by_sha(db)
    assert stored == {main: [("baseline", False)], feature: [("head", False)]}
    # the baseline measured next to the branch is not reused as one: measured again
    again = perfguard(repo, "check", "--baseline", "main", *args, db=db)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "has no usable results for this machine key: measuring it" in again.stderr
    # on the baseline branch itself (an A/A check) the rounds are trusted, as before
    git(repo, "checkout", "-q", "main")
    aa = perfguard(repo, "check", "--baseline", "main", *args, db=db)
    assert aa.returncode == 0, aa.stdout + aa.stderr
    assert "is not on main" not in aa.stderr
    assert sorted(runs_by_sha(db)[main]) == [("baseline", False)] * 2 + [("baseline", True), ("head", True)]
