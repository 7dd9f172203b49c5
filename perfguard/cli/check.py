"""``perfguard check --baseline REF``: the PR gate.

1. HEAD (plus uncommitted changes, said so) is verified against the float64 reference
   (``perfguard verify``, or the report ``--verify-report`` names): an implementation that fails
   is ``broken`` and fails the check whatever its timings.
2. The baseline is the merge-base of REF and HEAD.  Whatever this machine key has not stored yet
   for either side, with the current suite version and a covering ``--bench`` selection, is
   measured now (a commit in a temporary git worktree, HEAD in the work tree), both sides
   interleaved A B B A … when both are needed, and stored (one transaction per side).
3. Stage 1 compares every benchmark x params (:func:`perfguard.compare.compare_suite`); stage 2
   re-measures the suspects, baseline and HEAD interleaved in fresh processes, and decides them on
   that alone (:func:`perfguard.compare.apply_retry`).  docs/verdicts.md has every number.
4. The check and its items are stored; the verdict table is printed; ``--markdown``, ``--html``
   and ``--json`` are written from the stored check.

Exit 0 no regression, 1 regression (or broken / failed benchmark), 2 usage or environment error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfguard.cli.options import bench_option, db_option, profile_option, rounds_option
from perfguard.errors import PerfguardError, UsageError
from perfguard.files import write_atomic

if TYPE_CHECKING:
    from perfguard.cli.measure import Bench, Side
    from perfguard.compare import SuiteComparison
    from perfguard.store import ResultRecord, RunRecord

_path = click.Path(dir_okay=False, path_type=Path)


@click.command()
@click.option(
    "--baseline",
    "baseline_ref",
    required=True,
    metavar="REF",
    help="Baseline ref; the merge-base of REF and HEAD is compared with HEAD.",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Regression threshold as a fraction (default 0.20, or [tool.perfguard] threshold).",
)
@profile_option
@bench_option
@rounds_option
@db_option
@click.option("--markdown", "markdown_path", type=_path, default=None, help="Write the Markdown report here.")
@click.option("--json", "json_path", type=_path, default=None, help="Write the verdicts as JSON here.")
@click.option("--html", "html_path", type=_path, default=None, help="Write the HTML report here.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Measure HEAD again even if this machine key has it stored (the new rounds are compared).",
)
@click.option(
    "--verify-report",
    "verify_report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Use this `perfguard verify --json` report of the work tree instead of verifying again.",
)
@click.option("--no-verify", is_flag=True, help="Do not verify HEAD (no implementation can be 'broken').")
@click.pass_context
def check(
    ctx: click.Context,
    baseline_ref: str,
    threshold: float | None,
    profile: str,
    bench_regex: str | None,
    rounds: int | None,
    db_url: str | None,
    markdown_path: Path | None,
    json_path: Path | None,
    html_path: Path | None,
    fresh: bool,
    verify_report: Path | None,
    no_verify: bool,
) -> None:
    """Compare HEAD with the baseline on this machine; exit 1 on a real regression.

    \b
    Exit codes: 0 no regression, 1 regression / broken implementation / failed benchmark,
    2 usage or environment error (the message says what to do).
    """
    from perfguard.cli.measure import open_bench, say
    from perfguard.gitrepo import merge_base, rev_parse, work_tree

    if verify_report is not None and no_verify:
        raise UsageError("--verify-report and --no-verify contradict each other", hint="pass one of them")
    started = time.perf_counter()
    with open_bench(
        profile_name=profile, bench_regex=bench_regex, db_url=db_url, threshold=threshold
    ) as bench:
        tree = work_tree(bench.root)
        ref_sha = rev_parse(bench.root, baseline_ref, what="baseline ref")
        base_sha = merge_base(bench.root, ref_sha, tree.head)
        head = bench.head_side(tree)
        if tree.dirty:
            say(
                f"the work tree has uncommitted changes ({len(tree.changed)} files): HEAD is measured "
                f"with them, as {head.commit.sha}"
            )
        broken = _broken_impls(bench, verify_report, no_verify)
        same_commit = base_sha == tree.head and not tree.dirty
        if same_commit:
            say(
                f"HEAD is the merge-base of {baseline_ref} and HEAD: checking the commit against itself "
                "(an A/A check; HEAD is measured again)"
            )
        rounds_n = rounds or bench.config.rounds
        base_rounds, head_rounds, measured = _measure_sides(
            bench, head, base_sha, rounds_n, fresh=fresh or same_commit, baseline_ref=baseline_ref
        )
        first = _compare(bench, base_rounds, head_rounds, broken)
        result, retried = _retry(bench, first, head, base_sha, base_rounds, head_rounds, broken)
        seconds = time.perf_counter() - started
        check_id = _record(
            bench, head, base_sha, baseline_ref, result, base_rounds, head_rounds, measured, retried, seconds
        )
        stored = bench.store.get_check(check_id)
        assert stored is not None
        _print_verdicts(result, stored)
        _write_reports(bench, stored, markdown_path, html_path, json_path)
        say(f"check {check_id} stored in {bench.store.url} ({seconds:.0f} s)")
    ctx.exit(result.exit_code)


# --------------------------------------------------------------------------------------------
# verification of HEAD
# --------------------------------------------------------------------------------------------


def _broken_impls(bench: Bench, report: Path | None, skip: bool) -> dict[str, list[str]]:
    """Implementations that fail ``perfguard verify`` in HEAD, with their failures."""
    from perfguard.cli.measure import say

    if skip:
        say("HEAD is not verified (--no-verify)")
        return {}
    if report is None:
        report = _run_verify(bench)
    elif not report.is_file():
        raise UsageError(
            f"--verify-report {report} does not exist",
            hint="run `perfguard verify --json PATH` first, or leave the option out to verify now",
        )
    try:
        document = json.loads(report.read_text(encoding="utf-8"))
        rows = document["results"]
        broken: dict[str, list[str]] = {}
        for row in rows:
            if not row.get("passed") and not row.get("skipped"):
                broken.setdefault(str(row["impl"]), []).extend(str(f) for f in row.get("failures") or [])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{report} is not a perfguard verify report ({exc})",
            hint="pass the file `perfguard verify --json PATH` wrote",
        ) from None
    if broken:
        say(f"HEAD fails perfguard verify for: {', '.join(sorted(broken))} (these are 'broken')")
    else:
        say(f"HEAD passes perfguard verify ({len(rows)} rows)")
    return broken


def _run_verify(bench: Bench) -> Path:
    """``perfguard verify --json`` on the work tree, in a fresh process that imports its attention/."""
    from perfguard.asvrun import import_shim
    from perfguard.cli.measure import say

    out = bench.work_dir / "verify.json"
    shim = import_shim(bench.root, bench.work_dir)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p),
    }
    say(f"verifying HEAD ({bench.device}) ...")
    command = [sys.executable, "-m", "perfguard", "verify", "--device", bench.device, "--json", str(out)]
    proc = subprocess.run(command, cwd=bench.root, env=env, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1) or not out.exists():
        tail = "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise PerfguardError(
            f"perfguard verify could not run on HEAD (exit {proc.returncode}):\n  {tail}",
            hint="run `perfguard verify` to see the problem, or pass --no-verify",
        )
    return out


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------


def _measure_sides(
    bench: Bench, head: Side, base_sha: str, rounds: int, *, fresh: bool, baseline_ref: str
) -> tuple[list[list[ResultRecord]], list[list[ResultRecord]], dict[str, str]]:
    """The rounds of both sides: stored ones where usable, the rest measured now (and stored)."""
    from perfguard.cli.measure import say

    base_stored = bench.stored_rounds(base_sha)
    head_stored = [] if fresh else bench.stored_rounds(head.commit.sha)
    measured = {
        "base": f"{len(base_stored)} stored round(s)" if base_stored else f"measured ({rounds} rounds)",
        "head": f"{len(head_stored)} stored round(s)" if head_stored else f"measured ({rounds} rounds)",
    }
    if base_stored:
        say(f"baseline {base_sha[:10]}: using {len(base_stored)} stored round(s) from this machine key")
    if head_stored:
        say(f"HEAD {head.commit.sha[:10]}: using {len(head_stored)} stored round(s) (--fresh measures again)")
    sides: list[tuple[Side, str]] = []
    if not base_stored:
        say(
            f"baseline {base_sha[:10]} ({baseline_ref}) has no usable results for this machine key: "
            "measuring it"
        )
        base = bench.commit_side(base_sha, "baseline", branch=None)
        sides.append((base, "baseline"))
    if not head_stored:
        sides.append((head, "head"))
    if sides:
        runs = bench.measure([s for s, _ in sides], "baseline", rounds)
        for (side, purpose), side_runs in zip(sides, runs, strict=True):
            records = [_with_purpose(r, purpose) for r in side_runs]
            bench.store_runs(side, records)
            fresh_rounds = [list(r.results) for r in records]
            if purpose == "baseline":
                base_stored = fresh_rounds
            else:
                head_stored = fresh_rounds
    return base_stored, head_stored, measured


def _with_purpose(run: RunRecord, purpose: str) -> RunRecord:
    from dataclasses import replace

    return replace(run, purpose=purpose)


def _compare(
    bench: Bench, base: list[list[Any]], head: list[list[Any]], broken: dict[str, list[str]]
) -> SuiteComparison:
    from perfguard.compare import compare_suite, measurements_from_rounds

    return compare_suite(
        measurements_from_rounds(base), measurements_from_rounds(head), bench.config, broken_impls=broken
    )


def _retry(
    bench: Bench,
    first: SuiteComparison,
    head: Side,
    base_sha: str,
    base_rounds: list[list[Any]],
    head_rounds: list[list[Any]],
    broken: dict[str, list[str]],
) -> tuple[SuiteComparison, int]:
    """Stage 2: re-measure the suspects interleaved in fresh processes; (final comparison, count)."""
    from perfguard.asvrun import suspect_selection
    from perfguard.cli.measure import say
    from perfguard.compare import apply_retry, measurements_from_rounds

    if not first.suspects:
        return first, 0
    if not bench.config.retry.enabled:
        say(f"{len(first.suspects)} suspect(s); re-measurement is disabled ([tool.perfguard.retry])")
        return first, 0
    regexes = suspect_selection(first.suspects, head_rounds)
    names = ", ".join(
        f"{i.impl} {i.benchmark.split('.', 1)[-1]} ({i.ratio:.2f}x)" for i in first.suspects[:6]
    )
    n = bench.config.retry.rounds
    say(
        f"{len(first.suspects)} suspect(s): {names}; re-measuring, baseline and HEAD interleaved, "
        f"{n} rounds each"
    )
    base = bench.commit_side(base_sha, "baseline (retry)")
    runs = bench.measure([base, head], "retry", n, bench=regexes)
    for side, side_runs in zip((base, head), runs, strict=True):
        bench.store_runs(side, side_runs)
    retry_base = measurements_from_rounds(r.results for r in runs[0])
    retry_head = measurements_from_rounds(r.results for r in runs[1])
    return apply_retry(first, retry_base, retry_head, bench.config), len(first.suspects)


# --------------------------------------------------------------------------------------------
# recording and reporting
# --------------------------------------------------------------------------------------------


def _environment(bench: Bench, rounds: list[list[Any]], sha: str) -> dict[str, Any]:
    """One side's software, settings and fingerprint, from the runs its rounds came from."""
    run_ids = {getattr(r, "run_id", None) for results in rounds for r in results}
    stored = [r for r in bench.store.runs_for(bench.machine.key, sha, bench.profile.name) if r.id in run_ids]
    if stored:
        run = stored[0]
        return {**dict(run.software), "settings": dict(run.settings), "fingerprint": dict(run.fingerprint)}
    return {**dict(bench.machine.software), "fingerprint": bench.machine.as_dict()}


def _record(
    bench: Bench,
    head: Side,
    base_sha: str,
    baseline_ref: str,
    result: SuiteComparison,
    base_rounds: list[list[Any]],
    head_rounds: list[list[Any]],
    measured: dict[str, str],
    retried: int,
    seconds: float,
) -> int:
    from perfguard.cli.measure import command_line, commit_record
    from perfguard.store import CheckItemRecord

    base_commit = commit_record(bench.root, base_sha)
    counts = {k: v for k, v in result.counts().items() if v}
    verdict = "broken" if counts.get("broken") else ("regression" if result.exit_code else "pass")
    return bench.store.record_check(
        bench.machine_record,
        head.commit,
        base_commit,
        baseline_ref=baseline_ref,
        profile=bench.profile.name,
        threshold=bench.config.threshold,
        verdict=verdict,
        exit_code=result.exit_code,
        summary={
            "counts": counts,
            "retried": retried,
            "measured": measured,
            "rounds": {"base": len(base_rounds), "head": len(head_rounds)},
            "dirty": head.commit.dirty,
            "bench": list(bench.bench),
            "seconds": round(seconds, 1),
        },
        environment={
            "base": _environment(bench, base_rounds, base_sha),
            "head": _environment(bench, head_rounds, head.commit.sha),
        },
        config=bench.config.to_dict(),
        command=command_line(),
        items=[CheckItemRecord(**item.as_row()) for item in result.items],
    )


def _print_verdicts(result: SuiteComparison, stored: Any) -> None:
    """The verdict table on stdout: every item that is news, then the count of the rest."""
    from rich.console import Console
    from rich.table import Table

    from perfguard.report import formatting

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 180)
    quiet = ("unchanged", "skipped")
    notable = [i for i in result.items if str(i.verdict) not in quiet]
    table = Table(title=f"perfguard check {stored.id}: {stored.verdict}", title_justify="left")
    for column in ("verdict", "impl", "benchmark", "params", "ratio", "95% CI", "p", "reason"):
        table.add_column(column, overflow="fold")
    style = {"regression": "bold red", "broken": "bold red", "failed": "red", "improvement": "green",
             "unstable": "yellow"}  # fmt: skip
    for item in notable:
        params = formatting.params_label({k: v for k, v in item.params.items() if k != "impl"})
        ci = f"{item.ci_low:.2f}–{item.ci_high:.2f}" if item.ci_low and item.ci_high else ""
        table.add_row(
            str(item.verdict),
            item.impl,
            formatting.benchmark_label(item.benchmark),
            params,
            f"{item.ratio:.3f}" if item.ratio is not None else "",
            ci,
            f"{item.p_value:.1g}" if item.p_value is not None else "",
            item.reason,
            style=style.get(str(item.verdict)),
        )
    if notable:
        console.print(table)
    counts = ", ".join(f"{n} {v}" for v, n in result.counts().items() if n)
    console.print(f"{len(result.items)} items: {counts}")


def _write_reports(
    bench: Bench, stored: Any, markdown: Path | None, html: Path | None, json_path: Path | None
) -> None:
    from perfguard.cli.measure import say
    from perfguard.report import check_to_json, render_html, render_markdown

    for path, render in (
        (markdown, lambda: render_markdown(stored, store=bench.store)),
        (html, lambda: render_html(stored, store=bench.store)),
        (json_path, lambda: json.dumps(check_to_json(stored, store=bench.store), indent=2) + "\n"),
    ):
        if path is None:
            continue
        write_atomic(path, render())
        say(f"wrote {path}")
