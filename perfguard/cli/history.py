"""``perfguard history``: the stored series as a table, or as JSON.

Options and output only; the reading is :func:`perfguard.api.history`.  One section per series
(machine key x benchmark x params), newest commit first, with each commit's value, its spread
(interquartile range relative to the value), the samples behind it, and the change from the
commit before on the baseline branch's first-parent lineage (``--baseline``, default ``main``); a
commit off it (a pull request's head, another branch) is marked so, and its change is against the
baseline's commit before it, never the "before" of a baseline step (issue 30). Changes beyond the
default 20% threshold in the worse direction are red, in the better direction green: a quick look,
not a verdict (``perfguard check`` decides with statistics). The store is opened read-only
(``perfguard history`` never writes, creates or migrates one), and every stored name is printed as
written: machine keys, benchmarks and parameters come from whoever wrote the store, so they go
through :mod:`perfguard.console`, never through rich's markup.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import db_option
from perfguard.console import plain
from perfguard.files import write_atomic
from perfguard.output_paths import output_path
from perfguard.units import format_value

if TYPE_CHECKING:
    from rich.text import Text

    from perfguard.report.lineage import Lineage
    from perfguard.store import SeriesPoint, StoredSeries

_HIGHLIGHT = 0.20  # the default regression threshold (DESIGN.md)


@click.command()
@click.option("--impl", default=None, help="Only this implementation (exact name).")
@click.option("--benchmark", default=None, help="Only benchmarks whose name contains this.")
@click.option("--machine", default=None, help="Only machines whose key contains this.")
@click.option("--profile", default=None, help="Only runs of this profile.")
@click.option("--branch", default=None, help="Only commits recorded on this branch.")
@click.option("--include-dirty", is_flag=True, help="Also show dirty work trees (HEAD plus changes).")
@click.option(
    "--baseline",
    default="main",
    show_default=True,
    metavar="REF",
    help="The branch whose first-parent lineage the changes follow; other commits are marked off it.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Most recent commits per series.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    help="Write the series as JSON to this file ('-' for stdout, instead of the table).",
)
@db_option
def history(
    impl: str | None,
    benchmark: str | None,
    machine: str | None,
    profile: str | None,
    branch: str | None,
    include_dirty: bool,
    baseline: str,
    limit: int,
    json_path: Path | None,
    db_url: str | None,
) -> None:
    """Print the stored series (filters: implementation, benchmark, machine)."""
    from perfguard import api
    from perfguard.cli.output import say

    found = api.history(
        impl=impl,
        benchmark=benchmark,
        machine=machine,
        profile=profile,
        branch=branch,
        include_dirty=include_dirty,
        limit=limit,
        db=db_url,
        baseline=baseline,
    )
    if json_path is not None:
        text = json.dumps(found.to_json(), indent=2, allow_nan=False) + "\n"
        if str(json_path) == "-":
            click.echo(text, nl=False)
        else:
            say(f"wrote {write_atomic(output_path(json_path), text)}")
    elif found.message is not None:
        say(found.message)
    else:
        assert found.lineage is not None, "api.history gives the lineage with the series"
        _print_table(found.store, found.series, found.lineage)


# --- table ---------------------------------------------------------------------------------------


def _print_table(where: str, found: list[StoredSeries], lineage: Lineage) -> None:
    from rich.table import Table

    from perfguard.cli.output import stdout_console
    from perfguard.store import short_benchmark

    console = stdout_console(200)
    n_points = sum(len(s.points) for s in found)
    if lineage.shas is None:
        follows = f"changes by commit date ({lineage.ref}'s lineage unknown: {lineage.why})"
    else:
        follows = f"changes along {lineage.ref}'s first parents; other commits marked 'off {lineage.ref}'"
    title = f"{len(found)} series, {n_points} points: {where}; {follows}"
    table = Table(title=plain(title), title_justify="left")
    table.add_column("machine", overflow="fold")
    table.add_column("benchmark", overflow="fold")
    table.add_column("params", overflow="fold")
    table.add_column("commit", no_wrap=True)
    table.add_column("date (UTC)", no_wrap=True)
    table.add_column("on", overflow="fold")
    table.add_column("value", justify="right")
    table.add_column("IQR", justify="right")
    table.add_column("n", justify="right")
    table.add_column("change", justify="right")
    for series in found:
        table.add_section()
        points = list(series.points)
        for i, point in reversed(list(enumerate(points))):
            first = i == len(points) - 1
            older = lineage.previous(points, i)
            on = lineage.on(point.sha)
            table.add_row(
                plain(series.machine_key if first else ""),
                plain(short_benchmark(series.benchmark) if first else ""),
                plain(series.params_key if first else ""),
                plain(point.sha[:10] + ("+dirty" if point.dirty else "")),
                point.committed_at.strftime("%Y-%m-%d %H:%M"),
                plain(
                    "" if on is None else lineage.ref if on else f"off {lineage.ref}: {point.branch or '?'}"
                ),
                _value(point, series.unit),
                _spread(point),
                f"{point.n_samples}" + (f" ({point.n_runs} runs)" if point.n_runs > 1 else ""),
                _change(point, older, series.direction, against="" if on is not False else lineage.ref),
            )
    console.print(table)


def _value(point: SeriesPoint, unit: str) -> Text:
    if point.value is None:
        return plain(point.status, "dim")
    return plain(format_value(point.value, unit))


def _spread(point: SeriesPoint) -> str:
    if point.value is None or point.q25 is None or point.q75 is None or point.value == 0:
        return ""
    return f"{(point.q75 - point.q25) / abs(point.value):.1%}"


def _change(point: SeriesPoint, older: SeriesPoint | None, direction: str, *, against: str = "") -> Text:
    """The change from ``older``; ``against``: the baseline it is measured from, for a point off it
    (``+5.0% vs main``: a pull request's point is not a step of the baseline)."""
    if older is None or point.value is None or older.value is None or older.value == 0:
        return plain("")
    change = point.value / older.value - 1.0
    if not math.isfinite(change):
        return plain("")
    worse = change > 0 if direction == "lower" else change < 0
    style = ("red" if worse else "green") if abs(change) > _HIGHLIGHT else ""
    return plain(f"{change:+.1%}" + (f" vs {against}" if against else ""), style)
