"""``perfguard run``: benchmark one commit through asv and store the results (owner: issue 4)."""

from __future__ import annotations

import click

from perfguard.cli.options import bench_option, db_option, profile_option
from perfguard.errors import PerfguardError


@click.command()
@click.option(
    "--commit", "rev", default="HEAD", show_default=True, help="Commit (any git revision) to benchmark."
)
@profile_option
@bench_option
@db_option
def run(rev: str, profile: str, bench_regex: str | None, db_url: str | None) -> None:
    """Benchmark a commit on this machine through asv (in a git worktree) and store the results."""
    raise PerfguardError("perfguard run is not built yet")
