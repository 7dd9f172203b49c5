#!/usr/bin/env bash
# What the accuracy pass costs a production round (issue 31), in one device call (docs/perf/accuracy.md,
# "The cost with causal"): two `perfguard run --profile production --rounds 1` on the same machine (the
# second is the *warm* round: Triton's and Inductor's on-disk caches filled by the first, as on a runner
# that has checked before), the per-round table of docs/perf/accuracy_report.py, then (TRACE=1, the
# default) docs/perf/accuracy_profile.py --trace for a few implementations: where a first causal call
# and a steady pass spend their time.
#   bash docs/perf/accuracy_cost_gpu.sh "$OUT"        (PROFILE=quick runs it on the CPU)
set -u
out=${1:?usage: accuracy_cost_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh 2>/dev/null || true
profile=${PROFILE:-production}
work=$(mktemp -d)
export PERFGUARD_DB="sqlite:///$work/acc.db"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || uname -n
  git log -1 --format='commit %h %s'; date -u +'date %FT%TZ'; } > "$out/summary.txt"
for i in 1 2; do
  t0=$SECONDS
  timeout "${ROUND_TIMEOUT:-215}" python3 -m perfguard run --profile "$profile" --rounds 1 >> "$out/round.log" 2>&1
  echo "round $i rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
done
cp "$out/round.log" "$work/round.log"
python3 docs/perf/accuracy_report.py "$work/acc.db" "$work" >> "$out/summary.txt" 2>&1
if [ "${TRACE:-1}" = 1 ]; then
  t0=$SECONDS
  timeout "${TRACE_TIMEOUT:-120}" python3 docs/perf/accuracy_profile.py --profile "$profile" \
    --impls "${TRACE_IMPLS:-hilbert_ring,improved,multihead_improved}" --lengths "${TRACE_LENGTHS:-1024,16384}" \
    --trace "$out/trace" > "$out/accuracy_profile.md" 2>&1
  echo "profile rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
fi
gzip -f "$out/round.log"
cat "$out/summary.txt"
