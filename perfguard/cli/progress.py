"""Progress and messages of long operations, on stderr (the library reports, this prints).

:class:`perfguard.measuring.Bench` says what it does through a :class:`perfguard.measuring.Reporter`;
:func:`console_reporter` is the one the commands use, and :func:`verify_progress` the rows of
``perfguard verify``: a transient rich progress bar on a terminal, one flushed plain line per
finished benchmark or row otherwise (CI logs), never a ``Live`` display that shows nothing until it
stops.  Every name and message is printed as text, never as rich markup.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from perfguard.console import visible

if TYPE_CHECKING:
    from rich.console import Console

    from perfguard.engine.rounds import Progress
    from perfguard.verify.runner import PlannedRow


def say(message: str) -> None:
    """A message on stderr, control characters of stored text made visible (perfguard.console)."""
    click.echo(visible(message, keep_newlines=True), err=True)


class _PlainReporter:
    """One line per message and per finished benchmark (CI logs)."""

    def __init__(self) -> None:
        self._last: tuple[int, int | None, str] | None = None

    def say(self, message: str) -> None:
        say(message)

    def progress(self, p: Progress) -> None:
        # Keyed on the line, not on the count alone: every round counts from 1 again, so a round of
        # one benchmark after another one printed nothing (the re-measurement of one suspect).
        line = (p.done, p.total, p.latest)
        if line != self._last and p.latest:
            total = f"/{p.total}" if p.total else ""
            say(f"  [{p.done}{total}] {p.latest}")
            self._last = line


def _interactive(err: Console) -> bool:
    """A terminal a bar can redraw (a CI log is not, whatever FORCE_COLOR says)."""
    return bool(err.is_terminal and not err.is_dumb_terminal and sys.stderr.isatty())


def _bar(err: Console, description: str, refresh_per_second: float) -> Any:
    """A transient rich progress bar: description, bar, done/total, elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        refresh_per_second=refresh_per_second,
    )


@contextmanager
def console_reporter() -> Iterator[object]:
    """A reporter for the terminal the command runs in (see the module docstring)."""
    from rich.console import Console
    from rich.markup import escape

    err = Console(stderr=True)
    if not _interactive(err):
        yield _PlainReporter()
        return
    bar = _bar(err, "{task.description}", 4)
    task = bar.add_task("benchmarking", total=None)

    class _BarReporter:
        def say(self, message: str) -> None:
            bar.console.print(visible(message, keep_newlines=True), markup=False, highlight=False)

        def progress(self, p: Progress) -> None:
            bar.update(task, description=escape(visible(p.latest[:100])), completed=p.done, total=p.total)

    with bar:
        yield _BarReporter()


@contextmanager
def verify_progress(
    err: Console,
) -> Iterator[tuple[Callable[[PlannedRow, int, int], None], Callable[[str, int], None]]]:
    """Progress of ``perfguard verify`` on stderr: (before a row, after a row) callbacks."""
    if not _interactive(err):
        yield (lambda planned, index, total: None), (lambda line, index: click.echo(line, err=True))
        return
    from rich.markup import escape

    from perfguard.verify.numerics import dtype_name

    progress = _bar(err, "verifying {task.description}", 2)
    task = progress.add_task("", total=None)

    def on_row(planned: PlannedRow, index: int, total: int) -> None:
        label = escape(f"{planned.spec.name} [{planned.device} {dtype_name(planned.dtype)}]")
        progress.update(task, description=label, completed=index, total=total)

    def on_done(line: str, index: int) -> None:
        progress.console.print(line, highlight=False, markup=False)
        progress.update(task, completed=index + 1)

    with progress:
        yield on_row, on_done
