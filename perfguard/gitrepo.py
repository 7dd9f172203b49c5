"""The git facts perfguard needs: which commit is which, whether the tree is dirty, worktrees.

Every call runs ``git`` with a fixed locale and no pager, and every failure a user can fix (not a
repository, an unknown ref, a shallow clone without the merge-base) is a :class:`GitError` whose
hint says what to do (exit 2).

A dirty work tree is not a commit: it is measured as HEAD plus the changes and stored as
``<head sha>+dirty.<12 hex>``, the hex being a hash of ``git diff HEAD`` and of the untracked
files, so the same changes map to the same key and different ones never collide.  It is never used
as a baseline.  The history store's own files are not changes: ``work_tree(root, ignore=...)``
leaves them out (a ``--db sqlite:///relative.db`` inside the work tree made every run ``+dirty``).

Scratch space: every measurement works in a ``perfguard-*`` directory under the system's temporary
directory (``scratch_dir``), marked with its owner process, and measures other commits in git
worktrees inside it (``checkout``).  A perfguard killed with SIGKILL (the OOM killer, a cancelled
CI job) cannot remove them; ``cleanup_stale`` does, at the start of the next command: it removes
the worktrees and scratch directories of processes that no longer exist, and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from perfguard.errors import GitError

# GIT_NO_REPLACE_OBJECTS: a commit is read as it is; a `git replace` ref (which code under review
# can create in the repository) never substitutes the merge-base's files in its worktree.
_ENV = {"LC_ALL": "C", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1"}


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


def user(root: Path) -> str | None:
    """Who is at the keyboard, as git knows it: ``user.name <user.email>`` (either alone if the other
    is unset), None when git knows neither."""
    name = str(git(root, "config", "user.name", check=False))
    email = str(git(root, "config", "user.email", check=False))
    if not name and not email:
        return None
    return f"{name} <{email}>" if name and email else (name or email)


def current_branch(root: Path) -> str | None:
    """The checked-out branch, or None on a detached HEAD."""
    out = _text(root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return out or None


def work_tree(root: Path, *, ignore: Iterable[Path] = ()) -> WorkTree:
    """HEAD and the state of the work tree (tracked changes and untracked, not ignored, files).

    ``ignore``: files that are not part of the code even when they sit in the work tree: the
    history store's (``Store.files``: the database and its -wal, -shm and -journal files).  Paths
    outside the work tree are skipped.
    """
    head = rev_parse(root, "HEAD", what="HEAD")
    pathspec = ["--", ".", *_excludes(root, ignore)]
    raw = git(root, "status", "--porcelain=v1", "--untracked-files=all", "-z", *pathspec, binary=True)
    assert isinstance(raw, bytes)
    changed = _changed_paths(raw.decode(errors="replace"))
    if not changed:
        return WorkTree(head, None, ())
    digest = hashlib.sha1()
    diff = git(root, "diff", "--binary", "HEAD", *pathspec, binary=True)
    assert isinstance(diff, bytes)
    digest.update(diff)
    untracked = _text(root, "ls-files", "--others", "--exclude-standard", "-z", *pathspec)
    for name in sorted(n for n in untracked.split("\x00") if n):
        path = root / name
        digest.update(name.encode() + b"\x00")
        if path.is_file():
            digest.update(path.read_bytes())
    return WorkTree(head, digest.hexdigest()[:12], changed)


def _changed_paths(status: str) -> tuple[str, ...]:
    """The paths of ``git status --porcelain=v1 -z`` output, sorted.

    Not stripped: each entry starts with its two status columns, the first often a space.  A rename
    or copy (``R``/``C``) is followed by its source path, which has no status columns.
    """
    entries = iter(status.split("\x00"))
    paths = set()
    for entry in entries:
        if len(entry) > 3:
            paths.add(entry[3:])
            if entry[0] in "RC":
                next(entries, None)
    return tuple(sorted(paths))


def _excludes(root: Path, paths: Iterable[Path]) -> list[str]:
    """Pathspecs that leave ``paths`` (those inside the work tree) out of status, diff and ls-files."""
    top = Path(root).resolve()
    specs = []
    for path in paths:
        try:
            relative = Path(path).resolve().relative_to(top)
        except ValueError:
            continue  # outside the work tree: git does not see it anyway
        if relative.parts:
            specs.append(f":(exclude,literal){relative.as_posix()}")
    return specs


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


# --- scratch directories and what a killed perfguard leaves behind ------------------------------

SCRATCH_PREFIX = "perfguard-"
OWNER_FILE = ".perfguard-owner"
"""In a scratch directory: the process that owns it, ``{"pid": N, "started": <start time>}``."""
_WORKTREE_NAME = re.compile(r"^worktree-[0-9a-f]{12}-(?P<pid>\d+)$")  # what checkout() creates


@dataclass(frozen=True)
class Owner:
    """A process, identified by pid and start time (a pid alone may belong to a newer process)."""

    pid: int
    started: int | None = None  # /proc/<pid>/stat field 22 on Linux; None elsewhere

    @classmethod
    def current(cls) -> Owner:
        return cls(os.getpid(), _start_time(os.getpid()))

    def alive(self) -> bool:
        """Whether this very process still runs (a zombie, or another process on its pid, does not)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # another user's process: it exists
        stat = _stat_fields(self.pid)
        if stat is None:  # no /proc (not Linux): the pid exists, and that is all we can tell
            return True
        state, started = stat[0], int(stat[19])
        return state not in ("Z", "X") and (self.started is None or started == self.started)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the command name, which may hold spaces), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def scratch_dir(parent: Path | None = None) -> Path:
    """A new ``perfguard-*`` directory (under ``parent``, default the system's temporary directory),
    marked with this process as its owner, so that :func:`cleanup_stale` can tell, after a
    SIGKILL, that nobody uses it any more."""
    path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    owner = Owner.current()
    (path / OWNER_FILE).write_text(json.dumps({"pid": owner.pid, "started": owner.started}) + "\n")
    return path


@dataclass
class Cleanup:
    """What :func:`cleanup_stale` removed, and the scratch directories it left alone (and why)."""

    worktrees: list[Path] = field(default_factory=list)
    scratch_dirs: list[Path] = field(default_factory=list)
    kept: list[tuple[Path, str]] = field(default_factory=list)
    stuck: list[Path] = field(default_factory=list)  # dead processes' worktrees git still lists

    def __bool__(self) -> bool:
        return bool(self.worktrees or self.scratch_dirs or self.stuck)

    def describe(self) -> str:
        """What the command says ("" when there was nothing to clean up): what was removed, and
        the worktrees that could not be, by name."""
        parts = []
        if self.worktrees:
            parts.append(f"{len(self.worktrees)} git worktree(s)")
        if self.scratch_dirs:
            parts.append(f"{len(self.scratch_dirs)} scratch directory(ies)")
        lines = []
        if parts:
            lines.append(f"removed {' and '.join(parts)} left by perfguard processes that were killed")
        if self.stuck:
            names = ", ".join(str(t) for t in self.stuck)
            lines.append(
                f"could not remove {len(self.stuck)} git worktree(s) left by killed perfguard processes: "
                f"{names} (git worktree unlock, then git worktree remove --force --force)"
            )
        return "\n".join(lines)


def cleanup_stale(root: Path, *, scratch_parent: Path | None = None) -> Cleanup:
    """Remove the git worktrees and scratch directories of perfguard processes that were killed.

    Call it at the start of a command that measures (``run``, ``check``, ``calibrate``).  Safe to
    run while other perfguard processes work: only what belongs to a process that no longer exists
    is touched.

    - Scratch directories: ``perfguard-*`` entries of ``scratch_parent`` (default: the system's
      temporary directory) owned by this user, whose owner file (:func:`scratch_dir`) names a
      dead process; a directory without an owner file counts as dead only if it holds
      :func:`checkout` worktrees (their names carry the pid) and all their processes are dead.
      Anything else (another tool's ``perfguard-*`` directory, a live run) is left alone.
    - Git worktrees of ``root``: those inside a removed scratch directory, those named by
      :func:`checkout` whose process is dead (unlocked first: a kill inside ``git worktree add``
      leaves one locked), and registrations whose directory is gone (``git worktree prune``).
      A worktree counts as removed only once git no longer lists it; one it still lists is in
      ``stuck``, and the description names it.
    """
    done = Cleanup()
    registered = _worktrees(root)
    parent = Path(scratch_parent) if scratch_parent is not None else Path(tempfile.gettempdir())
    dead_dirs: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in sorted(parent.iterdir()):
            if not entry.name.startswith(SCRATCH_PREFIX):
                continue
            verdict = _scratch_owner_dead(entry)
            if verdict is True:
                dead_dirs.append(entry)
            elif isinstance(verdict, str):
                done.kept.append((entry, verdict))
    dead_dirs_resolved = [d.resolve() for d in dead_dirs]
    doomed = [
        tree
        for tree in registered
        if any(tree.resolve().is_relative_to(d) for d in dead_dirs_resolved) or _checkout_owner_dead(tree)
    ]
    for tree in doomed:
        # A worktree `git worktree add` was killed in stays locked ("initializing"): git neither
        # removes nor prunes a locked one, so it is unlocked first (issue 27).
        git(root, "worktree", "unlock", str(tree), check=False)
        git(root, "worktree", "remove", "--force", "--force", str(tree), check=False)
        if tree.exists():
            shutil.rmtree(tree, ignore_errors=True)
    for directory in dead_dirs:
        shutil.rmtree(directory, ignore_errors=True)  # never follows symlinks (the import shims)
        if not directory.exists():
            done.scratch_dirs.append(directory)
    gone = [tree for tree in _registrations(root) if not tree.exists() and _checkout_owner_dead(tree)]
    for tree in gone:  # ours, its directory already gone, but locked: prune skips it otherwise
        git(root, "worktree", "unlock", str(tree), check=False)
    git(root, "worktree", "prune", check=False)
    still = set(_registrations(root))
    for tree in [*doomed, *(t for t in gone if t not in doomed)]:
        if tree in still:  # said only when true: what git still lists was not removed
            done.stuck.append(tree)
        else:
            done.worktrees.append(tree)
    return done


def _registrations(root: Path) -> list[Path]:
    """Every linked worktree git lists for ``root``'s repository (not the main one), even where
    its directory is gone."""
    out = _text(root, "worktree", "list", "--porcelain", check=False)
    paths = [Path(line[len("worktree ") :]) for line in out.splitlines() if line.startswith("worktree ")]
    return paths[1:]


def _worktrees(root: Path) -> list[Path]:
    """The linked worktrees of ``root``'s repository that still exist (not the main one)."""
    return [p for p in _registrations(root) if p.exists()]


def _scratch_owner_dead(directory: Path) -> bool | str:
    """True: its owner is dead; a string: why it is kept (a live owner returns "")."""
    try:
        info = directory.lstat()
    except OSError:
        return ""
    if not directory.is_dir() or directory.is_symlink():
        return ""
    if info.st_uid != os.getuid():
        return "another user's"
    marker = directory / OWNER_FILE
    if marker.is_file():
        try:
            data = json.loads(marker.read_text())
            owner = Owner(int(data["pid"]), data.get("started"))
        except (OSError, ValueError, KeyError, TypeError):
            return "unreadable owner file"
        return True if not owner.alive() else ""
    pids = [int(m.group("pid")) for p in _listdir(directory) if (m := _WORKTREE_NAME.match(p))]
    if not pids:
        return "no owner file"
    return True if not any(Owner(pid).alive() for pid in pids) else ""


def _checkout_owner_dead(tree: Path) -> bool:
    """A worktree made by :func:`checkout` (its name carries the pid) whose process is gone."""
    match = _WORKTREE_NAME.match(tree.name)
    if match is None:
        return False  # not ours: a worktree the user made
    marker = tree.parent / OWNER_FILE
    if marker.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(marker.read_text())
            return not Owner(int(data["pid"]), data.get("started")).alive()
    return not Owner(int(match.group("pid"))).alive()


def _listdir(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []
