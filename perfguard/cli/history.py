"""``perfguard history``: the stored series as a table (owner: issue 5)."""

from __future__ import annotations

import click

from perfguard.cli.options import db_option


@click.command()
@click.option("--impl", default=None, help="Only this implementation.")
@click.option("--benchmark", default=None, help="Only benchmarks whose name contains this.")
@click.option("--machine", default=None, help="Only machines whose key contains this.")
@click.option("--limit", type=int, default=20, show_default=True, help="Most recent commits per series.")
@db_option
def history(
    impl: str | None, benchmark: str | None, machine: str | None, limit: int, db_url: str | None
) -> None:
    """Print the stored series (filters: implementation, benchmark, machine)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from perfguard.cli.report import store_url
    from perfguard.errors import UsageError
    from perfguard.report import formatting
    from perfguard.report.queries import history_rows, history_runs, open_session
    from perfguard.report.series import assemble

    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    with open_session(store_url(db_url)) as session:
        _, series = assemble(history_runs(session), history_rows(session))
    chosen = [
        s
        for s in series
        if (impl is None or s.impl == impl)
        and (benchmark is None or benchmark in s.benchmark)
        and (machine is None or machine in s.machine.key)
        and s.points
    ]
    console = Console()
    if not chosen:
        known = sorted({s.impl for s in series})
        console.print(
            "no stored series match"
            + (
                f"; implementations in the store: {', '.join(known)}"
                if known
                else "; the store holds no history yet"
            )
        )
        return
    table = Table(title=f"{len(chosen)} series, last {limit} commits each", show_lines=False)
    for name, justify in (
        ("machine", "left"),
        ("impl", "left"),
        ("benchmark", "left"),
        ("params", "left"),
        ("commit", "left"),
        ("date", "left"),
        ("value", "right"),
        ("interval", "right"),
        ("change", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in chosen:
        points = s.points[-limit:]
        start = len(s.points) - len(points)
        for k, p in enumerate(points):
            previous = s.points[start + k - 1] if start + k > 0 else None
            change = (
                formatting.format_change(p.value / previous.value)  # type: ignore[operator]
                if previous is not None and previous.value
                else ""
            )
            interval = (
                f"{formatting.format_value(p.low, s.unit)} – {formatting.format_value(p.high, s.unit)}"
                if p.low is not None
                else ""
            )
            cells = (
                s.machine.key if k == 0 else "",
                s.impl if k == 0 else "",
                formatting.benchmark_label(s.benchmark) if k == 0 else "",
                formatting.params_label(s.params) if k == 0 else "",
                p.commit.short,
                p.commit.when,
                formatting.format_value(p.value, s.unit),
                interval,
                change,
            )
            # Text, not str: names are user text and must not be read as rich markup ("[red]").
            table.add_row(*(Text(c) for c in cells), end_section=k == len(points) - 1)
    console.print(table)
