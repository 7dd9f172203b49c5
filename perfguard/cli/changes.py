"""``perfguard changes``: after the baseline workflow records a commit, flag the steps nobody accepted.

Options and output only; the detection is :func:`perfguard.api.changes` (:mod:`perfguard.changepoints`).
Exit 0 (also with flagged steps, unless ``--exit-code``), 1 with ``--exit-code`` when a step is
flagged, 2 on usage or environment errors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import db_option, profile_option

if TYPE_CHECKING:
    from perfguard.store import StoredChangePoint

_path = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.option("--commit", "rev", default="HEAD", show_default=True, help="The recorded commit to look at.")
@click.option(
    "--machine",
    "machine_key",
    default=None,
    metavar="KEY",
    help="Machine key of the history (default: this machine's, as `perfguard run` stores it).",
)
@profile_option
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Step that counts, as a fraction (default 0.20, or [tool.perfguard] threshold and overrides).",
)
@click.option(
    "--window",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="A step must also clear the median of this many recorded commits before it.",
)
@click.option(
    "--accept-approved-by",
    "approved_by",
    envvar="PERFGUARD_ACCEPT_APPROVED_BY",
    default=None,
    metavar="LOGIN",
    help="LOGIN, a maintainer, approved the pull request merged as --commit (the workflow checks the "
    "approval label's actor): the Perfguard-Accept trailers of the commits that merge brought in "
    "(COMMIT^1..COMMIT) are trusted, no others. Env PERFGUARD_ACCEPT_APPROVED_BY.",
)
@db_option
@click.option("--json", "json_path", type=_path, default=None, help="Write the steps as JSON here.")
@click.option(
    "--markdown", "markdown_path", type=_path, default=None, help="Write the job-summary section here."
)
@click.option("--exit-code", "exit_code", is_flag=True, help="Exit 1 when a step is flagged.")
@click.option(
    "--list", "list_only", is_flag=True, help="List the stored steps instead (--flagged: unaccepted only)."
)
@click.option("--flagged", is_flag=True, help="With --list: only the steps no acceptance covers.")
@click.pass_context
def changes(
    ctx: click.Context,
    rev: str,
    machine_key: str | None,
    profile: str,
    threshold: float | None,
    window: int,
    approved_by: str | None,
    db_url: str | None,
    json_path: Path | None,
    markdown_path: Path | None,
    exit_code: bool,
    list_only: bool,
    flagged: bool,
) -> None:
    """Compare a recorded commit of the baseline branch with the recent history of its machine key.

    \b
    A step beyond the threshold against the commit recorded before it (and the median of the last
    --window ones) is stored; it is flagged unless a trusted acceptance of the new commits covers
    it (`perfguard accept`, or an approved Perfguard-Accept trailer). A software change between
    the two runs (torch, driver, CUDA, cuDNN) is named as the likely cause.
    """
    from perfguard import api
    from perfguard.cli.output import echo, write_output
    from perfguard.errors import UsageError

    if list_only:
        _print_steps(api.change_points(machine=machine_key, flagged=flagged, db=db_url))
        return
    if flagged:
        raise UsageError("--flagged goes with --list", hint="perfguard changes --list --flagged")
    found = api.changes(
        rev,
        machine=machine_key,
        profile=profile,
        threshold=threshold,
        window=window,
        approved_by=approved_by,
        db=db_url,
    )
    if json_path is not None:
        write_output(json_path, json.dumps(found.to_json(), indent=2) + "\n")
    markdown = found.to_markdown()
    if markdown_path is not None:
        write_output(markdown_path, markdown)
    echo(markdown.rstrip())
    if exit_code:
        ctx.exit(found.exit_code)


def _print_steps(steps: Sequence[StoredChangePoint]) -> None:
    from perfguard.cli.output import print_table

    columns = ("commit", "machine", "impl", "benchmark", "params", "ratio", "status", "cause")
    rows = (
        (
            s.sha[:10],
            s.machine_key,
            s.impl,
            s.benchmark.split(".", 1)[-1],
            ", ".join(f"{k}={v}" for k, v in sorted(s.params.items()) if k != "impl"),
            f"{s.ratio:.3f}",
            f"accepted by {s.acceptance.author}" if s.acceptance is not None else "flagged",
            s.cause or "",
        )
        for s in steps
    )
    print_table("perfguard steps on the baseline branch", columns, rows, empty="no steps stored",
                min_width=160, overflow="fold")  # fmt: skip
