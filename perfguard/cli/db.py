"""``perfguard db``: create or upgrade the history store's schema (owner: issue 4)."""

from __future__ import annotations

import click

from perfguard.cli.options import db_option
from perfguard.errors import PerfguardError


@click.group()
def db() -> None:
    """Manage the history store (Alembic migrations)."""


@db.command()
@db_option
def upgrade(db_url: str | None) -> None:
    """Create the schema or migrate it to the newest version."""
    raise PerfguardError("perfguard db upgrade is not built yet")
