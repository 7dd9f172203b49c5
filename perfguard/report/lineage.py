"""The baseline branch's lineage: which stored commits are steps of it, and which are not (issue 30).

A series ordered by commit date mixes whatever was measured: ``perfguard history`` showed a
comment-only commit of ``main`` as "-72.2%" against the commit before it by date, a slow branch's.
The history of the baseline branch is its first-parent chain (``git rev-list --first-parent
REF``: a merged pull request is one step, its merge commit); a stored commit outside it (a pull
request's head, another branch) is shown as such and is never the "before" of a step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from perfguard.errors import GitError

P = TypeVar("P")


@dataclass(frozen=True)
class Lineage:
    """The first-parent commits of ``ref`` (full shas); ``why``: why it is unknown (``shas`` None)."""

    ref: str
    shas: frozenset[str] | None
    why: str = ""

    def on(self, sha: str) -> bool | None:
        """Whether ``sha`` is a step of the baseline branch (None: the lineage is unknown)."""
        if self.shas is None:
            return None
        return sha.split("+", 1)[0] in self.shas

    def of(self, shas: Iterable[str]) -> Lineage:
        """This lineage for the stored commits ``shas``, or an unknown one when it holds none of them
        (a store of another repository, or of a branch that was never merged): nothing would be
        left to draw, and the order by date is the better guess."""
        if self.shas is None or any(self.on(sha) for sha in shas):
            return self
        return Lineage(self.ref, None, f"{self.ref}'s first parents hold none of the stored commits")

    def previous(self, points: Sequence[P], index: int, sha_of: str = "sha") -> P | None:
        """The point a change of ``points[index]`` is measured from: the newest earlier point on the
        lineage (every earlier point when the lineage is unknown: the order by date)."""
        for older in reversed(points[:index]):
            if self.on(getattr(older, sha_of)) is not False:
                return older
        return None


def lineage(root: Path | None, ref: str) -> Lineage:
    """``git rev-list --first-parent ref`` in ``root`` (unknown outside a repository or for a bad ref)."""
    from perfguard.gitrepo import git

    if root is None:
        return Lineage(ref, None, "not in a git repository")
    try:
        out = git(root, "rev-list", "--first-parent", "--end-of-options", ref)
    except GitError:
        return Lineage(ref, None, f"{ref!r} is not a ref of {root}")
    assert isinstance(out, str)
    return Lineage(ref, frozenset(out.split()))
