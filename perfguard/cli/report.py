"""``perfguard report``: the check report and the static history site (owner: issue 5).

Options and output only; the rendering is :func:`perfguard.api.report` (:mod:`perfguard.report`).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from perfguard.cli.options import db_option

_file = click.Path(dir_okay=False, path_type=Path, allow_dash=True)


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
@click.option(
    "--markdown", "markdown_path", type=_file, default=None, help="With --check: Markdown path ('-': stdout)."
)
@click.option("--json", "json_path", type=_file, default=None, help="With --check: JSON path ('-': stdout).")
@click.option(
    "--baseline",
    default="main",
    show_default=True,
    metavar="REF",
    help="With --out: the branch whose first-parent lineage the charts follow (others listed apart).",
)
@db_option
def report(
    out_dir: Path | None,
    check_id: int | None,
    html_path: Path | None,
    markdown_path: Path | None,
    json_path: Path | None,
    baseline: str,
    db_url: str | None,
) -> None:
    """Render the static history site (--out) or one stored check's report (--check).

    --check ID alone prints the check as ``perfguard check`` did on the terminal."""
    from perfguard import api
    from perfguard.cli.output import print_verdicts, say, write_output
    from perfguard.report.formatting import count

    rendered = api.report(
        out_dir=out_dir,
        check_id=check_id,
        markdown=markdown_path is not None,
        html=html_path is not None,
        json=json_path is not None,
        db=db_url,
        baseline=baseline,
    )
    if rendered.terminal is not None:
        print_verdicts(rendered.terminal)
    for path, text in (
        (markdown_path, rendered.markdown),
        (html_path, rendered.html),
        (json_path, json.dumps(rendered.json, indent=2) + "\n" if rendered.json is not None else None),
    ):
        if path is not None and text is not None:
            write_output(path, text, allow_dash=True)
    if out_dir is not None and rendered.site is not None:
        summary = rendered.site
        marked = count(summary.step_marks + summary.check_marks, "change")
        say(
            f"wrote {count(summary.pages, 'page')} ({summary.series} series over "
            f"{count(summary.commits, 'commit')} on {count(summary.machines, 'machine')}; {marked} marked) "
            f"to {summary.out_dir} in {summary.seconds:.1f} s; open {summary.out_dir / 'index.html'}"
        )
