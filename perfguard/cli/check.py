"""``perfguard check --baseline REF``: the PR gate (the pipeline is :mod:`perfguard.gate`).

This module only declares the options, calls :func:`perfguard.api.check` (which opens the bench,
runs :func:`perfguard.gate.run_check` and writes the reports) and prints what it returns for the
terminal (:mod:`perfguard.report.terminal`: the deciding items, the unstable ones summarised).  Exit 0
no regression, 1 regression (or broken / failed benchmark), 2 usage or environment error.
"""

from __future__ import annotations

from pathlib import Path

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
@untrusted_option
@results_db_option
@click.option(
    "--accept-approved-by",
    "accept_approved_by",
    envvar="PERFGUARD_ACCEPT_APPROVED_BY",
    default=None,
    metavar="LOGIN",
    help="The maintainer who approved the Perfguard-Accept trailers of this PR (the workflow passes it "
    "when a maintainer applied the perfguard-accept label); without it they are ignored.",
)
@click.option(
    "--all",
    "measure_all",
    is_flag=True,
    help="Measure every implementation, not only those the change between the merge-base and HEAD can "
    "reach (the guarded package's import graph; docs/verdicts.md, 'What a check measures').",
)
@no_wait_option
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
    untrusted: bool,
    results_db_url: str | None,
    accept_approved_by: str | None,
    measure_all: bool,
    no_wait: bool,
) -> None:
    """Compare HEAD with the baseline on this machine; exit 1 on a real regression.

    \b
    Exit codes: 0 no regression, 1 regression / broken implementation / failed benchmark,
    2 usage or environment error (the message says what to do; also a baseline that cannot be
    measured: the check fails closed), 130 / 143 interrupted by Ctrl-C / SIGTERM (the finished
    rounds are kept and the next check resumes with them).
    """
    from perfguard import api
    from perfguard.cli.output import say
    from perfguard.cli.progress import console_reporter

    with console_reporter() as reporter:
        outcome = api.check(
            baseline_ref,
            threshold=threshold,
            profile=profile,
            bench=bench_regex,
            rounds=rounds,
            db=db_url,
            markdown=markdown_path,
            json_path=json_path,
            html=html_path,
            fresh=fresh,
            verify_report=verify_report,
            no_verify=no_verify,
            untrusted=untrusted,
            results_db=results_db_url,
            accept_approved_by=accept_approved_by,
            measure_all=measure_all,
            reporter=reporter,
            wait=not no_wait,
        )
    from perfguard.cli.output import print_verdicts

    assert outcome.terminal is not None, "perfguard.api.check fills outcome.terminal"
    print_verdicts(outcome.terminal)
    for path in outcome.written:
        say(f"wrote {path}")
    say(f"check {outcome.check_id} stored in {outcome.store} ({outcome.seconds:.0f} s)")
    ctx.exit(outcome.exit_code)
