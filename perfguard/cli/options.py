"""Options shared by several subcommands, declared once so their names and help stay identical."""

from __future__ import annotations

import click

from perfguard.profiles import CHOICES

db_option = click.option(
    "--db",
    "db_url",
    envvar="PERFGUARD_DB",
    default=None,
    metavar="URL",
    help="SQLAlchemy URL of the history store (env PERFGUARD_DB). "
    "Default: sqlite file .perfguard/history.db in the repository.",
)

profile_option = click.option(
    "--profile",
    type=click.Choice(CHOICES),
    default="auto",
    show_default=True,
    help="Benchmark profile: sequence lengths and dtypes. 'auto' = quick without CUDA, production with.",
)

bench_option = click.option(
    "--bench",
    "bench_regex",
    default=None,
    metavar="REGEX",
    help="Only benchmarks whose 'name(params)' matches this regular expression (asv -b).",
)

untrusted_option = click.option(
    "--untrusted",
    is_flag=True,
    envvar="PERFGUARD_UNTRUSTED",
    help="The code measured is under review: open the history store (--db) read-only and store what is "
    "measured, as untrusted runs, in --results-db (docs/ci.md, 'Trust model'). Env PERFGUARD_UNTRUSTED=1.",
)

results_db_option = click.option(
    "--results-db",
    "results_db_url",
    envvar="PERFGUARD_RESULTS_DB",
    default=None,
    metavar="URL",
    help="Where an --untrusted command stores its rounds (a check also its verdict); never the --db "
    "store (default: sqlite file .perfguard/untrusted.db in the repository). Env PERFGUARD_RESULTS_DB.",
)

rounds_option = click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=None,
    help="Rounds (fresh processes) per commit; default [tool.perfguard] rounds, else 3.",
)

no_wait_option = click.option(
    "--no-wait",
    is_flag=True,
    help="Exit 2 at once when another perfguard measures on this GPU (or CPU machine), instead of "
    "waiting for it: one measurement per device at a time ($PERFGUARD_LOCK_DIR, default "
    "/tmp/perfguard-locks).",
)
