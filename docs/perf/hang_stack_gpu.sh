#!/usr/bin/env bash
# Issue 26: the Python stacks of a case measured alone that does not finish its first
# forward+backward (docs/perf/fidelity.md).  Runs `perfguard fidelity --alone CASE`, waits until the
# case alone has been running WAIT seconds, sends SIGABRT to its worker (started with -X faulthandler:
# every thread's stack goes to the worker's log), copies the log and stops.  Before that, the
# native stacks of every thread (py-spy dump --native) and each thread's kernel wait channel.
#   bash docs/perf/hang_stack_gpu.sh "$OUT"            (after a full round, as fidelity measures)
#   MODE=run WAIT=25 bash docs/perf/hang_stack_gpu.sh "$OUT"   (the case alone, no round before it)
set -u
out=${1:?usage: hang_stack_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
case_re=${CASE:-"'multihead_dilated', 1024"}
t0=$SECONDS
if [ "${MODE:-fidelity}" = run ]; then  # the case alone with no full round before it
  PERFGUARD_DB="sqlite:////tmp/hang.db" python3 -m perfguard run --profile production --bench "$case_re" \
    > "$out/fidelity.log" 2>&1 &
  fid=$!
  echo "run started" > "$out/hang_summary.txt"
else
  PERFGUARD_DB="sqlite:////tmp/hang.db" python3 -m perfguard fidelity --profile production --alone "$case_re" \
    --json "$out/fidelity.json" > "$out/fidelity.log" 2>&1 &
  fid=$!
  until grep -q "case(s) alone" "$out/fidelity.log" 2>/dev/null; do
    sleep 1; [ $((SECONDS - t0)) -gt 200 ] && break
  done
  echo "full round done at $((SECONDS - t0)) s" > "$out/hang_summary.txt"
fi
sleep "${WAIT:-30}"
pgrep -af perfguard.engine.round_worker >> "$out/hang_summary.txt"
i=0
for f in /tmp/perfguard-*/import-shim-*/worker-*.log; do  # read through the open file: perfguard deletes it
  i=$((i + 1)); tail -n +1 -f "$f" > "$out/worker-$i.log" 2>/dev/null &
done
sleep 1
for pid in $(pgrep -f perfguard.engine.round_worker); do  # native stacks (py-spy is carried in .whl/), kernel waits
  timeout 60 /tmp/site/bin/py-spy dump --native --pid "$pid" > "$out/pyspy-$pid.txt" 2>&1
  for t in /proc/"$pid"/task/*; do echo "$t $(cat "$t/comm") $(cat "$t/wchan")"; done > "$out/wchan-$pid.txt" 2>&1
  kill -ABRT "$pid"
done
sleep 4
pkill -f "tail -n +1 -f" 2>/dev/null
kill "$fid" 2>/dev/null; sleep 2; pkill -f perfguard 2>/dev/null
grep -c "alone 1/1\|round 1/" "$out/fidelity.log" >> "$out/hang_summary.txt"
echo "ended at $((SECONDS - t0)) s" >> "$out/hang_summary.txt"
for f in "$out"/worker-*.log; do
  echo "== $f"; grep -n -A30 "Current thread" "$f" | cut -c1-160 | head -40
done
for f in "$out"/pyspy-*.txt; do echo "== $f"; head -80 "$f" | cut -c1-160; done
cat "$out"/wchan-*.txt "$out/hang_summary.txt"
