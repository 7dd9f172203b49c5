"""Whether a store can take a write, asked before anything is measured; the read-only snapshot.

:func:`check_writable` probes what would make a write fail an hour into a measurement (a read-only
store, directory, file or file system, a full disk, a read-only PostgreSQL session, a role without
INSERT) in milliseconds, and says which.  :func:`snapshot` copies a SQLite store for PR runners
(docs/ci.md, "Trust model").  Both are behind :class:`perfguard.store.Store` methods.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from perfguard.errors import StoreError
from perfguard.store.engine import NO_SPACE, READ_ONLY_HINT, WRITE_OPTION, explain
from perfguard.store.url import StoreURL

# The tables perfguard writes (check_writable asks PostgreSQL for INSERT on each, and USAGE of
# their id sequences); alembic_version only matters to migrations.
_WRITTEN_TABLES = ("machines", "commits", "runs", "results", "result_data", "checks", "check_items")
MIN_FREE_BYTES = 16 * 2**20
"""check_writable() refuses a SQLite store on a disk with less free space than this (a run of a
production suite writes about 1 MB; the WAL grows by as much again before a checkpoint)."""
_PROBE_BYTES = 64 * 2**10


def check_writable(
    engine: Engine, store_url: StoreURL, *, read_only: bool, min_free_bytes: int = MIN_FREE_BYTES
) -> None:
    """Raise :class:`StoreError` when a write would fail, before anything is measured.

    Cheap (milliseconds): a read-only store; on SQLite, a directory that refuses a new file
    (SQLite writes its -wal/-shm/-journal files there), a disk with less than
    ``min_free_bytes`` free or that refuses a small write with "no space left", a file or
    filesystem that is read-only; on PostgreSQL, a read-only session or role and a user
    without INSERT on perfguard's tables.  Each error says which, and what to do.
    """
    if read_only:
        raise StoreError(
            f"the history store {store_url.masked} was opened read-only: perfguard will not write to it",
            hint=READ_ONLY_HINT,
        )
    path = store_url.sqlite_path
    if path is not None:
        _probe_directory(path.parent, min_free_bytes)
        if path.exists() and not os.access(path, os.W_OK):
            raise StoreError(
                f"the history store {path} is not writable by this user",
                hint=f"make it writable (chmod u+w {path}), or point --db at a store you may write",
            )
    try:
        with engine.connect() as connection:
            if store_url.dialect == "sqlite":
                connection.execution_options(**{WRITE_OPTION: True})
                with connection.begin() as transaction:  # BEGIN IMMEDIATE: the write lock
                    connection.execute(text("UPDATE alembic_version SET version_num = version_num"))
                    transaction.rollback()
            elif store_url.dialect == "postgresql":
                _probe_postgres(connection, store_url.masked)
    except SQLAlchemyError as exc:
        raise explain(exc, store_url, "writing to") from None


def snapshot(engine: Engine, store_url: StoreURL, target: Path) -> Path:
    """Copy a SQLite store to ``target``: consistent, read-only, readable from any directory.

    For PR runners (docs/ci.md, "Trust model"): the baseline workflow publishes a snapshot
    that PR jobs open with ``read_only=True``.  SQLite's online backup copies a consistent
    state while writers carry on; the copy uses a rollback journal instead of WAL, because a
    WAL database can only be read where SQLite may create its -shm file (a read-only mount
    cannot).  Written under a temporary name and renamed, so a reader never sees half a copy;
    the file is made read-only (0444).  Returns ``target``.
    """
    if store_url.dialect != "sqlite" or store_url.sqlite_path is None:
        raise StoreError(
            f"{store_url.masked} is not a SQLite file: snapshots are of SQLite stores",
            hint="PR jobs read a PostgreSQL store through a read-only role instead (docs/ci.md)",
        )
    target = Path(target)
    if target.resolve() in {f.resolve() for f in store_url.files}:
        raise StoreError(f"the snapshot {target} would overwrite the store itself", hint="pick another path")
    if not target.parent.is_dir():
        raise StoreError(f"the directory of the snapshot {target} does not exist", hint="create it first")
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with engine.connect() as connection:
            source = connection.connection.driver_connection
            copy = sqlite3.connect(partial)
            try:
                source.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")
            finally:
                copy.close()
        partial.chmod(0o444)
        os.replace(partial, target)
    except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise StoreError(
            f"copying {store_url.masked} to {target} failed: {exc}",
            hint="check that the target's directory is writable and has room",
        ) from None
    return target


def _probe_directory(directory: Path, min_free_bytes: int) -> None:
    """The directory of a SQLite store takes a new file and has room: else a StoreError saying which."""
    try:
        read_only_fs = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        raise StoreError(
            f"cannot reach the directory of the history store {directory}: {exc.strerror or exc}",
            hint="create it, or fix the path in --db (or PERFGUARD_DB)",
        ) from None
    if read_only_fs:  # before the free space: a read-only mount reports none available
        raise _not_writable(directory, os.strerror(errno.EROFS))
    if free < min_free_bytes:
        wanted = f"{min_free_bytes / 2**20:.0f} MiB"
        raise _no_space(directory, f"only {free / 2**20:.1f} MiB free (perfguard wants {wanted})")
    try:
        handle, name = tempfile.mkstemp(prefix=".perfguard-probe-", dir=directory)
        try:
            os.write(handle, b"\0" * _PROBE_BYTES)
            os.fsync(handle)
        finally:
            os.close(handle)
            os.unlink(name)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            detail = f"a {_PROBE_BYTES // 1024} KiB test write failed: {exc.strerror}"
            raise _no_space(directory, detail) from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise _not_writable(directory, exc.strerror or str(exc)) from None
        raise StoreError(f"cannot write to the directory of the history store {directory}: {exc}") from None


def _not_writable(directory: Path, why: str) -> StoreError:
    return StoreError(
        f"the directory of the history store {directory} is not writable ({why}): SQLite writes the "
        "database and its -wal/-shm/-journal files there",
        hint="make the directory writable by this user, or point --db (or PERFGUARD_DB) at another place",
    )


def _no_space(directory: Path, detail: str) -> StoreError:
    return StoreError(
        f"{NO_SPACE} for the history store in {directory}: {detail}",
        hint=f"free space on that disk (df -h {directory}), or point --db (or PERFGUARD_DB) at another disk",
    )


def _probe_postgres(connection: Any, where: str) -> None:
    """A PostgreSQL session that may write: not read-only, INSERT on every table perfguard writes."""
    if connection.execute(text("SHOW transaction_read_only")).scalar() == "on":
        raise StoreError(
            f"the PostgreSQL session for {where} is read-only (default_transaction_read_only is on for "
            "this role or database, or the server is a standby)",
            hint="a trusted job needs the role that may write; a PR job's read-only role is "
            "meant for --db with --untrusted (docs/ci.md, 'Trust model')",
        )
    insert_granted = "has_table_privilege(CAST(:t AS text), 'INSERT')"
    sequence_granted = "has_sequence_privilege(pg_get_serial_sequence(CAST(:t AS text), 'id'), 'USAGE')"
    missing = []
    for table in _WRITTEN_TABLES:
        # result_data is keyed by its result: no id sequence of its own
        check = insert_granted if table == "result_data" else f"{insert_granted} AND {sequence_granted}"
        if not connection.execute(text(f"SELECT {check}"), {"t": table}).scalar():
            missing.append(table)
    if missing:
        raise StoreError(
            f"the PostgreSQL user of {where} may not write to {', '.join(missing)}",
            hint="GRANT INSERT (and USAGE on their id sequences) to the role a trusted job uses; "
            "a PR job's read-only role is meant for --db with --untrusted (docs/ci.md)",
        )
