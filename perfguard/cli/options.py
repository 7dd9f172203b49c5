"""Options shared by several subcommands, declared once so their names and help stay identical."""

from __future__ import annotations

import click

db_option = click.option(
    "--db",
    "db_url",
    envvar="PERFGUARD_DB",
    default=None,
    metavar="URL",
    help="SQLAlchemy URL of the history store (env PERFGUARD_DB). "
    "Default: sqlite file .perfguard/history.db in the repository.",
)

PROFILES = ("auto", "quick", "production", "medium", "long", "document", "context", "book")

profile_option = click.option(
    "--profile",
    type=click.Choice(PROFILES),
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
