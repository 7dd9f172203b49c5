"""``perfguard run``: benchmark one commit on this machine with the asv suite and store the results."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import bench_option, db_option, profile_option, rounds_option
from perfguard.errors import EXIT_FAILED

if TYPE_CHECKING:
    from rich.text import Text

    from perfguard.store import ResultRecord, RunRecord


@click.command()
@click.option(
    "--commit", "rev", default="HEAD", show_default=True, help="Commit (any git revision) to benchmark."
)
@profile_option
@bench_option
@rounds_option
@db_option
@click.pass_context
def run(
    ctx: click.Context,
    rev: str,
    profile: str,
    bench_regex: str | None,
    rounds: int | None,
    db_url: str | None,
) -> None:
    """Benchmark a commit on this machine through asv and store the results.

    \b
    HEAD is measured in the work tree itself; with uncommitted changes it is stored as
    '<sha>+dirty.<hash>' (never used as a baseline).  Any other commit is measured in a
    temporary git worktree.  All rounds are stored in one transaction: an interrupted run
    stores nothing.  Exit 0 when stored, 1 when some benchmark failed (stored too), 2 on errors.
    """
    from perfguard.cli.measure import console_reporter, say
    from perfguard.gitrepo import rev_parse, work_tree
    from perfguard.measuring import open_bench

    with (
        console_reporter() as reporter,
        open_bench(profile_name=profile, bench_regex=bench_regex, db_url=db_url, reporter=reporter) as bench,
    ):
        tree = work_tree(bench.root, ignore=bench.store_files)
        sha = rev_parse(bench.root, rev)
        if sha == tree.head:
            side = bench.head_side(tree)
            if tree.dirty:
                say(
                    f"the work tree has uncommitted changes ({len(tree.changed)} files): measuring HEAD "
                    f"plus changes, stored as {side.commit.sha}"
                )
        else:
            side = bench.commit_side(sha, "commit")
        n = rounds or bench.config.rounds
        [runs] = bench.measure([side], "run", n)
        bench.store_runs(side, runs)
        say(f"stored {n} round(s) of {side.label} for machine key {bench.machine.key!r} in {bench.store.url}")
        failed = print_results(runs)
    if failed:
        say(f"{failed} benchmark(s) failed; their errors are stored with the results (perfguard history)")
        ctx.exit(EXIT_FAILED)


def print_results(runs: list[RunRecord]) -> int:
    """A table of the stored numbers (median over rounds); returns how many benchmarks failed."""
    from rich.console import Console
    from rich.table import Table

    by_key: dict[tuple[str, str], list[ResultRecord]] = defaultdict(list)
    for run in runs:
        for result in run.results:
            by_key[result.key].append(result)
    table = Table(title="perfguard run", show_lines=False)
    for column in ("benchmark", "impl", "params", "median", "spread", "rounds", "method / status"):
        table.add_column(column, justify="right" if column in ("median", "spread", "rounds") else "left")
    failed = 0
    for (benchmark, _), results in sorted(by_key.items()):
        first = results[0]
        params = " ".join(f"{k}={v}" for k, v in first.params.items() if k != "impl")
        ok = [r for r in results if r.status == "ok" and r.value is not None]
        if any(r.status == "failed" for r in results):
            failed += 1
            error = next(r.error for r in results if r.status == "failed") or ""
            status = "failed: " + (error.strip().splitlines() or [""])[-1][:80]
            table.add_row(
                *_text(benchmark.split(".", 1)[-1], first.impl, params, "", "", str(len(results)), status)
            )
            continue
        if not ok:
            reason = (first.error or "skipped").strip().splitlines()[-1][:80]
            table.add_row(
                *_text(benchmark.split(".", 1)[-1], first.impl, params, "", "", "", f"skipped: {reason}")
            )
            continue
        medians = [float(r.value) for r in ok if r.value is not None]
        median = statistics.median(medians)
        spread = (max(medians) / min(medians) - 1) if min(medians) > 0 else 0.0
        table.add_row(
            *_text(
                benchmark.split(".", 1)[-1],
                first.impl,
                params,
                format_value(median, first.unit),
                f"{spread:.1%}",
                str(len(ok)),
                first.method or "",
            )
        )
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    console.print(table)
    return failed


def _text(*cells: str) -> list[Text]:
    """Cells as plain text: names and errors are data, never rich markup ("[/oops]", "ring[fp8]")."""
    from rich.text import Text

    return [Text(c) for c in cells]


def format_value(value: float, unit: str) -> str:
    if unit == "seconds":
        return f"{value * 1e3:.3f} ms" if value < 1 else f"{value:.3f} s"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "FLOP":
        return f"{value / 1e9:.4g} GFLOP"
    return f"{value:.4g} {unit}"
