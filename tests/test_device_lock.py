"""Issue 27, item 9: one measurement per GPU (or per CPU machine) at a time.

The holder is a real ``perfguard run`` whose benchmark blocks in its first forward call until the
test creates a file (``HOLD_ENV``), so every step happens at a moment the test chooses: while it
holds the lock, ``--no-wait`` exits 2 naming it (for ``run``, ``check``, ``bisect`` and
``calibrate``), and a second ``run`` waits, says so, and measures only after the holder's last round
ended (the stored rounds' start and end times).  A holder killed with SIGKILL leaves its benchmark
process behind, still holding the lock: the next command says so, and proceeds as soon as that
process ends (no stale lock: the kernel drops an flock with its last holder).

Each test has its own lock directory (``PERFGUARD_LOCK_DIR``), so that no other perfguard on the
machine can make it wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.helpers.project import ROOT, append_commit, git, perfguard, project_repo

BENCH = r"Work\.track_forward_ops\('dilated', 512,"
HOLD_ENV = "PERFGUARD_TEST_HOLD"

#: dilated's first forward call writes its pid to ``<dir>/holding`` and waits for ``<dir>/release``.
HOLD = f"""

# --- tests/test_device_lock.py: the first forward call waits for the test ---
import os as _hold_os
import time as _hold_time

_hold_build = ImplSpec.build


def _holding(self, *args, **kwargs):
    module = _hold_build(self, *args, **kwargs)
    where = _hold_os.environ.get("{HOLD_ENV}")
    if where and self.name == "dilated":
        forward = module.forward

        def held(*a, **k):
            with open(_hold_os.path.join(where, "holding"), "w") as fh:
                fh.write(str(_hold_os.getpid()))
            while not _hold_os.path.exists(_hold_os.path.join(where, "release")):
                _hold_time.sleep(0.05)
            return forward(*a, **k)

        module.forward = held
    return module


ImplSpec.build = _holding
"""


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = project_repo(tmp_path_factory.mktemp("lock") / "project")
    append_commit(repo, "attention/registry.py", HOLD, "the first forward waits for the test")
    return repo


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    return clone


def start_holder(repo: Path, db: str, locks: Path, hold: Path) -> subprocess.Popen[str]:
    """``perfguard run`` holding the CPU machine's lock, blocked in its first benchmark."""
    hold.mkdir()
    env = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1", "PERFGUARD_LOCK_DIR": str(locks),
           HOLD_ENV: str(hold), "PYTHONPATH": str(ROOT)}  # fmt: skip
    command = [sys.executable, "-m", "perfguard", "run", "--bench", BENCH, "--rounds", "1"]
    proc = subprocess.Popen(
        command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not (hold / "holding").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def runs(db: str) -> list[tuple[str, str]]:
    """(started_at, finished_at) of every stored round, oldest first."""
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT started_at, finished_at FROM runs ORDER BY started_at")).all()
    finally:
        engine.dispose()
    return [(str(a), str(b)) for a, b in rows]


def test_a_second_measurement_waits_or_exits_2_with_no_wait(repo: Path, tmp_path: Path) -> None:
    db, locks = f"sqlite:///{tmp_path / 'history.db'}", tmp_path / "locks"
    env = {"PERFGUARD_LOCK_DIR": str(locks)}
    holder = start_holder(repo, db, locks, tmp_path / "hold")
    try:
        busy = f"another measurement runs on this CPU machine: pid {holder.pid} (perfguard run --bench"
        for command in (
            ["run", "--bench", BENCH, "--rounds", "1"],
            ["check", "--baseline", "main", "--bench", BENCH, "--no-verify"],
            ["bisect", "--good", "HEAD~1", "--bad", "HEAD", "--bench", BENCH],
            ["calibrate", "--bench", BENCH, "--no-asv", "--planted", ""],
        ):
            refused = perfguard(repo, *command, "--no-wait", db=db, env=env)
            assert refused.returncode == 2, (command, refused.stdout + refused.stderr)
            assert busy in refused.stderr and "hint:" in refused.stderr, (command, refused.stderr)
            assert "Traceback" not in refused.stderr
        assert runs(db) == []  # none of them measured (nor stored) anything

        waiting_env = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1", **env,
                       "PYTHONPATH": str(ROOT)}  # fmt: skip
        command = [sys.executable, "-m", "perfguard", "run", "--bench", BENCH, "--rounds", "1"]
        second = subprocess.Popen(command, cwd=repo, env=waiting_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert second.stderr is not None
        line = second.stderr.readline()
        while line and "waiting for this CPU machine" not in line:
            line = second.stderr.readline()
        assert f"pid {holder.pid} (perfguard run --bench" in line and "--no-wait exits instead" in line, line
        (tmp_path / "hold" / "release").touch()
        assert holder.wait(timeout=300) == 0, holder.communicate()
        rest = second.stderr.read()
        assert second.wait(timeout=300) == 0, rest
        assert "this CPU machine is free after" in rest
    finally:
        (tmp_path / "hold" / "release").touch()
        if holder.poll() is None:
            holder.kill()
    (_, first_end), (second_start, _) = runs(db)
    assert second_start >= first_end  # measured one after the other, never side by side


def test_a_killed_holder_leaves_no_stale_lock(repo: Path, tmp_path: Path) -> None:
    db, locks = f"sqlite:///{tmp_path / 'history.db'}", tmp_path / "locks"
    env = {"PERFGUARD_LOCK_DIR": str(locks)}
    holder = start_holder(repo, db, locks, tmp_path / "hold")
    holder.send_signal(signal.SIGKILL)  # no cleanup at all; its benchmark process still measures
    holder.wait(timeout=60)
    refused = perfguard(repo, "run", "--bench", BENCH, "--rounds", "1", "--no-wait", db=db, env=env)
    assert refused.returncode == 2, refused.stderr
    assert f"a benchmark process left behind by pid {holder.pid}" in refused.stderr, refused.stderr
    assert "that process is gone" in refused.stderr
    orphan = int((tmp_path / "hold" / "holding").read_text())
    (tmp_path / "hold" / "release").touch()  # the orphan finishes its round and ends
    deadline = time.monotonic() + 300
    while Path(f"/proc/{orphan}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # the lock file still names the killed pid; the lock itself went with its last holder
    result = perfguard(repo, "run", "--bench", BENCH, "--rounds", "1", "--no-wait", db=db, env=env)
    assert result.returncode == 0, result.stderr
    assert "waiting" not in result.stderr
    assert len(runs(db)) == 1  # the killed run stored nothing; the new one its round
