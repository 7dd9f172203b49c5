"""``perfguard bisect --good REF --bad REF --bench REGEX``: the commit where a series moved.

Options and output only; the search is :func:`perfguard.api.bisect` (:mod:`perfguard.bisect`).  Exit 0 when
the culprit is found, 2 on usage or environment errors (refs that are not a range, nothing moved
between them, a commit that cannot be measured).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from perfguard.cli.options import db_option, no_wait_option, profile_option, rounds_option


@click.command()
@click.option("--good", "good_ref", required=True, metavar="REF", help="A commit before the change.")
@click.option(
    "--bad", "bad_ref", required=True, metavar="REF", help="A commit after it (good must be its ancestor)."
)
@click.option(
    "--bench",
    "bench_regex",
    required=True,
    metavar="REGEX",
    help="The series to follow: benchmarks whose 'name(params)' matches (asv -b). "
    "Work metrics are exact on a CPU.",
)
@click.option(
    "--direction",
    type=click.Choice(["worse", "better"]),
    default="worse",
    show_default=True,
    help="Look for the first regression, or the first improvement.",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Move that counts, as a fraction (default 0.20, or [tool.perfguard] threshold).",
)
@profile_option
@rounds_option
@db_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the probes and the culprit as JSON here.")  # fmt: skip
@no_wait_option
def bisect(
    good_ref: str,
    bad_ref: str,
    bench_regex: str,
    direction: str,
    threshold: float | None,
    profile: str,
    rounds: int | None,
    db_url: str | None,
    json_path: Path | None,
    no_wait: bool,
) -> None:
    """Find the first commit of GOOD..BAD (first parent) whose selected series moved beyond the threshold.

    \b
    Binary search: measures BAD and GOOD (unless stored on this machine key), then ceil(log2(n))
    commits of the n in the range; stored rounds are reused and new ones stored. Each commit is
    compared with GOOD the way `perfguard check` compares (timing suspects re-measured interleaved).
    Prints the culprit with `git show --stat`. Exit 0 found, 2 usage or environment error.
    """
    from perfguard import api
    from perfguard.cli.output import echo, say, write_output
    from perfguard.cli.progress import console_reporter

    with console_reporter() as reporter:
        result = api.bisect(
            good_ref,
            bad_ref,
            bench=bench_regex,
            direction=direction,
            threshold=threshold,
            profile=profile,
            rounds=rounds,
            db=db_url,
            reporter=reporter,
            wait=not no_wait,
        )
    compared = len(result.probes) - 1  # good itself is the reference
    say(
        f"{len(result.measured)} commit(s) measured, {len(result.reused)} reused from the store "
        f"({compared} compared with good, of {result.candidates} in the range)"
    )
    if json_path is not None:
        write_output(json_path, json.dumps(result.to_json(), indent=2) + "\n")
    echo(f"first {'regressing' if direction == 'worse' else 'improving'} commit: {result.culprit}")
    for item in result.culprit_items:
        echo(f"  {item.impl} {item.benchmark.split('.', 1)[-1]} ({item.params_key}): {item.reason}")
    echo("")
    echo(result.stat)
