"""Stored text reaches the terminal inert: no escape sequence from the store is ever printed raw.

A reason, an author or a cause is written by whoever wrote the store (a trailer, ``perfguard
accept``'s arguments, a commit's metadata); printed raw, ``ESC [2J`` clears the reader's screen and
an OSC 8 sequence plants a link that shows one text and opens another.  ``accept``, ``accept
--list`` and ``changes --list`` print it with every control character spelled out (``\\x1b``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.series import store_series

from perfguard.store import ChangePointRecord, CommitRecord, MachineRecord, Store
from tests.helpers.project import git, perfguard

CLEAR = "\x1b[2J\x1b[H"
OSC8 = "\x1b]8;;https://evil.example\x07click here\x1b]8;;\x07"
MACHINE = MachineRecord(key="cpu:Test CPU x2", kind="cpu", label="Test CPU")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_stored_text_is_printed_with_its_control_characters_visible(tmp_path: Path, db_url: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "c0")
    git(repo, "commit", "-q", "--allow-empty", "-m", "c1")
    c0, c1 = git(repo, "rev-list", "--reverse", "HEAD").split()
    env = {"GIT_AUTHOR_NAME": "Mae", "GIT_AUTHOR_EMAIL": "mae@example.invalid"}
    reason = f"on purpose {CLEAR}{OSC8}"
    store_series(db_url, c1, [("dilated", "bench_attention.Work.track_forward_ops")])
    accepted = perfguard(repo, "accept", "dilated", "Work.*", "--max", "2.5", "--reason", reason,
                         "--by", f"Mae {OSC8}", db=db_url, env=env)  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    with Store.open(db_url) as store:  # the step it accepts, with a cause that carries escapes too
        point = ChangePointRecord(benchmark="bench_attention.Work.track_forward_ops", impl=f"dilated{CLEAR}",
                                  params={"impl": "dilated"}, metric="ops", unit="aten ops",
                                  direction="lower", before=1.0, after=2.0, ratio=2.0, threshold=0.2,
                                  reason="2x", cause=f"torch {CLEAR}", software_changes={})  # fmt: skip
        commit = CommitRecord(
            sha=c1, base_sha=c1, committed_at=store.acceptances()[0].created_at, subject="c1"
        )
        previous = CommitRecord(sha=c0, base_sha=c0, committed_at=commit.committed_at, subject="c0")
        store.record_change_points(MACHINE, commit, previous, profile="quick", points=[point])
    listed = perfguard(repo, "accept", "--list", db=db_url)
    steps = perfguard(repo, "changes", "--list", db=db_url)
    for result in (accepted, listed, steps):
        assert result.returncode == 0, result.stderr
        shown = result.stdout + result.stderr
        assert "\x1b" not in shown and "\x07" not in shown, shown
    assert "\\x1b[2J" in accepted.stderr and "\\x1b]8;;https://evil.example\\x07" in listed.stdout
    assert "torch\\x1b[2J" in "".join(steps.stdout.split())
