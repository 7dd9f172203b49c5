#!/usr/bin/env bash
# Planted-slowdown calibrations on every GPU of one machine at once (issue 19: device time is the
# scarce thing, and the 10-minute limit of a call is shorter than one repetition of four plants).
#
#   source docs/perf/device_setup.sh
#   bash docs/perf/calibrate_parallel.sh OUT DEADLINE_S "0:0.25 1:0.25 2:0.3 3:0.5" "0.1"
#
# Phase 1: one `perfguard calibrate --profile production --aa 0 --planted F` per "GPU:F" item, each
# on its own GPU (CUDA_VISIBLE_DEVICES), in its own clone of HEAD with its own compilation cache, so
# the runs share nothing but the host.  Phase 2: as each GPU finishes, it runs the second argument's
# fractions too, if at least 240 s are left before DEADLINE_S (seconds from the start); every run is
# killed at the deadline.  A run that finishes writes OUT/gpuN-<fractions>.{json,md,log}; sum them
# with `python docs/perf/calibration_sum.py OUT/*.json`.
set -uo pipefail
OUT="$1"; DEADLINE="$2"; FIRST="$3"; SECOND="${4:-}"
START=$(date +%s)
ROOT="$PWD"
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }

one() {  # gpu fractions
  local gpu="$1" fr="$2" name="gpu$1-${2//,/_}" work="/tmp/calib-w$1"
  rm -rf "$work" && git clone -q "$ROOT" "$work"
  ( cd "$work" && CUDA_VISIBLE_DEVICES="$gpu" PERFGUARD_CACHE_DIR="/tmp/calib-cache$gpu" \
      PYTHONPATH="/tmp/site:$work" timeout "$(left)" python3 -m perfguard calibrate --profile production \
      --aa 0 --planted "$fr" --repeats 1 --json "$OUT/$name.json" --markdown "$OUT/$name.md" \
      > "$OUT/$name.log" 2>&1 )
  echo "$name: exit $? after $(( $(date +%s) - START )) s"
}

lane() {  # gpu first-fractions
  one "$1" "$2"
  if [ -n "$SECOND" ] && [ "$(left)" -ge 240 ]; then one "$1" "$SECOND"; fi
}

for item in $FIRST; do
  lane "${item%%:*}" "${item#*:}" &
done
wait
