"""``perfguard db upgrade`` / ``db current`` through the real CLI, on real SQLite files and PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from perfguard.store import Store
from perfguard.store.schema import head_revision

ROOT = Path(__file__).resolve().parents[1]
HEAD = head_revision()  # the newest migration this perfguard ships


def perfguard(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    environment["PYTHONPATH"] = str(ROOT)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    (path / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_db_upgrade_creates_the_default_store_at_the_repository_root(repo: Path) -> None:
    db_file = repo / ".perfguard" / "history.db"
    first = perfguard("db", "upgrade", cwd=repo / "src")
    assert first.returncode == 0, first.stderr
    assert f"created the schema (revision {HEAD})" in first.stdout
    assert str(db_file) in first.stdout
    assert db_file.is_file()
    again = perfguard("db", "upgrade", cwd=repo)
    assert again.returncode == 0 and f"schema up to date (revision {HEAD})" in again.stdout
    current = perfguard("db", "current", cwd=repo)
    assert current.returncode == 0 and f"revision {HEAD} (up to date)" in current.stdout


def test_db_current_changes_nothing(repo: Path) -> None:
    result = perfguard("db", "current", cwd=repo)
    assert result.returncode == 0
    assert "no history store there yet" in result.stdout
    assert not (repo / ".perfguard").exists() or not (repo / ".perfguard" / "history.db").exists()


def test_db_option_and_environment_variable(repo: Path, tmp_path: Path) -> None:
    by_flag = tmp_path / "flag.db"
    by_env = tmp_path / "env.db"
    assert perfguard("db", "upgrade", "--db", f"sqlite:///{by_flag}", cwd=repo).returncode == 0
    assert perfguard("db", "upgrade", cwd=repo, env={"PERFGUARD_DB": f"sqlite:///{by_env}"}).returncode == 0
    assert by_flag.is_file() and by_env.is_file()
    assert not (repo / ".perfguard" / "history.db").exists()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://bob:hunter2@127.0.0.1/perf", "unsupported database 'mysql'"),
        ("::not a url::", "cannot parse the database URL"),
        ("postgresql://bob:hunter2@127.0.0.1:{port}/perf", "check that the PostgreSQL server is running"),
        ("postgresql+pg8000://bob:hunter2@127.0.0.1/perf", "no database driver 'pg8000'"),
        ("sqlite:////no/such/directory/history.db", "does not exist"),
    ],
)
def test_db_upgrade_on_an_unusable_url_exits_2_with_the_message(repo: Path, url: str, words: str) -> None:
    result = perfguard("db", "upgrade", "--db", url.format(port=closed_port()), cwd=repo)
    assert result.returncode == 2
    assert words in result.stderr
    assert "hint:" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_a_schema_newer_than_this_perfguard_exits_2(repo: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'future.db'}"
    with Store.open(url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    for command in (("db", "upgrade"), ("db", "current"), ("history",)):
        result = perfguard(*command, "--db", url, cwd=repo)
        assert result.returncode == 2, command
        assert "schema revision '0099', newer than this perfguard knows" in result.stderr
        assert "upgrade perfguard" in result.stderr


@pytest.mark.postgres
def test_db_upgrade_on_postgresql(repo: Path, postgres_url: str) -> None:
    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    result = perfguard("db", "upgrade", "--db", plain, cwd=repo)
    assert result.returncode == 0, result.stderr
    assert f"created the schema (revision {HEAD})" in result.stdout
    assert "perfguard-test-secret" not in result.stdout and ":***@" in result.stdout
    current = perfguard("db", "current", cwd=repo, env={"PERFGUARD_DB": plain})
    assert f"revision {HEAD} (up to date)" in current.stdout


@pytest.mark.postgres
def test_wrong_password_and_missing_database_exit_2(repo: Path, postgres_server, postgres_url: str) -> None:
    if not postgres_server.checks_passwords:
        pytest.skip("the PostgreSQL server in PERFGUARD_TEST_POSTGRES_URL accepts any password (trust auth)")
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url)
    wrong = url.set(password="wrong-password").render_as_string(hide_password=False)
    result = perfguard("db", "upgrade", "--db", wrong, cwd=repo)
    assert result.returncode == 2
    assert "password authentication failed" in result.stderr
    assert "check the user name and password" in result.stderr
    assert "wrong-password" not in result.stderr
    missing = url.set(database="no_such_database").render_as_string(hide_password=False)
    result = perfguard("db", "upgrade", "--db", missing, cwd=repo)
    assert result.returncode == 2
    assert 'database "no_such_database" does not exist' in result.stderr
    assert "createdb" in result.stderr


def test_db_snapshot_writes_a_read_only_copy(repo: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    assert perfguard("db", "upgrade", "--db", url, cwd=repo).returncode == 0
    target = tmp_path / "baseline-snapshot.db"
    result = perfguard("db", "snapshot", "--db", url, str(target), cwd=repo)
    assert result.returncode == 0, result.stderr
    assert f"read-only snapshot written to {target}" in result.stdout
    assert target.stat().st_mode & 0o777 == 0o444
    with Store.open(f"sqlite:///{target}", read_only=True) as snapshot:
        assert snapshot.schema_state.up_to_date
    missing = perfguard("db", "snapshot", "--db", f"sqlite:///{tmp_path / 'nope.db'}", str(target), cwd=repo)
    assert missing.returncode == 2 and "never created" in missing.stderr
    assert not (tmp_path / "nope.db").exists()
