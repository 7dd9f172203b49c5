#!/usr/bin/env bash
# Issue 26, one device call on the stall of a case alone after its first backward (fidelity.md):
#  (1) CUDA_TESTS=1: the CUDA tests of the whole suite, verbose (the timer and kernel selection moved
#      in issue 28);
#  (2) STACKS=1: native stacks of the stalled worker (hang_stack_gpu.sh, MODE=run: the case alone);
#  (3) the case alone in fresh `perfguard run` processes, one per variant below, each with LIMIT
#      seconds and its garbage collections logged (docs/perf/gc_probe, GC_PROBE=log): which
#      measuring passes before the first backward make it stall?
# Everything goes into $1/stall.tgz (the device returns at most 8 files), a short table last.
#   bash docs/perf/stall_gpu.sh "$OUT"
set -u
out=${1:?usage: stall_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
work=/tmp/stall && rm -rf "$work" && mkdir -p "$work"
case_re=${CASE:-"'multihead_dilated', 1024"}
summary="$out/stall_summary.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format='commit %H'; date -u +%FT%TZ; } > "$summary" 2>&1
if [ "${CUDA_TESTS:-0}" = 1 ]; then
  t0=$SECONDS
  timeout "${CUDA_TESTS_LIMIT:-200}" python3 -m pytest -o addopts="" -v -rs -p no:cacheprovider -m cuda tests/ > "$work/cuda_tests.log" 2>&1
  echo "cuda tests rc=$? $((SECONDS - t0)) s: $(tail -1 "$work/cuda_tests.log")" >> "$summary"
fi
if [ "${STACKS:-1}" = 1 ]; then
  mkdir -p "$work/stack"
  CASE="$case_re" MODE=run WAIT=${WAIT:-25} bash docs/perf/hang_stack_gpu.sh "$work/stack" > "$work/stack/hang_stack.out" 2>&1
  echo "stacks: $(tr '\n' ' ' < "$work/stack/hang_summary.txt")" >> "$summary"
fi
# name=benchmark regex (prefixed to the case): which passes run before PeakMemory's first backward
variants=(
  "all=.*"
  "no_capture=(^|\.)(PeakMemory\.track_\w+|Work\.track_forward_(flops|ops|allocated))\("
  "kernels_only=(^|\.)(PeakMemory\.track_\w+|Work\.track_forward_kernels)\("
  "time_only=(^|\.)(PeakMemory\.track_\w+|Forward\.track_time)\("
  "dispatch_only=(^|\.)(PeakMemory\.track_\w+|Work\.track_forward_ops)\("
)
export PYTHONPATH="$PWD/docs/perf/gc_probe:$PYTHONPATH"
for v in ${VARIANTS:-all no_capture kernels_only time_only dispatch_only}; do
  for entry in "${variants[@]}"; do
    [ "${entry%%=*}" = "$v" ] || continue
    regex="${entry#*=}.*$case_re"
    t0=$SECONDS
    GC_PROBE=log GC_PROBE_LOG="$work/gc-$v.log" PERFGUARD_DB="sqlite:///$work/$v.db" \
      timeout "${LIMIT:-45}" python3 -m perfguard run --profile production --bench "$regex" > "$work/run-$v.log" 2>&1
    rc=$?
    pkill -f perfguard.engine.round_worker 2>/dev/null
    last=$(awk '{last[$1]=$0} END {for (p in last) printf "[%s] ", last[p]}' "$work/gc-$v.log" 2>/dev/null)
    echo "$v rc=$rc $((SECONDS - t0)) s, benchmarks $(grep -c 'round 1/' "$work/run-$v.log"); last gc per process: $last" >> "$summary"
  done
done
cp "$summary" "$work/"
tar -czf "$out/stall.tgz" -C /tmp stall
cat "$summary"
