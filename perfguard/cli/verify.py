"""``perfguard verify``: catch wrong attention before anyone times it (owner: issue 3)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.errors import EXIT_FAILED, EXIT_OK, UsageError
from perfguard.files import write_atomic

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.console import Console

    from attention.registry import ImplSpec
    from perfguard.verify.runner import PlannedRow


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
    Per implementation × device × dtype, in both modes (longnet, head_groups), causal and not:
    build, forward, backward, shape, return contract, every output row written, no NaN/inf,
    declared pattern sane (and equal to dilated's for "same function" implementations),
    output and input gradients against the float64 reference, determinism of two runs.

    Exit codes: 0 all passed, 1 a check failed, 2 usage error.
    """
    started = time.perf_counter()
    from rich.console import Console

    from perfguard.verify import merged_registry, run_verify
    from perfguard.verify.render import render, row_line

    if seq_len is not None and seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len}")
    registry = merged_registry()
    impls, dtypes = _scope(registry, impls, dtypes, device, bench_regexes, profile_name)
    _preload(registry, impls)
    imports = time.perf_counter() - started
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 200)  # CI logs: keep the table on one line per row
    with _row_progress(Console(stderr=True)) as (on_row, on_done):
        report = run_verify(
            registry,
            impls=impls,
            device=device,
            dtypes=dtypes,
            seq_len=seq_len,
            progress=on_row,
            row_done=lambda row, i, total: on_done(row_line(row, i, total), i),
        )
    report.setup_seconds = {"imports": imports, **report.setup_seconds}
    render(report, console)
    if json_path is not None:
        write_atomic(json_path, json.dumps(report.to_json(), indent=2, allow_nan=False, default=str) + "\n")
        console.print(f"wrote {json_path}", style="dim")
    ctx.exit(EXIT_OK if report.passed else EXIT_FAILED)


def _scope(
    registry: Mapping[str, ImplSpec],
    impls: tuple[str, ...],
    dtypes: tuple[str, ...],
    device: str,
    bench_regexes: tuple[str, ...],
    profile_name: str | None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The implementations and dtypes to verify when a benchmark selection / profile narrows them."""
    import re

    from perfguard import profiles
    from perfguard.suite import suite_labels

    if profile_name is None and not bench_regexes:
        return impls, dtypes
    if profile_name is not None and profile_name not in profiles.CHOICES:
        raise UsageError(f"--profile {profile_name!r} is not one of {', '.join(profiles.CHOICES)}")
    cuda = device == "cuda"
    profile = profiles.resolve(profile_name or "auto", cuda=cuda)
    measured = profile.dtypes("cuda" if cuda else "cpu")
    if profile_name is not None and not dtypes and device != "auto":
        dtypes = measured
    if bench_regexes:
        try:
            compiled = [re.compile(r) for r in bench_regexes]
        except re.error as exc:
            raise UsageError(f"--bench is not a regular expression: {exc}") from None
        names = impls or tuple(registry)
        chosen = []
        for name in names:
            labels = suite_labels([name], profile.seq_lens, measured)
            if any(r.search(label) for r in compiled for label in labels):
                chosen.append(name)
        if not chosen:
            raise UsageError(
                f"--bench {bench_regexes[0]!r} selects no benchmark of profile {profile.name!r}",
                hint="it must match asv's 'name(params)', e.g. \"Forward\\.track_time\\('improved'\"",
            )
        impls = tuple(chosen)
    return impls, dtypes


def _preload(registry: Mapping[str, ImplSpec], impls: tuple[str, ...]) -> None:
    """Import the implementations' modules now, so their import time counts as setup, not as the
    first row's verification.  A module that fails to import is left for the ``build`` check to
    report (with the row it belongs to)."""
    import torch

    import attention.factory  # noqa: F401  (registered implementations are built through it)

    # the first autograd.grad with grad_outputs imports torch.fx's symbolic shapes (sympy): ~1 s
    x = torch.ones(1, requires_grad=True)
    torch.autograd.grad(x * 2, x, torch.ones(1))

    for name in impls or registry:
        spec = registry.get(name)
        if spec is None:
            continue  # an unknown name: run_verify says so, as a usage error
        try:
            spec.cls  # noqa: B018  (resolves module:Class, importing the module)
        except Exception:
            continue


@contextmanager
def _row_progress(
    err: Console,
) -> Iterator[tuple[Callable[[PlannedRow, int, int], None], Callable[[str, int], None]]]:
    """Progress on stderr: a transient bar on a terminal, one plain line per finished row elsewhere.

    In a CI log (stderr not a terminal) a rich ``Live`` display shows nothing until it stops and
    keeps a refresh thread busy meanwhile, so there each finished row is one flushed line instead.
    """
    if not (err.is_terminal and not err.is_dumb_terminal and sys.stderr.isatty()):  # FORCE_COLOR too
        yield (lambda planned, index, total: None), (lambda line, index: click.echo(line, err=True))
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from perfguard.verify.numerics import dtype_name

    progress = Progress(
        TextColumn("verifying {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        refresh_per_second=2,
    )
    task = progress.add_task("", total=None)

    def on_row(planned: PlannedRow, index: int, total: int) -> None:
        label = escape(f"{planned.spec.name} [{planned.device} {dtype_name(planned.dtype)}]")
        progress.update(task, description=label, completed=index, total=total)

    def on_done(line: str, index: int) -> None:
        progress.console.print(line, highlight=False, markup=False)
        progress.update(task, completed=index + 1)

    with progress:
        yield on_row, on_done
