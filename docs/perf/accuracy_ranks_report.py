"""The table of docs/perf/accuracy_ranks.sh: each error of the distributed suite at each number of
ranks (growth over the fewest), what the accuracy pass cost, and the planted check's verdicts.

python docs/perf/accuracy_ranks_report.py STORE.db OUT_DIR   (OUT_DIR holds check.json)
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def main(db: str, out: Path) -> None:
    con = sqlite3.connect(db)
    rows = con.execute(
        "select m.key, r.benchmark, r.impl, r.params_key, r.value, r.status, d.info, u.purpose "
        "from results r "
        "join result_data d on d.result_id = r.id join runs u on u.id = r.run_id "
        "join machines m on m.id = u.machine_id where r.benchmark like 'bench_distributed.Accuracy.%'"
    ).fetchall()
    errors: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    cost: dict[int, float] = defaultdict(float)
    skipped = set()
    for key, benchmark, impl, params, value, status, info, purpose in rows:
        if purpose != "run":
            continue
        n = int(key.rsplit("ranks=", 1)[1])
        if status != "ok":
            skipped.add((n, impl, params, status))
            continue
        name = benchmark.rsplit(".", 1)[1].removeprefix("track_")
        errors[(impl, params, name)][n] = value
        if name in ("output_error", "output_error_causal"):
            cost[n] += json.loads(info).get("accuracy_s", 0.0)
    ns = sorted({n for by_n in errors.values() for n in by_n})
    print("accuracy pass per N (both passes, summed over the cases): "
          + ", ".join(f"N = {n}: {cost[n]:.1f} s" for n in ns))  # fmt: skip
    print("| implementation | params | error | " + " | ".join(f"N = {n}" for n in ns) + " |")
    print("| --- | --- | --- |" + " ---: |" * len(ns))
    for (impl, params, name), by_n in sorted(errors.items()):
        first = by_n[min(by_n)]
        cells = [f"{by_n[n]:.2e} (x{by_n[n] / first:.2f})" if n in by_n else "–" for n in ns]
        print(f"| {impl} | {params} | {name} | " + " | ".join(cells) + " |")
    for n, impl, params, status in sorted(skipped):
        print(f"not ok at N = {n}: {impl} {params}: {status}")
    check = out / "check.json"
    if check.exists():
        doc = json.loads(check.read_text())
        counts = defaultdict(int)
        for item in doc["items"]:
            if item.get("metric") == "error":
                counts[item["verdict"]] += 1
                if item["verdict"] not in ("unchanged", "not affected"):
                    what = f"{item['impl']} {item['benchmark'].rsplit('.', 1)[-1]} {item['params_key']}"
                    change = f"{item['base_value']:.2e} -> {item['head_value']:.2e}"
                    print(f"  {item['verdict']}: {what} x{item['ratio']:.2f} ({change})")
        print("planted check, accuracy verdicts:", dict(counts))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
