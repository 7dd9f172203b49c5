"""The store's schema, as functions: ``db_upgrade``, ``db_current``, ``db_snapshot`` and
``db_revision`` (:mod:`perfguard.api`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfguard.store import SchemaState


@dataclass
class Schema:
    """Where a store's schema stands (``state``: None when there is no store there yet)."""

    store: str
    state: SchemaState | None
    migrated_from: str | None = None


def db_upgrade(db: str | None = None) -> Schema:
    """``perfguard db upgrade``: create the schema or migrate it to this perfguard's newest revision."""
    from perfguard.store import Store

    with Store.open(db) as store:
        return Schema(store.url, store.schema_state, store.migrated_from)


def db_current(db: str | None = None) -> Schema:
    """``perfguard db current``: the schema revision of the store, changing nothing."""
    from perfguard.store import Store, resolve

    store_url = resolve(db)
    path = store_url.sqlite_path
    if path is not None and not path.exists():
        return Schema(store_url.masked, None)
    with Store.open(db, migrate=False, read_only=True) as store:
        return Schema(store.url, store.schema_state)


def db_snapshot(target: Path, db: str | None = None) -> str:
    """``perfguard db snapshot``: a consistent read-only copy of a SQLite store; the store's URL."""
    from perfguard.store import Store

    with Store.open(db, read_only=True) as store:
        store.snapshot(target)
        return store.url


def db_revision(message: str) -> Path:
    """``perfguard db revision``: a new migration from the models (for developers); its path."""
    import tempfile

    from perfguard.store import Store
    from perfguard.store.schema import write_revision

    with tempfile.TemporaryDirectory() as scratch, Store.open(f"sqlite:///{Path(scratch) / 'x.db'}") as store:
        return write_revision(store.engine, message)
