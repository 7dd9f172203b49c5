#!/usr/bin/env bash
# Issue 26: why multihead_block_sparse_ring at 4096 tokens does not finish its first
# forward+backward alone (docs/perf/fidelity.md), then the cases fidelity has not measured alone yet.
#   bash docs/perf/probe_gpu.sh "$OUT"
set -u
out=${1:?usage: probe_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
export TORCHINDUCTOR_CACHE_DIR=/tmp/probe-inductor TRITON_CACHE_DIR=/tmp/probe-triton
for run in cold warm; do
  timeout -s KILL 80 python3 docs/perf/first_call_probe.py multihead_block_sparse_ring 4096 --every 25 --limit 60 \
    > "$out/probe_$run.log" 2>&1
  echo "probe $run rc=$?" >> "$out/probe_summary.txt"
done
timeout -s KILL 60 python3 docs/perf/first_call_probe.py block_sparse_ring 4096 --every 25 --limit 50 \
  > "$out/probe_core.log" 2>&1
echo "probe core rc=$?" >> "$out/probe_summary.txt"
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
FIDELITY_TIMEOUT=$((585 - SECONDS)) ALONE="${ALONE:-'(multihead_(dilated|improved|ring)|ring)'}" \
  bash docs/perf/fidelity_gpu.sh "$out" > /dev/null 2>&1
for f in "$out"/probe_cold.log "$out"/probe_warm.log "$out"/probe_core.log; do
  echo "== $f"; grep -v "^  File" "$f" | head -8; grep -m1 -A25 "most recent call first" "$f" | cut -c1-150
done
cat "$out/probe_summary.txt" "$out/summary.txt"
