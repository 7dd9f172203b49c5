"""Console output of measurements: messages and progress on stderr (the library reports, this prints).

:class:`perfguard.measuring.Bench` says what it does through a :class:`perfguard.measuring.Reporter`;
:func:`console_reporter` is the one the commands use: a transient rich progress bar on a terminal,
one flushed plain line per finished benchmark otherwise (CI logs), never a ``Live`` display that
shows nothing until it stops.  Every name and message is printed as text, never as rich markup.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from perfguard.rounds import Progress


def say(message: str) -> None:
    click.echo(message, err=True)


class _PlainReporter:
    """One line per message and per finished benchmark (CI logs)."""

    def __init__(self) -> None:
        self._last = -1

    def say(self, message: str) -> None:
        say(message)

    def progress(self, p: Progress) -> None:
        if p.done != self._last and p.latest:
            total = f"/{p.total}" if p.total else ""
            click.echo(f"  [{p.done}{total}] {p.latest}", err=True)
            self._last = p.done


@contextmanager
def console_reporter() -> Iterator[object]:
    """A reporter for the terminal the command runs in (see the module docstring)."""
    from rich.console import Console

    err = Console(stderr=True)
    if not (err.is_terminal and not err.is_dumb_terminal and sys.stderr.isatty()):
        yield _PlainReporter()
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        refresh_per_second=4,
    )
    task = bar.add_task("benchmarking", total=None)

    class _BarReporter:
        def say(self, message: str) -> None:
            bar.console.print(message, markup=False, highlight=False)

        def progress(self, p: Progress) -> None:
            bar.update(task, description=escape(p.latest[:100]), completed=p.done, total=p.total)

    with bar:
        yield _BarReporter()
