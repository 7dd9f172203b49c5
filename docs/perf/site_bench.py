"""How long ``perfguard report --out`` takes on a big history, and how big the index gets.

Writes a synthetic store of ``--commits`` commits x ``--series`` series through the real models
(2 machines; 5 implementations x 5 sequence lengths x 4 benchmarks per machine for the default
200 series; 10 samples per result, ±2% noise, a few planted steps), then times ``build_site`` on
it, end to end: reading the store, step detection, rendering every page, writing the downloads.

    python docs/perf/site_bench.py                 # 1,000 commits x 200 series
    python docs/perf/site_bench.py --commits 100   # quicker

Run it from the repository root.  The store is kept (``--db``) so a second run only re-times the
rendering.  Results go in ``docs/perf/site.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from perfguard.report import build_site
from perfguard.store.models import Base, Commit, Machine, Result, ResultData, Run

IMPLS = ("dilated", "improved", "ring", "hilbert_ring", "block_sparse_ring")
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
BENCHMARKS = (
    ("bench_attention.Forward.track_time", "time", "seconds"),
    ("bench_attention.ForwardBackward.track_time", "time", "seconds"),
    ("bench_attention.PeakMemory.track_forward", "memory", "bytes"),
    ("bench_attention.PeakMemory.track_forward_backward", "memory", "bytes"),
)
MACHINES = (
    ("nvidia-h100-80gb-hbm3-x1", "NVIDIA H100 80GB HBM3 ×1"),
    ("nvidia-a100-sxm4-80gb-x1", "NVIDIA A100 ×1"),
)


def base_value(impl: str, n: int, metric: str, k: int) -> float:
    quadratic = impl in ("dilated", "improved")
    if metric == "memory":
        return float((64 if quadratic else 8192) * n * (n if quadratic else 1) * (1 + k))
    return (2e-11 * n * n if quadratic else 5e-8 * n) * (1 + 0.7 * k) + 1e-4


def series_keys(n_series: int) -> list[tuple[str, str, str, str, int]]:
    per_machine = n_series // len(MACHINES)
    return [(b, m, u, impl, n) for b, m, u in BENCHMARKS for impl in IMPLS for n in SEQ_LENS][:per_machine]


def planted_steps(n_commits: int, n_series: int, seed: int = 0) -> list[tuple[int, int, float]]:
    """(series index, first commit of the new level, factor); the same on both machines."""
    rng = random.Random(seed)
    n_keys = len(series_keys(n_series))
    return [
        (rng.randrange(n_keys), rng.randrange(n_commits // 4, n_commits), rng.choice((1.3, 0.8)))
        for _ in range(6)
    ]


def build_store(path: Path, n_commits: int, n_series: int, seed: int = 0) -> None:
    """A history of ``n_commits`` x ``n_series`` results with samples, written in bulk."""
    rng = random.Random(seed + 1)
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    keys = series_keys(n_series)
    steps = planted_steps(n_commits, n_series, seed)
    with Session(engine) as session, session.begin():
        machines = [
            Machine(key=k, kind="cuda", label=lbl, attributes={}, first_seen=t0) for k, lbl in MACHINES
        ]
        commits = [
            Commit(
                sha=f"{i:08x}" + "ab" * 16,
                base_sha=f"{i:08x}" + "ab" * 16,
                branch="main",
                parents=[],
                subject=f"commit {i}: change something in the attention kernels",
                author="dev",
                committed_at=t0 + timedelta(hours=6 * i),
            )
            for i in range(n_commits)
        ]
        session.add_all(machines + commits)
        session.flush()
        runs = []
        for m in machines:
            for i, c in enumerate(commits):
                runs.append(
                    {
                        "machine_id": m.id,
                        "commit_id": c.id,
                        "profile": "production",
                        "purpose": "run",
                        "round": 0,
                        "software": {"torch": "2.13.0", "cuda": "12.8", "driver": "570.86"},
                        "fingerprint": {},
                        "settings": {},
                        "command": "perfguard run",
                        "started_at": t0 + timedelta(hours=6 * i, minutes=5),
                        "finished_at": t0 + timedelta(hours=6 * i, minutes=50),
                        "status": "complete",
                    }
                )
        run_ids = session.scalars(insert(Run).returning(Run.id), runs).all()
        results: list[dict[str, Any]] = []
        data: list[list[float]] = []
        for r_index, run_id in enumerate(run_ids):
            m_index, i = divmod(r_index, n_commits)
            for s_index, (bench, metric, unit, impl, n) in enumerate(keys):
                level = base_value(impl, n, metric, BENCHMARKS.index((bench, metric, unit)) % 2 + m_index)
                for s, at, factor in steps:
                    if s == s_index and i >= at:
                        level *= factor
                if metric == "memory":
                    samples = [level] * 3
                else:
                    samples = [level * (1 + rng.gauss(0, 0.02)) for _ in range(10)]
                ordered = sorted(samples)
                params = {"impl": impl, "seq_len": n, "dtype": "bfloat16"}
                data.append(samples)
                results.append(
                    {
                        "run_id": run_id,
                        "benchmark": bench,
                        "impl": impl,
                        "params": params,
                        "params_key": f"dtype=bfloat16,impl={impl},seq_len={n}",
                        "metric": metric,
                        "unit": unit,
                        "direction": "lower",
                        "gated": True,
                        "status": "ok",
                        "value": ordered[len(ordered) // 2],
                        "n_samples": len(samples),
                        "q25": ordered[len(ordered) // 4],
                        "q75": ordered[3 * len(ordered) // 4],
                        "method": "cuda-graph" if metric == "time" else None,
                        "error": None,
                        "benchmark_version": "1",
                    }
                )
            if len(results) >= 20_000:
                _insert_results(session, results, data)
                results, data = [], []
        if results:
            _insert_results(session, results, data)
    engine.dispose()


def _insert_results(session: Session, results: list[dict[str, Any]], samples: list[list[float]]) -> None:
    """Results and their samples (``result_data``), in bulk."""
    ids = session.scalars(insert(Result).returning(Result.id, sort_by_parameter_order=True), results).all()
    session.execute(
        insert(ResultData),
        [{"result_id": rid, "samples": s, "info": {}} for rid, s in zip(ids, samples, strict=True)],
    )


def _cpu_seconds() -> float:
    """User + system time of this process and its finished children (the step-fit workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--db", type=Path, default=None, help="store to (re)use; default: a temp file")
    parser.add_argument("--out", type=Path, default=None, help="site directory; default: a temp dir")
    parser.add_argument("--workers", type=int, default=None, help="processes for step detection")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="perfguard-site-bench-"))
    db = args.db or tmp / f"history-{args.commits}x{args.series}.db"
    if not db.exists():
        started = time.perf_counter()
        build_store(db, args.commits, args.series)
        size = db.stat().st_size / 2**20
        print(f"store: {db} ({size:.0f} MiB) written in {time.perf_counter() - started:.1f} s")
    out = args.out or tmp / "site"
    load_before = os.getloadavg()[0]
    cpu_before = _cpu_seconds()
    summary = build_site(f"sqlite:///{db}", out, workers=args.workers)
    cpu = _cpu_seconds() - cpu_before
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # Did the step marks find the planted steps, and nothing else?
    keys = series_keys(args.series)
    planted = {
        (bench, f"dtype=bfloat16,impl={impl},seq_len={n}", f"{at:08x}")
        for s, at, _ in planted_steps(args.commits, args.series)
        for bench, _, _, impl, n in [keys[s]]
    }
    doc = json.loads((out / "data" / "history.json").read_text(encoding="utf-8"))
    found = [
        (s["benchmark"], s["params_key"], m["sha"][:8])
        for s in doc["series"]
        for m in s["marks"]
        if m["source"] == "step"
    ]
    record = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpu_seconds": round(cpu, 2),
        "commits": summary.commits,
        "series": summary.series,
        "points": summary.points,
        "pages": summary.pages,
        "seconds": round(summary.seconds, 2),
        "index_bytes": summary.index_bytes,
        "total_bytes": summary.total_bytes,
        "step_marks": summary.step_marks,
        "planted_steps": len(planted) * len(MACHINES),
        "planted_steps_found": sum(1 for f in found if f in planted),
        "step_marks_not_planted": sum(1 for f in found if f not in planted),
        "peak_rss_mib": round(peak_rss),
        "out": str(out),
    }
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
