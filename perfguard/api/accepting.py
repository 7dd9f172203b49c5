"""Intended regressions, as functions: ``accept`` records one, ``acceptances`` lists them
(:mod:`perfguard.api`; docs/living-with-regressions.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfguard.store import StoredAcceptance


@dataclass
class Accepted:
    """An acceptance ``accept`` recorded, and the flagged steps of its commit it accepts."""

    acceptance: StoredAcceptance
    text: str  # how checks will show it
    store: str
    flagged_steps: int


def accept(
    spec: Sequence[str],
    *,
    ceiling: float | None = None,
    reason: str | None = None,
    commit: str = "HEAD",
    by: str | None = None,
    db: str | None = None,
    cwd: Path | None = None,
) -> Accepted:
    """``perfguard accept``: record an intended regression of ``commit`` (trusted: a maintainer's own).

    ``spec``, ``ceiling``, ``reason``: :func:`perfguard.accept.command_spec` (refused where
    ``PERFGUARD_UNTRUSTED`` is set).  ``by``: who accepts (default: git's ``user.name <user.email>``).
    """
    from perfguard.accept import Acceptance, command_spec
    from perfguard.errors import UsageError
    from perfguard.gitrepo import repo_root, rev_parse, user
    from perfguard.measuring import commit_record
    from perfguard.store import Store

    root = repo_root(cwd)
    parsed = command_spec(spec, ceiling=ceiling, reason=reason)
    sha = rev_parse(root, commit)
    who = by or user(root)
    if not who:
        raise UsageError(
            "who accepts? git has no user.name here", hint="pass --by NAME, or set git config user.name"
        )
    with Store.open(db, cwd=root) as store:
        [stored] = store.record_acceptances(
            commit_record(root, sha), [parsed.record(source="command", author=who, trusted=True)]
        )
        steps = [p for p in store.change_points(sha=sha) if p.acceptance and p.acceptance.id == stored.id]
        where = store.url
    return Accepted(stored, Acceptance.of(stored, stored.sha, stored.id).describe(), where, len(steps))


def acceptances(
    commit: str | None = None, *, db: str | None = None, cwd: Path | None = None
) -> list[StoredAcceptance]:
    """``perfguard accept --list``: the stored acceptances (of ``commit`` when given), oldest first."""
    from perfguard.gitrepo import repo_root, rev_parse
    from perfguard.store import Store

    root = repo_root(cwd)
    sha = rev_parse(root, commit) if commit is not None else None
    with Store.open(db, cwd=root) as store:
        return store.acceptances([sha] if sha else None)
