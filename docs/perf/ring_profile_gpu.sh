#!/usr/bin/env bash
# Issues 33/34, one device call on nvidia-h200-x4: per-kernel profiles of the ring at N = 1, 2, 4
# and improved at N = 1 (docs/perf/distributed_profile_gpu.py, $TOKENS, default 1M), then the
# distributed suite's error against N = 1, 2, 4 (docs/perf/accuracy_ranks.sh, bf16 on GPUs).
# Logs under $OUT/profile and $OUT/accuracy, packed into $OUT/ring_profile.tar.gz.
#   bash docs/perf/ring_profile_gpu.sh "$OUT"          (STEPS="profile accuracy", PROFILE_RANKS="1 2 4")
set -u
out=${1:?usage: ring_profile_gpu.sh OUT_DIR}
steps=${STEPS:-profile accuracy}
# shellcheck disable=SC1091
source docs/perf/device_setup.sh || exit 1
mkdir -p "$out/profile" "$out/accuracy"
t0=$SECONDS
if [[ " $steps " == *" profile "* ]]; then
  for n in ${PROFILE_RANKS:-1 2 4}; do
    timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$n" \
      docs/perf/distributed_profile_gpu.py --out "$out/profile" --tokens "${TOKENS:-1048576}" \
      > "$out/profile/N$n.log" 2>&1
    echo "profile N=$n: rc=$? $((SECONDS - t0)) s"
  done
fi
if [[ " $steps " == *" accuracy "* ]]; then
  RANKS="1 2 4" STEP_TIMEOUT=${STEP_TIMEOUT:-100} bash docs/perf/accuracy_ranks.sh "$out/accuracy" > "$out/accuracy/stdout.log" 2>&1
  echo "accuracy: rc=$? $((SECONDS - t0)) s"
fi
tar -czf "$out/ring_profile.tar.gz" -C "$out" profile accuracy 2>/dev/null
for n in 1 2 4; do grep -E "^== |^   [a-z]" "$out/profile/N$n.log" 2>/dev/null | grep -v " ms .*x  \[" ; done
tail -25 "$out/accuracy/summary.txt" 2>/dev/null
