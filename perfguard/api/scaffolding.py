"""``perfguard init`` as a function: what a repository needs to be guarded (:mod:`perfguard.scaffold`)."""

from __future__ import annotations

from pathlib import Path

from perfguard.scaffold import InitOutcome


def init(
    *, package: str | None = None, source: str | None = None, cwd: str | Path | None = None
) -> InitOutcome:
    """Write asv.conf.json, the asv suite, ``[tool.perfguard]``, a registry stub and the workflows
    into the repository ``cwd`` (default: the current directory's); never overwrites a file."""
    from perfguard.gitrepo import repo_root
    from perfguard.scaffold import init_repository

    root = repo_root(Path(cwd) if cwd is not None else None)
    return init_repository(root, package, source)
