"""``perfguard verify``: catch wrong attention before anyone times it (owner: issue 3)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from perfguard.errors import EXIT_FAILED, EXIT_OK, UsageError


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
    help="Repeatable. Implementation names from attention.registry (default: all), plus any "
    "added by PERFGUARD_EXTRA_IMPLS=module:attr.",
)
@click.option("--seq-len", type=int, default=None, help="Sequence length (default: the registry's config).")
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
    json_path: Path | None,
) -> None:
    """Check every implementation against the float64 reference; exit 1 on any failure.

    \b
    Per implementation × device × dtype, in both modes (longnet, head_groups), causal and not:
    build, forward, backward, shape, return contract, every output row written, no NaN/inf,
    declared pattern sane (and equal to dilated's for "same function" implementations),
    output and input gradients against the float64 reference, determinism of two runs.

    Exit codes: 0 all passed, 1 a check failed, 2 usage error.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from perfguard.verify import merged_registry, run_verify
    from perfguard.verify.numerics import dtype_name
    from perfguard.verify.render import render
    from perfguard.verify.runner import PlannedRow

    if seq_len is not None and seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len}")
    registry = merged_registry()
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 200)  # CI logs: keep the table on one line per row
    progress = Progress(
        TextColumn("verifying {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task("", total=None)

    def on_row(planned: PlannedRow, index: int, total: int) -> None:
        label = f"{planned.spec.name} [{planned.device} {dtype_name(planned.dtype)}]"
        progress.update(task, description=label, completed=index, total=total)

    with progress:
        report = run_verify(
            registry, impls=impls, device=device, dtypes=dtypes, seq_len=seq_len, progress=on_row
        )
    render(report, console)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(
            json.dumps(report.to_json(), indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8"
        )
        console.print(f"wrote {json_path}", style="dim")
    ctx.exit(EXIT_OK if report.passed else EXIT_FAILED)
