"""``approval``: who approved a pull request's ``Perfguard-Accept`` trailers.

The last actor who applied the approval label (default ``perfguard-accept``), if the label is still
applied and that actor has write access to the repository.
"""

from __future__ import annotations

from perfguard.github.comment import Transport

APPROVAL_LABEL = "perfguard-accept"
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})


def pull_for_commit(transport: Transport, repo: str, sha: str) -> int | None:
    """The pull request that merged ``sha`` (GitHub's commit -> pulls association), if any."""
    pulls = transport("GET", f"/repos/{repo}/commits/{sha}/pulls?per_page=100", None) or []
    merged = [p for p in pulls if p.get("merged_at") and p.get("merge_commit_sha") == sha]
    chosen = merged or [p for p in pulls if p.get("merged_at")] or list(pulls)
    return int(chosen[0]["number"]) if chosen else None


def label_applier(transport: Transport, repo: str, number: int, label: str) -> str | None:
    """The login that applied ``label`` last, if the label is still applied (issue events, all pages)."""
    applier: str | None = None
    page = 1
    while True:
        batch = transport("GET", f"/repos/{repo}/issues/{number}/events?per_page=100&page={page}", None) or []
        for event in batch:
            if (event.get("label") or {}).get("name") != label:
                continue
            if event.get("event") == "labeled":
                applier = (event.get("actor") or {}).get("login")
            elif event.get("event") == "unlabeled":
                applier = None
        if len(batch) < 100:
            return applier
        page += 1


def approver(
    transport: Transport, repo: str, number: int, label: str = APPROVAL_LABEL
) -> tuple[str | None, str]:
    """(login, why): the maintainer whose label approves the PR's acceptances, or None and why not."""
    login = label_applier(transport, repo, number, label)
    if login is None:
        return None, f"PR #{number} does not carry the {label!r} label"
    answer = transport("GET", f"/repos/{repo}/collaborators/{login}/permission", None) or {}
    permission = str(answer.get("role_name") or answer.get("permission") or "none")
    if permission not in WRITE_PERMISSIONS:
        return None, f"{login} applied {label!r} on PR #{number} but has {permission!r} access, not write"
    return login, f"{login} ({permission}) applied {label!r} on PR #{number}"
