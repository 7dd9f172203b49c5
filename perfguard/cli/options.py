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
