"""``perfguard run``: benchmark one commit on this machine with the asv suite and store the results.

Options and output only; the measurement is :func:`perfguard.api.run`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import (
    bench_option,
    db_option,
    no_wait_option,
    profile_option,
    results_db_option,
    rounds_option,
    untrusted_option,
)
from perfguard.errors import EXIT_FAILED
from perfguard.units import format_value

if TYPE_CHECKING:
    from perfguard.store import ResultRecord, RunRecord


@click.command()
@click.option(
    "--commit", "rev", default="HEAD", show_default=True, help="Commit (any git revision) to benchmark."
)
@profile_option
@bench_option
@rounds_option
@db_option
@untrusted_option
@results_db_option
@no_wait_option
@click.pass_context
def run(
    ctx: click.Context,
    rev: str,
    profile: str,
    bench_regex: str | None,
    rounds: int | None,
    db_url: str | None,
    untrusted: bool,
    results_db_url: str | None,
    no_wait: bool,
) -> None:
    """Benchmark a commit on this machine through asv and store the results.

    \b
    HEAD is measured in the work tree itself; with uncommitted changes it is stored as
    '<sha>+dirty.<hash>' (never used as a baseline).  Any other commit is measured in a
    temporary git worktree.  Each round is stored when it ends: an interrupted run keeps its
    finished rounds (exit 130 on Ctrl-C, 143 on SIGTERM).  One measurement per GPU (or CPU
    machine) at a time: a second waits, or exits 2 with --no-wait.  --untrusted (or
    PERFGUARD_UNTRUSTED=1, as in a job that runs a pull request's code): stored as untrusted runs
    in --results-db, never in the history store.  Exit 0 when stored, 1 when some benchmark
    failed (stored too), 2 on errors.
    """
    from perfguard import api
    from perfguard.cli.output import say
    from perfguard.cli.progress import console_reporter

    with console_reporter() as reporter:
        outcome = api.run(
            rev, profile=profile, bench=bench_regex, rounds=rounds, db=db_url, untrusted=untrusted,
            results_db=results_db_url, reporter=reporter, wait=not no_wait,
        )  # fmt: skip
    print_results(outcome.runs)
    if outcome.failed:
        say(f"{outcome.failed} benchmark(s) failed; their errors are stored with the results "
            "(perfguard history)")  # fmt: skip
        ctx.exit(EXIT_FAILED)


def print_results(runs: list[RunRecord]) -> None:
    """A table of the stored numbers: per benchmark x params the median over rounds and its spread."""
    from perfguard.cli.output import stdout_console, text_table

    by_key: dict[tuple[str, str], list[ResultRecord]] = defaultdict(list)
    for run in runs:
        for result in run.results:
            by_key[result.key].append(result)
    rows = []
    for (benchmark, _), results in sorted(by_key.items()):
        first = results[0]
        name = benchmark.split(".", 1)[-1]
        params = " ".join(f"{k}={v}" for k, v in first.params.items() if k != "impl")
        ok = [r for r in results if r.status == "ok" and r.value is not None]
        if any(r.status == "failed" for r in results):
            error = next(r.error for r in results if r.status == "failed") or ""
            status = "failed: " + (error.strip().splitlines() or [""])[-1][:80]
            rows.append((name, first.impl, params, "", "", str(len(results)), status))
        elif not ok:
            reason = (first.error or "skipped").strip().splitlines()[-1][:80]
            rows.append((name, first.impl, params, "", "", "", f"skipped: {reason}"))
        else:
            medians = [float(r.value) for r in ok if r.value is not None]
            spread = (max(medians) / min(medians) - 1) if min(medians) > 0 else 0.0
            median = format_value(statistics.median(medians), first.unit)
            rows.append((name, first.impl, params, median, f"{spread:.1%}", str(len(ok)), first.method or ""))
    columns = ("benchmark", "impl", "params", "median", "spread", "rounds", "method / status")
    table = text_table(
        "perfguard run", columns, rows, right=("median", "spread", "rounds"), title_justify="center"
    )
    stdout_console(160).print(table)
