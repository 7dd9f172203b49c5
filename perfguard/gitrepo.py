"""The git facts perfguard needs: which commit is which, whether the tree is dirty, worktrees.

Every call runs ``git`` with a fixed locale and no pager, and every failure a user can fix (not a
repository, an unknown ref, a shallow clone without the merge-base) is a :class:`GitError` whose
hint says what to do (exit 2).

A dirty work tree is not a commit: it is measured as HEAD plus the changes and stored as
``<head sha>+dirty.<12 hex>``, the hex being a hash of ``git diff HEAD`` and of the untracked
files, so the same changes map to the same key and different ones never collide.  It is never used
as a baseline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from perfguard.errors import GitError

_ENV = {"LC_ALL": "C", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def git(root: Path, *args: str, check: bool = True, binary: bool = False) -> str | bytes:
    """Run ``git -C root args``; stdout (text unless ``binary``); GitError with git's message on failure."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            env={**os.environ, **_ENV},
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed", hint="install git; perfguard compares commits") from None
    if check and proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip() or f"git {' '.join(args)} failed"
        raise GitError(f"git {' '.join(args)}: {message}")
    return proc.stdout if binary else proc.stdout.decode(errors="replace").strip()


def _text(root: Path, *args: str, check: bool = True) -> str:
    out = git(root, *args, check=check)
    assert isinstance(out, str)
    return out


@dataclass(frozen=True)
class CommitInfo:
    """A commit's identity and the facts the store keeps about it."""

    sha: str
    parents: tuple[str, ...]
    subject: str
    author: str
    committed_at: datetime


@dataclass(frozen=True)
class WorkTree:
    """HEAD of a work tree and, when it has uncommitted changes, their key."""

    head: str
    dirty_hash: str | None  # 12 hex of the changes, None when clean
    changed: tuple[str, ...]  # paths with changes (for the message)

    @property
    def dirty(self) -> bool:
        return self.dirty_hash is not None

    @property
    def key(self) -> str:
        """The sha the store keeps: the commit, or ``<sha>+dirty.<hash>``."""
        return f"{self.head}+dirty.{self.dirty_hash}" if self.dirty_hash else self.head


def repo_root(cwd: Path | None = None) -> Path:
    """The top of the git work tree containing ``cwd``."""
    start = Path(cwd or Path.cwd())
    try:
        out = _text(start, "rev-parse", "--show-toplevel")
    except GitError:
        raise GitError(
            f"{start} is not inside a git repository",
            hint="run perfguard from a clone of the project it guards (it compares commits)",
        ) from None
    return Path(out)


def rev_parse(root: Path, rev: str, *, what: str = "revision") -> str:
    """The full sha of ``rev``; a GitError that says how to get it when it is unknown."""
    out = _text(
        root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False
    )
    if not out:
        hint = (
            f"check the name; for a remote branch fetch it first (git fetch origin {rev.split('/')[-1]}); "
            "in GitHub Actions check out with fetch-depth: 0"
        )
        raise GitError(f"unknown {what} {rev!r}: it is not a commit in {root}", hint=hint)
    return out


def merge_base(root: Path, a: str, b: str) -> str:
    """The best common ancestor of two commits (the baseline of a pull request)."""
    out = _text(root, "merge-base", a, b, check=False)
    if not out:
        shallow = _text(root, "rev-parse", "--is-shallow-repository", check=False) == "true"
        raise GitError(
            f"{a[:12]} and {b[:12]} have no common ancestor here",
            hint="the clone is shallow: fetch the full history (git fetch --unshallow, or fetch-depth: 0)"
            if shallow
            else "compare with a branch that shares history with HEAD",
        )
    return out


def commit_info(root: Path, sha: str) -> CommitInfo:
    """Parents, subject, author and committer date of a commit."""
    out = _text(root, "show", "-s", "--format=%H%x00%P%x00%s%x00%an <%ae>%x00%ct", sha)
    full, parents, subject, author, stamp = out.split("\x00")
    return CommitInfo(
        sha=full,
        parents=tuple(parents.split()),
        subject=subject,
        author=author,
        committed_at=datetime.fromtimestamp(int(stamp), tz=timezone.utc),
    )


def current_branch(root: Path) -> str | None:
    """The checked-out branch, or None on a detached HEAD."""
    out = _text(root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return out or None


def work_tree(root: Path) -> WorkTree:
    """HEAD and the state of the work tree (tracked changes and untracked, not ignored, files)."""
    head = rev_parse(root, "HEAD", what="HEAD")
    raw = git(root, "status", "--porcelain=v1", "--untracked-files=all", "-z", binary=True)
    assert isinstance(raw, bytes)
    # not stripped: each entry starts with its two status columns, the first often a space
    entries = [e for e in raw.decode(errors="replace").split("\x00") if e]
    if not entries:
        return WorkTree(head, None, ())
    changed = tuple(sorted({e[3:] for e in entries if len(e) > 3}))
    digest = hashlib.sha1()
    diff = git(root, "diff", "--binary", "HEAD", binary=True)
    assert isinstance(diff, bytes)
    digest.update(diff)
    untracked = _text(root, "ls-files", "--others", "--exclude-standard", "-z")
    for name in sorted(n for n in untracked.split("\x00") if n):
        path = root / name
        digest.update(name.encode() + b"\x00")
        if path.is_file():
            digest.update(path.read_bytes())
    return WorkTree(head, digest.hexdigest()[:12], changed)


@contextmanager
def checkout(root: Path, sha: str, parent: Path) -> Iterator[Path]:
    """A detached git worktree of ``sha`` under ``parent``, removed afterwards (also on errors)."""
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"worktree-{sha[:12]}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    _text(root, "worktree", "add", "--force", "--detach", str(path), sha)
    try:
        yield path
    finally:
        git(root, "worktree", "remove", "--force", str(path), check=False)
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        git(root, "worktree", "prune", check=False)
