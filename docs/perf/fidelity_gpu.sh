#!/usr/bin/env bash
# Issue 26 on one GPU, in one device call: is every gated number of a full production round the
# number of the same case measured alone in a fresh process?  Run from the repository root on the
# lent machine (wheels carried in .whl/, docs/perf/device_setup.sh):
#
#   bash docs/perf/fidelity_gpu.sh "$OUT"
#
# 1. `perfguard fidelity --profile production`: one full round, then all 27 cases alone (JSON and a
#    Markdown table of every number: 54 gated timings, peak memory, work counts, paths).
#    ALONE=REGEX measures alone only the cases it picks (--alone), SAMPLE=N spreads N over them.
# 2. With CUDA_TESTS=1: the CUDA tests of the fallbacks (tests/test_attention_fallbacks.py).
# Results into $1; a short table last.
set -u
out=${1:?usage: fidelity_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/summary.txt" 2>&1
git log -1 --format='commit %H %s' >> "$out/summary.txt" 2>&1
date -u +'date %Y-%m-%dT%H:%M:%SZ' >> "$out/summary.txt"
if [ "${CUDA_TESTS:-0}" = 1 ]; then
  t0=$SECONDS
  timeout 120 python3 -m pytest -o addopts="" -q -rs -p no:cacheprovider -m cuda tests/test_attention_fallbacks.py tests/test_held_memory.py > "$out/cuda_tests.log" 2>&1
  echo "cuda tests rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
fi
t0=$SECONDS
PERFGUARD_DB="sqlite:////tmp/fidelity.db" timeout "${FIDELITY_TIMEOUT:-$((575 - SECONDS))}" python3 -m perfguard fidelity \
  --profile production ${SAMPLE:+--sample "$SAMPLE"} ${ALONE:+--alone "$ALONE"} --json "$out/fidelity.json" --markdown "$out/fidelity.md" \
  > "$out/fidelity.log" 2>&1
echo "fidelity rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
python3 - "$out/fidelity.json" <<'PY' >> "$out/summary.txt" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
rows = [r for r in d["rows"] if r["metric"] == "time" and r["ratio"]]
print(f"cases alone {d['cases']} of {d['cases_in_round']}; seconds {d['seconds']}; disagreeing {d['disagreeing']}")
for c in d.get("costs") or []:
    print(f"cost {c['case']}: {c.get('round_s')} s, start-up+discovery {c.get('discovery_s')} s, steps {c.get('steps_s')}")
if rows:
    ratios = [r["ratio"] for r in rows]
    print(f"timings {len(rows)}: alone/round min {min(ratios):.3f} max {max(ratios):.3f}")
for r in d["rows"]:
    if r["agree"] is False:
        print("DIFFERS", r["impl"], r["benchmark"].split(".", 1)[-1], r["params_key"], r["in_round"], r["alone"], r["why"][:120])
for r in d["rows"]:
    if r["impl"] == "block_sparse_ring" and r["metric"] in ("time", "memory") and "16384" in r["params_key"]:
        print("block_sparse_ring 16K", r["benchmark"].split(".", 1)[-1], r["in_round"], r["alone"])
PY
cat "$out/summary.txt"
