"""What a side's code is, file by file, so that a change made while it is measured is seen.

A check measures two sides next to each other: the merge-base in a git worktree perfguard creates,
and HEAD in the work tree.  HEAD may be code under review, and its rounds run in the same user
account as the baseline's: a pull request's code, imported in its own round, could rewrite the
merge-base's worktree beside it (issue 27, item 2: a 40 ms loop appended to the baseline, 42 ms
stored against 1.4 ms as a trusted run of main).  So each side's tree is recorded when the side is
made (:meth:`TreeState.record`) and compared after every round (:meth:`TreeState.changes`); a side
whose tree changed is not stored (:class:`TreeChanged`, exit 2).

What is recorded: every file git lists in the tree (tracked, and untracked but not ignored; for a
worktree perfguard created, ignored files too, since nothing but perfguard should ever write
there), with its ``lstat`` (size, mtime, ctime, inode, mode) and the SHA-256 of its content (a
symlink: of its target).  A comparison re-reads a file only when its ``lstat`` changed: ctime
cannot be set by a process (only the clock moves it), so an unchanged ctime and inode mean the
content was not written.  ``git status`` alone is not enough: ``git update-index
--assume-unchanged`` (which the code under test can run) hides a modified file from it.

A worktree perfguard created is also made read-only (:func:`make_read_only`): that stops careless
writes, not a determined process of the same user, which can make it writable again; the
comparison is the guarantee.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from perfguard.errors import PerfguardError

#: How many changed paths a message names before "and N more".
SHOWN = 8


class TreeChanged(PerfguardError):
    """A side's tree changed while it was measured: its rounds are not of the code they would be
    stored under, so nothing of that side is stored (exit 2)."""


@dataclass(frozen=True)
class _File:
    stat: tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, inode, mode
    digest: str  # SHA-256 of the content (of the link target for a symlink); "" for a directory


@dataclass(frozen=True)
class TreeState:
    """The files of one tree at one moment (see the module docstring)."""

    path: Path
    files: Mapping[str, _File]
    ignored: bool  # ignored files were recorded too (a worktree perfguard created)
    excluded: frozenset[str]  # paths left out (the history store's own files)

    @classmethod
    def record(cls, path: Path, *, ignored: bool, exclude: Iterable[Path] = ()) -> TreeState:
        """The state of the tree at ``path`` now.

        ``ignored``: also record git-ignored files (a worktree perfguard created, where nothing else
        should ever appear).  ``exclude``: files that are not code even inside the tree (the history
        store's database and its -wal/-shm/-journal files).
        """
        path = Path(path)
        excluded = frozenset(_relative(path, exclude))
        names = _listed(path, ignored=ignored, excluded=excluded)
        return cls(path, {name: _file(path / name) for name in names}, ignored, excluded)

    def changes(self) -> list[str]:
        """The paths that were added, removed or changed since the state was recorded, sorted."""
        now = _listed(self.path, ignored=self.ignored, excluded=self.excluded)
        changed = set(now ^ set(self.files))
        root = os.fspath(self.path)  # joined as strings: a Path per file was most of a comparison's cost
        for name in now & set(self.files):
            before = self.files[name]
            info = _lstat(os.path.join(root, name))
            if info is None:
                changed.add(name)
            elif _stat_key(info) != before.stat:  # written, chmod-ed or replaced: compare the content
                after = _file(self.path / name)
                if after.digest != before.digest or _kind(after) != _kind(before):
                    changed.add(name)
        return sorted(changed)

    def verify(self, label: str) -> None:
        """Raise :class:`TreeChanged` naming the files when the tree is not as recorded."""
        changed = self.changes()
        if not changed:
            return
        raise TreeChanged(
            f"the code of {label} changed while this check measured it ({describe(changed)}, in "
            f"{self.path}): rounds of it would not be of the code they are stored under, so nothing "
            "measured since the last round is stored (rounds finished before it, checked unchanged "
            "then, are kept)",
            hint="if you edited the work tree during the check, run it again and leave the files alone "
            "until it ends; if not, code measured in this check wrote there (a pull request's code "
            "can): review it before running it on this machine again",
        )


def describe(paths: list[str] | tuple[str, ...]) -> str:
    """``3 files: a.py, b.py, c.py`` (the first :data:`SHOWN`, then ``and N more``)."""
    shown = ", ".join(paths[:SHOWN]) + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
    return f"{len(paths)} file{'s' if len(paths) != 1 else ''}: {shown}"


def make_read_only(path: Path) -> None:
    """Take the write bits off every file under ``path`` (not git's own ``.git`` file).

    Directories stay writable, so that removing the tree (``git worktree remove --force``) still
    works; a file added there is seen by :meth:`TreeState.changes`.
    """
    for top, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not (Path(top) == path and d == ".git")]
        for name in files:
            if not (Path(top) == path and name == ".git"):
                _drop_write(Path(top) / name)


def _drop_write(target: Path) -> None:
    try:
        info = target.lstat()
        if not stat.S_ISLNK(info.st_mode):
            target.chmod(stat.S_IMODE(info.st_mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    except OSError:
        pass


def _relative(root: Path, paths: Iterable[Path]) -> list[str]:
    top = root.resolve()
    out = []
    for p in paths:
        try:
            out.append(Path(p).resolve().relative_to(top).as_posix())
        except ValueError:
            continue
    return out


def _listed(root: Path, *, ignored: bool, excluded: frozenset[str]) -> set[str]:
    """Every file git shows in the tree: tracked (from the index) and untracked (all of them, or
    those not ignored); submodules and git's own files are not listed."""
    from perfguard.gitrepo import git

    args = ["ls-files", "-z", "--cached", "--others"]
    if not ignored:
        args.append("--exclude-standard")
    out = git(root, *args, binary=True)
    assert isinstance(out, bytes)
    names = {n for n in out.decode(errors="surrogateescape").split("\x00") if n}
    return {n for n in names if n not in excluded}


def _lstat(path: Path | str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _stat_key(info: os.stat_result) -> tuple[int, int, int, int, int]:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode)


def _kind(file: _File) -> int:
    """The file type and the owner's execute bit: what git keeps of a mode."""
    mode = file.stat[4]
    return stat.S_IFMT(mode) | (mode & stat.S_IXUSR)


def _file(path: Path) -> _File:
    info = _lstat(path)
    if info is None:
        return _File((-1, -1, -1, -1, -1), "missing")
    if stat.S_ISLNK(info.st_mode):
        digest = hashlib.sha256(os.readlink(path).encode(errors="surrogateescape")).hexdigest()
    elif stat.S_ISREG(info.st_mode):
        digest = _hash_file(path)
    else:
        digest = ""
    return _File(_stat_key(info), digest)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "unreadable"
    return h.hexdigest()
