#!/usr/bin/env bash
# Issue 34 (the ring on 4 GPUs), in one device call on nvidia-h200-x4:
#   1. scaling: ring at 128K, 512K, 1M tokens on N = 1, 2, 4 and improved at N = 1, forward and
#      forward+backward (docs/perf/distributed_gpu.py --steps scaling);
#   2. gate: the gate at 4 ranks (docs/perf/distributed_gate_gpu.sh): A/A, then a planted spin of
#      ~30% of the 4-GPU forward at 128K that step 1 measured (SPIN=cycles to override);
#   3. profile (not by default): per-kernel device time of the ring at $PROFILE_RANKS ranks and of
#      improved on one GPU (docs/perf/distributed_profile_gpu.py, $TOKENS, default 1M);
#   4. accuracy (not by default): the distributed suite's error against N = 1, 2, 4
#      (docs/perf/accuracy_ranks.sh, bf16 on GPUs).
# Logs under $OUT/<step>, packed into $OUT/ring4.tar.gz; a short table last.
#   bash docs/perf/ring4_gpu.sh "$OUT"     (STEPS="scaling gate profile accuracy", SCALING_BUDGET=seconds)
set -u
out=${1:?usage: ring4_gpu.sh OUT_DIR}
steps=${STEPS:-scaling gate}
# shellcheck disable=SC1091
source docs/perf/device_setup.sh || exit 1
mkdir -p "$out/scaling" "$out/gate" "$out/profile" "$out/accuracy"
t0=$SECONDS
if [[ " $steps " == *" scaling "* ]]; then
  python3 docs/perf/distributed_gpu.py --out "$out/scaling" --steps scaling --ranks "${RANKS:-1,2,4}" \
    --budget "${SCALING_BUDGET:-270}" > "$out/scaling/stdout.log" 2>&1
  echo "scaling: rc=$? $((SECONDS - t0)) s"
fi
if [[ " $steps " == *" gate "* ]]; then
  # ~30% of the 4-GPU forward at 128K, in cycles of the spin (~1.95 GHz on an H200)
  spin=${SPIN:-$(python3 - "$out/scaling/distributed_gpu.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    t = [r["time_s"] for g in d["scaling"] if g["ranks"] == max(x["ranks"] for x in d["scaling"])
         for r in g["rows"] if r.get("seq_len") == 131072 and r.get("pass") == "forward"
         and r.get("impl", "ring") == "ring" and r.get("time_s")]
    print(int(0.30 * t[0] * 1.95e9))
except Exception:
    print(600000)
PY
)}
  echo "planted spin: $spin cycles"
  SPIN=$spin CHECK_TIMEOUT=${CHECK_TIMEOUT:-140} bash docs/perf/distributed_gate_gpu.sh "$out/gate" > "$out/gate/stdout.log" 2>&1
  echo "gate: rc=$? $((SECONDS - t0)) s"
fi
if [[ " $steps " == *" profile "* ]]; then
  for n in ${PROFILE_RANKS:-1 2 4}; do
    timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$n" \
      docs/perf/distributed_profile_gpu.py --out "$out/profile" --tokens "${TOKENS:-1048576}" \
      > "$out/profile/N$n.log" 2>&1
    echo "profile N=$n: rc=$? $((SECONDS - t0)) s"
  done
  grep -hE "^== |^   [a-z]" "$out"/profile/N*.log
fi
if [[ " $steps " == *" accuracy "* ]]; then
  RANKS="1 2 4" STEP_TIMEOUT=${STEP_TIMEOUT:-100} bash docs/perf/accuracy_ranks.sh "$out/accuracy" > "$out/accuracy/stdout.log" 2>&1
  echo "accuracy: rc=$? $((SECONDS - t0)) s"
  tail -25 "$out/accuracy/summary.txt"
fi
tar -czf "$out/ring4.tar.gz" -C "$out" scaling gate profile accuracy 2>/dev/null
grep -E "^(aa|planted) check|^  regression" "$out/gate/summary.txt" 2>/dev/null | cut -c1-150
cat "$out/scaling/table.md" 2>/dev/null
