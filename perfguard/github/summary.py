"""The Markdown for the job summary and the PR comment (``summary``), and the report's marker line.

The body is the report ``perfguard check`` wrote; when there is none (verify failed, the baseline
could not be resolved, perfguard crashed), a short account of which step failed first and its
message.  The first line is always a hidden marker by which ``comment`` finds its own comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perfguard.github.commands import EXIT_MEANING, error_message_from_log

MARKER = "<!-- perfguard-report -->"
"""Hidden first line of the Markdown report; the comment step finds its own comment by it."""

MARKER_PREFIX = "<!-- perfguard-report"
"""A report may carry a per-machine marker (``<!-- perfguard-report h100 -->``, docs/reports.md):
each distinct first line is its own sticky comment, so two GPU classes do not overwrite each other."""

COMMENT_LIMIT = 65_536
"""GitHub rejects issue comments longer than this many characters."""

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
        meaning = EXIT_MEANING.get(failed.exit_code or 0, f"crashed (exit {failed.exit_code})")
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
