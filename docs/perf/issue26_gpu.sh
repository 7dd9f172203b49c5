#!/usr/bin/env bash
# Issue 26's remaining GPU proof, one step per device call (each ends inside the 10-minute limit;
# every output goes into one tarball, $1/<step>.tgz, because the device returns at most 8 files):
#   bash docs/perf/issue26_gpu.sh "$OUT" fidelity    # a full production round, then all 27 cases alone (~5.5 min)
#   bash docs/perf/issue26_gpu.sh "$OUT" planted     # the planted +30% in block_sparse_ring's flex path at 16K (~6 min)
#   bash docs/perf/issue26_gpu.sh "$OUT" calibrate   # A/A of the whole production profile, block-sparse on its flex path (~7 min)
#   CAL_BENCH=block_sparse bash docs/perf/issue26_gpu.sh "$OUT" calibrate   # the block-sparse rows only (~3 min)
# A short table last.
set -u
out=${1:?usage: issue26_gpu.sh OUT_DIR fidelity|planted|calibrate}
step=${2:?usage: issue26_gpu.sh OUT_DIR fidelity|planted|calibrate}
work=/tmp/issue26-$step && rm -rf "$work" && mkdir -p "$work"
t0=$SECONDS
case "$step" in
  fidelity)
    FIDELITY_TIMEOUT=560 bash docs/perf/fidelity_gpu.sh "$work" > "$work/run.out" 2>&1 ;;
  planted)  # the store (main's rounds of the narrowed selection) comes back too: reach_check_gpu.sh reuses it
    CHECK_TIMEOUT=560 bash docs/perf/planted_flex_gpu.sh "$work" > "$work/run.out" 2>&1
    cp /tmp/planted.db "$work/" ;;
  calibrate)
    source docs/perf/device_setup.sh
    timeout "${CAL_TIMEOUT:-560}" python3 -m perfguard calibrate --profile production --bench "${CAL_BENCH:-.}" --aa 2 --planted "" --db "sqlite:///$work/cal.db" \
      --json "$work/aa.json" --markdown "$work/aa.md" > "$work/calibrate.log" 2>&1
    echo "calibrate rc=$? $((SECONDS - t0)) s" > "$work/summary.txt"
    grep -iE "regression|false alarm|process CV|block_sparse_ring.*16384" "$work/aa.md" | head -20 >> "$work/summary.txt" ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
tar -czf "$out/$step.tgz" -C /tmp "issue26-$step"
echo "step $step: $((SECONDS - t0)) s"
cat "$work/summary.txt" 2>/dev/null
