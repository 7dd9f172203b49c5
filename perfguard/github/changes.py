"""``changes``: the steps ``perfguard changes`` found on the baseline branch, as job summary and
``::warning::`` annotations naming the benchmark, the ratio and the likely cause."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from perfguard.github.commands import workflow_command

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
