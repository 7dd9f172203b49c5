"""``perfguard report``: the check report and the static history site (owner: issue 5)."""

from __future__ import annotations

from pathlib import Path

import click

from perfguard.cli.options import db_option
from perfguard.errors import PerfguardError

_file = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the static history site into this directory.",
)
@click.option("--check", "check_id", type=int, default=None, help="Render the report of this stored check.")
@click.option("--html", "html_path", type=_file, default=None, help="With --check: HTML report path.")
@click.option("--markdown", "markdown_path", type=_file, default=None, help="With --check: Markdown path.")
@click.option("--json", "json_path", type=_file, default=None, help="With --check: JSON path.")
@db_option
def report(
    out_dir: Path | None,
    check_id: int | None,
    html_path: Path | None,
    markdown_path: Path | None,
    json_path: Path | None,
    db_url: str | None,
) -> None:
    """Render the static history site (--out) or one stored check's report (--check)."""
    raise PerfguardError("perfguard report is not built yet")
