"""GitHub Actions glue for perfguard's workflows: annotations, the job summary, the sticky PR comment.

The workflows in ``.github/workflows/`` call this module as ``python -m perfguard.github ...``:

``step``
    Run one perfguard command, mirror its output to the log and to a file, record its exit code,
    and turn a failure into an ``::error::`` annotation that says *why* (exit 1 = regression or
    failed verification; exit 2 = usage/environment error, with perfguard's own message and hint).
    Shell can do this too, but ``PIPESTATUS`` juggling and annotation escaping in three workflows
    is where CI scripts rot (asv #884 and dedupe #1019 in the research notes: exit codes that
    broke or hid the comment step).
``summary``
    Compose the Markdown that goes to the job summary and to the PR comment: the report perfguard
    wrote, or, when no report exists (verify failed, the baseline could not be resolved, perfguard
    crashed), a short account of which step failed and its message.
``comment``
    Create or update the *one* perfguard comment on a pull request, found by the hidden marker
    ``<!-- perfguard-report -->`` and by its author, never a new comment per push.
``changes``
    After ``perfguard changes --json changes.json --markdown changes.md`` on the baseline branch:
    append its section to the job summary and turn every flagged step (a regression on the
    baseline branch that no acceptance covers) into a ``::warning::`` annotation naming the
    benchmark, the ratio and the likely cause (a software change).
``approval``
    Who approved a pull request's ``Perfguard-Accept`` trailers: the last actor who applied the
    approval label (default ``perfguard-accept``) and still has it applied, if that actor has write
    access to the repository.  Prints the login to ``$GITHUB_OUTPUT`` as ``approved_by``; the
    workflow passes it to ``perfguard check`` / ``perfguard changes --accept-approved-by``.  Finds
    the pull request from ``--pr`` or from a merged commit (``--sha``).

Why the standard library only: ``comment`` runs in the ``comment`` job of ``perfguard-pr.yml``,
which holds a token with ``pull-requests: write``. It must not install packages and must never run
code from the pull request, so it checks out the base branch and runs this file with the runner's
bare ``python3``. The PR number, head commit and the benchmark job's conclusion come from the
workflow (GitHub's event and job results), never from the artifact. The artifact's Markdown was
written by a job that ran the PR's code, so it is data that the PR controls: before it is posted
under the bot's name, :func:`neutralize` makes every @mention, issue reference, link, image and
HTML tag in it inert (docs/ci.md, "Trust model"), and a line written here, not by the PR, states
the job's conclusion.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "<!-- perfguard-report -->"
"""Hidden first line of the Markdown report; the comment step finds its own comment by it."""

MARKER_PREFIX = "<!-- perfguard-report"
"""A report may carry a per-machine marker (``<!-- perfguard-report h100 -->``, docs/reports.md):
each distinct first line is its own sticky comment, so two GPU classes do not overwrite each other."""

COMMENT_LIMIT = 65_536
"""GitHub rejects issue comments longer than this many characters."""

DEFAULT_AUTHOR = "github-actions[bot]"
"""Login that owns the comment when the workflow's ``GITHUB_TOKEN`` posts it."""

_EXIT_MEANING = {
    1: "found a regression, a broken benchmark or a failed verification (exit 1)",
    2: "stopped on a usage or environment error (exit 2)",
}
_ERROR_LINE = re.compile(r"^Error: ", re.MULTILINE)


class GitHubError(RuntimeError):
    """A GitHub API call failed or the artifact did not match the run; the message says which."""


# --------------------------------------------------------------------------------------------------
# Workflow commands (https://docs.github.com/actions/reference/workflow-commands-for-github-actions)


def escape_data(text: str) -> str:
    """Escape a workflow-command message so newlines survive (``%0A``) and ``%`` is literal."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property (``title=...``): also ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(level: str, message: str, title: str | None = None) -> str:
    """One ``::error title=...::message`` line (level: error, warning or notice)."""
    props = f" title={escape_property(title)}" if title else ""
    return f"::{level}{props}::{escape_data(message)}"


def error_message_from_log(log: str) -> str:
    """The user-facing part of a failed command's output.

    click prints a :class:`perfguard.errors.PerfguardError` as ``Error: <message>`` followed by
    ``  hint: ...``; that block, not the progress output before it, is what belongs in an
    annotation. Without such a line (a traceback, a killed process) the last lines are the best
    evidence there is.
    """
    matches = list(_ERROR_LINE.finditer(log))
    if matches:
        return log[matches[-1].end() :].strip()
    tail = [line for line in log.strip().splitlines() if line.strip()]
    return "\n".join(tail[-15:])


def describe_exit(name: str, code: int, log: str) -> tuple[str, str] | None:
    """(title, message) of the annotation for a perfguard command that exited ``code``; None if 0."""
    if code == 0:
        return None
    if code == 1 and "Traceback (most recent call last)" not in log:
        if _ERROR_LINE.search(log):  # a click error that kept click's default exit code 1
            return (f"perfguard {name} failed (exit 1)", error_message_from_log(log))
        return (
            f"perfguard {name} {_EXIT_MEANING[1]}",
            f"perfguard {name} {_EXIT_MEANING[1]}. The job summary and the report artifact show "
            "which benchmark or implementation.",
        )
    if code == 2:
        return (f"perfguard {name} {_EXIT_MEANING[2]}", error_message_from_log(log))
    if code == 127:
        return (
            f"perfguard {name} could not start",
            "the perfguard command was not found: the 'Install perfguard' step did not put it on PATH "
            "(see its log).\n" + error_message_from_log(log),
        )
    return (f"perfguard {name} crashed (exit {code})", error_message_from_log(log))


# --------------------------------------------------------------------------------------------------
# step: run one perfguard command


def run_step(name: str, argv: Sequence[str], log_dir: Path) -> int:
    """Run ``argv``, stream its output to stdout and ``<log_dir>/<name>.log``, record the exit code.

    Output is copied in chunks as it arrives so that long benchmark runs show progress in the live
    job log. The exit code lands in ``<name>.exit`` for :func:`compose_summary`, and a non-zero exit
    prints an ``::error::`` annotation. Returns the command's exit code, which the caller exits with.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    out = sys.stdout.buffer
    with log_path.open("wb") as log:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except FileNotFoundError as exc:
            message = f"{exc.strerror}: {argv[0]}\n".encode()
            log.write(message)
            out.write(message)
            code = 127
        else:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                out.write(chunk)
                out.flush()
                log.write(chunk)
            code = proc.wait()
    (log_dir / f"{name}.exit").write_text(f"{code}\n")
    annotation = describe_exit(name, code, log_path.read_text(errors="replace"))
    if annotation:
        title, message = annotation
        out.write((workflow_command("error", message, title) + "\n").encode())
    out.flush()
    return code


# --------------------------------------------------------------------------------------------------
# summary: the Markdown for the job summary and the PR comment

STEP_ORDER = ("baseline", "verify", "check", "run", "changes", "snapshot", "report")
"""Order in which the workflows run the recorded steps; the first failure is the one explained."""

_CONSEQUENCE = {
    "baseline": "no benchmark comparison was made",
    "verify": "no benchmark comparison was made",
    "check": "there is no verdict report",
    "run": "no baseline was recorded for this commit",
    "snapshot": "PR runners still read the previous baseline snapshot",
    "changes": "the new commit was not compared with the history of this machine",
    "report": "the history site was not updated",
}


@dataclass(frozen=True)
class StepRecord:
    """What :func:`run_step` (or a workflow's shell step) left behind for one step."""

    name: str
    exit_code: int | None
    log: str


def read_steps(report_dir: Path) -> list[StepRecord]:
    """The recorded steps in workflow order (``<name>.exit`` / ``<name>.log`` pairs)."""
    records = []
    names = sorted(p.stem for p in report_dir.glob("*.exit"))
    for name in sorted(names, key=lambda n: (STEP_ORDER.index(n) if n in STEP_ORDER else 99, n)):
        raw = (report_dir / f"{name}.exit").read_text().strip()
        log_path = report_dir / f"{name}.log"
        records.append(
            StepRecord(
                name=name,
                exit_code=int(raw) if raw.lstrip("-").isdigit() else None,
                log=log_path.read_text(errors="replace") if log_path.exists() else "",
            )
        )
    return records


def marker_of(body: str) -> str | None:
    """The body's perfguard marker line (its first line), or None if it has none."""
    first = body.lstrip().split("\n", 1)[0].strip()
    if first.startswith(MARKER_PREFIX) and first.endswith("-->") and "-->" not in first[4:-3]:
        return first
    return None


def ensure_marker(body: str) -> str:
    """The body with a perfguard marker as its first line (:data:`MARKER` if the report has none)."""
    return body if marker_of(body) else f"{MARKER}\n{body}"


def utf16_len(text: str) -> int:
    """Length as GitHub counts it for the comment limit (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def truncate_body(body: str, note: str, limit: int = COMMENT_LIMIT) -> str:
    """Cut ``body`` so that it plus ``note`` fits GitHub's comment limit, at a line boundary."""
    if utf16_len(body) <= limit:
        return body
    budget = limit - utf16_len(note) - 2
    lines, used = [], 0
    for line in body.split("\n"):
        cost = utf16_len(line) + 1
        if used + cost > budget:
            break
        lines.append(line)
        used += cost
    return "\n".join(lines) + "\n\n" + note


def compose_summary(
    report_dir: Path,
    *,
    head_sha: str,
    base_ref: str | None = None,
    run_url: str | None = None,
    title: str = "perfguard",
) -> str:
    """Markdown for the job summary and the PR comment, always starting with a perfguard marker.

    When ``report.md`` exists (perfguard check wrote it, whatever its verdict) it is the body. When
    it does not, the body says which step failed first and quotes its message, so a PR author sees
    "the baseline branch could not be resolved" instead of an empty comment; a job without a check
    report whose steps all passed (the baseline workflow) gets the tail of each step's log.
    """
    report = report_dir / "report.md"
    commit = f"`{head_sha[:12]}`" if head_sha else "this commit"
    footer_bits = [f"Commit {commit}"]
    if base_ref:
        footer_bits.append(f"baseline `{base_ref}`")
    if run_url:
        footer_bits.append(f"[workflow run and artifacts]({run_url})")
    footer = "\n\n---\n<sub>" + " · ".join(footer_bits) + "</sub>\n"

    if report.exists() and report.read_text().strip():
        return ensure_marker(report.read_text().rstrip() + footer)

    steps = read_steps(report_dir)
    failed = next((s for s in steps if s.exit_code not in (0, None)), None)
    perfguard_steps = [s for s in steps if s.name != "baseline"]
    if failed is None and perfguard_steps:
        # A job that writes no check report (the baseline workflow) and succeeded.
        lines = [
            MARKER,
            f"## {title}: {', '.join(f'`{s.name}`' for s in perfguard_steps)} passed for {commit}",
        ]
        for step in perfguard_steps:
            tail = "\n".join(step.log.strip().splitlines()[-10:])
            fence = code_fence(tail)
            lines += [
                "",
                f"<details><summary>perfguard {step.name}</summary>",
                "",
                f"{fence}text",
                tail,
                fence,
                "",
                "</details>",
            ]
        return "\n".join(lines) + footer

    lines = [MARKER, f"## {title}: no report for {commit}", ""]
    if failed is None:
        lines.append(
            "No perfguard step recorded a failure, but no report was written: an earlier step of the "
            "job (checkout, install) failed. See the workflow run's log."
        )
    else:
        meaning = _EXIT_MEANING.get(failed.exit_code or 0, f"crashed (exit {failed.exit_code})")
        consequence = _CONSEQUENCE.get(failed.name, "the job stopped there")
        lines.append(f"`perfguard {failed.name}` {meaning}; {consequence}.")
        message = error_message_from_log(failed.log) or "(no output)"
        fence = code_fence(message)
        lines += ["", f"{fence}text", message, fence]
    return "\n".join(lines) + footer


def code_fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text``, so the text cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def write_summary(
    report_dir: Path,
    *,
    head_sha: str,
    base_ref: str | None,
    run_url: str | None,
    step_summary: Path | None,
) -> str:
    """Write ``comment.md`` into ``report_dir``; append it to the job summary."""
    report_dir.mkdir(parents=True, exist_ok=True)
    body = compose_summary(report_dir, head_sha=head_sha, base_ref=base_ref, run_url=run_url)
    (report_dir / "comment.md").write_text(body)
    if step_summary is not None:
        with step_summary.open("a") as fh:
            fh.write(body if body.endswith("\n") else body + "\n")
    return body


# --------------------------------------------------------------------------------------------------
# comment: one sticky PR comment, updated in place

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


# --------------------------------------------------------------------------------------------------
# What the pull request wrote, posted under the bot's name (issue 13, W5)

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


# --------------------------------------------------------------------------------------------------
# changes: steps on the baseline branch, as job summary and annotations

MAX_STEP_ANNOTATIONS = 10
"""GitHub shows at most 10 warning annotations per step; the rest are counted in one more line."""


def step_annotations(document: dict[str, Any], limit: int = MAX_STEP_ANNOTATIONS) -> list[str]:
    """``::warning`` lines for the flagged steps of a ``perfguard changes --json`` document."""
    sha = str(document.get("sha") or "")[:10]
    machine = str(document.get("machine_key") or "")
    cause = document.get("cause")
    flagged = [s for s in document.get("steps") or [] if s.get("flagged")]
    lines = []
    for step in flagged[:limit]:
        benchmark = str(step.get("benchmark", "")).split(".", 1)[-1]
        params = ", ".join(f"{k}={v}" for k, v in sorted((step.get("params") or {}).items()) if k != "impl")
        ratio = step.get("ratio")
        ratio_text = f"{ratio:.2f}x worse" if isinstance(ratio, (int, float)) else "worse"
        title = f"perfguard: {step.get('impl')} {benchmark} {ratio_text} at {sha}"
        message = f"{step.get('impl')} {benchmark} ({params}) on {machine}: {step.get('reason', '')}"
        if cause:
            message += f"\nlikely cause: {cause} between the two runs"
        message += "\nno acceptance covers it: accept it (perfguard accept) if intended, else fix it"
        lines.append(workflow_command("warning", message, title))
    if len(flagged) > limit:
        lines.append(
            workflow_command(
                "warning",
                f"{len(flagged) - limit} more unaccepted step(s) at {sha}: see the job summary",
                "perfguard: more steps",
            )
        )
    return lines


def report_changes(report_dir: Path, *, step_summary: Path | None, out: Any = None) -> int:
    """Append ``changes.md`` to the job summary and print the annotations of ``changes.json``.

    Returns the number of flagged steps.  A missing report (``perfguard changes`` did not run or
    failed) is said in the summary; its step's own annotation says why.
    """
    out = out or sys.stdout
    path = report_dir / "changes.json"
    markdown = report_dir / "changes.md"
    if not path.exists():
        body = (
            "### perfguard: no change-point report\n\n`perfguard changes` wrote no report (see its step).\n"
        )
        flagged: list[str] = []
    else:
        document = json.loads(path.read_text())
        body = markdown.read_text() if markdown.exists() else ""
        flagged = step_annotations(document)
        for line in flagged:
            print(line, file=out)
    if step_summary is not None and body:
        with step_summary.open("a") as fh:
            fh.write(body if body.endswith("\n") else body + "\n")
    return sum(1 for line in flagged if "more unaccepted" not in line)


# --------------------------------------------------------------------------------------------------
# approval: who approved a pull request's Perfguard-Accept trailers (the approval label)

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


# --------------------------------------------------------------------------------------------------
# command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perfguard.github", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    step = sub.add_parser("step", help="run one perfguard command, record its exit code, annotate failures")
    step.add_argument("--name", required=True, help="step name: the log is <log-dir>/<name>.log")
    step.add_argument("--log-dir", required=True, type=Path)
    step.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command to run")

    summary = sub.add_parser("summary", help="write comment.md and append to the job summary")
    summary.add_argument("--report-dir", required=True, type=Path)
    summary.add_argument("--head-sha", required=True)
    summary.add_argument("--base-ref", default=None)
    summary.add_argument("--run-url", default=None)

    comment = sub.add_parser("comment", help="create or update the one perfguard comment on a PR")
    comment.add_argument("--artifact-dir", required=True, type=Path)
    comment.add_argument("--repo", required=True, help="owner/name of the base repository")
    comment.add_argument("--pr-number", required=True, type=int, help="github.event.pull_request.number")
    comment.add_argument("--head-sha", required=True, help="the commit that was benchmarked (from the gate)")
    comment.add_argument("--conclusion", default=None, help="needs.benchmark.result, stated in the comment")
    comment.add_argument("--run-url", default=None)
    comment.add_argument("--author", default=DEFAULT_AUTHOR)
    comment.add_argument(
        "--dry-run",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the would-be comment (and the PR it targets) to FILE; call no API",
    )
    changes = sub.add_parser("changes", help="job summary and annotations of `perfguard changes`")
    changes.add_argument("--report-dir", required=True, type=Path, help="holds changes.json and changes.md")

    approval = sub.add_parser("approval", help="who approved a PR's Perfguard-Accept trailers (the label)")
    approval.add_argument("--repo", required=True, help="owner/name")
    which = approval.add_mutually_exclusive_group(required=True)
    which.add_argument("--pr", type=int, help="the pull request number")
    which.add_argument("--sha", help="a commit merged by a pull request (the baseline workflow's push)")
    approval.add_argument("--label", default=APPROVAL_LABEL)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "step":
        command = list(args.argv)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            print("perfguard.github step: give the command after --", file=sys.stderr)
            return 2
        return run_step(args.name, command, args.log_dir)

    if args.command == "summary":
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        write_summary(
            args.report_dir,
            head_sha=args.head_sha,
            base_ref=args.base_ref,
            run_url=args.run_url,
            step_summary=Path(summary_path) if summary_path else None,
        )
        return 0

    if args.command == "changes":
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        report_changes(args.report_dir, step_summary=Path(summary_path) if summary_path else None)
        return 0

    if args.command == "approval":
        return _approval(args)

    try:
        if args.pr_number <= 0 or not re.fullmatch(r"[0-9a-f]{40}", args.head_sha):
            raise GitHubError(f"implausible PR number {args.pr_number} or head SHA {args.head_sha!r}")
        body = prepare_comment_body(
            args.artifact_dir, repo=args.repo, run_url=args.run_url, conclusion=args.conclusion
        )
        if args.dry_run is not None:
            plan = {"repo": args.repo, "pr": args.pr_number, "head_sha": args.head_sha, "body": body}
            args.dry_run.write_text(json.dumps(plan, indent=2) + "\n")
            print(f"dry run: would create or update the perfguard comment on PR #{args.pr_number}")
            return 0
        token = os.environ.get("GITHUB_TOKEN")
        if not token:
            raise GitHubError("GITHUB_TOKEN is not set: pass ${{ github.token }} in the step's env")
        transport = github_transport(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
        action, comment_id = upsert_comment(transport, args.repo, args.pr_number, body, args.author)
    except GitHubError as exc:
        print(workflow_command("error", str(exc), "perfguard PR comment"))
        return 1
    print(f"{action} comment {comment_id} on PR #{args.pr_number}")
    return 0


def _approval(args: argparse.Namespace) -> int:
    """``approval``: print and output ``approved_by`` (empty when nobody approved); 0 either way.

    An API failure is a warning and no approval (fail closed: the regression still fails).
    """
    token = os.environ.get("GITHUB_TOKEN")
    approved: str | None = None
    try:
        if not token:
            raise GitHubError("GITHUB_TOKEN is not set: pass ${{ github.token }} in the step's env")
        transport = github_transport(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
        number = args.pr if args.pr is not None else pull_for_commit(transport, args.repo, args.sha)
        if number is None:
            why = f"no pull request merged {args.sha}"
        else:
            approved, why = approver(transport, args.repo, number, args.label)
    except GitHubError as exc:
        print(workflow_command("warning", f"{exc}; acceptances stay unapproved", "perfguard approval"))
        why = "the approval could not be checked"
    print(f"approval: {why}")
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as fh:
            fh.write(f"approved_by={approved or ''}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
