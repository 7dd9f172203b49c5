"""Which database perfguard opens, and the errors for URLs it cannot use (no server needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfguard.errors import StoreError
from perfguard.store import Store, mask, resolve


def _git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_default_is_a_sqlite_file_at_the_repository_root(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PERFGUARD_DB", raising=False)
    repo = _git_repo(tmp_path / "repo")
    (repo / "sub" / "deeper").mkdir(parents=True)
    resolved = resolve(None, cwd=repo / "sub" / "deeper")
    assert resolved.is_default
    assert resolved.dialect == "sqlite"
    assert resolved.sqlite_path == (repo / ".perfguard" / "history.db").resolve()


def test_default_outside_git_is_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PERFGUARD_DB", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # do not find a repository above
    resolved = resolve(None, cwd=tmp_path)
    assert resolved.sqlite_path == tmp_path.resolve() / ".perfguard" / "history.db"


def test_opening_the_default_creates_the_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PERFGUARD_DB", raising=False)
    repo = _git_repo(tmp_path / "repo")
    with Store.open(None, cwd=repo) as store:
        assert store.schema_state.up_to_date
    assert (repo / ".perfguard" / "history.db").is_file()


def test_environment_variable_is_used_when_no_url_is_given(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PERFGUARD_DB", f"sqlite:///{tmp_path / 'env.db'}")
    resolved = resolve(None)
    assert not resolved.is_default
    assert resolved.sqlite_path == tmp_path / "env.db"
    # an explicit URL wins over the environment
    assert resolve(f"sqlite:///{tmp_path / 'flag.db'}").sqlite_path == tmp_path / "flag.db"


@pytest.mark.parametrize(
    ("given", "driver"),
    [
        ("postgresql://u:p@db.example:5432/perf", "postgresql+psycopg"),
        ("postgres://u:p@db.example/perf", "postgresql+psycopg"),
        ("postgresql+psycopg://u@db.example/perf", "postgresql+psycopg"),
        ("sqlite:///relative.db", "sqlite+pysqlite"),
        ("sqlite:////abs/history.db", "sqlite+pysqlite"),
    ],
)
def test_plain_scheme_maps_to_the_tested_driver(given: str, driver: str) -> None:
    assert resolve(given).url.drivername == driver


def test_password_is_masked() -> None:
    resolved = resolve("postgresql://alice:s3cret@db.example:5432/perf")
    assert "s3cret" not in resolved.masked
    assert resolved.masked == "postgresql+psycopg://alice:***@db.example:5432/perf"
    assert "s3cret" not in mask("not a url://alice:s3cret@host")


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("not a url at all", "cannot parse"),
        ("mysql://bob:hunter2@db.example/perf", "unsupported database 'mysql'"),
        ("oracle://bob:hunter2@db.example/perf", "unsupported database 'oracle'"),
        ("postgresql+asyncpg://bob:hunter2@db.example/perf", "async driver"),
        ("sqlite+aiosqlite:///x.db", "async driver"),
        ("sqlite://", "in-memory SQLite database"),
        ("sqlite:///:memory:", "in-memory SQLite database"),
        ("sqlite:///file::memory:?cache=shared", "in-memory SQLite database"),
        ("sqlite:///file:history?mode=memory&cache=shared", "in-memory SQLite database"),
    ],
)
def test_unusable_urls_are_refused_before_connecting(given: str, words: str) -> None:
    with pytest.raises(StoreError) as info:
        Store.open(given)
    message = info.value.format_message()
    assert words in message
    assert "hunter2" not in message
    assert info.value.exit_code == 2
    assert "\n  hint: " in message  # says what to do


def test_missing_driver_names_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Store.open("postgresql+pg8000://bob:hunter2@127.0.0.1/perf")
    message = info.value.format_message()
    assert "no database driver 'pg8000'" in message
    assert "bob:***@127.0.0.1" in message
    assert "hunter2" not in message


def test_unreachable_server_says_so_with_the_password_masked() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreError) as info:
        Store.open(f"postgresql://bob:hunter2@127.0.0.1:{port}/perf")
    message = info.value.format_message()
    assert f"postgresql+psycopg://bob:***@127.0.0.1:{port}/perf" in message
    assert "hunter2" not in message
    assert "running and reachable" in message


def test_sqlite_file_in_a_missing_directory_is_an_error_not_a_new_directory(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "history.db"
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(f"sqlite:///{target}")
    assert not (tmp_path / "no").exists()


def test_a_file_that_is_not_a_database_is_an_error(tmp_path: Path) -> None:
    junk = tmp_path / "history.db"
    junk.write_text("this is not a database, " * 200)
    with pytest.raises(StoreError) as info:
        Store.open(f"sqlite:///{junk}")
    assert "not a database" in info.value.format_message()
    assert junk.read_text().startswith("this is not a database")


def test_the_results_store_of_an_untrusted_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfguard.store import resolve_results, untrusted_from_env

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.delenv("PERFGUARD_RESULTS_DB", raising=False)
    monkeypatch.setenv("PERFGUARD_DB", f"sqlite:///{tmp_path / 'baseline.db'}")  # never the results store
    default = resolve_results(cwd=repo / "src")
    assert default.is_default and default.sqlite_path == repo / ".perfguard" / "untrusted.db"
    with Store.open(default) as store:  # a StoreURL; its directory is created
        assert store.url.endswith("/.perfguard/untrusted.db")
    assert (repo / ".perfguard" / "untrusted.db").is_file() and not (tmp_path / "baseline.db").exists()
    monkeypatch.setenv("PERFGUARD_RESULTS_DB", f"sqlite:///{tmp_path / 'results.db'}")
    assert resolve_results(cwd=repo).sqlite_path == tmp_path / "results.db"
    assert resolve_results("sqlite:///x.db", cwd=repo).sqlite_path == Path("x.db")
    for value, expected in (("1", True), ("true", True), ("ON", True), ("0", False), ("", False)):
        monkeypatch.setenv("PERFGUARD_UNTRUSTED", value)
        assert untrusted_from_env() is expected


def test_an_in_memory_store_is_refused_by_the_cli_with_exit_2(tmp_path: Path) -> None:
    """Issue 27: ``--db sqlite://`` said "stored" and kept nothing."""
    import os
    import sys

    repo = _git_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b.c", "commit", "-q",
                    "--allow-empty", "-m", "c0"], check=True)  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for args in (["accept", "dilated", "*", "--max", "1.5", "--reason", "why", "--db", "sqlite://"],
                 ["history", "--db", "sqlite:///:memory:"]):  # fmt: skip
        result = subprocess.run([sys.executable, "-m", "perfguard", *args], cwd=repo, env=env,
                                capture_output=True, text=True, check=False)  # fmt: skip
        assert result.returncode == 2, result.stdout + result.stderr
        assert "in-memory SQLite database" in result.stderr and "recorded" not in result.stderr
