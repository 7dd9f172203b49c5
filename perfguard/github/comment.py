"""The one sticky PR comment (``comment``): the artifact's Markdown made inert, posted or updated.

The artifact's Markdown was written by a job that ran the pull request's code, so it is data the
PR controls: before it is posted under the bot's name, :func:`neutralize` makes every @mention,
issue reference, link, image and HTML tag in it inert (docs/ci.md, "Trust model"), and a line
written here, not by the PR, states the job's conclusion.  The comment is found by its marker and
its author and edited in place, never a new comment per push.
"""

from __future__ import annotations

import html
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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


# --- what the pull request wrote, posted under the bot's name (issue 13, W5) ---------------------

WORD_JOINER = "\u2060"
"""Invisible, zero-width, and no letter or digit: inserted where GitHub would otherwise see a
mention (``@⁠user``), an issue reference (``#⁠12``), a link (``[x]⁠(url)``), an image, an
autolink (``https⁠://``) or an HTML tag (``<⁠img``).  The text reads as written; nothing fires."""

_ALLOWED_TAGS = frozenset(
    f"<{slash}{tag}>" for slash in ("", "/") for tag in ("details", "summary", "sub", "sup", "b", "i", "code")
) | {"<br>", "<br/>", "<br />"}
_ENTITY = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_MEANINGFUL = frozenset("@#<>[]()!:/.")  # characters an entity could smuggle past the rules below
_URL = re.compile(r"(?i)\b(?:https?|ftp)://[^\s<>()\[\]`'\"]*|\bwww\.[^\s<>()\[\]`'\"]*")
_LINK_TARGET = re.compile(r"\]\(\s*<?([^\s)>]*)")
_REFERENCE_DEFINITION = re.compile(r"(?m)^( {0,3}\[[^\]\n]*)\]:")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_MENTION = re.compile(r"(?<![A-Za-z0-9_`])@(?=[A-Za-z0-9])")
_ISSUE_REFERENCE = re.compile(r"(?<!&)#(?=[0-9])|(?i:\bGH-)(?=[0-9])")


def allowed_link_prefixes(repo: str, run_url: str | None = None) -> tuple[str, ...]:
    """Where links in the comment may point: this repository on GitHub and its Pages site."""
    owner, _, name = repo.partition("/")
    prefixes = [f"https://github.com/{repo}/", f"https://{owner.lower()}.github.io/{name}/"]
    if run_url:
        prefixes.append(run_url)
    return tuple(prefixes)


def neutralize(markdown: str, *, allowed_links: Sequence[str] = ()) -> str:
    """Markdown from a job that ran the PR's code, made inert before the bot posts it.

    Every @mention, issue reference, image, raw HTML tag (but the plain ``<details>``,
    ``<summary>``, ``<sub>``... that reports use), link and bare URL is broken with an invisible
    :data:`WORD_JOINER`, except links and URLs that start with one of ``allowed_links`` (the
    repository's own pages: its workflow runs and history site).  Entities that spell one of
    those characters (``&#64;`` for ``@``) are decoded first, so they cannot sneak past.  The
    hidden marker on the first line is kept as it is.  Whatever the PR wrote still reads as
    written: only invisible characters are added.
    """
    first, newline, rest = markdown.partition("\n")
    if marker_of(first) is None:
        first, newline, rest = "", "", markdown
    text = _ENTITY.sub(_decode_meaningful, rest)
    allowed = tuple(p.lower() for p in allowed_links)

    def is_allowed(url: str) -> bool:
        return bool(allowed) and url.lower().startswith(allowed)

    text = text.replace("![", "!" + WORD_JOINER + "[")
    text = _LINK_TARGET.sub(
        lambda m: m.group(0) if is_allowed(m.group(1)) else "]" + WORD_JOINER + m.group(0)[1:], text
    )
    text = _REFERENCE_DEFINITION.sub(lambda m: m.group(1) + "]" + WORD_JOINER + ":", text)
    text = _URL.sub(lambda m: m.group(0) if is_allowed(m.group(0)) else _break_url(m.group(0)), text)
    text = _TAG.sub(lambda m: m.group(0) if _allowed_tag(text, m.start()) else "<" + WORD_JOINER, text)
    text = _MENTION.sub("@" + WORD_JOINER, text)
    text = _ISSUE_REFERENCE.sub(lambda m: m.group(0) + WORD_JOINER, text)
    return first + newline + text


def _decode_meaningful(match: re.Match[str]) -> str:
    decoded = html.unescape(match.group(0))
    return decoded if decoded in _MEANINGFUL else match.group(0)


def _break_url(url: str) -> str:
    if url.lower().startswith("www."):
        return "www" + WORD_JOINER + url[3:]
    scheme, sep, rest = url.partition("://")
    return scheme + WORD_JOINER + sep + rest


def _allowed_tag(text: str, start: int) -> bool:
    end = text.find(">", start)
    return end != -1 and end - start <= 12 and text[start : end + 1].lower() in _ALLOWED_TAGS


def prepare_comment_body(
    artifact_dir: Path, *, repo: str, run_url: str | None, conclusion: str | None = None
) -> str:
    """The comment: the artifact's ``comment.md`` neutralized, a line of ours, GitHub's size limit kept.

    ``conclusion`` is GitHub's result of the benchmark job (``needs.benchmark.result``), so the
    comment states it even if the PR's code rewrote the report.
    """
    path = artifact_dir / "comment.md"
    if not path.exists():
        raise GitHubError(f"{path} is missing: the benchmark job did not write its summary")
    body = neutralize(
        ensure_marker(path.read_text(errors="replace")), allowed_links=allowed_link_prefixes(repo, run_url)
    )
    marker, _, report = body.partition("\n")
    if conclusion:
        if not re.fullmatch(r"[a-z_]{1,32}", conclusion):
            raise GitHubError(f"implausible job conclusion {conclusion!r}")
        where = f" ([workflow run]({run_url}))" if run_url else ""
        ours = (
            f"<sub>GitHub reports the benchmark job as **{conclusion}**{where}. The report below was written "
            "by that job, which ran this pull request's code; links, mentions and HTML in it are shown as "
            "plain text.</sub>"
        )
        body = f"{marker}\n{ours}\n\n{report}"
    note = "*The report was cut to fit a GitHub comment"
    note += f"; the full report is in the [workflow run's artifacts]({run_url}).*" if run_url else ".*"
    return truncate_body(body, note)
