"""``perfguard check --baseline REF``: the PR gate (owner: issue 4)."""

from __future__ import annotations

from pathlib import Path

import click

from perfguard.cli.options import bench_option, db_option, profile_option
from perfguard.errors import PerfguardError

_path = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.option(
    "--baseline",
    "baseline_ref",
    required=True,
    metavar="REF",
    help="Baseline ref; the merge-base of REF and HEAD is compared with HEAD.",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Regression threshold as a fraction (default 0.20, or [tool.perfguard] threshold).",
)
@profile_option
@bench_option
@db_option
@click.option("--markdown", "markdown_path", type=_path, default=None, help="Write the Markdown report here.")
@click.option("--json", "json_path", type=_path, default=None, help="Write the verdicts as JSON here.")
@click.option("--html", "html_path", type=_path, default=None, help="Write the HTML report here.")
def check(
    baseline_ref: str,
    threshold: float | None,
    profile: str,
    bench_regex: str | None,
    db_url: str | None,
    markdown_path: Path | None,
    json_path: Path | None,
    html_path: Path | None,
) -> None:
    """Compare HEAD with the baseline on this machine; exit 1 on a real regression."""
    raise PerfguardError("perfguard check is not built yet")
