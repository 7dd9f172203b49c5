"""Engines for the two supported backends, and database errors turned into messages that say what to do.

SQLite is set up for several processes on one runner: WAL (readers never block the writer), foreign
keys on (off by default in SQLite), a busy timeout (a second writer waits instead of failing), and
writes that take the write lock when they begin (``BEGIN IMMEDIATE``), so that two writers cannot
both read and then fail to upgrade their lock halfway through a run.  PostgreSQL goes through
psycopg 3 with a connect timeout, so an unreachable server is an error within seconds, not a hang,
and a ``lock_timeout`` as long as SQLite's busy timeout (30 s), so a writer stuck behind another
process's lock (a hung runner, an open psql transaction) fails with a message that says so
instead of waiting for ever; ``?options=-c%20lock_timeout=...`` in the URL overrides it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
import urllib.parse
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, NoSuchModuleError

from perfguard.errors import StoreError
from perfguard.store.url import StoreURL

# Connection execution option that marks a transaction as a writer (SQLite: BEGIN IMMEDIATE).
WRITE_OPTION = "perfguard_write"
SQLITE_BUSY_TIMEOUT_MS = 30_000
POSTGRES_LOCK_TIMEOUT_MS = SQLITE_BUSY_TIMEOUT_MS
"""How long a write waits for another writer's lock before it gives up, on either backend."""
POSTGRES_CONNECT_TIMEOUT_S = 10

# errno ENOSPC's text, as SQLite, PostgreSQL and the OS word it.
NO_SPACE = "no space left on device"
# Below this much free space an I/O error of SQLite is taken for a full disk (it grows -wal/-shm).
_LOW_FREE_BYTES = 4 * 2**20
READ_ONLY_HINT = (
    "this store was opened read-only: an untrusted check reads baselines and writes its own runs "
    "and check to --results-db (docs/ci.md, 'Trust model')"
)

_json_dumps = functools.partial(json.dumps, allow_nan=False, separators=(",", ":"))


def create(store_url: StoreURL, *, read_only: bool = False) -> Engine:
    """An engine for a resolved URL; raises :class:`StoreError` for a missing directory or driver.

    ``read_only``: the database refuses writes itself, whatever perfguard (or code running next to
    it) asks for.  SQLite opens the file with ``mode=ro`` and ``query_only`` (the file must exist:
    a read-only store is never created); PostgreSQL sessions start with
    ``default_transaction_read_only``.  The real boundary for a PR job is a role or a file it
    cannot write (docs/ci.md); this makes perfguard's own process honour it too.
    """
    url = store_url.url
    path = store_url.sqlite_path
    creator = None
    if path is not None:
        if read_only:
            if not path.is_file():
                raise StoreError(
                    f"there is no history store at {path}: a read-only store is opened, never created",
                    hint="point --db (or PERFGUARD_DB) at the baseline store that `perfguard run` wrote, "
                    "or at a snapshot of it (perfguard db snapshot)",
                )
            uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
            creator = functools.partial(sqlite3.connect, uri, uri=True, check_same_thread=False)
        elif store_url.is_default:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.parent.is_dir():
            raise StoreError(
                f"the directory of the SQLite file in {store_url.masked} does not exist: {path.parent}",
                hint="create it, or fix the path (sqlite:///relative.db, sqlite:////absolute/path.db)",
            )
    elif read_only and store_url.dialect == "sqlite":
        raise StoreError(
            f"{store_url.masked} is not a SQLite file: only a file can be opened read-only",
            hint="point --db at the baseline store's file (sqlite:////path/to/history.db)",
        )
    connect_args: dict[str, Any] = {}
    if store_url.dialect == "postgresql":
        if "connect_timeout" not in url.query:
            connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
        if "application_name" not in url.query:
            connect_args["application_name"] = "perfguard"
        given = url.query.get("options", "")
        given = " ".join(given) if isinstance(given, tuple) else given
        options = [given] if given else []
        if "lock_timeout" not in given:  # the URL's own setting wins
            options.append(f"-c lock_timeout={POSTGRES_LOCK_TIMEOUT_MS}")
        if read_only:
            options.append("-c default_transaction_read_only=on")
        connect_args["options"] = " ".join(options)
    try:
        extra: dict[str, Any] = {"creator": creator} if creator is not None else {}
        engine = create_engine(url, json_serializer=_json_dumps, connect_args=connect_args, **extra)
    except (NoSuchModuleError, ImportError) as exc:
        driver = url.drivername.partition("+")[2]
        if driver == "psycopg":
            hint = "install perfguard's PostgreSQL extra: pip install 'perfguard[postgres]' (psycopg 3)"
        else:
            hint = (
                "for PostgreSQL use postgresql:// (pip install 'perfguard[postgres]'), "
                "or install the driver the URL names"
            )
        raise StoreError(f"no database driver {driver!r} for {store_url.masked}: {exc}", hint=hint) from None
    if store_url.dialect == "sqlite":
        _configure_sqlite(engine, in_memory=path is None, read_only=read_only)
    return engine


def _configure_sqlite(engine: Engine, *, in_memory: bool, read_only: bool = False) -> None:
    """Pragmas on every new connection, and transactions that perfguard begins itself.

    The standard library's sqlite3 starts transactions lazily and on its own terms; SQLAlchemy's
    documented recipe is to switch that off and emit BEGIN from the ``begin`` event.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if read_only:
                cursor.execute("PRAGMA query_only = ON")
            elif not in_memory:
                _use_wal(cursor)
        finally:
            cursor.close()

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        # On KeyboardInterrupt / SystemExit SQLAlchemy closes the connection, but SQLite only really
        # closes it (and releases the write lock) once its last statement is finalized; the cursor
        # lives on in the traceback.  Close it now so the next writer is not blocked.
        cursor = getattr(context.execution_context, "cursor", None)
        if not isinstance(context.original_exception, Exception) and cursor is not None:
            with contextlib.suppress(Exception):
                cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL, waiting (up to the busy timeout) for other connections to let go.

    WAL is a property of the file, so this is a no-op once any connection has set it.  Setting it
    needs an exclusive lock, and SQLite does not call the busy handler for that: a runner opening
    a new store while another one creates it got "database is locked" at once (8 and 12 of 300 rounds
    of three threads opening a fresh file on the 2-core VM; 0 of 1,000 with this wait).  So the
    wait is done here.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.002
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                return  # a file this process may not write (a snapshot): reading it needs no WAL
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


def explain(exc: BaseException, store_url: StoreURL, doing: str, *, read_only: bool = False) -> StoreError:
    """A :class:`StoreError` for a database error: what failed, where (password masked), what to do."""
    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    detail = _first_line(str(original))
    password = store_url.url.password
    if password:
        detail = detail.replace(str(password), "***")
    low = detail.lower()
    where = store_url.masked
    if store_url.dialect == "postgresql":
        if "password authentication failed" in low or "no password supplied" in low:
            hint = "check the user name and password in the URL"
        elif "does not exist" in low and "database" in low:
            hint = "create the database first (createdb), or fix its name in the URL"
        elif "lock timeout" in low:
            hint = (
                f"another connection held a lock on the store for longer than the lock timeout "
                f"({POSTGRES_LOCK_TIMEOUT_MS // 1000} s unless the URL sets lock_timeout): a runner still "
                "writing, or an open transaction (pg_stat_activity shows it); try again once it is done"
            )
        elif any(
            s in low
            for s in ("connection refused", "could not connect", "timeout", "timed out", "translate host")
        ):
            hint = "check that the PostgreSQL server is running and reachable at that host and port"
        elif "read-only transaction" in low:
            hint = READ_ONLY_HINT
        elif "permission denied" in low:
            hint = (
                "the database user may not write here: a PR job's read-only role cannot (docs/ci.md, "
                "'Trust model'); a trusted job needs INSERT on the tables (and CREATE for migrations)"
            )
        elif NO_SPACE in low or "could not extend file" in low:
            hint = "the PostgreSQL server's disk is full: free space on it (its log names the file)"
        else:
            hint = "check the URL and the server's log"
    elif "disk is full" in low or NO_SPACE in low:
        where_dir = store_url.sqlite_path.parent if store_url.sqlite_path else "the store's directory"
        hint = f"no space left on the disk holding {where_dir}: free some (df -h shows it), then run again"
    elif "disk i/o error" in low:
        hint = _io_error(store_url)
    elif "unable to open database file" in low and read_only:
        hint = (
            "SQLite reads a store in WAL mode only where it may create the -shm file next to it; give "
            "read-only readers a snapshot instead (perfguard db snapshot, docs/ci.md), or PostgreSQL"
        )
    elif "unable to open database file" in low:
        hint = _unopenable(store_url)
    elif "malformed" in low or "disk image" in low:
        hint = (
            f"the SQLite file {store_url.sqlite_path} is damaged (a crash or a full disk while it was "
            "written, or a copy taken mid-write): restore it from a backup, or move it aside and let "
            "`perfguard run` start a new history; the sqlite3 shell's `.recover` command can salvage "
            "what is readable"
        )
    elif "file is not a database" in low:
        hint = "that file is not a SQLite database; point --db (or PERFGUARD_DB) at another path"
    elif "query_only" in low or (read_only and "attempt to write a readonly database" in low):
        hint = READ_ONLY_HINT
    elif "readonly" in low or "read-only" in low:
        hint = "the database file (and its directory, for the WAL files) must be writable"
    elif "locked" in low or "busy" in low:
        hint = (
            f"another process held the database for over {SQLITE_BUSY_TIMEOUT_MS // 1000} s; "
            "try again, or use PostgreSQL for many concurrent runners"
        )
    else:
        hint = "check the URL (--db or PERFGUARD_DB)"
    return StoreError(f"{doing} {where} failed: {detail}", hint=hint)


def _io_error(store_url: StoreURL) -> str:
    """SQLite's "disk I/O error": a full disk (it cannot grow the -wal/-shm files), else the disk."""
    path = store_url.sqlite_path
    directory = path.parent if path is not None else None
    if directory is not None and directory.is_dir():
        with contextlib.suppress(OSError):
            stat = os.statvfs(directory)
            free = stat.f_bavail * stat.f_frsize
            if free < _LOW_FREE_BYTES:
                return (
                    f"{NO_SPACE} for the history store in {directory} ({free / 2**20:.1f} MiB free): "
                    f"free some (df -h {directory}), then run again"
                )
    return (
        f"the disk or file system holding {directory or 'the store'} failed a read or write: "
        "check it (df -h, the kernel log), or point --db at another place"
    )


def _unopenable(store_url: StoreURL) -> str:
    """Why SQLite could not open a file for writing, as precisely as the directory tells."""
    path = store_url.sqlite_path
    directory = path.parent if path is not None else None
    if directory is None or not directory.is_dir():
        return "check that the directory exists and is writable by this user"
    with contextlib.suppress(OSError):
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return (
                f"{directory} is on a read-only file system: SQLite needs to write the database and its "
                "-wal/-shm files there; point --db at a writable place (a PR job opens its baseline "
                "store read-only, docs/ci.md)"
            )
    if not os.access(directory, os.W_OK):
        return f"the directory {directory} is not writable by this user (SQLite writes -wal/-shm files there)"
    return "check that the file and its directory are readable and writable by this user"


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return text.strip() or "unknown error"
