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
    cost: dict[tuple[str, str], float] = {}  # both modes
    causal_cost: dict[tuple[str, str], float] = {}
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    main_runs = sorted({r[0] for r in rows})[:2]  # the two rounds of main (the check's come later)
    first_run = main_runs[0] if main_runs else None
    for run_id, benchmark, impl, key, value, info in rows:
        if run_id not in main_runs:
            continue
        values[(benchmark.rsplit(".", 1)[-1], impl, key)].append(value)
        if run_id == first_run and benchmark.endswith(("track_output_error", "track_output_error_causal")):
            # one accuracy pass per case and mode: its seconds are stored on every tensor's error
            part = json.loads(info).get("accuracy_s", 0.0)
            cost[(impl, key)] = cost.get((impl, key), 0.0) + part
            if "causal" in benchmark:
                causal_cost[(impl, key)] = part
    log = (out / "round.log").read_text(errors="replace") if (out / "round.log").exists() else ""
    wall = [float(m) for m in re.findall(r"round 1/1 done in (\d+(?:\.\d+)?) s", log)]
    total, causal = sum(cost.values()), sum(causal_cost.values())
    wall = wall or [float(w) for w in sys.argv[3:4]]  # given when OUT_DIR has no round.log
    print(
        f"accuracy pass (non-causal + causal): {total:.1f} s ({total - causal:.1f} + {causal:.1f})"
        f" over {len(cost)} cases"
        + (f" in a full round of {wall[0]:.0f} s ({100 * total / wall[0]:.1f}%)" if wall else "")
    )
    for (impl, key), s in sorted(cost.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  slowest: {impl} {key}: {s:.2f} s")
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
