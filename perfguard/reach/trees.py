"""The files of one side of a change: a commit's tree, or the work tree (a check of uncommitted code).

The import graph of both sides is read from here, never from an import: the analysis must not run
the code it is deciding about (a pull request's code is untrusted, docs/ci.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfguard.gitrepo import git


@dataclass(frozen=True)
class Tree:
    """One side: ``commit`` (a full sha), or None for the work tree of ``root`` as it is on disk."""

    root: Path
    commit: str | None

    def files(self, under: str) -> list[str]:
        """Repository-relative paths of the files under the directory ``under`` (tracked, and in the
        work tree also untracked files that git does not ignore: code a check would import)."""
        prefix = under.rstrip("/") + "/"
        if self.commit is not None:
            out = git(self.root, "ls-tree", "-r", "--name-only", self.commit, "--", prefix)
        else:
            out = git(self.root, "ls-files", "--cached", "--others", "--exclude-standard", "--", prefix)
        assert isinstance(out, str)
        paths = sorted({p for p in out.splitlines() if p})
        if self.commit is None:  # deleted in the work tree but still in the index
            paths = [p for p in paths if (self.root / p).is_file()]
        return paths

    def read(self, path: str) -> bytes:
        """The bytes of ``path`` on this side."""
        if self.commit is None:
            return (self.root / path).read_bytes()
        out = git(self.root, "show", f"{self.commit}:{path}", binary=True)
        assert isinstance(out, bytes)
        return out


def changed_files(base: Tree, head: Tree) -> tuple[str, ...]:
    """Every path that differs between the two sides (added, removed, modified, renamed: both names)."""
    if base.commit is None:
        raise ValueError("the base side of a change is a commit, not the work tree")
    if head.commit is not None:
        out = git(base.root, "diff", "--name-only", "--no-renames", base.commit, head.commit)
        assert isinstance(out, str)
        return tuple(sorted({p for p in out.splitlines() if p}))
    tracked = git(base.root, "diff", "--name-only", "--no-renames", base.commit)
    untracked = git(base.root, "ls-files", "--others", "--exclude-standard")
    assert isinstance(tracked, str) and isinstance(untracked, str)
    return tuple(sorted({p for p in (tracked + "\n" + untracked).splitlines() if p}))
