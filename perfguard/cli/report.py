"""``perfguard report``: the check report and the static history site (owner: issue 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from perfguard.cli.options import db_option
from perfguard.errors import UsageError
from perfguard.files import write_atomic

_file = click.Path(dir_okay=False, path_type=Path, allow_dash=True)


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    write_atomic(path, text)
    click.echo(f"wrote {path}", err=True)


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
    outputs = {"html": html_path, "markdown": markdown_path, "json": json_path}
    if check_id is None and any(outputs.values()):
        raise UsageError("--html, --markdown and --json render a stored check", hint="add --check ID")
    if out_dir is None and check_id is None:
        raise UsageError(
            "nothing to render",
            hint="pass --out DIR for the history site, or --check ID with --html/--markdown/--json PATH",
        )
    if check_id is not None and not any(outputs.values()):
        raise UsageError(
            f"--check {check_id} needs somewhere to write",
            hint="add --html PATH, --markdown PATH or --json PATH",
        )

    from perfguard.report.queries import open_store

    with open_store(db_url) as store:  # reports only read: nothing is created or migrated
        _render(store, out_dir, check_id, outputs)


def _render(store: Any, out_dir: Path | None, check_id: int | None, outputs: dict[str, Path | None]) -> None:
    from perfguard.report import build_site, check_to_json, load_check, render_html, render_markdown
    from perfguard.report.formatting import count

    if check_id is not None:
        check = load_check(store, check_id)
        if outputs["markdown"]:
            _write(outputs["markdown"], render_markdown(check, store=store))
        if outputs["html"]:
            _write(outputs["html"], render_html(check, store=store))
        if outputs["json"]:
            _write(outputs["json"], json.dumps(check_to_json(check, store=store), indent=2) + "\n")
    if out_dir is not None:
        summary = build_site(store, out_dir)
        marked = count(summary.step_marks + summary.check_marks, "change")
        click.echo(
            f"wrote {count(summary.pages, 'page')} ({summary.series} series over "
            f"{count(summary.commits, 'commit')} on {count(summary.machines, 'machine')}; {marked} marked) "
            f"to {out_dir} in {summary.seconds:.1f} s; open {out_dir / 'index.html'}",
            err=True,
        )
