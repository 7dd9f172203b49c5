"""The history store on real SQLite files and a real PostgreSQL server: writes, reads, atomicity."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text

from perfguard.errors import StoreError
from perfguard.store import (
    CheckItemRecord,
    CommitRecord,
    MachineRecord,
    ResultRecord,
    Store,
    params_key,
)
from perfguard.store.models import Base

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
GPU = MachineRecord(key="NVIDIA H100 80GB HBM3 x1", kind="cuda", label="H100", attributes={"sm": 132})
CPU = MachineRecord(key="cpu:AMD EPYC 7B13", kind="cpu", label="EPYC", attributes={"cores": 2})


def sha(n: int) -> str:
    return f"{n:040x}"


def commit(n: int, *, at: datetime | None = None, branch: str | None = "main") -> CommitRecord:
    return CommitRecord(
        sha=sha(n),
        base_sha=sha(n),
        committed_at=at or T0 + timedelta(hours=n),
        branch=branch,
        parents=[sha(n - 1)] if n > 0 else [],
        subject=f"commit {n}",
        author="A. Author <a@example.com>",
    )


def result(
    impl: str = "dilated",
    seq_len: int = 256,
    benchmark: str = "bench_attention.Forward.track_time",
    *,
    scale: float = 1.0,
    n: int = 20,
    **overrides: Any,
) -> ResultRecord:
    values: dict[str, Any] = dict(
        benchmark=benchmark,
        impl=impl,
        params={"impl": impl, "seq_len": seq_len, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        samples=[scale * (1e-3 + 1e-6 * i) for i in range(n)],
        method="cpu-wall",
        info={"warmup_s": 1.0, "nvml": []},
        benchmark_version="abc123",
    )
    values.update(overrides)
    return ResultRecord(**values)


def suite(scale: float = 1.0) -> list[ResultRecord]:
    return [
        result(impl, seq_len, bench, scale=scale)
        for impl in ("dilated", "ring")
        for seq_len in (256, 512)
        for bench in ("bench_attention.Forward.track_time", "bench_attention.ForwardBackward.track_time")
    ]


def record(store: Store, machine: MachineRecord = GPU, n: int = 1, **kwargs: Any) -> Any:
    the_commit = kwargs.pop("commit", None) or commit(n)
    values: dict[str, Any] = dict(
        profile="quick",
        purpose="run",
        round=0,
        software={"torch": "2.13.0", "python": "3.11"},
        fingerprint={"gpu": machine.label, "hostname": "runner-1"},
        settings={"tf32": False},
        command="perfguard run",
        started_at=T0 + timedelta(days=n),
        finished_at=T0 + timedelta(days=n, minutes=3),
        results=suite(),
    )
    values.update(kwargs)
    return store.record_run(machine, the_commit, **values)


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: 'the store exactly as it was'."""
    with store.engine.connect() as conn:
        return {
            table.name: [tuple(row) for row in conn.execute(select(table).order_by(*table.primary_key))]
            for table in Base.metadata.sorted_tables
        }


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


# --- schema --------------------------------------------------------------------------------------


def test_open_creates_the_schema_and_reopening_changes_nothing(store_url: str) -> None:
    with Store.open(store_url) as first:
        assert first.migrated_from is None
        assert first.schema_state.up_to_date
        head = first.schema_state.head
    with Store.open(store_url) as again:
        assert again.migrated_from == head
        assert again.schema_state.current == head


def test_migrations_and_models_agree(store: Store) -> None:
    """Autogenerate finds nothing to do: the migrations build exactly the models' schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_revisions_read_from_file_names_agree_with_alembic() -> None:
    """Opening a store reads revisions from file names (no Alembic import); Alembic must agree."""
    from alembic.script import ScriptDirectory

    from perfguard.store.schema import alembic_config, head_revision, known_revisions

    script = ScriptDirectory.from_config(alembic_config())
    assert [r.revision for r in reversed(list(script.walk_revisions()))] == known_revisions()
    assert script.get_current_head() == head_revision()
    for revision in script.walk_revisions():
        assert Path(revision.path).name.startswith(revision.revision + "_")


def test_opening_an_up_to_date_store_does_not_load_alembic(tmp_path: Path) -> None:
    import subprocess

    url = f"sqlite:///{tmp_path / 'h.db'}"
    Store.open(url).close()
    probe = (
        "import sys; sys.path.insert(0, sys.argv[2]); from perfguard.store import Store; "
        "Store.open(sys.argv[1]).close(); print(sorted(m for m in sys.modules if m.startswith('alembic')))"
    )
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", probe, url, root], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_downgrade_to_nothing_and_upgrade_again(store: Store, store_url: str) -> None:
    from alembic import command

    from perfguard.store.schema import alembic_config

    record(store)
    config = alembic_config()
    with store.engine.connect() as conn, conn.begin():
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    with store.engine.connect() as conn:
        assert "results" not in set(conn.dialect.get_table_names(conn))
    with Store.open(store_url) as reopened:
        assert reopened.migrated_from is None
        record(reopened)


def test_a_writer_waits_for_a_lock_as_long_on_both_backends_then_says_why(store_url: str) -> None:
    """Issue 27: PostgreSQL lock waits had no end (SQLite gives up after its 30 s busy timeout).

    Both wait 30 s by default; with a short wait (the URL's own lock_timeout, or busy_timeout) a
    write behind a lock held elsewhere fails with a message that says a lock held it up."""
    from perfguard.store.engine import POSTGRES_LOCK_TIMEOUT_MS, SQLITE_BUSY_TIMEOUT_MS

    assert POSTGRES_LOCK_TIMEOUT_MS == SQLITE_BUSY_TIMEOUT_MS == 30_000
    postgres = store_url.startswith("postgresql")
    with Store.open(store_url) as store, store.engine.connect() as conn:
        setting = "SHOW lock_timeout" if postgres else "PRAGMA busy_timeout"
        assert str(conn.exec_driver_sql(setting).scalar()) == ("30s" if postgres else "30000")
    short = (
        f"{store_url}{'&' if '?' in store_url else '?'}options=-c%20lock_timeout%3D300"
        if postgres
        else store_url
    )
    with Store.open(short) as store:
        record(store)
        holder = store.engine.connect()
        try:
            if postgres:
                holder.begin()
                holder.exec_driver_sql("LOCK TABLE commits IN ACCESS EXCLUSIVE MODE")
            else:
                holder.execution_options(perfguard_write=True).begin()
                holder.exec_driver_sql("UPDATE commits SET subject = subject")
                store.engine.pool.dispose()  # new connections get the short wait below
                event.listen(store.engine, "connect", lambda c, _r: c.execute("PRAGMA busy_timeout = 300"))
            with pytest.raises(StoreError) as info:
                record(store, n=99)
        finally:
            holder.close()
    message = info.value.format_message()
    assert info.value.exit_code == 2
    expected = ("lock timeout", "pg_stat_activity") if postgres else ("locked", "held the database")
    assert all(words in message for words in expected), message


def test_sqlite_is_set_up_for_concurrent_runners(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'h.db'}") as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000


def test_schema_newer_than_this_perfguard_is_refused(store_url: str) -> None:
    with Store.open(store_url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError) as info:
        Store.open(store_url)
    message = info.value.format_message()
    assert "'9999', newer than this perfguard knows" in message
    assert "upgrade perfguard" in message
    assert "perfguard-test-secret" not in message
    with pytest.raises(StoreError, match="newer"):
        Store.open(store_url, migrate=False)


def test_tables_perfguard_did_not_create_are_left_alone(store_url: str) -> None:
    from sqlalchemy import create_engine

    from perfguard.store import resolve

    engine = create_engine(resolve(store_url).url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE results (id INTEGER PRIMARY KEY, other TEXT)"))
    engine.dispose()
    with pytest.raises(StoreError, match="already has tables named results but no perfguard schema"):
        Store.open(store_url)


def test_two_processes_creating_the_same_store_at_once(store_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def open_it() -> None:
        barrier.wait()
        try:
            Store.open(store_url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with Store.open(store_url) as store:
        assert store.schema_state.up_to_date


# --- runs and results ----------------------------------------------------------------------------


def test_a_run_round_trips_with_samples_and_metadata(store: Store) -> None:
    run = record(store)
    assert run.n_results == 8
    stored = store.results_for(GPU.key, sha(1), "quick")
    assert len(stored) == 8
    key = ("bench_attention.Forward.track_time", "dtype=float32,impl=dilated,seq_len=256")
    assert next(iter(stored)) == key  # grouped and sorted by (benchmark, params_key)
    (only,) = stored[key]
    expected = result()
    assert only.samples == expected.samples
    assert only.n_samples == 20
    assert only.value == pytest.approx(expected.value)
    assert only.q25 == pytest.approx(expected.q25) and only.q75 == pytest.approx(expected.q75)
    assert only.params == {"impl": "dilated", "seq_len": 256, "dtype": "float32"}
    assert only.info == {"warmup_s": 1.0, "nvml": []}
    assert (only.method, only.benchmark_version, only.gated, only.direction) == (
        "cpu-wall",
        "abc123",
        True,
        "lower",
    )
    assert (only.run_id, only.round, only.purpose) == (run.id, 0, "run")
    (stored_run,) = store.runs_for(GPU.key, sha(1), "quick")
    assert stored_run.software == {"torch": "2.13.0", "python": "3.11"}
    assert stored_run.fingerprint["hostname"] == "runner-1"
    assert stored_run.n_results == 8
    assert stored_run.started_at == T0 + timedelta(days=1)
    assert stored_run.started_at.tzinfo is not None


def test_results_are_grouped_per_round_and_filtered(store: Store) -> None:
    for rnd in range(3):
        record(
            store,
            purpose="head",
            round=rnd,
            results=suite(scale=1 + rnd),
            started_at=T0 + timedelta(minutes=10 * rnd),
            finished_at=T0 + timedelta(minutes=10 * rnd + 5),
        )
    record(store)  # a plain run of the same commit, a day later
    record(store, purpose="retry", round=0)
    record(store, profile="production")
    record(store, CPU)
    record(store, n=2)

    grouped = store.results_for(GPU.key, sha(1), "quick")
    assert len(grouped) == 8
    rounds = grouped[("bench_attention.Forward.track_time", "dtype=float32,impl=ring,seq_len=512")]
    assert [r.round for r in rounds] == [0, 1, 2, 0]  # oldest run first; the plain 'run' is newest
    assert [r.purpose for r in rounds] == ["head", "head", "head", "run"]
    assert rounds[1].samples[0] == pytest.approx(2e-3)

    retries = store.results_for(GPU.key, sha(1), "quick", purposes=("retry",))
    assert {len(v) for v in retries.values()} == {1}
    assert [r.purpose for r in store.runs_for(GPU.key, sha(1), "quick")] == ["head", "head", "head", "run"]
    assert store.results_for(GPU.key, sha(1), "production")
    assert store.results_for(CPU.key, sha(1), "quick")
    assert store.results_for(GPU.key, sha(99), "quick") == {}
    assert store.results_for("no such machine", sha(1), "quick") == {}


def test_has_complete_run(store: Store) -> None:
    assert not store.has_complete_run(GPU.key, sha(1), "quick")
    record(store, purpose="calibrate")
    assert not store.has_complete_run(GPU.key, sha(1), "quick")  # calibration is not a measurement
    assert store.has_complete_run(GPU.key, sha(1), "quick", purposes=("calibrate",))
    record(store, purpose="baseline")
    assert store.has_complete_run(GPU.key, sha(1), "quick")
    assert not store.has_complete_run(GPU.key, sha(1), "production")
    assert not store.has_complete_run(CPU.key, sha(1), "quick")


def test_get_or_create_is_idempotent_and_keeps_the_first_row(store: Store) -> None:
    first = store.get_or_create_machine(GPU.key, GPU.kind, GPU.label, GPU.attributes)
    again = store.get_or_create_machine(GPU.key, "cuda", "renamed", {"other": 1})
    assert again.id == first.id and again.label == "H100" and again.attributes == {"sm": 132}
    c = commit(5)
    one = store.get_or_create_commit(
        c.sha, c.base_sha, c.dirty, c.branch, c.parents, c.subject, c.author, c.committed_at
    )
    two = store.get_or_create_commit(c.sha, c.base_sha, False, "other", [], "", None, T0)
    assert one.id == two.id and two.branch == "main" and two.parents == (sha(4),)
    assert two.committed_at == c.committed_at
    # the returned values are records: record_run takes them as they are
    run = store.record_run(
        one and first,
        two,
        profile="quick",
        software={},
        fingerprint={},
        settings={},
        started_at=T0,
        finished_at=T0,
        results=[result()],
    )
    assert run.machine_key == GPU.key
    assert [m.key for m in store.machines()] == [GPU.key]


def test_dirty_work_tree_is_its_own_commit(store: Store) -> None:
    base = sha(7)
    dirty = CommitRecord(sha=f"{base}+dirty.0123456789ab", base_sha=base, dirty=True, committed_at=T0)
    store.record_run(
        GPU,
        dirty,
        profile="quick",
        software={},
        fingerprint={},
        settings={},
        started_at=T0,
        finished_at=T0,
        results=[result()],
    )
    assert store.has_complete_run(GPU.key, dirty.sha, "quick")
    assert not store.has_complete_run(GPU.key, base, "quick")


def test_timestamps_are_utc_whatever_zone_they_came_in(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2026, 3, 1, 14, 0, tzinfo=plus_two)
    record(store, commit=commit(1, at=local), started_at=local, finished_at=local)
    (run,) = store.runs_for(GPU.key, sha(1), "quick")
    assert run.started_at == local and run.started_at.utcoffset() == timedelta(0)
    (series,) = store.series(
        impl="dilated",
        params_key=params_key({"impl": "dilated", "seq_len": 256, "dtype": "float32"}),
        benchmark="bench_attention.Forward.track_time",
    )
    assert series.points[0].committed_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


# --- nothing written on bad input or interruption -----------------------------------------------


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (dict(samples=[1e-3, -2e-3, 3e-3]), "sample 1 is -0.002: a time sample is a positive amount"),
        (dict(samples=[1e-3, 0.0]), "sample 1 is 0.0: a time sample is a positive amount of seconds"),
        (dict(samples=[]), "samples is an empty list; pass None"),
        (dict(samples=[1e-3, True]), "sample 1 is True, not a number"),
        (dict(samples=[1e-3, "2e-3"]), "sample 1 is '2e-3', not a number"),
        (dict(samples=[1e-3, 10**401]), "sample 1 is 1000000000000000000000000000000000000..."),
        (dict(samples=[math.nan, math.inf, -math.inf]), "all 3 samples are NaN or infinite"),
        (dict(samples=None, value=-1.0), "value is -1.0: a time is a positive amount of seconds"),
        (dict(samples=None, value=True), "value is True, not a finite number"),
        (dict(metric="speed"), "metric is 'speed'"),
        (dict(direction="up"), "direction is 'up'"),
        (dict(status="ok", samples=None, value=None), "needs a value"),
        (dict(status="failed", samples=None, value=None), "needs the error text"),
        (dict(params={"impl": "ring", "seq_len": 256}), "differs from impl='dilated'"),
        (dict(params={"impl": "dilated", "t": object()}), "cannot be stored as JSON"),
        (dict(benchmark="x" * 300), "at most 255"),
        (dict(info={"bad": float("nan")}), "cannot be stored as JSON"),
        (dict(params_key="seq_len=256"), "not the canonical key"),
    ],
)
def test_a_bad_result_in_the_middle_aborts_the_whole_run(
    store: Store, bad: dict[str, Any], words: str
) -> None:
    record(store)
    before = snapshot(store)
    results = suite()
    results.insert(5, result(seq_len=4096, **bad))
    with pytest.raises(StoreError) as info:
        record(store, n=2, results=results)
    message = info.value.format_message()
    assert words in message
    assert "result 6 of 9" in message
    assert "nothing was written" in message
    assert snapshot(store) == before


def test_nan_and_infinite_samples_are_ignored_as_the_docs_say(store: Store) -> None:
    """docs/verdicts.md: "Samples that are NaN or infinite are ignored" (one NaN used to reject the
    whole measurement, issue 13 D9): dropped, counted in info, the rest stored."""
    samples = [1e-3, math.nan, 2e-3, math.inf, 3e-3, -math.inf]
    record(store, results=[result(samples=samples), result(seq_len=512)])
    ((_, (stored,)),) = [
        (key, rounds)
        for key, rounds in store.results_for(GPU.key, sha(1), "quick").items()
        if "256" in key[1]
    ]
    assert stored.samples == [1e-3, 2e-3, 3e-3] and stored.n_samples == 3
    assert stored.value == 2e-3 and stored.info["ignored_samples"] == 3
    assert stored.info["warmup_s"] == 1.0  # the rest of info kept


def test_duplicate_results_and_bad_run_fields_are_refused(store: Store) -> None:
    before = snapshot(store)
    with pytest.raises(StoreError, match="results 1 and 3 of the run are both"):
        record(store, results=[result(), result(seq_len=512), result()])
    with pytest.raises(StoreError, match="no time zone"):
        record(store, started_at=datetime(2026, 1, 1, 12, 0))
    with pytest.raises(StoreError, match="purpose is 'nightly'"):
        record(store, purpose="nightly")
    with pytest.raises(StoreError, match="at least one result"):
        record(store, results=[])
    with pytest.raises(StoreError, match="parents must be a list"):
        store.get_or_create_commit(sha(1), sha(1), False, "main", sha(0), "", None, T0)
    with pytest.raises(StoreError, match="clean commit sha"):
        record(store, commit=CommitRecord(sha="abc", base_sha=sha(1), committed_at=T0))
    with pytest.raises(StoreError, match="before started_at"):
        record(store, finished_at=T0)
    assert snapshot(store) == before


@pytest.mark.parametrize("exception", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_an_exception_while_writing_results_leaves_nothing_behind(
    store: Store, exception: BaseException
) -> None:
    record(store)
    before = snapshot(store)
    sent = []

    def fail_once_results_are_sent(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement.split("(")[0].strip())
        if statement.startswith("INSERT INTO result_data"):
            raise exception

    event.listen(store.engine, "after_cursor_execute", fail_once_results_are_sent)
    many = [result(seq_len=s) for s in range(1, 301)]
    try:
        with pytest.raises(type(exception)):
            # a new machine and commit too: they must vanish with the run
            record(store, CPU, n=3, results=many)
    finally:
        event.remove(store.engine, "after_cursor_execute", fail_once_results_are_sent)
    # the machine, the commit, the run and every result (with its samples) had been sent
    for table in ("machines", "commits", "runs", "results", "result_data"):
        assert f"INSERT INTO {table}" in sent
    assert snapshot(store) == before
    record(store, CPU, n=3, results=many)  # and the store still works
    assert len(store.results_for(CPU.key, sha(3), "quick")) == 300


_KILLED_WRITER = """
import os, sys, time
from datetime import datetime, timedelta, timezone
from sqlalchemy import event
sys.path.insert(0, {root!r})
from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

store = Store.open(sys.argv[1])
where = sys.argv[2]

def hang(*args):
    print("WRITTEN", flush=True)   # everything is sent; the transaction is not committed
    time.sleep(600)

if where == "commit":
    event.listen(store.engine, "commit", hang)
else:
    def after(conn, cursor, statement, *args):
        if statement.startswith("INSERT INTO results"):
            hang()
    event.listen(store.engine, "after_cursor_execute", after)

t0 = datetime(2026, 5, 1, tzinfo=timezone.utc)
results = [
    ResultRecord(benchmark="bench_attention.Forward.track_time", impl="ring",
                 params={{"impl": "ring", "seq_len": n, "dtype": "float32"}}, metric="time",
                 unit="seconds", direction="lower", gated=True, samples=[1e-3] * 50)
    for n in range(1, 301)
]
store.record_run(
    MachineRecord(key="killed-machine", kind="cpu", label="k"),
    CommitRecord(sha="f" * 40, base_sha="f" * 40, committed_at=t0),
    profile="quick", software={{}}, fingerprint={{}}, settings={{}},
    started_at=t0, finished_at=t0, results=results,
)
print("COMMITTED", flush=True)
"""


@pytest.mark.parametrize("where", ["commit", "results"])
def test_a_run_killed_mid_write_leaves_the_store_exactly_as_it_was(
    store: Store, store_url: str, tmp_path: Path, where: str
) -> None:
    import os
    import signal
    import subprocess

    record(store)
    before = snapshot(store)
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER.format(root=str(Path(__file__).resolve().parents[1])))
    writer = subprocess.Popen(
        [sys.executable, str(script), store_url, where],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = writer.stdout.readline()  # blocks until the writer has sent its writes
        assert line.strip() == "WRITTEN", writer.stderr.read()
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == -signal.SIGKILL
    with Store.open(store_url) as reopened:
        assert snapshot(reopened) == before
        if reopened.dialect == "sqlite":
            with reopened.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        record(reopened, CPU, n=4)  # no lock or half-run left behind
        assert reopened.has_complete_run(CPU.key, sha(4), "quick")
        assert not reopened.has_complete_run("killed-machine", "f" * 40, "quick")


def test_two_runners_recording_the_same_new_commit_at_once(store_url: str) -> None:
    """get-or-create under a race: both runs are stored, against one machine row and one commit row."""
    stores = [Store.open(store_url) for _ in range(2)]
    errors: list[BaseException] = []
    try:
        for n in range(10, 16):
            barrier = threading.Barrier(2)

            def write(s: Store, rnd: int, n: int = n, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                try:
                    record(s, MachineRecord(key=f"race-{n}", kind="cpu", label="r"), n=n, round=rnd)
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(s, i)) for i, s in enumerate(stores)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert errors == []
        for n in range(10, 16):
            assert sorted(r.round for r in stores[0].runs_for(f"race-{n}", sha(n), "quick")) == [0, 1]
        rows = snapshot(stores[0])
        assert len(rows["commits"]) == 6 and len(rows["machines"]) == 6
    finally:
        for s in stores:
            s.close()


# --- checks --------------------------------------------------------------------------------------


def item(verdict: str = "unchanged", **overrides: Any) -> CheckItemRecord:
    values: dict[str, Any] = dict(
        benchmark="bench_attention.Forward.track_time",
        impl="dilated",
        params={"impl": "dilated", "seq_len": 256, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        verdict=verdict,
        threshold=0.2,
        base_value=1e-3,
        head_value=1.01e-3,
        ratio=1.01,
        ci_low=0.98,
        ci_high=1.04,
        p_value=0.4,
        noise=0.02,
        method="cpu-wall",
        base_n=60,
        head_n=60,
        reason="within threshold",
    )
    values.update(overrides)
    return CheckItemRecord(**values)


def check_kwargs(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = dict(
        baseline_ref="main",
        profile="quick",
        threshold=0.2,
        verdict="regression",
        exit_code=1,
        summary={"regression": 1, "unchanged": 1},
        environment={"differs": []},
        config={"threshold": 0.2},
        command="perfguard check --baseline main",
        created_at=T0,
        items=[
            item(),
            item("regression", impl="ring", params={"impl": "ring"}, ratio=2.0, retried=True),
            item(
                "new",
                impl="block_sparse_ring",
                params={"impl": "block_sparse_ring"},
                base_value=None,
                ratio=None,
                ci_low=None,
                ci_high=None,
                p_value=None,
            ),
        ],
    )
    values.update(overrides)
    return values


def test_a_check_round_trips_with_its_items(store: Store) -> None:
    check_id = store.record_check(GPU, commit(2), commit(1), **check_kwargs())
    got = store.get_check(check_id)
    assert got is not None
    assert (got.machine.key, got.head.sha, got.base.sha) == (GPU.key, sha(2), sha(1))
    assert (got.verdict, got.exit_code, got.threshold, got.baseline_ref) == ("regression", 1, 0.2, "main")
    assert got.summary == {"regression": 1, "unchanged": 1}
    assert [i.verdict for i in got.items] == ["unchanged", "regression", "new"]
    assert got.items[1].retried and got.items[1].ratio == 2.0 and got.items[1].params_key == "impl=ring"
    assert got.items[2].base_value is None
    assert got.created_at == T0
    assert store.get_check(check_id + 1000) is None


def test_a_bad_check_item_writes_nothing(store: Store) -> None:
    before = snapshot(store)
    with pytest.raises(StoreError, match=r"check item 2 of 2 .* ratio is nan"):
        store.record_check(
            GPU, commit(2), commit(1), **check_kwargs(items=[item(), item(ratio=float("nan"))])
        )
    assert snapshot(store) == before


# --- history -------------------------------------------------------------------------------------


def test_series_follow_commit_dates_not_insertion_order(store: Store) -> None:
    # commits recorded out of order; commit 3 is older than commit 2 by date
    record(store, n=1, results=suite(1.0))
    record(store, n=2, commit=commit(2, at=T0 + timedelta(days=10)), results=suite(1.2))
    record(store, n=3, commit=commit(3, at=T0 + timedelta(days=5)), results=suite(1.1))
    record(store, CPU, n=1, results=suite(5.0))
    everything = store.series()
    assert len(everything) == 16  # 8 benchmark x params on each of two machines
    gpu = [s for s in everything if s.machine_key == GPU.key]
    assert [p.sha for p in gpu[0].points] == [sha(1), sha(3), sha(2)]
    values = [p.value for p in gpu[0].points]
    assert values == sorted(values)
    assert gpu[0].latest.sha == sha(2)
    # newest two commits per series
    cut = store.series(machine=GPU.key, last=2)
    assert {tuple(p.sha for p in s.points) for s in cut} == {(sha(3), sha(2))}


def test_series_filters(store: Store) -> None:
    record(store, n=1)
    record(store, CPU, n=1)
    assert {s.impl for s in store.series(impl="ring")} == {"ring"}
    assert store.series(impl="rin") == []
    assert len(store.series(machine="h100", match="contains")) == 8
    assert store.series(machine="h100") == []
    backward = store.series(benchmark="backward", match="contains")
    assert len(backward) == 8 and all("ForwardBackward" in s.benchmark for s in backward)
    assert len(store.series(benchmark="100%_", match="contains")) == 0  # wildcards are literal
    assert len(store.series(profile="production")) == 0
    assert len(store.series(branch="main")) == 16
    assert store.distinct("impl") == ["dilated", "ring"]
    assert store.distinct("machine") == sorted([GPU.key, CPU.key])


def test_a_commit_measured_several_times_is_one_point(store: Store) -> None:
    record(store, purpose="baseline", round=0, results=suite(1.0))
    record(store, purpose="baseline", round=1, results=suite(3.0))
    record(store, purpose="head", round=0, results=suite(2.0))
    record(store, purpose="retry", round=0, results=suite(100.0))  # not part of the history
    record(store, purpose="calibrate", results=suite(100.0))
    (s,) = store.series(
        impl="dilated",
        benchmark="bench_attention.Forward.track_time",
        params_key="dtype=float32,impl=dilated,seq_len=256",
    )
    (point,) = s.points
    assert point.n_runs == 3 and point.n_samples == 60
    assert point.value == pytest.approx(result(scale=2.0).value)
    assert len(point.run_ids) == 3


def test_dirty_work_trees_and_failures_in_the_history(store: Store) -> None:
    record(store, n=1)
    dirty = CommitRecord(
        sha=f"{sha(1)}+dirty.0123456789ab", base_sha=sha(1), dirty=True, committed_at=T0 + timedelta(days=30)
    )
    failed = result(status="failed", samples=None, error="CUDA out of memory")
    store.record_run(
        GPU,
        dirty,
        profile="quick",
        software={},
        fingerprint={},
        settings={},
        started_at=T0,
        finished_at=T0,
        results=[result(scale=9.0)],
    )
    record(store, n=2, results=[failed])
    key = "dtype=float32,impl=dilated,seq_len=256"
    (clean,) = store.series(params_key=key, benchmark="bench_attention.Forward.track_time")
    assert [p.sha for p in clean.points] == [sha(1), sha(2)]
    assert clean.latest.status == "failed" and clean.latest.value is None
    assert clean.latest.error == "CUDA out of memory"
    (with_dirty,) = store.series(
        params_key=key, benchmark="bench_attention.Forward.track_time", include_dirty=True
    )
    assert with_dirty.latest.dirty and with_dirty.latest.value == pytest.approx(result(scale=9.0).value)


def test_latest_is_the_newest_point_per_implementation_and_machine(store: Store) -> None:
    record(store, n=1, results=suite(1.0))
    record(store, n=2, results=suite(2.0))
    record(store, CPU, n=1, results=suite(7.0))
    latest = store.latest(impl="dilated")
    assert len(latest) == 8
    for s in latest:
        (point,) = s.points
        assert point.sha == (sha(2) if s.machine_key == GPU.key else sha(1))
