"""What the commands print on stdout and write to files: tables of data, and reports.

Names, subjects, errors and reasons are data (an implementation may be called ``[/oops]``, a
reason may hold a terminal escape): table cells are rich ``Text``, never markup, and every cell
and message goes through :mod:`perfguard.console`, which makes control characters visible.  In a
log or a pipe the console is given at least the width a command's table needs, so CI logs keep
one line per row instead of squeezing it to 80 columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfguard.console import plain, visible
from perfguard.files import write_atomic
from perfguard.output_paths import output_path

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from perfguard.report.terminal import TerminalSummary


def say(message: str) -> None:
    """A message for the user (stderr, plain text; control characters of stored text made visible,
    so a reason or a name cannot clear the screen or plant a terminal link)."""
    click.echo(visible(message, keep_newlines=True), err=True)


def echo(text: str) -> None:
    """Text for stdout (a report, a listing), with control characters made visible like :func:`say`."""
    click.echo(visible(text, keep_newlines=True))


def stdout_console(min_width: int) -> Console:
    """The console on stdout; not a terminal: at least ``min_width`` columns."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, min_width)
    return console


def text_table(
    title: Any,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    styles: Iterable[str | None] | None = None,
    right: Iterable[str] = (),
    title_justify: str = "left",
    **column_options: Any,
) -> Table:
    """A rich table whose cells are plain text; ``styles``: one row style per row, ``right``: the
    columns justified right.

    ``title`` is given to rich as it is: a ``str`` of perfguard's own words (rich's title style), or
    a ``Text`` when it holds data.
    """
    from rich.table import Table

    table = Table(title=title, title_justify=title_justify)  # type: ignore[arg-type]
    right = set(right)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left", **column_options)
    row_styles = iter(styles) if styles is not None else None
    for row in rows:
        style = next(row_styles) if row_styles is not None else None
        table.add_row(*(plain(cell) for cell in row), style=style)
    return table


def print_table(
    title: Any,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    empty: str,
    min_width: int,
    **options: Any,
) -> None:
    """:func:`text_table` on stdout, or the line ``empty`` when there are no rows."""
    from rich.text import Text

    rows = list(rows)
    console = stdout_console(min_width)
    console.print(text_table(title, columns, rows, **options) if rows else Text(empty))


def write_output(path: Path, text: str, *, allow_dash: bool = False) -> None:
    """Write ``text`` to ``path`` and say where; never a partial file, never in the work tree where it
    would be a change (:func:`perfguard.output_paths.output_path`).  ``allow_dash``: ``-`` is stdout
    (for options declared with ``click.Path(allow_dash=True)``)."""
    if allow_dash and str(path) == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    say(f"wrote {write_atomic(output_path(path), text)}")


def print_verdicts(summary: TerminalSummary) -> None:
    """A check's terminal summary (:mod:`perfguard.report.terminal`) in its order: the table, the
    unstable items, the headline and the count of every item (``perfguard check``, and ``perfguard
    report --check ID`` for a stored check)."""
    style = {"regression": "bold red", "broken": "bold red", "failed": "red", "improvement": "green",
             "accepted": "cyan"}  # fmt: skip
    console = stdout_console(180)
    if summary.rows:
        rows = [row.cells for row in summary.rows]
        styles = (style.get(row.verdict) for row in summary.rows)
        console.print(text_table(summary.title, summary.columns, rows, styles=styles, overflow="fold"))
    for line in summary.unstable:  # a sentence a line, not folded: a CI log keeps it greppable
        console.print(plain(line, keep_newlines=True), style="yellow", soft_wrap=True)
    if summary.also:
        console.print(plain(summary.also, keep_newlines=True), soft_wrap=True)
    console.print(plain(summary.headline), soft_wrap=True)  # one line each, however long
    console.print(plain(summary.counts), style="dim", soft_wrap=True)
