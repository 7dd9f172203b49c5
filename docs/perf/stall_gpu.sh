#!/usr/bin/env bash
# Issue 26, one device call: (1) the CUDA tests of the whole suite (the timer and kernel selection
# moved in issue 28); (2) native stacks of a stalled case alone (hang_stack_gpu.sh); (3) is the stall
# in the garbage collector?  The same case alone in fresh `perfguard run` processes, RUNS times with
# collections logged (docs/perf/gc_probe, GC_PROBE=log) and RUNS times with the collector off
# (GC_PROBE=off), each with a LIMIT.  Results into $1, a short table last.
#   bash docs/perf/stall_gpu.sh "$OUT"
set -u
out=${1:?usage: stall_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
case_re=${CASE:-"'multihead_dilated', 1024"}
summary="$out/stall_summary.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format='commit %H'; date -u +%FT%TZ; } > "$summary" 2>&1
if [ "${CUDA_TESTS:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 200 python3 -m pytest -o addopts="" -q -rs -p no:cacheprovider -m cuda tests/ > "$out/cuda_tests.log" 2>&1
  echo "cuda tests rc=$? $((SECONDS - t0)) s: $(tail -1 "$out/cuda_tests.log")" >> "$summary"
fi
if [ "${STACKS:-1}" = 1 ]; then
  mkdir -p "$out/stack"
  CASE="$case_re" WAIT=${WAIT:-30} bash docs/perf/hang_stack_gpu.sh "$out/stack" > "$out/stack/hang_stack.out" 2>&1
  echo "stacks: $(tr '\n' ' ' < "$out/stack/hang_summary.txt")" >> "$summary"
fi
export PYTHONPATH="$PWD/docs/perf/gc_probe:$PYTHONPATH"
for mode in log off; do
  for i in $(seq 1 "${RUNS:-2}"); do
    t0=$SECONDS
    rm -f /tmp/perfguard-*/import-shim-*/worker-*.log 2>/dev/null
    GC_PROBE=$mode GC_PROBE_LOG="$out/gc-$mode-$i.log" PERFGUARD_DB="sqlite:////tmp/stall-$mode-$i.db" \
      timeout "${LIMIT:-60}" python3 -m perfguard run --profile production --bench "$case_re" > "$out/run-$mode-$i.log" 2>&1
    rc=$?
    echo "gc=$mode run $i rc=$rc $((SECONDS - t0)) s; last collection per process: $(awk '{last[$1]=$0} END {for (p in last) printf "[%s] ", last[p]}' "$out/gc-$mode-$i.log" 2>/dev/null)" >> "$summary"
    pkill -f perfguard.engine.round_worker 2>/dev/null
  done
done
cat "$summary"
