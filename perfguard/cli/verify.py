"""``perfguard verify``: catch wrong attention before anyone times it (owner: issue 3).

Options and output only; the verification is :func:`perfguard.api.verify` (:mod:`perfguard.verify`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from perfguard.errors import EXIT_FAILED, EXIT_OK
from perfguard.files import write_atomic
from perfguard.output_paths import output_path


@click.command()
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto = cpu, plus cuda when a GPU is present.",
)
@click.option(
    "--dtype",
    "dtypes",
    multiple=True,
    type=click.Choice(["float32", "bfloat16", "float16"]),
    help="Repeatable. Default: float32 on CPU; bfloat16 and float32 on CUDA.",
)
@click.option(
    "--impl",
    "impls",
    multiple=True,
    metavar="NAME",
    help="Repeatable. Implementation names of the guarded package's registry ([tool.perfguard] "
    "registry in pyproject.toml; default: all).",
)
@click.option("--seq-len", type=int, default=None, help="Sequence length (default: the registry's config).")
@click.option(
    "--bench",
    "bench_regexes",
    multiple=True,
    metavar="REGEX",
    help="Only the implementations (and dtypes) that benchmarks matching this asv --bench regex "
    "measure with --profile: what `perfguard check --bench` verifies.",
)
@click.option(
    "--profile",
    "profile_name",
    default=None,
    metavar="NAME",
    help="With it, verify only the dtypes this benchmark profile measures on the device.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the results as JSON (schema perfguard.verify/1).",
)
@click.pass_context
def verify(
    ctx: click.Context,
    device: str,
    dtypes: tuple[str, ...],
    impls: tuple[str, ...],
    seq_len: int | None,
    bench_regexes: tuple[str, ...],
    profile_name: str | None,
    json_path: Path | None,
) -> None:
    """Check every implementation against the float64 reference; exit 1 on any failure.

    \b
    The implementations are those of the package pyproject.toml declares ([tool.perfguard]
    package and registry), imported from this repository (exit 2 when it declares none).
    Per implementation × device × dtype, in each of its modes, causal and not:
    build, forward, backward, shape, return contract, every output row written, no NaN/inf,
    declared pattern sane (and equal to dilated's for "same function" implementations),
    output and input gradients against the float64 reference, determinism of two runs.

    Exit codes: 0 all passed, 1 a check failed, 2 usage error.
    """
    started = time.perf_counter()
    from rich.console import Console

    from perfguard import api
    from perfguard.cli.output import stdout_console
    from perfguard.cli.progress import verify_progress
    from perfguard.verify.render import render, row_line

    console = stdout_console(200)  # CI logs: keep the table on one line per row
    with verify_progress(Console(stderr=True)) as (on_row, on_done):
        report = api.verify(
            impls=impls,
            device=device,
            dtypes=dtypes,
            seq_len=seq_len,
            bench=bench_regexes,
            profile=profile_name,
            progress=on_row,
            row_done=lambda row, i, total: on_done(row_line(row, i, total), i),
            started=started,
        )
    render(report, console)
    if json_path is not None:
        text = json.dumps(report.to_json(), indent=2, allow_nan=False, default=str) + "\n"
        console.print(f"wrote {write_atomic(output_path(json_path), text)}", style="dim")
    ctx.exit(EXIT_OK if report.passed else EXIT_FAILED)
