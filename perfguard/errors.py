"""Errors that reach the user, each with an exit code and a hint saying what to do next.

The CLI's contract (DESIGN.md): exit 0 when nothing regressed, 1 on a regression or a failed
verification, 2 on a usage or environment error.  Every error raised on purpose by perfguard is a
:class:`PerfguardError`: a plain exception for library callers (``perfguard.api``); the CLI
(``perfguard.cli.main``) prints its message and hint as ``Error: ...`` and exits with its code, so
no traceback reaches a CI log for a problem the user can fix.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # regression, broken implementation, failed verification
EXIT_ERROR = 2  # usage or environment error: the message says what to do
EXIT_SIGINT = 130  # interrupted by Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports it
EXIT_SIGTERM = 143  # stopped by SIGTERM (a CI job cancelled, a runner shutting down)


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
    """Unknown or unreachable database URL, schema too new, write failed (nothing was written)."""


class BenchmarkError(PerfguardError):
    """asv itself failed (configuration, environment), as opposed to one benchmark failing."""


class ConfigError(PerfguardError):
    """Invalid ``[tool.perfguard]`` configuration in pyproject.toml."""
