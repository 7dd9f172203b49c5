"""``perfguard db``: create, upgrade and inspect the history store's schema (Alembic, run in code).

Every command that opens the store migrates it anyway; ``db upgrade`` exists so that a fleet's
shared PostgreSQL database can be upgraded once, on purpose, before runners with a newer perfguard
use it, and ``db current`` says where a database stands without changing it.  ``db snapshot``
writes the read-only copy of a SQLite store that PR runners read (docs/ci.md, "Trust model").
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
    from perfguard.store import Store

    with Store.open(db_url) as store:
        before, head = store.migrated_from, store.schema_state.head
        if before == head:
            click.echo(f"{store.url}: schema up to date (revision {head})")
        elif before is None:
            click.echo(f"{store.url}: created the schema (revision {head})")
        else:
            click.echo(f"{store.url}: upgraded the schema from revision {before} to {head}")


@db.command()
@db_option
def current(db_url: str | None) -> None:
    """Show the schema revision of the store, changing nothing."""
    from perfguard.store import Store, resolve

    store_url = resolve(db_url)
    path = store_url.sqlite_path
    if path is not None and not path.exists():
        click.echo(f"{store_url.masked}: no history store there yet (perfguard db upgrade creates it)")
        return
    with Store.open(db_url, migrate=False, read_only=True) as store:
        state = store.schema_state
    if state.up_to_date:
        click.echo(f"{store.url}: revision {state.current} (up to date)")
    elif state.current is None:
        click.echo(f"{store.url}: empty, no perfguard schema yet (perfguard db upgrade creates it)")
    else:
        click.echo(
            f"{store.url}: revision {state.current}; this perfguard's newest is {state.head} "
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
    from perfguard.store import Store

    with Store.open(db_url, read_only=True) as store:
        store.snapshot(target)
    click.echo(f"{store.url}: read-only snapshot written to {target}")


@db.command()
@click.option("-m", "--message", required=True, help="What the migration changes, e.g. 'add run notes'.")
def revision(message: str) -> None:
    """For developers: write a new migration from changes to perfguard/store/models.py.

    Compares the models with a scratch SQLite store at the current newest revision and writes the
    difference to perfguard/migrations/versions/ (review it, and check it on PostgreSQL too).
    """
    import tempfile

    from perfguard.store import Store
    from perfguard.store.schema import write_revision

    with tempfile.TemporaryDirectory() as scratch, Store.open(f"sqlite:///{Path(scratch) / 'x.db'}") as store:
        path = write_revision(store.engine, message)
    click.echo(f"wrote {path}")
