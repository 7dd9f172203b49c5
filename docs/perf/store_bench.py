"""Benchmark of the history store: the queries ``perfguard check`` and the history need, at 100k results.

Fills a store (SQLite file by default, or any ``--url``) with a realistic history — several machine
keys, ~120 commits, ~200 benchmark x params series per machine, 20-100 samples per result, plus
some check-style runs (baseline / head rounds / retries) — and times, in this process:

* the check side: ``Store.open`` (schema check), ``has_complete_run`` / ``runs_for`` /
  ``results_for`` for the merge-base and HEAD on one machine key and profile, ``record_check``
  with one item per benchmark x params, and ``get_check``;
* the history side: one series (all commits), one implementation (newest 20 commits per series),
  every series (newest 20), ``latest`` everywhere, and every series with every point.

Each query is run ``--repeat`` times; the first (cold) and the median wall time are reported, and
the median CPU time of this process (on a shared, loaded machine the CPU time is the steadier
number; for PostgreSQL it leaves out the server's own work).  With
``--explain`` the exact SQL each call sent (captured from the engine) is run again under
``EXPLAIN QUERY PLAN`` (SQLite) or ``EXPLAIN (ANALYZE, BUFFERS)`` (PostgreSQL).

Usage (from the repository root)::

    python docs/perf/store_bench.py                                  # temporary SQLite file
    python docs/perf/store_bench.py --url sqlite:///tmp/bench.db     # kept; refilled only if short
    python docs/perf/store_bench.py --url postgresql://user:pw@127.0.0.1:5432/bench --explain

Results and the machine they were measured on: ``docs/perf/store.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import event, func, select

from perfguard.store import (
    CheckItemRecord,
    CommitRecord,
    MachineRecord,
    ResultRecord,
    Store,
)
from perfguard.store.models import Commit, Result

PROFILE = "production"
IMPLS = (
    "dilated",
    "improved",
    "ring",
    "hilbert_ring",
    "block_sparse_ring",
    "multihead_dilated",
    "multihead_improved",
    "multihead_ring",
    "multihead_block_sparse_ring",
)
SEQ_LENS = (1024, 2048, 4096, 8192)
# (asv name, metric, unit, direction, gated)
BENCHMARKS = (
    ("bench_attention.Forward.track_time", "time", "seconds", "lower", True),
    ("bench_attention.ForwardBackward.track_time", "time", "seconds", "lower", True),
    ("bench_attention.PeakMemory.track_forward", "memory", "bytes", "lower", True),
    ("bench_attention.PeakMemory.track_forward_backward", "memory", "bytes", "lower", True),
    ("bench_attention.Throughput.track_tokens_per_second", "throughput", "tokens/s", "higher", False),
    ("bench_attention.Throughput.track_tflops", "efficiency", "TFLOP/s", "higher", False),
)
MACHINES = (
    MachineRecord(key="NVIDIA H100 80GB HBM3 x1", kind="cuda", label="H100", attributes={"sm": 132}),
    MachineRecord(key="NVIDIA H200 x1", kind="cuda", label="H200", attributes={"sm": 132}),
    MachineRecord(key="NVIDIA A100-SXM4-80GB x1", kind="cuda", label="A100", attributes={"sm": 108}),
    MachineRecord(key="NVIDIA L4 x1", kind="cuda", label="L4", attributes={"sm": 58}),
)
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def sha(n: int) -> str:
    return hashlib.sha1(f"commit {n}".encode()).hexdigest()


def commit(n: int) -> CommitRecord:
    return CommitRecord(
        sha=sha(n),
        base_sha=sha(n),
        committed_at=T0 + timedelta(hours=7 * n),
        branch="main",
        parents=[sha(n - 1)] if n else [],
        subject=f"Change number {n}",
        author="Dev <dev@example.com>",
    )


def run_results(rng: random.Random, machine_index: int, n: int) -> list[ResultRecord]:
    """One run's results: every impl x seq_len x benchmark (216), realistic values and samples."""
    results = []
    speed = (1.0, 0.8, 1.9, 3.5)[machine_index]
    drift = 1.0 + 0.002 * n
    for impl_index, impl in enumerate(IMPLS):
        for seq_len in SEQ_LENS:
            params = {"impl": impl, "seq_len": seq_len, "dtype": "bfloat16"}
            base_time = 1e-4 * speed * (1 + impl_index / 4) * (seq_len / 1024) ** 1.3 * drift
            for name, metric, unit, direction, gated in BENCHMARKS:
                samples: list[float] | None
                if metric == "time":
                    t = base_time * (3.0 if "Backward" in name else 1.0)
                    samples = [t * rng.lognormvariate(0, 0.02) for _ in range(rng.randint(20, 100))]
                    info = {"warmup_s": 1.0, "eager_median": t * 1.4, "nvml": [{"sm_clock": 1980}]}
                elif metric == "memory":
                    per_token = 4 if "backward" in name else 2
                    samples = [float(2**20 * seq_len * per_token * (1 + impl_index % 3))]
                    info = {}
                else:
                    factor = 1e7 if metric == "throughput" else 50.0
                    samples = [factor / base_time * 1e-4 * rng.lognormvariate(0, 0.02) for _ in range(20)]
                    info = {}
                results.append(
                    ResultRecord(
                        benchmark=name,
                        impl=impl,
                        params=params,
                        metric=metric,
                        unit=unit,
                        direction=direction,
                        gated=gated,
                        samples=samples,
                        method="cuda-graph" if metric == "time" else None,
                        info=info,
                        benchmark_version="5f2a9c01",
                    )
                )
    return results


def count_results(store: Store) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Result)).scalar_one()


def fill(store: Store, target: int) -> tuple[int, float]:
    """Regular runs of every commit on every machine, plus check-style runs on the H100."""
    rng = random.Random(20260105)
    per_run = len(IMPLS) * len(SEQ_LENS) * len(BENCHMARKS)
    n_commits = -(-target // (per_run * len(MACHINES)))
    started = time.perf_counter()
    written = 0
    for n in range(n_commits):
        for machine_index, machine in enumerate(MACHINES):
            purpose = "baseline" if n % 10 == 0 else "run"
            at = T0 + timedelta(hours=7 * n, minutes=10 * machine_index)
            store.record_run(
                machine,
                commit(n),
                profile=PROFILE,
                purpose=purpose,
                software={"torch": "2.13.0", "cuda": "12.8", "driver": "570.86"},
                fingerprint={"gpu": machine.label, "hostname": f"runner-{machine_index}"},
                settings={"sdpa": "flash", "tf32": False},
                command="perfguard run --profile production",
                started_at=at,
                finished_at=at + timedelta(minutes=25),
                results=run_results(rng, machine_index, n),
            )
            written += per_run
        if n % 10 == 0:
            print(f"  filled {written} results ({n + 1}/{n_commits} commits)", file=sys.stderr, flush=True)
    return written, time.perf_counter() - started


@contextmanager
def captured_sql(store: Store) -> Iterator[list[tuple[str, Any]]]:
    statements: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statements.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        yield statements
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, float, Any]:
    """(first wall time, median wall time, median CPU time of this process, last value)."""
    times = []
    cpu = []
    value = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        value = fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return times[0], statistics.median(times), statistics.median(cpu), value


def explain(store: Store, statement: str, parameters: Any) -> str:
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
            return "\n".join(row[-1] for row in rows)
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).all()
        return "\n".join(row[0] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--results", type=int, default=100_000, help="results to fill (default 100000)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--explain", action="store_true", help="print the query plans")
    args = parser.parse_args()

    scratch = None
    url = args.url
    if url is None:
        scratch = tempfile.TemporaryDirectory()
        url = f"sqlite:///{Path(scratch.name) / 'bench.db'}"
    store = Store.open(url)
    have = count_results(store)
    print(f"store: {store.url} ({have} results)", file=sys.stderr)
    if have < args.results:
        written, seconds = fill(store, args.results - have)
        print(f"filled {written} results in {seconds:.1f} s ({written / seconds:.0f}/s)", file=sys.stderr)
    total = count_results(store)
    store.close()

    with Store.open(url) as probe, probe.engine.connect() as conn:
        n_commits = conn.execute(select(func.count()).select_from(Commit)).scalar_one()
    head, base = sha(n_commits - 1), sha(max(0, n_commits - 11))
    machine = MACHINES[0].key

    rows: list[tuple[str, float, float, float, str]] = []
    plans: list[tuple[str, str]] = []

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    t = time.perf_counter()
    store = Store.open(url)
    rows.append(("Store.open (schema check, fresh engine)", time.perf_counter() - t, math.nan, math.nan, ""))

    def check_side() -> Any:
        out = []
        for commit_sha in (base, head):
            out.append(store.has_complete_run(machine, commit_sha, PROFILE))
            out.append(store.runs_for(machine, commit_sha, PROFILE))
            out.append(store.results_for(machine, commit_sha, PROFILE))
        return out

    def results_pair() -> Any:
        return [store.results_for(machine, s, PROFILE) for s in (base, head)]

    base_results = store.results_for(machine, base, PROFILE)
    items = [
        CheckItemRecord(
            benchmark=group[0].benchmark,
            impl=group[0].impl,
            params=group[0].params,
            metric=group[0].metric,
            unit=group[0].unit,
            direction=group[0].direction,
            gated=group[0].gated,
            verdict="unchanged",
            threshold=0.2,
            base_value=group[0].value,
            head_value=group[0].value,
            ratio=1.0,
            ci_low=0.99,
            ci_high=1.01,
            p_value=0.5,
            noise=0.01,
            base_n=group[0].n_samples,
            head_n=group[0].n_samples,
        )
        for group in base_results.values()
    ]
    check_ids: list[int] = []

    def record_check() -> int:
        check_id = store.record_check(
            MACHINES[0],
            commit(n_commits - 1),
            commit(n_commits - 11),
            baseline_ref="main",
            profile=PROFILE,
            threshold=0.2,
            verdict="pass",
            exit_code=0,
            summary={"unchanged": len(items)},
            environment={},
            config={"threshold": 0.2},
            items=items,
        )
        check_ids.append(check_id)
        return check_id

    cases: list[tuple[str, Callable[[], Any], Callable[[Any], str]]] = [
        (
            "check: has_complete_run + runs_for + results_for, base and head",
            check_side,
            lambda v: f"{len(v[2])} + {len(v[5])} groups",
        ),
        (
            "check: results_for(base) + results_for(head), with samples",
            results_pair,
            lambda v: f"{sum(len(g) for g in v[0].values())} + {sum(len(g) for g in v[1].values())} results",
        ),
        (
            "check: record_check with one item per benchmark x params",
            record_check,
            lambda v: f"{len(items)} items",
        ),
        ("check: get_check", lambda: store.get_check(check_ids[-1]), lambda v: f"{len(v.items)} items"),
        (
            "history: one series, every commit",
            lambda: store.series(
                machine=machine,
                benchmark=BENCHMARKS[0][0],
                params_key="dtype=bfloat16,impl=ring,seq_len=4096",
            ),
            lambda v: f"{len(v[0].points)} points",
        ),
        (
            "history: one implementation, newest 20 commits per series",
            lambda: store.series(impl="ring", last=20),
            lambda v: f"{len(v)} series, {sum(len(s.points) for s in v)} points",
        ),
        (
            "history: perfguard history default (every series, newest 20)",
            lambda: store.series(last=20),
            lambda v: f"{len(v)} series, {sum(len(s.points) for s in v)} points",
        ),
        (
            "history: latest value of every series (site index)",
            lambda: store.latest(),
            lambda v: f"{len(v)} series",
        ),
        (
            "history: every series, every point (whole site)",
            lambda: store.series(),
            lambda v: f"{len(v)} series, {sum(len(s.points) for s in v)} points",
        ),
    ]
    for name, fn, describe in cases:
        with captured_sql(store) as statements:
            first, median, cpu, value = timed(fn, args.repeat)
        rows.append((name, first, median, cpu, describe(value)))
        if args.explain and statements:
            seen = set()
            for statement, parameters in statements:
                if statement in seen:
                    continue
                seen.add(statement)
                plans.append((f"{name}\n\n{statement.strip()}", explain(store, statement, parameters)))

    check_rows = [r for r in rows if r[0].startswith("check: ") and "results_for(base) +" not in r[0]]
    check_wall, check_cpu = sum(r[2] for r in check_rows), sum(r[3] for r in check_rows)
    print(f"\nstore: {store.url} ({store.dialect}); {total} results; python {platform.python_version()}")
    print(f"repeat {args.repeat}; check side = base {base[:10]} vs head {head[:10]} on {machine!r}")
    print(f"load average before the queries: {load_before}\n")
    print("| query | first (s) | median (s) | median CPU here (s) | returned |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, first, median, cpu, returned in rows:
        median_text = "" if math.isnan(median) else f"{median:.3f}"
        cpu_text = "" if math.isnan(cpu) else f"{cpu:.3f}"
        print(f"| {name} | {first:.3f} | {median_text} | {cpu_text} | {returned} |")
    print(
        "\ncheck-side store work per check (medians, open excluded): "
        f"{check_wall:.3f} s wall, {check_cpu:.3f} s CPU"
    )
    for title, plan in plans:
        print(f"\n---- {title}\n{plan}")
    store.close()
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
