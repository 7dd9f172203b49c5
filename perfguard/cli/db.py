"""``perfguard db``: create, upgrade and inspect the history store's schema (Alembic, run in code).

Every command that opens the store migrates it anyway; ``db upgrade`` exists so that a fleet's
shared PostgreSQL database can be upgraded once, on purpose, before runners with a newer perfguard
use it, and ``db current`` says where a database stands without changing it.  ``db snapshot``
writes the read-only copy of a SQLite store that PR runners read (docs/ci.md, "Trust model").
Options and output only; the work is ``perfguard.api.db_*``.
"""

from __future__ import annotations

from pathlib import Path

import click

from perfguard.cli.options import db_option


@click.group()
def db() -> None:
    """Manage the history store (Alembic migrations)."""


@db.command()
@db_option
def upgrade(db_url: str | None) -> None:
    """Create the schema or migrate it to the newest version."""
    from perfguard import api

    schema = api.db_upgrade(db_url)
    assert schema.state is not None
    before, head = schema.migrated_from, schema.state.head
    if before == head:
        click.echo(f"{schema.store}: schema up to date (revision {head})")
    elif before is None:
        click.echo(f"{schema.store}: created the schema (revision {head})")
    else:
        click.echo(f"{schema.store}: upgraded the schema from revision {before} to {head}")


@db.command()
@db_option
def current(db_url: str | None) -> None:
    """Show the schema revision of the store, changing nothing."""
    from perfguard import api

    schema = api.db_current(db_url)
    state = schema.state
    if state is None:
        click.echo(f"{schema.store}: no history store there yet (perfguard db upgrade creates it)")
    elif state.up_to_date:
        click.echo(f"{schema.store}: revision {state.current} (up to date)")
    elif state.current is None:
        click.echo(f"{schema.store}: empty, no perfguard schema yet (perfguard db upgrade creates it)")
    else:
        click.echo(
            f"{schema.store}: revision {state.current}; this perfguard's newest is {state.head} "
            "(run perfguard db upgrade)"
        )


@db.command()
@db_option
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
def snapshot(db_url: str | None, target: Path) -> None:
    """Copy a SQLite store to TARGET: consistent, read-only, readable from a read-only mount.

    What the baseline workflow publishes for PR runners, which open it read-only with
    `perfguard check --untrusted --db sqlite:///TARGET` (docs/ci.md, "Trust model").
    """
    from perfguard import api

    click.echo(f"{api.db_snapshot(target, db_url)}: read-only snapshot written to {target}")


@db.command()
@click.option("-m", "--message", required=True, help="What the migration changes, e.g. 'add run notes'.")
def revision(message: str) -> None:
    """For developers: write a new migration from changes to perfguard/store/models.py.

    Compares the models with a scratch SQLite store at the current newest revision and writes the
    difference to perfguard/migrations/versions/ (review it, and check it on PostgreSQL too).
    """
    from perfguard import api

    click.echo(f"wrote {api.db_revision(message)}")
