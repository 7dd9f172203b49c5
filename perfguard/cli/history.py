"""``perfguard history``: the stored series as a table (owner: issue 5)."""

from __future__ import annotations

import click

from perfguard.cli.options import db_option
from perfguard.errors import PerfguardError


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
    raise PerfguardError("perfguard history is not built yet")
