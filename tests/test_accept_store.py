"""The store's acceptances and change points, on SQLite and a real PostgreSQL server.

Each write is one transaction validated before it starts (one bad record: nothing written), a
repeated write is idempotent (the baseline workflow may run twice for one commit), and a trusted
acceptance recorded at a flagged commit accepts the steps it covers, within its ceiling only.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from perfguard.errors import StoreError
from perfguard.store import (
    AcceptanceRecord,
    ChangePointRecord,
    CommitRecord,
    MachineRecord,
    ResultRecord,
    Store,
)

T0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
MACHINE = MachineRecord(key="NVIDIA H100 80GB HBM3 x1", kind="cuda", label="H100")
OPS = "bench_attention.Work.track_forward_ops"
FWD = "bench_attention.Forward.track_time"


def commit(n: int) -> CommitRecord:
    sha = f"{n:040x}"
    return CommitRecord(sha=sha, base_sha=sha, committed_at=T0 + timedelta(hours=n), subject=f"commit {n}")


def acceptance(**changes: object) -> AcceptanceRecord:
    base = AcceptanceRecord(impl="dilated", benchmark="Work.*", ceiling=2.1, reason="exact pass",
                            source="command", author="Mae", trusted=True)  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def step(benchmark: str, ratio: float, **changes: object) -> ChangePointRecord:
    base = ChangePointRecord(benchmark=benchmark, impl="dilated", params={"impl": "dilated", "seq_len": 4096},
                             metric="ops" if benchmark == OPS else "time",
                             unit="aten ops" if benchmark == OPS else "seconds", direction="lower",
                             before=100.0, after=100.0 * ratio, ratio=ratio, threshold=0.2,
                             reason=f"{ratio:.2f}x", cause="driver 550.54 → 560.28",
                             software_changes={"driver": ["550.54", "560.28"]})  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = (
        f"sqlite:///{tmp_path / 'history.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    opened = Store.open(url)
    request.addfinalizer(opened.close)
    return opened


def test_acceptances_round_trip_idempotently(store: Store) -> None:
    [first] = store.record_acceptances(commit(1), [acceptance(params={"seq_len": "4096"}, metric="ops")])
    assert (first.sha, first.params, first.metric, first.ceiling) == (
        commit(1).sha,
        {"seq_len": "4096"},
        "ops",
        2.1,
    )
    assert first.created_at.tzinfo is not None
    [again] = store.record_acceptances(commit(1), [acceptance(params={"seq_len": "4096"}, metric="ops")])
    assert again.id == first.id
    store.record_acceptances(commit(2), [acceptance(trusted=False, source="trailer", author="pr <p@x>")])
    store.record_acceptances(
        commit(3), [acceptance(source="trailer", approved_by="maint", reason="approved")]
    )
    assert len(store.acceptances()) == 3
    assert [a.reason for a in store.acceptances([commit(2).sha, commit(3).sha], trusted_only=True)] == [
        "approved"
    ]
    assert [a.sha for a in store.acceptances([commit(1).sha])] == [commit(1).sha]


def test_one_bad_acceptance_writes_nothing(store: Store) -> None:
    for bad, message in (
        ({"ceiling": 1.0}, "accepts nothing"),
        ({"ceiling": float("inf")}, "accepts nothing"),
        ({"ceiling": True}, "must be a number"),
        ({"reason": " "}, "reason is empty"),
        ({"source": "trailer"}, "trusted only with the maintainer who approved it"),
        ({"source": "label"}, "acceptance source"),
        ({"metric": "speed"}, "acceptance metric"),
        ({"params": {"seq_len": 4096}}, "non-empty globs"),
        ({"impl": "x" * 129}, "at most 128"),
    ):
        with pytest.raises(StoreError, match=message) as caught:
            store.record_acceptances(commit(1), [acceptance(), acceptance(**bad)])
        assert "nothing was written" in caught.value.message
    assert store.acceptances() == []


def test_change_points_upsert_and_accept_within_the_ceiling(store: Store) -> None:
    stored = store.record_change_points(MACHINE, commit(5), commit(4), profile="production",
                                        points=[step(OPS, 2.0), step(FWD, 2.3)])  # fmt: skip
    assert [p.flagged for p in stored] == [True, True]
    assert stored[0].previous_sha == commit(4).sha and stored[0].subject == "commit 5"
    assert stored[0].software_changes == {"driver": ["550.54", "560.28"]} and stored[0].cause.startswith(
        "driver"
    )
    # found again (a re-run of the baseline workflow): one row per series, values updated
    again = store.record_change_points(MACHINE, commit(5), commit(4), profile="production",
                                       points=[step(OPS, 2.0, reason="again")])  # fmt: skip
    assert again[0].id == stored[0].id and again[0].reason == "again"
    assert len(store.change_points(machine_key=MACHINE.key)) == 2
    # a maintainer accepts the step after the fact: the ops step (2.0 <= 2.1) is covered, the time
    # step is outside the scope (Work.*); a ceiling below the step accepts nothing
    store.record_acceptances(commit(5), [acceptance(ceiling=1.5, reason="too low")])
    assert len(store.change_points(flagged_only=True)) == 2
    [accepted] = store.record_acceptances(commit(5), [acceptance()])
    flagged = store.change_points(flagged_only=True)
    assert [p.benchmark for p in flagged] == [FWD]
    [ops] = store.change_points(benchmark=OPS)
    assert ops.acceptance is not None and ops.acceptance.id == accepted.id and not ops.flagged
    # an untrusted acceptance never accepts a step
    store.record_acceptances(
        commit(5), [acceptance(benchmark="*", ceiling=9, trusted=False, source="trailer")]
    )
    assert [p.benchmark for p in store.change_points(flagged_only=True)] == [FWD]
    # a re-run keeps the acceptance it had
    store.record_change_points(MACHINE, commit(5), commit(4), profile="production", points=[step(OPS, 2.0)])
    assert not store.change_points(benchmark=OPS)[0].flagged
    # filters
    assert store.change_points(sha=commit(4).sha) == []
    assert {p.benchmark for p in store.change_points(sha=commit(5).sha)} == {OPS, FWD}
    assert store.change_points(machine_key="cpu:other") == []


def test_a_bad_change_point_writes_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="after is nan, not a finite number"):
        store.record_change_points(MACHINE, commit(5), commit(4), profile="production",
                                   points=[step(OPS, 2.0), step(FWD, float("nan"))])  # fmt: skip
    with pytest.raises(StoreError, match="metric is 'speed'"):
        store.record_change_points(MACHINE, commit(5), commit(4), profile="production",
                                   points=[step(OPS, 2.0, metric="speed")])  # fmt: skip
    assert store.change_points() == [] and store.machines() == []
    assert store.record_change_points(MACHINE, commit(5), commit(4), profile="production", points=[]) == []


def test_measured_shas_answers_in_one_query(store: Store) -> None:
    result = ResultRecord(benchmark=OPS, impl="dilated", params={"impl": "dilated"}, metric="ops",
                          unit="aten ops", direction="lower", gated=True, value=433.0)  # fmt: skip
    for n in (1, 3):
        store.record_run(MACHINE, commit(n), profile="production", software={}, fingerprint={}, settings={},
                         started_at=T0, finished_at=T0, results=[result])  # fmt: skip
    shas = [commit(n).sha for n in range(5)]
    assert store.measured_shas(MACHINE.key, "production", shas) == {commit(1).sha, commit(3).sha}
    assert store.measured_shas(MACHINE.key, "quick", shas) == set()
    assert store.measured_shas("cpu:other", "production", shas) == set()
    assert store.measured_shas(MACHINE.key, "production", []) == set()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_writers_at_the_same_moment_store_each_acceptance_and_step_once(db_url: str) -> None:
    """Issue 27: 6 writers record the same 15 acceptances and 15 steps of one commit at once (the
    baseline workflow re-run, two runners): none fails, and each is stored once."""
    Store.open(db_url).close()  # the schema, before the writers race
    writers = 6
    records = [acceptance(reason=f"reason {k}", ceiling=1.5 + k / 10) for k in range(15)]
    points = [
        step(OPS, 2.0, params={"impl": "dilated", "seq_len": 512 * (k + 1)}, params_key="") for k in range(15)
    ]
    barrier = threading.Barrier(writers)
    errors: list[StoreError] = []

    def write() -> None:
        with Store.open(db_url) as store:
            barrier.wait()
            for point, record in zip(points, records, strict=True):
                try:
                    store.record_change_points(MACHINE, commit(5), commit(4), profile="production",
                                               points=[point])  # fmt: skip
                except StoreError as exc:  # every writer's failures are reported below
                    errors.append(exc)
                try:
                    store.record_acceptances(commit(5), [record])
                except StoreError as exc:
                    errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with Store.open(db_url) as store:
        assert len(store.acceptances()) == 15
        stored = store.change_points()
    assert len(stored) == 15 and all(p.acceptance is not None for p in stored)


def test_the_migration_merges_acceptances_stored_twice(db_url: str) -> None:
    """A store written before 0004 may hold the same acceptance twice: the upgrade keeps the oldest,
    points its change points at it, and gives it the identity new writes compute."""
    import sqlalchemy as sa
    from alembic import command

    from perfguard.store.acceptances import acceptance_identity
    from perfguard.store.schema import alembic_config

    record = acceptance(params={"seq_len": "512"})
    with Store.open(db_url) as store:
        [first] = store.record_acceptances(commit(5), [record, acceptance(reason="another")])[:1]
        store.record_change_points(
            MACHINE, commit(5), commit(4), profile="production", points=[step(OPS, 2.0)]
        )
        config = alembic_config()
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0003")
            columns = ("commit_id, impl, benchmark, metric, params, ceiling, reason, source, author, "
                       "approved_by, trusted, created_at")  # fmt: skip
            conn.execute(
                sa.text(
                    f"INSERT INTO acceptances ({columns}) SELECT {columns} FROM acceptances "
                    f"WHERE id = {first.id}"
                )
            )  # fmt: skip  (the same, stored twice)
            twice = max(conn.execute(sa.text("SELECT id FROM acceptances")).scalars())
            conn.execute(sa.text(f"UPDATE change_points SET acceptance_id = {twice}"))
    with Store.open(db_url) as store:
        assert store.migrated_from == "0003"
        assert sorted((a.id, a.reason) for a in store.acceptances()) == [
            (first.id, "exact pass"), (first.id + 1, "another")
        ]  # fmt: skip
        [point] = store.change_points()
        assert point.acceptance is not None and point.acceptance.id == first.id
        [again] = store.record_acceptances(commit(5), [record])
        assert again.id == first.id  # the identity the migration computed is the one writes compute
        with store.engine.connect() as conn:
            identity = conn.execute(
                sa.text(f"SELECT identity FROM acceptances WHERE id = {first.id}")
            ).scalar()
    assert identity == acceptance_identity(record)
