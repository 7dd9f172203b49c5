"""The table of docs/perf/accuracy_gpu.sh: accuracy cost per round, spread across rounds, planted verdicts.

python docs/perf/accuracy_report.py STORE.db OUT_DIR [ROUND_SECONDS]
  (OUT_DIR holds round.log and check.json; ROUND_SECONDS: the full round's wall time when it has no round.log)
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def main(db: str, out: Path) -> None:
    con = sqlite3.connect(db)
    rows = con.execute(
        "select r.run_id, r.benchmark, r.impl, r.params_key, r.value, d.info from results r "
        "join result_data d on d.result_id = r.id where r.benchmark like '%Accuracy.%' and r.status = 'ok'"
    ).fetchall()
    # per stored round: each case's accuracy pass, non-causal and causal (one pass per case and mode;
    # its seconds are stored on every tensor's error, read here from the output error's)
    costs: dict[int, dict[tuple[str, str, bool], float]] = defaultdict(dict)
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    main_runs = sorted({r[0] for r in rows})[:2]  # the two rounds of main (the check's come later)
    for run_id, benchmark, impl, key, value, info in rows:
        if benchmark.endswith(("track_output_error", "track_output_error_causal")):
            costs[run_id][(impl, key, "causal" in benchmark)] = json.loads(info).get("accuracy_s", 0.0)
        if run_id in main_runs:
            values[(benchmark.rsplit(".", 1)[-1], impl, key)].append(value)
    log = (out / "round.log").read_text(errors="replace") if (out / "round.log").exists() else ""
    walls = [float(m) for m in re.findall(r"round 1/1 done in (\d+(?:\.\d+)?) s", log)]
    walls = walls or [float(w) for w in sys.argv[3:]]  # given when OUT_DIR has no round.log
    for n, run_id in enumerate(sorted(costs)):
        cost = costs[run_id]
        causal = sum(v for (_, _, c), v in cost.items() if c)
        total = sum(cost.values())
        wall = walls[n] if n < len(walls) else None
        cases = len({(i, k) for i, k, _ in cost})
        print(
            f"round {n + 1}: accuracy pass {total:.1f} s"
            f" (non-causal {total - causal:.1f} + causal {causal:.1f})"
            f" over {cases} cases"
            + (f" in a full round of {wall:.0f} s ({100 * total / wall:.1f}%)" if wall else "")
        )
        for (impl, key, c), v in sorted(cost.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  slowest: {impl} {key}{' causal' if c else ''}: {v:.2f} s")
    spreads = [(max(v) / min(v), k) for k, v in values.items() if len(v) > 1 and min(v) > 0]
    if spreads:
        worst = max(spreads)
        same = sum(1 for s, _ in spreads if s == 1.0)
        print(f"errors in two fresh rounds: {same} of {len(spreads)} identical; ", end="")
        print(f"largest spread x{worst[0]:.4f} ({worst[1]})")
    check = out / "check.json"
    if check.exists():
        doc = json.loads(check.read_text())
        print("planted check exit", doc.get("exit_code", doc.get("summary", {}).get("exit_code")))
        for item in doc["items"]:
            if item.get("metric") == "error" and item["verdict"] not in ("unchanged", "not affected"):
                what = f"{item['impl']} {item['benchmark'].rsplit('.', 1)[-1]} {item['params_key']}"
                change = f"{item['base_value']:.2e} -> {item['head_value']:.2e}"
                print(f"  {item['verdict']}: {what} x{item['ratio']:.2f} ({change})")
    errors = defaultdict(list)
    for (bench, impl, key), v in values.items():
        if bench == "track_output_error":
            length = dict(part.split("=", 1) for part in key.split(","))["seq_len"]
            errors[impl].append(f"{length}: {min(v):.2e}")
    for impl, vals in sorted(errors.items()):
        print(f"  output error {impl}: {' '.join(sorted(vals))}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
