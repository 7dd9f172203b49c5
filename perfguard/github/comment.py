"""The one sticky PR comment (``comment``): the artifact's Markdown made inert, posted or updated.

The artifact's Markdown was written by a job that ran the pull request's code, so it is data the
PR controls: before it is posted under the bot's name, :func:`~perfguard.github.sanitize.sanitize_markdown`
rebuilds it from its CommonMark parse with no @mention, issue reference, image, foreign link or
HTML but the plain tags reports use (docs/ci.md, "Trust model"), and a line written here, not by
the PR, states the job's conclusion.  The comment is found by its marker and
its author and edited in place, never a new comment per push.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from perfguard.github.sanitize import RepositoryLinks, sanitize_markdown
from perfguard.github.summary import MARKER, ensure_marker, marker_of, truncate_body

DEFAULT_AUTHOR = "github-actions[bot]"
"""Login that owns the comment when the workflow's ``GITHUB_TOKEN`` posts it."""


class GitHubError(RuntimeError):
    """A GitHub API call failed or the artifact did not match the run; the message says which."""


Transport = Callable[[str, str, dict[str, Any] | None], Any]
"""(method, path, json body) -> decoded JSON response; injectable so the logic is testable."""


def github_transport(api_url: str, token: str) -> Transport:
    """A :data:`Transport` over the GitHub REST API with ``urllib`` (no third-party packages)."""

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            api_url.rstrip("/") + path,
            data=data,
            method=method,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "perfguard-ci",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise GitHubError(f"{method} {path} failed: HTTP {exc.code} {detail}") from exc
        return json.loads(raw) if raw else None

    return call


def find_comment(
    transport: Transport, repo: str, number: int, author: str, marker: str = MARKER
) -> dict[str, Any] | None:
    """The first comment on PR ``number`` by ``author`` whose marker line is ``marker``, if any."""
    page = 1
    while True:
        batch = transport("GET", f"/repos/{repo}/issues/{number}/comments?per_page=100&page={page}", None)
        for comment in batch or []:
            user = (comment.get("user") or {}).get("login")
            if user == author and marker_of(comment.get("body") or "") == marker:
                return comment
        if not batch or len(batch) < 100:
            return None
        page += 1


def upsert_comment(
    transport: Transport, repo: str, number: int, body: str, author: str = DEFAULT_AUTHOR
) -> tuple[str, int]:
    """Update perfguard's comment on the PR in place, or create it; returns (action, comment id)."""
    existing = find_comment(transport, repo, number, author, marker_of(body) or MARKER)
    if existing is not None:
        transport("PATCH", f"/repos/{repo}/issues/comments/{existing['id']}", {"body": body})
        return "updated", int(existing["id"])
    created = transport("POST", f"/repos/{repo}/issues/{number}/comments", {"body": body})
    return "created", int(created["id"])


def prepare_comment_body(
    artifact_dir: Path, *, repo: str, run_url: str | None, conclusion: str | None = None
) -> str:
    """The comment: the artifact's ``comment.md`` sanitized, a line of ours, GitHub's size limit kept.

    ``conclusion`` is GitHub's result of the benchmark job (``needs.benchmark.result``), so the
    comment states it even if the PR's code rewrote the report.
    """
    path = artifact_dir / "comment.md"
    if not path.exists():
        raise GitHubError(f"{path} is missing: the benchmark job did not write its summary")
    text = ensure_marker(path.read_text(errors="replace").lstrip())
    marker, _, report = text.partition("\n")
    links = RepositoryLinks(repo, _server_of(run_url))
    try:
        report = sanitize_markdown(report, links)
    except RuntimeError as exc:
        raise GitHubError(str(exc)) from exc
    body = f"{marker}\n{report}"
    if conclusion:
        if not re.fullmatch(r"[a-z_]{1,32}", conclusion):
            raise GitHubError(f"implausible job conclusion {conclusion!r}")
        where = f" ([workflow run]({run_url}))" if run_url else ""
        ours = (
            f"<sub>GitHub reports the benchmark job as **{conclusion}**{where}. The report below was written "
            "by that job, which ran this pull request's code; its links outside this repository, images, "
            "mentions and HTML are shown as plain text.</sub>"
        )
        body = f"{marker}\n{ours}\n\n{report}"
    note = "*The report was cut to fit a GitHub comment"
    note += f"; the full report is in the [workflow run's artifacts]({run_url}).*" if run_url else ".*"
    return truncate_body(body, note)


def _server_of(run_url: str | None) -> str:
    """Where the repository lives: the run URL's origin (GitHub Enterprise), else github.com."""
    if run_url:
        parts = urlsplit(run_url)
        if parts.scheme == "https" and parts.netloc:
            return f"https://{parts.netloc}"
    return "https://github.com"
