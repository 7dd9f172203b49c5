"""The steps of the baseline branch, as functions: ``changes`` detects and stores them,
``change_points`` lists them (:mod:`perfguard.api`; docs/living-with-regressions.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfguard.changepoints import Detection
    from perfguard.store import StoredChangePoint


def changes(
    commit: str = "HEAD",
    *,
    machine: str | None = None,
    profile: str = "auto",
    threshold: float | None = None,
    window: int = 5,
    approved_by: str | None = None,
    db: str | None = None,
    cwd: Path | None = None,
) -> Detection:
    """``perfguard changes``: the steps of a recorded commit of the baseline branch against the history
    of its machine key (``machine``: default this machine's), stored; ``detection.exit_code`` is 1
    when one is flagged (no trusted acceptance covers it)."""
    from perfguard.changepoints import detect, history_of
    from perfguard.config import find_pyproject, load_config
    from perfguard.gitrepo import repo_root, rev_parse
    from perfguard.store import Store

    root = repo_root(cwd)
    config = load_config(find_pyproject(root), threshold=threshold)
    sha = rev_parse(root, commit)
    key, profile_name = history_of(machine, profile)
    with Store.open(db, cwd=root) as store:
        return detect(
            store, root, machine_key=key, sha=sha, profile=profile_name, config=config, window=window,
            approved_by=approved_by,
        )  # fmt: skip


def change_points(
    *, machine: str | None = None, flagged: bool = False, db: str | None = None, cwd: Path | None = None
) -> list[StoredChangePoint]:
    """``perfguard changes --list``: the stored steps (``flagged``: only those nobody accepted)."""
    from perfguard.gitrepo import repo_root
    from perfguard.store import Store

    with Store.open(db, cwd=repo_root(cwd)) as store:
        return store.change_points(machine_key=machine, flagged_only=flagged)
