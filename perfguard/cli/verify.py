"""``perfguard verify``: catch wrong attention before anyone times it (owner: issue 3)."""

from __future__ import annotations

from pathlib import Path

import click

from perfguard.errors import PerfguardError


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
    help="Repeatable. Implementation names from attention.registry (default: all).",
)
@click.option("--seq-len", type=int, default=None, help="Sequence length (default: the registry's config).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the results as JSON.",
)
def verify(
    device: str, dtypes: tuple[str, ...], impls: tuple[str, ...], seq_len: int | None, json_path: Path | None
) -> None:
    """Check every implementation against the float64 reference; exit 1 on any failure."""
    raise PerfguardError("perfguard verify is not built yet")
