"""``perfguard report``: the check report and the static history site (owner: issue 5)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import click

from perfguard.cli.options import db_option
from perfguard.errors import UsageError

_file = click.Path(dir_okay=False, path_type=Path, allow_dash=True)


def store_url(db_url: str | None) -> str:
    """``--db`` / ``PERFGUARD_DB``, else the repository's ``.perfguard/history.db``.

    Reports only read: the URL is opened read-only, and a missing SQLite file is an error that
    says what to do rather than an empty new database.
    """
    if db_url:
        return db_url
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        root = Path(top)
    except (OSError, subprocess.CalledProcessError):
        root = Path.cwd()
    return f"sqlite:///{root / '.perfguard' / 'history.db'}"


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
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

    from perfguard.report import (
        build_site,
        check_to_json,
        load_check,
        open_session,
        render_html,
        render_markdown,
    )

    url = store_url(db_url)
    if check_id is not None:
        with open_session(url) as session:
            check = load_check(session, check_id)
            if markdown_path:
                _write(markdown_path, render_markdown(check))
            if html_path:
                _write(html_path, render_html(check))
            if json_path:
                _write(json_path, json.dumps(check_to_json(check), indent=2) + "\n")
    if out_dir is not None:
        summary = build_site(url, out_dir)
        click.echo(
            f"wrote {summary.pages} pages ({summary.series} series over {summary.commits} commits on "
            f"{summary.machines} machines; {summary.step_marks + summary.check_marks} changes marked) "
            f"to {out_dir} in {summary.seconds:.1f} s; open {out_dir / 'index.html'}",
            err=True,
        )
