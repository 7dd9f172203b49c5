"""The store's schema version: Alembic, configured in code and run under a lock.

The migration scripts live in ``perfguard/migrations`` inside the package, and the Alembic
configuration is built here rather than read from an ``alembic.ini``, so an installed perfguard
can create and upgrade a store from any directory.  Upgrades run in one transaction under a lock
(PostgreSQL: an advisory lock; SQLite: ``BEGIN IMMEDIATE``), so two runners that open a new store
at the same moment do not both try to create the tables.

Opening an up-to-date store is the common case and must stay cheap (``perfguard check`` has a
budget), so it does not import Alembic at all: revisions are numbered ``0001``, ``0002``, ... and
named by their file (``versions/0001_initial_schema.py``), the database's revision is read from
the ``alembic_version`` table directly, and Alembic is only loaded when there is something to
migrate.  A test checks that this view agrees with Alembic's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from perfguard.errors import StoreError
from perfguard.store.engine import WRITE_OPTION
from perfguard.store.models import Base
from perfguard.store.url import StoreURL

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
VERSION_TABLE = "alembic_version"
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
# Any constant works; it only has to be the same in every perfguard process (b"perfgrd" as int).
_PG_LOCK_KEY = 0x70657266677264


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: its revision (None = empty) and this perfguard's newest one."""

    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def alembic_config() -> Config:
    """The Alembic configuration, built in code (``%`` doubled: Config values are interpolated)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def known_revisions() -> list[str]:
    """The revisions this perfguard ships, oldest first (from the names of the migration files)."""
    names = (path.name for path in (MIGRATIONS_DIR / "versions").glob("*.py"))
    return sorted(match.group(1) for name in names if (match := _REVISION_FILE.match(name)))


def head_revision() -> str:
    known = known_revisions()
    if not known:  # pragma: no cover - the package always ships its initial migration
        raise StoreError(f"no migrations found in {MIGRATIONS_DIR}", hint="reinstall perfguard")
    return known[-1]


def current_revision(connection: Connection) -> list[str]:
    """The revision(s) recorded in the database (empty: no perfguard schema yet)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return []
    return list(connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def state(connection: Connection, store_url: StoreURL) -> SchemaState:
    """Read the database's revision; raise :class:`StoreError` if it is not one this perfguard knows."""
    known = known_revisions()
    head = head_revision()
    heads = current_revision(connection)
    for revision in heads:
        if revision not in known:
            raise StoreError(
                f"the history store {store_url.masked} has schema revision {revision!r}, newer than this "
                f"perfguard knows (its newest is {head!r})",
                hint="upgrade perfguard (pip install -U perfguard) on this runner, or use another --db",
            )
    if len(heads) > 1:  # pragma: no cover - perfguard's history is linear
        raise StoreError(f"the history store {store_url.masked} has several schema heads: {heads}")
    return SchemaState(current=heads[0] if heads else None, head=head)


def upgrade(engine: Engine, store_url: StoreURL) -> tuple[str | None, str]:
    """Migrate the database to this perfguard's newest revision; return (from, to).

    Cheap when nothing is to do: the version is read without a write lock first.
    """
    with engine.connect() as connection:
        before = state(connection, store_url)
    if before.up_to_date:
        return before.current, before.head
    with engine.connect() as connection:
        connection.execution_options(**{WRITE_OPTION: True})
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            locked = state(connection, store_url)  # another process may have migrated meanwhile
            if locked.current is None:
                _refuse_foreign_tables(connection, store_url)
            if not locked.up_to_date:
                _run_upgrade(connection, store_url)
    return before.current, before.head


def _run_upgrade(connection: Connection, store_url: StoreURL) -> None:
    from alembic import command
    from alembic.util.exc import CommandError

    config = alembic_config()
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as exc:
        raise StoreError(
            f"migrating the history store {store_url.masked} failed: {exc}",
            hint="the schema was left as it was; report this as a perfguard bug",
        ) from None


def _refuse_foreign_tables(connection: Connection, store_url: StoreURL) -> None:
    """An unversioned database that already has tables with our names was not made by perfguard."""
    clash = sorted(set(inspect(connection).get_table_names()) & set(Base.metadata.tables))
    if clash:
        raise StoreError(
            f"the database {store_url.masked} already has tables named {', '.join(clash)} but no perfguard "
            "schema version, so perfguard will not write into it",
            hint="point --db (or PERFGUARD_DB) at an empty database, or at a store perfguard created",
        )


def write_revision(engine: Engine, message: str) -> Path:
    """Autogenerate a new migration from the models (for developers changing ``models.py``).

    ``engine`` must be at the current head (an empty throwaway SQLite file migrated by
    :func:`upgrade` is the usual choice); the new script lands in ``perfguard/migrations/versions``.
    """
    from alembic import command

    config = alembic_config()
    config.set_section_option("post_write_hooks", "hooks", "ruff")  # format the new script like the rest
    config.set_section_option("post_write_hooks", "ruff.type", "exec")
    config.set_section_option("post_write_hooks", "ruff.executable", "ruff")
    config.set_section_option("post_write_hooks", "ruff.options", "format REVISION_SCRIPT_FILENAME")
    rev_id = f"{int(head_revision()) + 1:04d}"  # revisions are numbered 0001, 0002, ...
    with engine.connect() as connection, connection.begin():
        config.attributes["connection"] = connection
        script = command.revision(config, message=message, autogenerate=True, rev_id=rev_id)
    if script is None or isinstance(script, list):  # pragma: no cover - one head, one script
        raise StoreError("alembic did not write a migration")
    return Path(script.path)
