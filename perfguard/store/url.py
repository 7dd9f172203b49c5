"""Which database a command talks to: the default file, ``--db`` / ``PERFGUARD_DB``, and their checks.

The default is a SQLite file inside the repository (``<repo root>/.perfguard/history.db``, git-ignored),
so a single runner needs no setup.  Any SQLAlchemy URL works through ``--db`` or ``PERFGUARD_DB``, but
perfguard only supports the two backends it is tested on: SQLite and PostgreSQL through psycopg 3.
Everything that can be said about a URL before connecting is said here, with the password masked.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from perfguard.errors import StoreError

ENV_VAR = "PERFGUARD_DB"
DEFAULT_RELATIVE_PATH = Path(".perfguard") / "history.db"
# An untrusted check's own store (docs/ci.md, "Trust model"): its runs and its check record.
RESULTS_ENV_VAR = "PERFGUARD_RESULTS_DB"
RESULTS_DEFAULT_RELATIVE_PATH = Path(".perfguard") / "untrusted.db"
UNTRUSTED_ENV_VAR = "PERFGUARD_UNTRUSTED"

# Dialects perfguard is tested on, and the driver each plain name maps to.
_DEFAULT_DRIVER = {"sqlite": "pysqlite", "postgresql": "psycopg"}
_ALIASES = {"postgres": "postgresql"}  # the Heroku-style scheme SQLAlchemy no longer accepts
_ASYNC_DRIVERS = {"aiosqlite", "asyncpg", "psycopg_async", "pysqlite_async"}

_HINT_URL = (
    "pass --db (or set PERFGUARD_DB) to a URL like sqlite:///path/to/history.db or "
    "postgresql://user:password@host:5432/dbname"
)


@dataclass(frozen=True)
class StoreURL:
    """A checked database URL, and whether perfguard chose it (the default file)."""

    url: URL
    is_default: bool = False

    @property
    def dialect(self) -> str:
        return self.url.get_backend_name()

    @property
    def masked(self) -> str:
        """The URL as it may appear in messages and logs: the password replaced by ``***``."""
        return mask(self.url)

    @property
    def sqlite_path(self) -> Path | None:
        """The file of a SQLite URL, or None for an in-memory database or another backend."""
        if self.dialect != "sqlite" or self.url.database in (None, "", ":memory:"):
            return None
        database = self.url.database
        if database.startswith("file:"):  # sqlite URI form; only the plain form names a path we check
            return None
        return Path(database)

    @property
    def files(self) -> tuple[Path, ...]:
        """The files a SQLite store consists of: the database and its -wal, -shm and -journal.

        Empty for PostgreSQL and in-memory databases.  ``perfguard.gitrepo.work_tree`` leaves
        them out of the dirty state, so a store kept inside the work tree does not make every
        measurement ``+dirty``.
        """
        path = self.sqlite_path
        if path is None:
            return ()
        return (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_SIDE_FILES))


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps next to a database (write-ahead log, its index, rollback journal)."""


def same_store(a: StoreURL, b: StoreURL) -> bool:
    """Whether two URLs name one database: the same SQLite file (whatever the path's spelling), or the
    same PostgreSQL database on the same server (whatever the role: a read-only role and the full
    one reach the same tables)."""
    if a.dialect != b.dialect:
        return False
    if a.dialect == "sqlite":
        pa, pb = a.sqlite_path, b.sqlite_path
        if pa is None or pb is None:
            return False  # in-memory databases are never shared; a URI form is not compared
        return os.path.realpath(pa) == os.path.realpath(pb)
    where = (a.url.host or "localhost", a.url.port or 5432, a.url.database)
    return where == (b.url.host or "localhost", b.url.port or 5432, b.url.database)


def refuse_tracked(store_url: StoreURL) -> None:
    """Raise :class:`StoreError` when git tracks a file of this SQLite store.

    A store that a repository tracks belongs to whichever commit is checked out: a pull request can
    force-add its own ``.perfguard/history.db`` (ignored, but tracked once added with ``-f``), and
    checking it out replaces the maintainer's store with the PR's baselines; checking out the base
    branch again deletes it (issue 27, item 4).  So perfguard never opens one, for reading or
    writing.  Files outside any git work tree, and a directory that does not exist yet, are fine.
    """
    files = store_url.files
    if not files:
        return
    directory = files[0].absolute().parent
    if not directory.is_dir():
        return
    try:
        proc = subprocess.run(
            ["git", "-C", str(directory), "ls-files", "-z", "--", *(f.name for f in files)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return  # no git: nothing can check this store out
    tracked = (
        [n for n in proc.stdout.decode(errors="replace").split("\x00") if n] if proc.returncode == 0 else []
    )
    if not tracked:
        return
    shown = " ".join(tracked)
    raise StoreError(
        f"the history store {files[0]} is tracked by git: checking out another commit replaces it (a pull "
        f"request can ship its own baselines this way), so perfguard does not open it",
        hint=f"untrack it and keep your copy: git -C {directory} rm --cached {shown} (then commit), or keep "
        "the store outside the work tree: --db sqlite:////var/lib/perfguard/history.db (or PERFGUARD_DB)",
    )


def mask(url: URL | str) -> str:
    """Render a URL for a message with its password hidden (never raises)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        scheme, sep, rest = url.partition("://")
        if "@" in rest:
            rest = "***@" + rest.rsplit("@", 1)[1]
        return f"{scheme}{sep}{rest}" if sep or "@" not in url else "***@" + url.rsplit("@", 1)[1]


def repo_root(cwd: Path | None = None) -> Path:
    """The top of the git work tree containing ``cwd``, or ``cwd`` itself outside git."""
    cwd = Path.cwd() if cwd is None else cwd
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return cwd.resolve()
    return Path(out.stdout.strip())


def resolve_results(url: str | URL | None = None, *, cwd: Path | None = None) -> StoreURL:
    """The results store of an untrusted check: ``url``, else ``$PERFGUARD_RESULTS_DB``, else
    ``sqlite:///<repo root>/.perfguard/untrusted.db`` (its directory created when opened).

    Pass the result to ``Store.open``.  Never the baseline store: an untrusted check writes its runs
    (``trusted=False``) and its check record here and reads baselines read-only elsewhere.
    """
    return resolve(url, cwd=cwd, env_var=RESULTS_ENV_VAR, default=RESULTS_DEFAULT_RELATIVE_PATH)


def untrusted_from_env() -> bool:
    """``PERFGUARD_UNTRUSTED`` set to a true value (1, true, yes, on): the PR workflow sets it."""
    return os.environ.get(UNTRUSTED_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def default_url(cwd: Path | None = None) -> URL:
    """``sqlite:///<repo root>/.perfguard/history.db`` (the directory is created when opened)."""
    return URL.create("sqlite+pysqlite", database=str(repo_root(cwd) / DEFAULT_RELATIVE_PATH))


# Linux's limits (NAME_MAX, PATH_MAX): beyond them every file call fails with ENAMETOOLONG.
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 4095


def _check_sqlite_path(url: URL) -> None:
    """Refuse a SQLite file name no file call can take: a NUL byte (``%00``), a name over 255 bytes
    or a path over 4095 (said here, once, instead of as a crash in whichever call meets it first)."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    hint = "fix the path in --db (or PERFGUARD_DB): sqlite:///relative.db, sqlite:////absolute/path.db"
    if "\x00" in database:
        raise StoreError(f"the SQLite path in {mask(url)!r} contains a NUL byte (%00)", hint=hint)
    encoded = os.fsencode(database)
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > _MAX_NAME_BYTES:
        raise StoreError(
            f"a name in the SQLite path of --db is {len(longest)} bytes long "
            f"({os.fsdecode(longest[:40])}...); a file or directory name may have at most {_MAX_NAME_BYTES}",
            hint=hint,
        )
    if len(encoded) > _MAX_PATH_BYTES:
        raise StoreError(
            f"the SQLite path in --db is {len(encoded)} bytes long; a path may have at most "
            f"{_MAX_PATH_BYTES}",
            hint=hint,
        )


def resolve(
    url: str | URL | None = None,
    *,
    cwd: Path | None = None,
    env_var: str = ENV_VAR,
    default: Path = DEFAULT_RELATIVE_PATH,
) -> StoreURL:
    """Check a URL given by the user (or ``$env_var``, or the default) before connecting.

    ``postgresql://`` and ``postgres://`` mean psycopg 3; ``sqlite:///path`` means the standard
    library's sqlite3.  Raises :class:`StoreError` (exit 2) for a malformed URL, a dialect other than
    SQLite and PostgreSQL, an async driver, or an in-memory SQLite database (``sqlite://``), which
    would say "stored" and keep nothing.  ``env_var`` and ``default`` (relative to the repository root)
    serve :func:`resolve_results`.
    """
    if url is None or url == "":
        url = os.environ.get(env_var) or None
    if url is None:
        path = repo_root(cwd) / default
        return StoreURL(URL.create("sqlite+pysqlite", database=str(path)), is_default=True)
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"cannot parse the database URL {mask(str(url))!r}: {exc}", hint=_HINT_URL) from None

    backend, _, driver = parsed.drivername.partition("+")
    backend = _ALIASES.get(backend, backend)
    if backend not in _DEFAULT_DRIVER:
        raise StoreError(
            f"unsupported database {backend!r} in {mask(parsed)}: perfguard stores history in SQLite "
            "or PostgreSQL only",
            hint=_HINT_URL,
        )
    driver = driver or _DEFAULT_DRIVER[backend]
    if backend == "sqlite":
        _check_sqlite_path(parsed)
    if driver in _ASYNC_DRIVERS:
        raise StoreError(
            f"the async driver {driver!r} in {mask(parsed)} cannot be used: perfguard talks to the "
            "database synchronously",
            hint=f"use {backend}+{_DEFAULT_DRIVER[backend]}:// (or plain {backend}://)",
        )
    if backend == "sqlite" and _in_memory(parsed):
        raise StoreError(
            f"{mask(parsed)} is an in-memory SQLite database: everything stored in it is lost when the "
            "command ends",
            hint="give the store a file: sqlite:///relative/history.db or sqlite:////absolute/history.db "
            "(or leave --db out for the repository's .perfguard/history.db)",
        )
    return StoreURL(parsed.set(drivername=f"{backend}+{driver}"))


def _in_memory(url: URL) -> bool:
    """Whether a SQLite URL's database lives in memory only (``sqlite://``, ``:memory:``, URI form)."""
    database = url.database
    if database in (None, "", ":memory:"):
        return True
    assert database is not None
    if database.startswith("file:"):
        name, _, query = database[5:].partition("?")
        return (
            name in ("", ":memory:") or "mode=memory" in query.split("&") or url.query.get("mode") == "memory"
        )
    return False
