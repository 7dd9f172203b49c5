"""Workflow commands and the ``step`` helper: run one perfguard command, record its exit code, and
turn a failure into an ``::error::`` annotation that says why (exit 1: a regression or a failed
verification; exit 2: a usage or environment error, with perfguard's own message and hint).

Workflow commands: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_MEANING = {
    1: "found a regression, a broken benchmark or a failed verification (exit 1)",
    2: "stopped on a usage or environment error (exit 2)",
    130: "was interrupted (Ctrl-C, exit 130); its finished rounds are kept",
    143: "was stopped by SIGTERM (exit 143, a cancelled job); its finished rounds are kept",
    70: "crashed on an internal error (exit 70)",  # perfguard.errors.EXIT_INTERNAL: a bug
}
ERROR_LINE = re.compile(r"^Error: ", re.MULTILINE)


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
    matches = list(ERROR_LINE.finditer(log))
    if matches:
        return log[matches[-1].end() :].strip()
    tail = [line for line in log.strip().splitlines() if line.strip()]
    return "\n".join(tail[-15:])


def describe_exit(name: str, code: int, log: str) -> tuple[str, str] | None:
    """(title, message) of the annotation for a perfguard command that exited ``code``; None if 0."""
    if code == 0:
        return None
    if code == 1 and "Traceback (most recent call last)" not in log:
        if ERROR_LINE.search(log):  # a click error that kept click's default exit code 1
            return (f"perfguard {name} failed (exit 1)", error_message_from_log(log))
        return (
            f"perfguard {name} {EXIT_MEANING[1]}",
            f"perfguard {name} {EXIT_MEANING[1]}. The job summary and the report artifact show "
            "which benchmark or implementation.",
        )
    if code in (2, 70, 130, 143):
        return (f"perfguard {name} {EXIT_MEANING[code]}", error_message_from_log(log))
    if code == 127:
        return (
            f"perfguard {name} could not start",
            "the perfguard command was not found: the 'Install perfguard' step did not put it on PATH "
            "(see its log).\n" + error_message_from_log(log),
        )
    return (f"perfguard {name} crashed (exit {code})", error_message_from_log(log))


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
