"""``perfguard calibrate``: this machine's noise, false alarms and detection rates (issue 7).

Options and output only: the calibration is :func:`perfguard.api.calibrate`
(:mod:`perfguard.calibrate`).  ``--db`` deliberately does not read ``PERFGUARD_DB``: a runner whose
environment points at its history store should not collect calibration runs there without being
asked to.  User documentation: ``docs/calibration.md``.

Exit 0 when the calibration ran (it reports; findings do not fail it), 2 on usage or environment
errors (a dirty work tree, bad ``--planted``, asv missing for ``--asv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.api import DEFAULT_PLANTED
from perfguard.cli.options import bench_option, no_wait_option, profile_option, rounds_option

if TYPE_CHECKING:
    from perfguard.calibrate import Calibration

_path = click.Path(dir_okay=False, path_type=Path)


@click.command()
@profile_option
@bench_option
@rounds_option
@click.option(
    "--aa",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="A/A repetitions: HEAD measured as two sides (interleaved) and compared with itself; "
    "0 with --planted measures only the planted comparisons.",
)
@click.option(
    "--planted",
    default=DEFAULT_PLANTED,
    show_default=True,
    metavar="F,F,...",
    help="Planted slowdowns as fractions of each module's own forward time (0.1 = +10%); '' for none.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Repetitions of the planted comparisons (each measures HEAD and every planted commit again).",
)
@click.option(
    "--asv/--no-asv",
    "use_asv",
    default=True,
    show_default=True,
    help="Also apply asv's own regression rule (asv compare --factor 1+threshold) to the same data.",
)
@click.option("--json", "json_path", type=_path, default=None, help="Write the report as JSON here.")
@click.option(
    "--markdown", "markdown_path", type=_path, default=None, help="Write the report as Markdown here."
)
@click.option(
    "--db",
    "db_url",
    default=None,
    metavar="URL",
    help="Keep the calibration rounds (purpose 'calibrate') in this store. "
    "Default: a temporary store, deleted afterwards (PERFGUARD_DB is not read).",
)
@no_wait_option
def calibrate(
    profile: str,
    bench_regex: str | None,
    rounds: int | None,
    aa: int,
    planted: str,
    repeats: int,
    use_asv: bool,
    json_path: Path | None,
    markdown_path: Path | None,
    db_url: str | None,
    no_wait: bool,
) -> None:
    """Measure this machine's noise, false alarms and detection rates on the commit HEAD.

    \b
    1. process noise: every benchmark of the profile in fresh processes; CV of the round medians
    2. A/A: HEAD against itself with the full verdict rule (stage 1 + re-measured suspects)
    3. planted slowdowns: clones of HEAD whose forward passes do f x their own work more,
       compared with HEAD: the share flagged 'regression' is the detection rate
    4. the time each phase took; 5. asv's own rule on the same data (--asv)

    The work tree must be clean (commit or stash first).  Exit 0 when the calibration ran
    (findings do not fail it), 2 on usage or environment errors.
    """
    import time

    from perfguard.api import calibrate as run_calibration
    from perfguard.cli.progress import console_reporter

    started = time.perf_counter()
    with console_reporter() as reporter:
        calibration = run_calibration(
            profile=profile,
            bench=bench_regex,
            rounds=rounds,
            aa=aa,
            planted=planted,
            repeats=repeats,
            asv=use_asv,
            db=db_url,
            reporter=reporter,
            started=started,
            wait=not no_wait,
        )
    _print(calibration)
    _write(calibration, json_path, markdown_path)


def _print(calibration: Calibration) -> None:
    from perfguard.cli.output import stdout_console, text_table

    console = stdout_console(180)
    for data in calibration.tables():
        console.print(text_table(data.title, data.columns, data.rows, overflow="fold"))
        for note in data.notes:
            console.print(note, style="dim", highlight=False)
        console.print()
    for line in calibration.summary():
        console.print(line, highlight=False)
    for warning in calibration.warnings:
        console.print(f"warning: {warning}", style="yellow", highlight=False)


def _write(calibration: Calibration, json_path: Path | None, markdown_path: Path | None) -> None:
    import json

    from perfguard.cli.output import write_output

    if json_path is not None:
        write_output(json_path, json.dumps(calibration.to_json(), indent=2, allow_nan=False) + "\n")
    if markdown_path is not None:
        write_output(markdown_path, calibration.to_markdown())
