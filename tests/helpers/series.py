"""Store measured series through the real store, so that ``perfguard accept`` has names to check."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

MACHINE = MachineRecord(key="cpu:Series CPU", kind="cpu", label="Series CPU")


def store_series(db: str, sha: str, series: Iterable[tuple[str, str]]) -> None:
    """One trusted run of commit ``sha`` with one forward time per (implementation, benchmark)."""
    now = datetime.now(timezone.utc)
    results = [
        ResultRecord(
            benchmark=benchmark,
            impl=impl,
            params={"impl": impl, "seq_len": 512},
            metric="time",
            unit="seconds",
            direction="lower",
            gated=True,
            samples=[1e-3] * 5,
            method="cpu-time",
        )
        for impl, benchmark in series
    ]
    with Store.open(db) as store:
        store.record_run(
            MACHINE,
            CommitRecord(sha=sha, base_sha=sha, branch="main", subject="measured", committed_at=now),
            profile="quick",
            purpose="run",
            software={},
            fingerprint={},
            settings={},
            started_at=now,
            finished_at=now,
            results=results,
            trusted=True,
        )
