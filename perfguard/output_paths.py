"""Where perfguard's own outputs go: never where they would make the work tree dirty.

A work tree with an untracked file is not a commit: ``perfguard check`` measures it as
``HEAD+dirty`` (:mod:`perfguard.gitrepo`) and reuses nothing stored for HEAD.  So a report written
into the repository (``--html pr.html``, as the README used to suggest) made the next check measure
everything again (issue 27, item 10: 5 min 33 s instead of 3 min 28 s).

The rule: an output path inside a git work tree that would be a new, untracked file there (not
ignored, not tracked) is written under ``.perfguard/reports/`` of that work tree instead, at the same
relative path (``pr.html`` -> ``.perfguard/reports/pr.html``), and the command says where it wrote.
Paths outside any work tree, ignored ones (``site/`` where ``.gitignore`` says so, anything under
``.perfguard/``) and tracked ones are written as given: a tracked file is named on purpose, to be
updated and committed (``perfguard calibrate --markdown docs/perf/calibration.md``).
``.perfguard/`` ignores itself (a ``.gitignore`` of ``*`` in it, as pytest does for its cache), so
this holds in repositories whose ``.gitignore`` does not name it.

Why not leave the files where they were asked for and stop counting them as changes: a list of
"files perfguard wrote" would live in the work tree too, where code under review (which a check runs)
could add its own files to it and hide them from the dirty state.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: Where redirected outputs go, relative to the top of their work tree.
REPORTS_DIR = Path(".perfguard") / "reports"


def output_path(path: Path, *, directory: bool = False) -> Path:
    """The path to write the output asked for at ``path`` (see the module docstring).

    ``directory``: ``path`` is a directory (the history site), which matters for ignore patterns
    that name directories only (``/site/``).  ``-`` (stdout) is returned unchanged.
    """
    if str(path) == "-":
        return path
    target = Path(os.path.abspath(path))
    top = _work_tree_of(target)
    if top is None:
        return path
    relative = _relative_to(target, top)
    if relative is None or not relative.parts or relative.parts[0] == ".git":
        return path
    if _ignored(top, relative, directory=directory) or _tracked(top, relative):
        return path
    _ignore_itself(top / REPORTS_DIR.parent)
    return top / REPORTS_DIR / relative


def _work_tree_of(target: Path) -> Path | None:
    """The top of the git work tree holding ``target`` (which may not exist yet), or None."""
    existing = target.parent
    while not existing.is_dir():
        if existing.parent == existing:
            return None
        existing = existing.parent
    proc = _git(existing, "rev-parse", "--show-toplevel")
    if proc is None or proc.returncode != 0 or not proc.stdout.strip():
        return None
    return Path(proc.stdout.strip())


def _relative_to(target: Path, top: Path) -> Path | None:
    """``target`` relative to ``top``, symlinks in its existing part resolved as git resolves them."""
    existing, rest = target, []
    while not existing.exists() and existing.parent != existing:
        rest.insert(0, existing.name)
        existing = existing.parent
    try:
        return Path(os.path.realpath(existing)).relative_to(os.path.realpath(top)).joinpath(*rest)
    except ValueError:
        return None


def _ignored(top: Path, relative: Path, *, directory: bool) -> bool:
    """Whether git ignores ``relative`` in the work tree ``top`` (a tracked file is never ignored)."""
    name = relative.as_posix() + ("/" if directory else "")
    proc = _git(top, "check-ignore", "-q", "--", name)
    return proc is not None and proc.returncode == 0


def _tracked(top: Path, relative: Path) -> bool:
    """Whether git tracks ``relative`` in the work tree ``top`` (a directory: any file under it)."""
    proc = _git(top, "ls-files", "-z", "--", relative.as_posix())
    return proc is not None and proc.returncode == 0 and bool(proc.stdout.strip("\x00"))


def _ignore_itself(directory: Path) -> None:
    """A ``.gitignore`` of ``*`` in perfguard's directory, so that nothing in it is ever a change."""
    marker = directory / ".gitignore"
    if marker.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    marker.write_text("# written by perfguard: its outputs and stores are never part of the code\n*\n")


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
