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
    The scope must name a stored series (:func:`perfguard.accept.naming.check_names`, exit 2 with
    the known names), checked before anything is written.
    """
    from perfguard.accept import Acceptance, command_spec
    from perfguard.accept.naming import check_names
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
        check_names(parsed, store.series_names())
        [stored] = store.record_acceptances(
            commit_record(root, sha), [parsed.record(source="command", author=who, trusted=True)]
        )
        steps = [p for p in store.change_points(sha=sha) if p.acceptance and p.acceptance.id == stored.id]
        where = store.url
    return Accepted(stored, Acceptance.of(stored, stored.sha, stored.id).describe(), where, len(steps))


def revoke_acceptance(
    acceptance_id: int,
    *,
    reason: str | None,
    by: str | None = None,
    db: str | None = None,
    cwd: Path | None = None,
) -> StoredAcceptance:
    """``perfguard accept --revoke ID``: acceptance ``acceptance_id`` accepts nothing from now on.

    Recorded with who (``by``, default git's ``user.name <user.email>``), why (``reason``, required)
    and when; the row stays (:meth:`perfguard.store.Store.revoke_acceptance`).  Refused where
    ``PERFGUARD_UNTRUSTED`` is set, like recording one.
    """
    from perfguard.accept.finding import refuse_untrusted
    from perfguard.errors import UsageError
    from perfguard.gitrepo import repo_root, user
    from perfguard.store import Store

    refuse_untrusted("revoke an acceptance")
    if not (reason or "").strip():
        raise UsageError(
            f"revoking acceptance #{acceptance_id} needs a reason",
            hint="add --reason 'why it no longer holds'",
        )
    root = repo_root(cwd)
    who = by or user(root)
    if not who:
        raise UsageError(
            "who revokes? git has no user.name here", hint="pass --by NAME, or set git config user.name"
        )
    with Store.open(db, cwd=root) as store:
        return store.revoke_acceptance(acceptance_id, by=who, reason=(reason or "").strip())


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
