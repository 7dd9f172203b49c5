"""perfguard.gitrepo against what issue 13 found: killed processes' leftovers (D7) and a store
inside the work tree that made every measurement ``+dirty`` (D8).  Real git repositories, real
processes killed with SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfguard.gitrepo import (
    OWNER_FILE,
    Owner,
    checkout,
    cleanup_stale,
    rev_parse,
    scratch_dir,
    work_tree,
)
from perfguard.store import Store

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    "GIT_AUTHOR_NAME": "perfguard test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "perfguard test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **ENV}, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "code.py").write_text("x = 1\n")
    git(path, "add", "code.py")
    git(path, "commit", "-q", "-m", "one")
    (path / "code.py").write_text("x = 2\n")
    git(path, "commit", "-q", "-am", "two")
    return path


def registered(repo: Path) -> list[Path]:
    out = git(repo, "worktree", "list", "--porcelain")
    return [Path(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("worktree ")][1:]


def made(repo: Path) -> list[Path]:
    """Linked worktrees that `git worktree add` has finished: while it runs, the worktree is listed
    as ``locked`` ("initializing"), and a `git worktree add` whose parent dies then (its output pipe
    closed) removes it again, so a test that kills perfguard must wait past that point."""
    out = git(repo, "worktree", "list", "--porcelain")
    blocks = [block.splitlines() for block in out.strip().split("\n\n")][1:]
    return [
        Path(lines[0].split(" ", 1)[1])
        for lines in blocks
        if lines and not any(line == "locked" or line.startswith("locked ") for line in lines)
    ]


# --- D8: the store's own files are not changes ---------------------------------------------------


def test_a_store_inside_the_work_tree_does_not_make_it_dirty(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    clean = work_tree(repo)
    assert not clean.dirty
    with Store.open("sqlite:///relative.db") as store:  # relative to the working directory
        store.get_or_create_machine("m", "cpu", "m", {})
        Store.open("sqlite:///relative.db", read_only=True).close()  # a reader leaves -wal/-shm
        (repo / "relative.db-journal").write_bytes(b"")  # and a rollback journal may exist
        assert {p.name for p in store.files} == {
            "relative.db",
            "relative.db-wal",
            "relative.db-shm",
            "relative.db-journal",
        }
        assert (repo / "relative.db").exists() and (repo / "relative.db-shm").exists()
        assert work_tree(repo).dirty  # what D8 was: every run +dirty
        assert work_tree(repo, ignore=store.files) == clean

        # A real change is still a change, with the same key as without the store's files.
        (repo / "code.py").write_text("x = 3\n")
        (repo / "new.py").write_text("y = 1\n")
        with_store = work_tree(repo, ignore=store.files)
    for suffix in ("", "-wal", "-shm", "-journal"):
        (repo / f"relative.db{suffix}").unlink(missing_ok=True)
    without_store = work_tree(repo)
    assert with_store.dirty and with_store == without_store
    assert with_store.changed == ("code.py", "new.py")


def test_ignored_paths_outside_the_work_tree_or_with_odd_names(repo: Path, tmp_path: Path) -> None:
    odd = repo / "we[ir]d*.db"
    odd.write_bytes(b"x")
    (repo / "other.db").write_bytes(b"y")
    tree = work_tree(repo, ignore=[odd, tmp_path / "elsewhere.db", repo])
    assert tree.changed == ("other.db",)  # the glob characters matched literally, nothing else


# --- D7: what a killed perfguard leaves behind ---------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from perfguard.gitrepo import checkout, scratch_dir
root, sha, parent = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
work = scratch_dir(parent)
(work / "round-1").mkdir()
(work / "round-1" / "attention").symlink_to(root, target_is_directory=True)  # like an import shim
with checkout(root, sha, work) as tree:
    print(work, tree, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def hold_worktree(
    repo: Path, sha: str, parent: Path, holders: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], Path, Path]:
    """A process that made a scratch directory and a worktree in it, and waits (killed by the test)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(repo), sha, str(parent)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    holders.append(proc)
    assert proc.stdout is not None
    work, tree = proc.stdout.readline().split()
    return proc, Path(work), Path(tree)


def test_cleanup_removes_what_a_killed_process_left_and_nothing_else(
    repo: Path, tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    sha = rev_parse(repo, "HEAD~1")
    killed, killed_work, killed_tree = hold_worktree(repo, sha, scratch, holders)
    alive, alive_work, alive_tree = hold_worktree(repo, sha, scratch, holders)
    other_tool = scratch / "perfguard-pg-cluster"  # not ours (no owner file): e.g. the tests' PostgreSQL
    other_tool.mkdir()
    (other_tool / "data").write_text("keep me")
    assert set(registered(repo)) == {killed_tree, alive_tree}

    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed_tree.is_dir() and killed_work.is_dir()  # what D7 was: left behind, still registered

    done = cleanup_stale(repo, scratch_parent=scratch)
    assert done.worktrees == [killed_tree]
    assert done.scratch_dirs == [killed_work]
    assert (other_tool, "no owner file") in done.kept
    assert "removed 1 git worktree(s) and 1 scratch directory(ies)" in done.describe()
    assert not killed_work.exists()
    assert registered(repo) == [alive_tree]  # the live run keeps its worktree and scratch space
    assert alive_tree.is_dir() and (alive_work / OWNER_FILE).is_file()
    assert (other_tool / "data").read_text() == "keep me"
    assert (repo / "code.py").read_text() == "x = 2\n"  # the import-shim symlink was not followed

    again = cleanup_stale(repo, scratch_parent=scratch)
    assert not again and again.describe() == ""

    alive.send_signal(signal.SIGKILL)
    alive.wait()
    assert cleanup_stale(repo, scratch_parent=scratch).scratch_dirs == [alive_work]
    assert registered(repo) == []


def test_a_worktree_whose_directory_is_gone_is_pruned(repo: Path, tmp_path: Path) -> None:
    parent = scratch_dir(tmp_path)
    with checkout(repo, rev_parse(repo, "HEAD~1"), parent) as tree:
        shutil.rmtree(tree)
        assert registered(repo) == [tree]
        cleanup_stale(repo, scratch_parent=tmp_path)
        assert registered(repo) == []
    # our own live scratch directory survives a cleanup
    assert parent.is_dir()


def test_a_reused_pid_is_not_the_owner() -> None:
    me = Owner.current()
    assert me.alive()
    if me.started is None:
        pytest.skip("no /proc here: start times are unknown")
    assert not Owner(me.pid, me.started + 1).alive()  # same pid, another process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not Owner(child.pid).alive()


def test_a_killed_perfguard_run_commit_is_cleaned_up_by_the_next_command(tmp_path: Path) -> None:
    """D7 end to end: `perfguard run --commit REF` killed with SIGKILL while it measures."""
    project = tmp_path / "project"
    for name in (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    ):
        if name and (ROOT / name).is_file():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, project / name)
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "base")
    (project / "README.md").write_text("changed\n")
    git(project, "commit", "-q", "-am", "head")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"},
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(scratch),  # where perfguard makes its perfguard-* scratch directory
        "PERFGUARD_DB": f"sqlite:///{tmp_path / 'history.db'}",
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "perfguard", "run", "--commit", "HEAD~1", "--profile", "quick"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not made(project):  # wait until it has made its worktree of HEAD~1
            assert run.poll() is None, "perfguard run ended before making its worktree"
            assert time.monotonic() < deadline, "perfguard run made no worktree within 120 s"
            time.sleep(0.1)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    (tree,) = registered(project)
    leftovers = [p for p in scratch.iterdir() if p.name.startswith("perfguard-")]
    assert tree.is_dir() and leftovers

    # The next command cleans up: a real `perfguard run` of one cheap benchmark, in the same TMPDIR.
    bench = r"Work\.track_forward_flops\('dilated', 512,"
    after = subprocess.run(
        [sys.executable, "-m", "perfguard", "run", "--commit", "HEAD~1", "--profile", "quick",
         "--bench", bench, "--rounds", "1"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert after.returncode == 0, after.stdout + after.stderr
    assert "left by perfguard processes that were killed" in after.stderr, after.stderr
    assert registered(project) == [] and not any(p.exists() for p in leftovers)
    assert not [p for p in scratch.iterdir() if p.name.startswith("perfguard-")]  # its own is gone too


def test_a_locked_worktree_of_a_killed_process_is_removed_for_real(
    repo: Path, tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    """Issue 27: a kill inside ``git worktree add`` leaves the worktree locked ("initializing");
    git neither removes nor prunes a locked one, yet "removed 1 git worktree(s)" was printed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    killed, killed_work, killed_tree = hold_worktree(repo, rev_parse(repo, "HEAD~1"), scratch, holders)
    subprocess.run(["git", "-C", str(repo), "worktree", "lock", "--reason", "initializing", str(killed_tree)],
                   check=True)  # fmt: skip
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    # and one whose directory is already gone, locked too, named as checkout() names them with
    # a pid no process can have
    pid_max = (
        int(Path("/proc/sys/kernel/pid_max").read_text())
        if Path("/proc/sys/kernel/pid_max").exists()
        else 2**22
    )
    ghost = tmp_path / f"worktree-{'a' * 12}-{pid_max + 1}"
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(ghost), "HEAD"], check=True
    )
    subprocess.run(["git", "-C", str(repo), "worktree", "lock", str(ghost)], check=True)
    shutil.rmtree(ghost)
    assert set(registered_all(repo)) == {killed_tree, ghost}

    done = cleanup_stale(repo, scratch_parent=scratch)
    assert registered_all(repo) == []  # git lists neither any more
    assert sorted(done.worktrees) == sorted([killed_tree, ghost]) and done.stuck == []
    assert done.scratch_dirs == [killed_work] and not killed_tree.exists()
    assert done.describe().startswith("removed 2 git worktree(s) and 1 scratch directory(ies)")


def registered_all(repo: Path) -> list[Path]:
    """Every linked worktree git lists, even where its directory is gone."""
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [Path(line[9:]) for line in out.splitlines() if line.startswith("worktree ")][1:]
