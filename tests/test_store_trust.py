"""The trust boundary at the store (docs/ci.md, "Trust model"), on real SQLite files and PostgreSQL.

Hole 1 of issue 13, reproduced at the store level: code running in a PR job (an untrusted context)
records ten fake runs of the baseline's commit, eight times slower, through the store API.  Before
the trust model that turned a planted 4x slowdown into "2x faster".  Now the PR job's baseline
store is read-only (perfguard refuses, and so does the database: SQLite ``mode=ro``, PostgreSQL
``default_transaction_read_only`` or a role without write rights), and runs that an untrusted
context did write somewhere (its own results store) are marked untrusted and never read as a
baseline (``trusted_only=True``).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from test_store import GPU, T0, commit, result, sha, snapshot

from perfguard.compare import Measurement, Verdict, compare_sides
from perfguard.config import Config
from perfguard.errors import StoreError
from perfguard.store import CheckItemRecord, ResultRecord, RunRecord, Store

ROOT = Path(__file__).resolve().parents[1]
FORWARD = "bench_attention.Forward.track_time"
MAIN = 1  # the baseline's commit (the merge-base of the PR)
PR_HEAD = 2


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("postgres_url")


def rounds(scale: float, n_rounds: int, *, seed: int, trusted: bool, purpose: str = "run") -> list[RunRecord]:
    """``n_rounds`` runs of one benchmark: 40 samples each around ``scale`` ms, with round noise."""
    rng = random.Random(seed)
    runs = []
    for i in range(n_rounds):
        level = scale * 1e-3 * rng.lognormvariate(0, 0.02)
        samples = [level * rng.lognormvariate(0, 0.03) for _ in range(40)]
        runs.append(
            RunRecord(
                profile="production",
                purpose=purpose,
                round=i,
                started_at=T0 + timedelta(minutes=10 * i),
                finished_at=T0 + timedelta(minutes=10 * i + 5),
                results=[result(seq_len=4096, samples=samples)],
                trusted=trusted,
            )
        )
    return runs


def baseline_read(store: Store) -> dict[str, Any]:
    """Everything the check's baseline side reads (``trusted_only=True``), comparable across calls."""
    results = store.results_for(GPU.key, sha(MAIN), "production", trusted_only=True)
    return {
        "results": {key: [(r.run_id, r.samples) for r in rounds_] for key, rounds_ in results.items()},
        "runs": [r.id for r in store.runs_for(GPU.key, sha(MAIN), "production", trusted_only=True)],
        "complete": store.has_complete_run(GPU.key, sha(MAIN), "production", trusted_only=True),
        "series": [
            [(p.sha, p.value, p.run_ids) for p in s.points]
            for s in store.series(profile="production", trusted_only=True)
        ],
    }


def verdict(store: Store, *, trusted_only: bool) -> tuple[Verdict, float]:
    """The verdict on PR_HEAD (planted 4x slower) against the baseline as read."""
    (base_rounds,) = store.results_for(GPU.key, sha(MAIN), "production", trusted_only=trusted_only).values()
    (head_rounds,) = store.results_for(GPU.key, sha(PR_HEAD), "production").values()
    item = compare_sides(
        Measurement.from_results(base_rounds), Measurement.from_results(head_rounds), Config()
    )
    return item.verdict, item.ratio


def record_baseline_and_pr(store: Store) -> None:
    """Three trusted rounds of main (1 ms) and the PR's head measured untrusted (4 ms: planted 4x)."""
    store.record_runs(GPU, commit(MAIN), rounds(1.0, 3, seed=1, trusted=True))
    store.record_runs(
        GPU, commit(PR_HEAD, branch="feature"), rounds(4.0, 3, seed=2, trusted=False, purpose="head")
    )


FORGED = rounds(8.0, 10, seed=3, trusted=True, purpose="run")  # what the attack inserts, claiming trust


# --- hole 1 -------------------------------------------------------------------------------------


def test_untrusted_runs_never_become_or_change_a_baseline(store_url: str) -> None:
    with Store.open(store_url) as store:
        record_baseline_and_pr(store)
        before = baseline_read(store)
        assert verdict(store, trusted_only=True)[0] == Verdict.REGRESSION

        # PR code writes ten runs of main's commit, eight times slower, marked untrusted (what an
        # untrusted context's store writes), both as baseline and as plain runs.
        store.record_runs(GPU, commit(MAIN), [_untrusted(r) for r in FORGED])
        store.record_runs(GPU, commit(MAIN), [_untrusted(r, purpose="baseline") for r in FORGED])

        assert baseline_read(store) == before
        found, ratio = verdict(store, trusted_only=True)
        assert found == Verdict.REGRESSION and ratio > 3.5
        # Without the filter the forged runs would decide it: the test can fail.  (The forged rounds
        # make the baseline look 8x slower than main's own: HEAD reads faster, and the regression is
        # gone; the rule over rounds calls that mixed baseline unstable rather than an improvement.)
        found, ratio = verdict(store, trusted_only=False)
        assert found != Verdict.REGRESSION and ratio < 1, (found, ratio)


def _untrusted(run: RunRecord, purpose: str = "run") -> RunRecord:
    return RunRecord(**{**run.__dict__, "trusted": False, "purpose": purpose})


def test_a_read_only_store_refuses_every_write_and_so_does_the_database(store_url: str) -> None:
    with Store.open(store_url) as store:
        record_baseline_and_pr(store)
        before_rows = snapshot(store)
        before = baseline_read(store)

    with Store.open(store_url, read_only=True) as pr_job:
        assert pr_job.read_only
        assert baseline_read(pr_job) == before  # reading works
        attempts = {
            "record_runs": lambda: pr_job.record_runs(GPU, commit(MAIN), FORGED),
            "record_run": lambda: pr_job.record_run(
                GPU,
                commit(MAIN),
                profile="production",
                software={},
                fingerprint={},
                settings={},
                started_at=T0,
                finished_at=T0,
                results=[result(seq_len=4096)],
                trusted=True,
            ),
            "record_check": lambda: pr_job.record_check(
                GPU,
                commit(PR_HEAD),
                commit(MAIN),
                baseline_ref="main",
                profile="production",
                threshold=0.2,
                verdict="pass",
                exit_code=0,
                summary={},
                environment={},
                config={},
                items=[],
            ),
            "machine": lambda: pr_job.get_or_create_machine("forged", "cuda", "x", {}),
            "commit": lambda: pr_job.get_or_create_commit(sha(9), sha(9), False, None, [], "", None, T0),
        }
        for name, attempt in attempts.items():
            with pytest.raises(StoreError) as info:
                attempt()
            message = info.value.format_message()
            assert "opened read-only" in message and "nothing was written" in message, name
            assert "--results-db" in message, name  # the hint says where an untrusted check writes
        with pytest.raises(StoreError, match="opened read-only"):
            pr_job.check_writable()

        # Code that goes around perfguard's API with the same connection is refused by the database.
        refusal = "readonly database" if pr_job.dialect == "sqlite" else "read-only transaction"
        with pytest.raises(Exception, match=refusal), pr_job.engine.begin() as connection:
            connection.execute(text("UPDATE runs SET trusted = true"))
        with pytest.raises(Exception, match=refusal), pr_job.engine.begin() as connection:
            connection.execute(text("DELETE FROM results"))

    with Store.open(store_url) as store:
        assert snapshot(store) == before_rows
        assert verdict(store, trusted_only=True)[0] == Verdict.REGRESSION


# --- PostgreSQL: the read-only role of docs/ci.md -----------------------------------------------


def read_only_role_sql() -> str:
    """The SQL docs/ci.md gives for the PR jobs' role (the block after its marker comment)."""
    doc = (ROOT / "docs" / "ci.md").read_text()
    match = re.search(r"<!-- read-only role -->\s*```sql\n(.*?)```", doc, re.DOTALL)
    assert match, "docs/ci.md lost its read-only role SQL"
    return match.group(1)


@contextlib.contextmanager
def read_only_role(postgres_url: str) -> Iterator[str]:
    """The role of docs/ci.md created on the test database; yields its URL (dropped afterwards)."""
    admin_url = make_url(postgres_url)
    role = f"perfguard_pr_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    sql = (
        read_only_role_sql()
        .replace("perfguard_pr", role)
        .replace("'choose-a-password'", f"'{password}'")
        .replace("DATABASE perfguard", f'DATABASE "{admin_url.database}"')
        .replace("FOR ROLE perfguard", f'FOR ROLE "{admin_url.username}"')
    )
    admin = create_engine(admin_url.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    try:
        code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        with admin.connect() as connection:
            for statement in filter(None, (s.strip() for s in code.split(";"))):
                connection.execute(text(statement))
        yield admin_url.set(username=role, password=password).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            if connection.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar():
                connection.execute(text(f'DROP OWNED BY "{role}"'))
                connection.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()


@pytest.mark.postgres
def test_the_read_only_role_of_the_docs_cannot_write_even_without_read_only(postgres_url: str) -> None:
    with Store.open(postgres_url) as store:
        record_baseline_and_pr(store)
        before_rows = snapshot(store)
        before = baseline_read(store)

    with read_only_role(postgres_url) as role_url:
        # Not opened read_only: the role alone stops a PR job that ignores perfguard's flag.
        with Store.open(role_url) as pr_job:
            assert baseline_read(pr_job) == before
            with pytest.raises(StoreError) as info:
                pr_job.record_runs(GPU, commit(MAIN), FORGED)
            assert "read-only transaction" in info.value.format_message()
            with pytest.raises(StoreError, match=r"session for .* is read-only"):
                pr_job.check_writable()
            # Even after switching the session back to read-write, the role has no INSERT.
            with pytest.raises(Exception, match="permission denied"), pr_job.engine.begin() as connection:
                connection.execute(text("SET TRANSACTION READ WRITE"))
                connection.execute(text("UPDATE runs SET trusted = false"))
        with Store.open(role_url, read_only=True) as pr_job:
            assert baseline_read(pr_job) == before

    with Store.open(postgres_url) as store:
        assert snapshot(store) == before_rows


@pytest.mark.postgres
def test_check_writable_names_missing_insert_rights_on_postgresql(postgres_url: str) -> None:
    with Store.open(postgres_url) as store:
        store.check_writable()  # the owner may write
    url = make_url(postgres_url)
    role = f"perfguard_half_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'pw'"))
            connection.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"'))
            connection.execute(text(f'GRANT INSERT ON machines, commits TO "{role}"'))
        half = url.set(username=role, password="pw").render_as_string(hide_password=False)
        with Store.open(half) as store, pytest.raises(StoreError) as info:
            store.check_writable()
        message = info.value.format_message()
        assert "may not write to machines, commits, runs, results" in message  # no sequence USAGE either
        assert "pw@" not in message
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP OWNED BY "{role}"'))
            connection.execute(text(f'DROP ROLE "{role}"'))
        admin.dispose()


# --- opening read-only ----------------------------------------------------------------------------


def test_a_read_only_store_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.db"
    with pytest.raises(StoreError, match="a read-only store is opened, never created"):
        Store.open(f"sqlite:///{missing}", read_only=True)
    assert not missing.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_an_empty_postgresql_database_is_not_a_baseline_store(postgres_url: str) -> None:
    with pytest.raises(StoreError, match="holds no perfguard history store"):
        Store.open(postgres_url, read_only=True)
    with create_engine(make_url(postgres_url).set(drivername="postgresql+psycopg")).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar() == 0


def test_a_read_only_store_is_never_migrated(store_url: str) -> None:
    from alembic import command

    from perfguard.store.schema import alembic_config

    with Store.open(store_url) as store:
        store.record_runs(GPU, commit(MAIN), rounds(1.0, 1, seed=1, trusted=True))
        config = alembic_config()
        with store.engine.connect() as connection, connection.begin():
            config.attributes["connection"] = connection
            command.downgrade(config, "0001")
    with pytest.raises(StoreError) as info:
        Store.open(store_url, read_only=True)
    message = info.value.format_message()
    from perfguard.store.schema import head_revision

    assert f"is at schema revision 0001; this perfguard reads {head_revision()}" in message
    assert "perfguard db upgrade" in message
    with Store.open(store_url, migrate=False) as store:
        assert store.schema_state.current == "0001"


def test_migration_0002_trusts_what_only_trusted_commands_wrote(store_url: str) -> None:
    """Rows from before the trust model: run/calibrate (perfguard run, calibrate) trusted; rows that
    perfguard check wrote (in CI: next to PR code) not."""
    from alembic import command

    from perfguard.store.schema import alembic_config

    purposes = ("run", "baseline", "head", "retry", "calibrate")
    with Store.open(store_url) as store:
        for n, purpose in enumerate(purposes, start=1):
            store.record_runs(GPU, commit(n), rounds(1.0, 1, seed=n, trusted=False, purpose=purpose))
        config = alembic_config()
        with store.engine.connect() as connection, connection.begin():
            config.attributes["connection"] = connection
            command.downgrade(config, "0001")
    with Store.open(store_url) as store:
        assert store.migrated_from == "0001"
        trusted = {
            purpose: [r.trusted for r in store.runs_for(GPU.key, sha(n), "production", purposes=(purpose,))]
            for n, purpose in enumerate(purposes, start=1)
        }
    assert trusted == {
        "run": [True],
        "baseline": [False],
        "head": [False],
        "retry": [False],
        "calibrate": [True],
    }


def test_trust_is_stored_and_read_back(store_url: str) -> None:
    with Store.open(store_url) as store:
        stored = store.record_runs(GPU, commit(MAIN), rounds(1.0, 2, seed=1, trusted=True))
        stored += store.record_runs(GPU, commit(MAIN), rounds(1.0, 1, seed=2, trusted=False))
        assert [r.trusted for r in stored] == [True, True, False]
        runs = sorted(store.runs_for(GPU.key, sha(MAIN), "production"), key=lambda r: r.id)
        assert [(r.id, r.trusted) for r in runs] == [(r.id, r.trusted) for r in stored]
        ((_, results),) = store.results_for(GPU.key, sha(MAIN), "production").items()
        assert sorted((r.run_id, r.trusted) for r in results) == [(r.id, r.trusted) for r in stored]
        assert len(store.runs_for(GPU.key, sha(MAIN), "production", trusted_only=True)) == 2
        with pytest.raises(StoreError, match="trusted must be True or False"):
            store.record_runs(
                GPU, commit(MAIN), [RunRecord(**{**stored_run_record().__dict__, "trusted": 1})]
            )


def stored_run_record() -> RunRecord:
    return rounds(1.0, 1, seed=1, trusted=True)[0]


def test_an_untrusted_only_store_has_a_complete_run_only_for_untrusted_reads(store_url: str) -> None:
    """What an untrusted check leaves in its results store: a baseline it measured itself is kept
    there with its results, never promoted: trusted reads do not see it."""
    with Store.open(store_url) as results_store:
        results_store.record_runs(
            GPU, commit(MAIN), rounds(1.0, 3, seed=1, trusted=False, purpose="baseline")
        )
        assert results_store.has_complete_run(GPU.key, sha(MAIN), "production")
        assert not results_store.has_complete_run(GPU.key, sha(MAIN), "production", trusted_only=True)
        assert results_store.results_for(GPU.key, sha(MAIN), "production", trusted_only=True) == {}
        assert results_store.series(trusted_only=True) == []
        assert len(results_store.series(purposes=("baseline",))) == 1


# --- reports from a store of untrusted runs and checks ---------------------------------------------


def perfguard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_reports_render_from_a_store_of_untrusted_runs_and_checks(tmp_path: Path) -> None:
    """The untrusted check's results store (--results-db) holds only untrusted runs and its check:
    the check report, the history and the site render from it."""
    url = f"sqlite:///{tmp_path / 'untrusted.db'}"
    with Store.open(url) as results_store:
        results_store.record_runs(
            GPU, commit(MAIN), rounds(1.0, 3, seed=1, trusted=False, purpose="baseline")
        )
        results_store.record_runs(
            GPU, commit(PR_HEAD, branch="feature"), rounds(4.0, 3, seed=2, trusted=False, purpose="head")
        )
        (base_rounds,) = results_store.results_for(GPU.key, sha(MAIN), "production").values()
        (head_rounds,) = results_store.results_for(GPU.key, sha(PR_HEAD), "production").values()
        item = compare_sides(
            Measurement.from_results(base_rounds), Measurement.from_results(head_rounds), Config()
        )
        check_id = results_store.record_check(
            GPU,
            commit(PR_HEAD, branch="feature"),
            commit(MAIN),
            baseline_ref="origin/main",
            profile="production",
            threshold=0.2,
            verdict="regression",
            exit_code=1,
            summary={"regression": 1},
            environment={},
            config={},
            items=[CheckItemRecord(**item.as_row())],
        )
    markdown = perfguard("report", "--db", url, "--check", str(check_id), "--markdown", "-", cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    assert "regression" in markdown.stdout.lower() and "dilated" in markdown.stdout
    site = perfguard("report", "--db", url, "--out", str(tmp_path / "site"), cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    assert (tmp_path / "site" / "index.html").stat().st_size > 0
    history = perfguard("history", "--db", url, cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    assert sha(PR_HEAD)[:10] in history.stdout


# --- check_writable (D4) -----------------------------------------------------------------------------


def test_check_writable_passes_on_a_writable_store_and_leaves_nothing(store_url: str, tmp_path: Path) -> None:
    with Store.open(store_url) as store:
        before = snapshot(store)
        listing = sorted(os.listdir(tmp_path))
        store.check_writable()
        assert snapshot(store) == before
        assert sorted(os.listdir(tmp_path)) == listing  # the probe file is gone


def test_check_writable_says_when_the_disk_is_nearly_full(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'h.db'}") as store:
        free = shutil.disk_usage(tmp_path).free
        with pytest.raises(StoreError) as info:
            store.check_writable(min_free_bytes=free + 2**40)
    message = info.value.format_message()
    assert f"no space left on device for the history store in {tmp_path}" in message
    assert "MiB free" in message and f"df -h {tmp_path}" in message
    assert "check the URL" not in message


@contextlib.contextmanager
def small_filesystem(path: Path, size: str = "1m") -> Iterator[Path]:
    """A real tmpfs of ``size`` at ``path`` (needs the right to mount: root in a container, CI)."""
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({proc.stderr.decode().strip()}); the min_free test covers the rule"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill_up(directory: Path) -> None:
    with (directory / "ballast").open("wb", buffering=0) as ballast, contextlib.suppress(OSError):
        while True:
            ballast.write(b"\0" * 65536)


def test_a_full_disk_is_named_before_measuring_and_when_writing(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small") as small:
        url = f"sqlite:///{small / 'h.db'}"
        with Store.open(url) as store:
            store.check_writable(min_free_bytes=0)
            fill_up(small)
            with pytest.raises(StoreError) as info:
                store.check_writable(min_free_bytes=0)
            message = info.value.format_message()
            assert "no space left on device for the history store" in message
            assert "test write failed" in message and "check the URL" not in message
            # And the write itself, had nobody checked: the hint names the disk, not the URL.
            with pytest.raises(StoreError) as info:
                store.record_runs(GPU, commit(MAIN), rounds(1.0, 60, seed=1, trusted=True))
            message = info.value.format_message()
            assert "disk is full" in message and "nothing was written" in message
            assert f"no space left on the disk holding {small}" in message


def test_a_read_only_filesystem_is_named_before_measuring(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "ro", size="4m") as mounted:
        url = f"sqlite:///{mounted / 'h.db'}"
        closed = f"sqlite:///{mounted / 'closed.db'}"
        with Store.open(url) as store:
            store.record_runs(GPU, commit(MAIN), rounds(1.0, 1, seed=1, trusted=True))
            store.snapshot(mounted / "snapshot.db")
        Store.open(closed).close()  # WAL mode, its -wal/-shm files removed on close
        Store.open(url, read_only=True).close()  # a reader leaves h.db's -wal/-shm files behind
        subprocess.run(["mount", "-o", "remount,ro", str(mounted)], check=True)

        # SQLite opens h.db (its -shm exists) but would fail at the first write, after measuring.
        with Store.open(url) as store, pytest.raises(StoreError) as info:
            store.check_writable()
        message = info.value.format_message()
        assert (
            f"the directory of the history store {mounted} is not writable (Read-only file system)" in message
        )
        # closed.db cannot even be opened for writing: the message says why, not "check the URL".
        with pytest.raises(StoreError) as info:
            Store.open(closed)
        assert f"{mounted} is on a read-only file system" in info.value.format_message()
        # The snapshot is what PR runners read from such a mount.
        with Store.open(f"sqlite:///{mounted / 'snapshot.db'}", read_only=True) as snap:
            assert len(snap.runs_for(GPU.key, sha(MAIN), "production", trusted_only=True)) == 1


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only directories; the tmpfs test covers it"
)
def test_a_read_only_directory_is_named_before_measuring(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    Store.open(url).close()
    tmp_path.chmod(0o555)
    try:
        with Store.open(url, migrate=False) as store, pytest.raises(StoreError, match="is not writable"):
            store.check_writable()
    finally:
        tmp_path.chmod(0o755)


# --- snapshots ----------------------------------------------------------------------------------------


def test_a_snapshot_is_a_consistent_read_only_copy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    target = tmp_path / "published" / "baseline.db"
    target.parent.mkdir()
    with Store.open(url) as store:
        record_baseline_and_pr(store)
        rows = snapshot(store)
        assert store.snapshot(target) == target
        with pytest.raises(StoreError, match="would overwrite the store itself"):
            store.snapshot(tmp_path / "h.db")
    assert target.stat().st_mode & 0o777 == 0o444
    assert [p.name for p in target.parent.iterdir()] == ["baseline.db"]
    with Store.open(f"sqlite:///{target}", read_only=True) as copy:
        assert snapshot(copy) == rows
        with copy.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"


@pytest.mark.postgres
def test_postgresql_stores_are_not_snapshotted(postgres_url: str, tmp_path: Path) -> None:
    with Store.open(postgres_url) as store, pytest.raises(StoreError, match="snapshots are of SQLite stores"):
        store.snapshot(tmp_path / "x.db")


# --- names that try to be something else ----------------------------------------------------------------

HOSTILE_NAMES = (
    "<script>alert('x')</script>",
    "x'); DROP TABLE runs; --",
    "[/oops]",
    "ring[fp8]",
    "[bold red]not bold[/]",
    '=HYPERLINK("http://evil.example","click")',
    "注意力 😀 ∑ ℵ",
    "../../etc/passwd",
    "@maintainer **bold** [link](http://evil.example) ![img](http://evil.example/x.png)",
)


def test_hostile_names_go_through_the_store_as_written(store_url: str) -> None:
    with Store.open(store_url) as store:
        for n, name in enumerate(HOSTILE_NAMES, start=10):
            record = ResultRecord(
                benchmark=f"bench_attention.{name}",
                impl=name,
                params={"impl": name, "note": name, "seq_len": 512},
                metric="time",
                unit="seconds",
                direction="lower",
                gated=True,
                samples=[1e-3, 2e-3],
                error=None,
                info={"name": name},
            )
            the_commit = commit(n, branch=name[:255])
            the_commit = type(the_commit)(**{**the_commit.__dict__, "subject": name, "author": name})
            store.record_runs(
                type(GPU)(key=name, kind="cuda", label=name),
                the_commit,
                [RunRecord(profile="quick", started_at=T0, finished_at=T0, results=[record], command=name)],
            )
            ((key, (stored,)),) = store.results_for(name, sha(n), "quick").items()
            assert key == (f"bench_attention.{name}", record.params_key)
            assert (stored.impl, dict(stored.params), dict(stored.info)) == (
                name,
                record.params,
                {"name": name},
            )
            (series,) = store.series(machine=name)
            assert (series.machine_key, series.impl, series.points[0].subject) == (name, name, name)
            assert series.points[0].branch == name
        assert sorted(store.distinct("impl")) == sorted(HOSTILE_NAMES)
        with pytest.raises(StoreError, match="contains a NUL character"):
            store.get_or_create_machine("nul\x00key", "cuda", "x", {})


def test_perfguard_run_on_a_full_disk_stops_before_measuring(tmp_path: Path) -> None:
    """D4 at the command line: the store's disk is full, so `perfguard run` says so at once (exit 2)
    instead of after the whole measurement, and measures nothing."""
    from tests.helpers.project import WORK_BENCH, perfguard, project_repo

    repo = project_repo(tmp_path / "repo")
    with small_filesystem(tmp_path / "small") as small:
        url = f"sqlite:///{small / 'h.db'}"
        Store.open(url).close()  # the store exists (schema written), then the disk fills up
        fill_up(small)
        result = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=url, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no space left on device for the history store" in result.stderr
    assert "check the URL" not in result.stderr
    assert "round 1/1" not in result.stderr and "[1/" not in result.stderr  # nothing was measured
    assert "Traceback" not in result.stderr
