"""Errors that reach the user, each with an exit code and a hint saying what to do next.

The CLI's contract (DESIGN.md): exit 0 when nothing regressed, 1 on a regression or a failed
verification, 2 on a usage or environment error, 70 on an internal error (a bug in perfguard).
Every error raised on purpose by perfguard is a :class:`PerfguardError`: a plain exception for
library callers (``perfguard.api``); the CLI (``perfguard.cli.main``) prints its message and hint
as ``Error: ...`` and exits with its code, so no traceback reaches a CI log for a problem the user
can fix.

:func:`error_for` is the one place that decides what any other exception means for the exit code:
an :class:`OSError` (disk full, name too long, a path component that is a file, permission
denied) is the environment's (exit 2); anything else is perfguard's own bug, :class:`InternalError`
(exit 70).  Never 1: CI reads exit 1 as "regression", and a crash must not look like a verdict.
"""

from __future__ import annotations

import errno
import os
import tempfile
import traceback
from datetime import datetime
from pathlib import Path


def error_summary(error: str | None, limit: int = 300) -> str:
    """One line for a stored benchmark error: what a report's reason shows.

    A stored error is often a whole traceback (``rank 0 of 2: Traceback ... RuntimeError: ...``);
    a reader needs where it came from (the text before the traceback) and the exception (its
    last line).  The whole error stays in the store.
    """
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return "no error message"
    first, last = lines[0], lines[-1]
    if "Traceback (most recent call last)" in first:
        where = first.split("Traceback (most recent call last)", 1)[0].strip()
        text = f"{where} {last}".strip()
    else:
        text = first if len(lines) == 1 else f"{first} … {last}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


EXIT_OK = 0
EXIT_FAILED = 1  # regression, broken implementation, failed verification
EXIT_ERROR = 2  # usage or environment error: the message says what to do
EXIT_SIGINT = 130  # interrupted by Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports it
EXIT_SIGTERM = 143  # stopped by SIGTERM (a CI job cancelled, a runner shutting down)
EXIT_INTERNAL = 70  # internal error, a bug in perfguard (sysexits.h EX_SOFTWARE); never 1

#: Prefix of the files that keep the traceback of an internal error (in the temporary directory).
CRASH_FILE_PREFIX = "perfguard-crash-"


class PerfguardError(Exception):
    """Base class: a message, a hint for the next step, and exit code 2."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    def format_message(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class Interrupted(PerfguardError):
    """Ctrl-C or SIGTERM stopped a command: exit 130 or 143 (128 + the signal), never 1 or 2.

    CI reads 1 as "regression" and 2 as "fix your input"; an interruption is neither, and a shell
    reports a process ended by a signal as 128 + its number.  The message says what was kept.
    """

    def __init__(self, message: str, hint: str | None = None, *, sigterm: bool = False) -> None:
        super().__init__(message, hint)
        self.exit_code = EXIT_SIGTERM if sigterm else EXIT_SIGINT


class UsageError(PerfguardError):
    """Bad command line: unknown implementation, unknown profile, CUDA asked for but absent."""


class GitError(PerfguardError):
    """Unknown ref, not a git repository, worktree could not be created."""


class StoreError(PerfguardError):
    """Unknown or unreachable database URL, schema too new, write failed (nothing was written),
    a stored value perfguard cannot use."""


class BenchmarkError(PerfguardError):
    """asv itself failed (configuration, environment), as opposed to one benchmark failing."""


class ConfigError(PerfguardError):
    """Invalid ``[tool.perfguard]`` configuration in pyproject.toml."""


class OutputError(PerfguardError):
    """A report, a JSON file or the site could not be written: full disk, a path through a file,
    no permission.  What was written before is kept whole (files are replaced atomically)."""


class InternalError(PerfguardError):
    """A bug in perfguard: an exception nobody expected.  Exit 70; the traceback is kept in a file
    (``traceback_file``) so that the message stays short and the bug can still be reported."""

    exit_code = EXIT_INTERNAL

    def __init__(self, error: BaseException, traceback_file: Path | None) -> None:
        where = (
            f"the traceback is in {traceback_file}"
            if traceback_file is not None
            else "the traceback is printed above (it could not be written to a file)"
        )
        super().__init__(
            f"internal error (a bug in perfguard, exit {EXIT_INTERNAL}): "
            f"{type(error).__name__}: {_first_line(error)}; {where}",
            hint="please report it with that traceback and the command line; this exit code is "
            "never a verdict (1 means regression)",
        )
        self.error = error
        self.traceback_file = traceback_file


# What to do about an OSError, by errno: the environment, not perfguard, has to change.
_OS_HINTS = {
    errno.ENOSPC: "free space on that file system (df -h), or write somewhere else",
    errno.EDQUOT: "free space within your quota, or write somewhere else",
    errno.ENAMETOOLONG: "use a shorter path: a name may have at most 255 bytes, a path 4096",
    errno.ENOTDIR: "a component of the path is a file, not a directory: fix the path",
    errno.EEXIST: "a component of the path is a file, not a directory: fix the path",
    errno.EISDIR: "the path is a directory: name a file",
    errno.EACCES: "check the permissions of the path, or write somewhere else",
    errno.EPERM: "check the permissions of the path, or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ENOENT: "check that the path exists",
}


def os_error(exc: OSError, doing: str) -> OutputError:
    """``exc`` (from ``doing``, e.g. "writing report.html") as an exit-2 error that says what to do."""
    reason = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) not in doing else ""
    return OutputError(
        f"{doing} failed: {reason}{where}",
        hint=_OS_HINTS.get(exc.errno or 0, "fix the file system or the path, then run the command again"),
    )


def error_for(exc: Exception) -> PerfguardError:
    """What an exception that reached the command line means: its message, hint and exit code.

    A :class:`PerfguardError` is itself; an :class:`OSError` or a :class:`MemoryError` is an
    environment error (exit 2); anything else is an :class:`InternalError` (exit 70), its traceback
    written to a file.
    """
    if isinstance(exc, PerfguardError):
        return exc
    if isinstance(exc, OSError):
        return os_error(exc, "a file operation")
    if isinstance(exc, MemoryError):
        return PerfguardError(
            "perfguard ran out of memory",
            hint="free memory on this machine, or measure less at once (--bench)",
        )
    return InternalError(exc, save_traceback(exc))


def save_traceback(exc: BaseException) -> Path | None:
    """Write ``exc``'s traceback to ``$TMPDIR/perfguard-crash-<time>-<pid>.txt``; None if that fails
    (the disk may be full): then it is printed on stderr instead."""
    text = "".join(traceback.format_exception(exc))
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(tempfile.gettempdir()) / f"{CRASH_FILE_PREFIX}{stamp}-{os.getpid()}.txt"
    try:
        path.write_text(text, encoding="utf-8")
    except OSError:
        traceback.print_exception(exc)
        return None
    return path


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else "(no message)"
    return line if len(line) <= 200 else line[:197] + "..."
