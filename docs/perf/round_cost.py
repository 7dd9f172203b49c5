"""Where a round's time went, from what perfguard stores with every run (``settings.cost``).

Each round records its wall time, how many processes it took, the worker's discovery time (the
interpreter and torch imports happen before it), the seconds of every benchmark, and per measuring
step (first call, memory, work counts, capture, timing, profiler) the total over all cases.

    python docs/perf/round_cost.py sqlite:////tmp/r.db              # every run, latest last
    python docs/perf/round_cost.py URL --run 3 --markdown cost.md   # one run
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STEPS = {
    "first_call_s": "first calls (compile, autotune, cuDNN plans)",
    "memory_s": "peak memory (2 eager calls per pass)",
    "work_s": "work counts (1 call per pass under a dispatch mode)",
    "capture_s": "capture (1 eager call + CUDA-graph capture)",
    "timing_s": "timing (warm-up and samples)",
    "profile_s": "profiler breakdown (re-measurement only)",
}


def rows(cost: dict[str, Any]) -> list[tuple[str, float]]:
    steps = cost.get("steps_s") or {}
    out = [(STEPS.get(k, k), float(v)) for k, v in steps.items()]
    accounted = sum(v for _, v in out)
    benchmarks = float(cost.get("benchmarks_s") or 0.0)
    out.append(("building cases and the suite's own work", max(0.0, benchmarks - accounted)))
    out.append(
        ("worker start: interpreter, torch import, suite discovery", float(cost.get("discovery_s") or 0))
    )
    rest = float(cost.get("round_s") or 0) - benchmarks - float(cost.get("discovery_s") or 0)
    out.append(("process exit, perfguard's own work between processes", max(0.0, rest)))
    return out


def table(cost: dict[str, Any], title: str) -> str:
    total = float(cost.get("round_s") or 0)
    lines = [f"**{title}**: {total:.1f} s, {cost.get('processes', 1)} process(es)", "",
             "| phase | s | share |", "| --- | ---: | ---: |"]  # fmt: skip
    for name, value in sorted(rows(cost), key=lambda r: -r[1]):
        lines.append(f"| {name} | {value:.1f} | {100 * value / total if total else 0:.0f}% |")
    lines.append(f"| **round** | **{total:.1f}** | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--run", type=int, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    from perfguard.store import Store

    store = Store.open(args.url, migrate=False)
    try:
        from sqlalchemy import select

        from perfguard.store.models import Run

        query = select(Run.id, Run.purpose, Run.round, Run.settings).order_by(Run.id)
        with store.engine.connect() as conn:
            docs = [(i, p, r, dict(s or {})) for i, p, r, s in conn.execute(query) if args.run in (None, i)]
    finally:
        store.close()
    out = []
    totals: dict[str, float] = defaultdict(float)
    for run_id, purpose, index, settings in docs:
        cost = settings.get("cost")
        if not isinstance(cost, dict):
            continue
        out.append(table(cost, f"run {run_id} ({purpose}, round {index})"))
        for name, value in rows(cost):
            totals[name] += value
    text = "\n".join(out)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0 if out else 1


if __name__ == "__main__":
    sys.exit(main())
