"""``perfguard fidelity``: is a number measured in a full round the number of the case alone?

Options and output only; the measurement is :func:`perfguard.api.fidelity`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import bench_option, profile_option

if TYPE_CHECKING:
    from perfguard.fidelity import FidelityReport


@click.command()
@profile_option
@bench_option
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Cases measured alone, spread evenly over the selection; 0: every case.",
)
@click.option(
    "--alone",
    "alone",
    default=None,
    metavar="REGEX",
    help="Measure alone only the cases with a benchmark label this regex searches (like --bench, "
    "e.g. \"'ring', 4096\"); the round stays the full selection.  Splits a long run over several.",
)
@click.option(
    "--time-tolerance",
    type=float,
    default=None,
    metavar="X",
    help="Largest ratio between a timing alone and in the round (default 1.10 on CUDA; "
    "on the CPU timings are shown, not judged, unless given).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every row as JSON.")  # fmt: skip
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the table as Markdown (for docs/perf/).")  # fmt: skip
@click.pass_context
def fidelity(
    ctx: click.Context,
    profile: str,
    bench_regex: str | None,
    sample: int,
    alone: str | None,
    time_tolerance: float | None,
    json_path: Path | None,
    markdown: Path | None,
) -> None:
    """Check that measuring does not change what is measured.

    \b
    One full round of the selection (a fresh process, as run and check measure), then each
    sampled case alone in a fresh process.  Peak memory, work counts and code-path fingerprints
    must be equal; timings within --time-tolerance.  Nothing is stored.
    Exit 0 when everything agrees, 1 when something does not, 2 on errors.
    """
    from perfguard import api
    from perfguard.cli.output import say, write_output
    from perfguard.cli.progress import console_reporter
    from perfguard.files import write_atomic
    from perfguard.output_paths import output_path

    def save(report: FidelityReport) -> None:  # after every case: a run cut short keeps its rows
        if json_path is not None:
            write_atomic(output_path(json_path), json.dumps(report.as_dict(), indent=2) + "\n")

    with console_reporter() as reporter:
        report = api.fidelity(
            profile=profile,
            bench=bench_regex,
            sample=sample,
            alone=alone,
            time_tolerance=time_tolerance,
            on_case=save,
            reporter=reporter,
        )
    _print(report)
    if json_path is not None:
        write_output(json_path, json.dumps(report.as_dict(), indent=2) + "\n")
    if markdown is not None:
        write_output(markdown, markdown_table(report))
    bad = report.disagreeing
    if bad:
        say(f"{len(bad)} number(s) differ between the full round and the case alone")
    else:
        say(f"every judged number of {report.cases} case(s) agrees between the full round and alone")
    ctx.exit(report.exit_code)


def _cells(report: FidelityReport) -> list[tuple[str, ...]]:
    from perfguard.report.formatting import metric_label, params_label
    from perfguard.units import format_value

    rows = []
    for r in report.rows:
        if r.agree and r.in_round is None and r.alone is None:
            continue  # skipped both times (e.g. CUDA kernels on the CPU): in the JSON only
        ratio = "" if r.ratio is None else f"×{r.ratio:.3f}"
        agree = {True: "yes", False: "NO", None: "–"}[r.agree]
        params = params_label(r.params)
        rows.append((r.impl, metric_label(r.benchmark), params, format_value(r.in_round, r.unit),
                     format_value(r.alone, r.unit), ratio, agree, r.why))  # fmt: skip
    return rows


COLUMNS = ("implementation", "benchmark", "params", "in the round", "alone", "alone/round", "agrees", "why")


def _print(report: FidelityReport) -> None:
    from perfguard.cli.output import stdout_console, text_table

    console = stdout_console(140)
    title = (
        f"fidelity: {report.cases} of {report.cases_in_round} case(s) alone vs the full round "
        f"({report.profile}, {report.device})"
    )
    console.print(text_table(title, COLUMNS, _cells(report), right=("in the round", "alone", "alone/round")))


def markdown_table(report: FidelityReport) -> str:
    """The rows as a Markdown table (what docs/perf/ keeps)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "| " + " | ".join("---" for _ in COLUMNS) + " |"]
    lines += ["| " + " | ".join(c.replace("|", "\\\\|") for c in row) + " |" for row in _cells(report)]
    return "\n".join(lines) + "\n"
