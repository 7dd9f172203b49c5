"""A store's connection: opening the database (URL, engine, schema), and the sessions every call runs in.

:class:`StoreConnection` is the part of :class:`perfguard.store.Store` that is not about any table:
opening and closing, the URL and its files, the read-only guard, whether a write would fail
(:mod:`perfguard.store.probes`), and one session per call, in which each way the database can fail
becomes one :class:`StoreError` (exit 2) naming the URL with its password masked.  A write is one
transaction: all of it, or (on any error) nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from perfguard.errors import StoreError
from perfguard.store import probes, schema
from perfguard.store.columns import StoredValueError
from perfguard.store.engine import READ_ONLY_HINT, WRITE_OPTION, create, explain
from perfguard.store.record_checks import NOTHING_WRITTEN
from perfguard.store.url import StoreURL, refuse_tracked, resolve

_Opened = TypeVar("_Opened", bound="StoreConnection")


class StoreConnection:
    """One database, its schema at this perfguard's newest revision (the base of ``Store``)."""

    def __init__(
        self,
        engine: Engine,
        store_url: StoreURL,
        schema_state: schema.SchemaState,
        migrated_from: str | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self._engine = engine
        self._url = store_url
        self.schema_state = schema_state
        # The revision open() found the database at (None: it was empty, or migrate=False).
        self.migrated_from = migrated_from
        # Every write is refused (by perfguard, and by the database: see engine.create).
        self.read_only = read_only

    # --- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls: type[_Opened],
        url: str | URL | StoreURL | None = None,
        *,
        cwd: Path | None = None,
        migrate: bool = True,
        read_only: bool = False,
    ) -> _Opened:
        """Connect to ``url`` (None: ``PERFGUARD_DB``, else ``<repo>/.perfguard/history.db``).

        With ``migrate`` (the default) the schema is created or upgraded to this perfguard's
        newest revision.  ``migrate=False`` only reads the schema state (``perfguard db current``).
        ``read_only`` (an untrusted check's baseline store): every write is refused with a
        :class:`StoreError`, by perfguard and by the database itself (SQLite ``mode=ro``,
        PostgreSQL ``default_transaction_read_only``); the store is never created or migrated, so
        it must exist at this perfguard's schema revision.
        ``url`` may also be a :class:`StoreURL` from ``resolve`` / ``resolve_results``.  A SQLite
        file that git tracks is refused (:func:`perfguard.store.url.refuse_tracked`).
        Raises :class:`StoreError` for every way this can fail, with the URL's password masked.
        """
        store_url = url if isinstance(url, StoreURL) else resolve(url, cwd=cwd)
        refuse_tracked(store_url)
        engine = create(store_url, read_only=read_only)
        try:
            if migrate and not read_only:
                before, head = schema.upgrade(engine, store_url)
                return cls(engine, store_url, schema.SchemaState(current=head, head=head), before)
            with engine.connect() as connection:
                state = schema.state(connection, store_url)
            if read_only and migrate and not state.up_to_date:
                raise _not_readable(store_url, state)
            return cls(engine, store_url, state, read_only=read_only)
        except StoreError:
            engine.dispose()
            raise
        except SQLAlchemyError as exc:
            engine.dispose()
            raise explain(exc, store_url, "opening the history store", read_only=read_only) from None

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self: _Opened) -> _Opened:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The URL, password masked: fit for messages and logs."""
        return self._url.masked

    @property
    def dialect(self) -> str:
        return self._url.dialect

    @property
    def files(self) -> tuple[Path, ...]:
        """The files of a SQLite store (database, -wal, -shm, -journal); none for PostgreSQL.

        For the dirty-state check: a store inside the work tree is not a change to the code
        (``perfguard.gitrepo.work_tree(root, ignore=store.files)``).
        """
        return self._url.files

    def check_writable(self, *, min_free_bytes: int = probes.MIN_FREE_BYTES) -> None:
        """Raise :class:`StoreError` when a write would fail, before anything is measured.

        Cheap (milliseconds): a read-only store; on SQLite, a directory that refuses a new file
        (SQLite writes its -wal/-shm/-journal files there), a disk with less than
        ``min_free_bytes`` free or that refuses a small write with "no space left", a file or
        filesystem that is read-only; on PostgreSQL, a read-only session or role and a user
        without INSERT on perfguard's tables.  Each error says which, and what to do
        (:mod:`perfguard.store.probes`).
        """
        probes.check_writable(
            self._engine, self._url, read_only=self.read_only, min_free_bytes=min_free_bytes
        )

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests, benchmarks and EXPLAIN; not for writing around the API)."""
        return self._engine

    def snapshot(self, target: Path) -> Path:
        """Copy a SQLite store to ``target``: consistent, read-only (0444), readable from any directory
        (:func:`perfguard.store.probes.snapshot`: what PR runners open with ``read_only=True``).
        Returns ``target``."""
        return probes.snapshot(self._engine, self._url, Path(target))

    # --- plumbing ----------------------------------------------------------------------------------

    def _refuse_if_read_only(self, doing: str) -> None:
        if self.read_only:
            raise StoreError(
                f"{doing} {self.url} refused: the store was opened read-only; {NOTHING_WRITTEN}",
                hint=READ_ONLY_HINT,
            )

    @contextmanager
    def _writing(self, doing: str) -> Iterator[Session]:
        """One write transaction (SQLite: holding the write lock from its first statement)."""
        self._refuse_if_read_only(doing)
        try:
            with Session(self._engine, expire_on_commit=False) as session:
                session.connection(execution_options={WRITE_OPTION: True})
                yield session
                session.commit()
        except StoredValueError as exc:
            raise damaged(exc, self.url, doing) from None
        except SQLAlchemyError as exc:
            error = explain(exc, self._url, doing, read_only=self.read_only)
            raise StoreError(f"{error.message}; {NOTHING_WRITTEN}", hint=error.hint) from exc

    @contextmanager
    def _reading(self, doing: str) -> Iterator[Session]:
        try:
            with Session(self._engine) as session:
                yield session
        except StoredValueError as exc:
            raise damaged(exc, self.url, doing) from None
        except SQLAlchemyError as exc:
            raise explain(exc, self._url, doing, read_only=self.read_only) from exc


def damaged(error: StoredValueError, url: str, doing: str) -> StoreError:
    """A value the store holds that perfguard cannot use (:mod:`perfguard.store.columns`)."""
    return StoreError(
        f"{doing} {url} stopped at a value perfguard cannot use: {error}",
        hint="the store was changed outside perfguard, is damaged, or holds values an older perfguard "
        "wrote that this one refuses: restore it from a backup, or delete that row (and the run or "
        "check it belongs to) with sqlite3 / psql",
    )


def _not_readable(store_url: StoreURL, state: schema.SchemaState) -> StoreError:
    """A read-only store must already be at this perfguard's schema: it is never created or migrated."""
    if state.current is None:
        return StoreError(
            f"{store_url.masked} holds no perfguard history store (no schema), and a read-only store "
            "is never created",
            hint="point --db at the baseline store that the baseline workflow (perfguard run) writes",
        )
    return StoreError(
        f"the history store {store_url.masked} is at schema revision {state.current}; this perfguard "
        f"reads {state.head}, and a read-only store is never migrated",
        hint="migrate it with a role that may write (perfguard db upgrade --db URL): the baseline "
        "workflow does so on its next run of this perfguard version",
    )
