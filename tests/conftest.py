"""Shared fixtures: the repository root, a guard that keeps tests on CPU unless marked cuda, and a
real PostgreSQL server for the store tests.

The suite runs on every core (``pytest -n auto``, pytest-xdist): most of its time is end-to-end
runs of perfguard, each a few fresh processes that import torch.  perfguard lets one measurement
at a time use a device (:mod:`perfguard.device_lock`); each test worker gets its own lock
directory, so that the workers' runs do not queue behind each other.  No test asserts on a timing
tighter than a busy 2-core machine gives: they already share the machine with whatever else runs.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.helpers.recordings import PostgresRecordings, Recordings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and "PERFGUARD_LOCK_DIR" not in os.environ:
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")[:12]
    os.environ["PERFGUARD_LOCK_DIR"] = str(Path(tempfile.gettempdir()) / f"perfguard-locks-{_run}-{_WORKER}")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    items[:] = _slow_modules_first(items, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _slow_modules_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The collection reordered so that every xdist worker starts with its share of the slow tests.

    A third of the suite's time is a few dozen end-to-end tests of 30-170 s (marked ``slow``); in
    collection order they bunched on one worker, and one that started last kept a core busy
    minutes after the other had finished (docs/perf/test_suite.md).  ``--dist worksteal`` gives
    worker *k* the *k*-th contiguous share of this list and later moves tests from the end of the
    longest queue, so each share begins with whole modules that hold slow tests (dealt greedily by
    their count of slow tests, the heaviest first) and is filled up with the other modules.
    Modules stay whole and in their own order (their module-scoped fixtures are built once per
    worker); the order is the same in every worker, as xdist requires.
    """
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    weight = {  # the tests marked slow one by one; a module marked slow as a whole counts as one
        name: sum(1 for i in its if any(m.name == "slow" for m in i.own_markers))
        or int(any(i.get_closest_marker("slow") for i in its))
        for name, its in modules.items()
    }
    buckets: list[list[pytest.Item]] = [[] for _ in range(max(workers, 1))]
    loads = [0] * len(buckets)
    for name in sorted((m for m in modules if weight[m]), key=lambda m: -weight[m]):
        lightest = loads.index(min(loads))
        buckets[lightest].extend(modules[name])
        loads[lightest] += weight[name]
    rest = [i for name, its in modules.items() if not weight[name] for i in its]
    order: list[pytest.Item] = []
    remaining = len(items)
    for k, bucket in enumerate(buckets):
        share = remaining // (len(buckets) - k)  # what worksteal's first schedule sends worker k
        remaining -= share
        fill = max(share - len(bucket), 0)
        order += bucket + rest[:fill]
        rest = rest[fill:]
    return order + rest


# --- PostgreSQL: a real server for the store tests -------------------------------------------------
#
# PERFGUARD_TEST_POSTGRES_URL (a superuser-ish URL: it must be allowed to CREATE DATABASE) is used
# when set.  Otherwise a throwaway cluster is started once per session with the Debian binaries
# (initdb + pg_ctl, run as the `postgres` user when we are root) on a free loopback port, with
# password authentication, and removed at the end.  Without any PostgreSQL binaries the tests that
# need it are skipped, except under CI (env CI set), where that is a failure.

PG_ENV_VAR = "PERFGUARD_TEST_POSTGRES_URL"
PG_PASSWORD = "perfguard-test-secret"


class PostgresServer:
    """A PostgreSQL server the tests may create and drop databases on."""

    def __init__(self, admin_url: str, *, checks_passwords: bool | None) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        url = make_url(admin_url)
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        self.admin_url = url
        self._admin = create_engine(url, isolation_level="AUTOCOMMIT")
        self._checks_passwords = checks_passwords

    def url_for(self, database: str) -> str:
        """The URL of a database on this server, password included (as a plain string)."""
        return self.admin_url.set(database=database).render_as_string(hide_password=False)

    def create_database(self, template: str | None = None) -> str:
        """A new database, empty or a copy of ``template`` (which nobody may be connected to)."""
        import uuid

        from sqlalchemy import text

        name = f"perfguard_test_{uuid.uuid4().hex[:12]}"
        copy = f' TEMPLATE "{template}"' if template else ""
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
        return name

    def drop_database(self, name: str) -> None:
        from sqlalchemy import text

        with self._admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    @property
    def checks_passwords(self) -> bool:
        """Whether a wrong password is refused (a server with `trust` auth accepts anything)."""
        if self._checks_passwords is None:
            import psycopg

            wrong = self.admin_url.set(password="certainly-not-the-password")
            try:
                psycopg.connect(
                    host=wrong.host,
                    port=wrong.port,
                    user=wrong.username,
                    password=wrong.password,
                    dbname=wrong.database,
                    connect_timeout=5,
                ).close()
                self._checks_passwords = False
            except psycopg.OperationalError:
                self._checks_passwords = True
        return self._checks_passwords

    def dispose(self) -> None:
        self._admin.dispose()


def _postgres_bin_dir() -> Path | None:
    import shutil

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    return None


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_cluster(bin_dir: Path) -> tuple[Path, list[str], int]:
    """initdb + pg_ctl start in a fresh temporary directory; returns (dir, run-as prefix, port)."""
    import os
    import shutil
    import subprocess
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="perfguard-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres", "postgres")
    pwfile = base / "pwfile"
    pwfile.write_text(PG_PASSWORD + "\n")
    if prefix:
        shutil.chown(pwfile, "postgres", "postgres")
    data = base / "data"
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
         "--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    last_error = ""
    for _ in range(5):  # the free port may be taken between choosing and binding it
        port = _free_port()
        options = (
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        started = subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"),
             "-o", options, "-w", "-t", "60", "start"],
            capture_output=True, text=True,
        )  # fmt: skip
        if started.returncode == 0:
            return base, prefix, port
        last_error = started.stdout + started.stderr + (base / "server.log").read_text(errors="replace")
    shutil.rmtree(base, ignore_errors=True)
    raise RuntimeError(f"could not start PostgreSQL:\n{last_error}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test session (see the comment above)."""
    import os
    import shutil
    import subprocess

    if os.environ.get(PG_ENV_VAR):
        server = PostgresServer(os.environ[PG_ENV_VAR], checks_passwords=None)
        yield server
        server.dispose()
        return
    bin_dir = _postgres_bin_dir()
    if bin_dir is None:
        reason = (
            f"no PostgreSQL binaries (initdb, pg_ctl) found: apt-get install postgresql, or set {PG_ENV_VAR}"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL for the store tests: {reason}")
        pytest.skip(reason)
    base, prefix, port = _start_cluster(bin_dir)
    server = PostgresServer(
        f"postgresql+psycopg://postgres:{PG_PASSWORD}@127.0.0.1:{port}/postgres", checks_passwords=True
    )
    try:
        yield server
    finally:
        server.dispose()
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(base / "data"), "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL (with password) of a fresh, empty database, dropped after the test."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.url_for(name)
    finally:
        postgres_server.drop_database(name)


# --- recordings of main, made once per session and copied per test (tests/helpers/recordings.py) ---


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    """SQLite stores holding a ``perfguard run`` of ``main``, recorded once, copied per test."""
    from tests.helpers.recordings import Recordings

    return Recordings(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="session")
def postgres_recordings(postgres_server: PostgresServer) -> Iterator[PostgresRecordings]:
    """The same on PostgreSQL: a template database per recording, a database made from it per test."""
    from tests.helpers.recordings import PostgresRecordings

    made = PostgresRecordings(postgres_server)
    try:
        yield made
    finally:
        made.close()
