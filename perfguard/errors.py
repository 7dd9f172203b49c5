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
