#!/usr/bin/env bash
# Issue 30: the timing rule calibrated end to end on this CPU with one core kept busy.
# A fresh clone of this checkout in $1; main recorded (the selected timings, 3 rounds); then, alternately,
#   A/A:     a comment-only commit on branch `aa`, checked against main;
#   planted: a comment-only commit on branch `plant`, whose first commit appends
#            perfguard.calibrate.planting.planted_source(1.0) to attention/registry.py: every forward
#            burns its own process CPU time again in a busy loop (time only, no extra torch op), 2x;
# each `perfguard check --baseline main --all --bench BENCH --no-verify` (3 rounds of HEAD, suspects
# re-measured interleaved 5 + 5 rounds, extended 5 at a time up to 15 while unstable).
# A busy loop (`python3 -c "while True: pass"`) runs on one of the 2 cores the whole time.
#   bash docs/perf/verdicts_calibration.sh /tmp/verdicts-calibration     (CHECKS=20 pairs by default)
set -eu
out=${1:?usage: verdicts_calibration.sh DIR}
n=${CHECKS:-20}
bench=${BENCH:-"Forward\.track_time\('(dilated|multihead_ring)', (512|1024),"}
here=$PWD
rm -rf "$out" && mkdir -p "$out"
git clone -q "$PWD" "$out/repo"
cd "$out/repo"
git checkout -q -B main
export PYTHONPATH="$out/repo" PERFGUARD_DB="sqlite:///$out/history.db" GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
python3 -c "while True: pass" &
busy=$!
trap 'kill "$busy"' EXIT
{ uname -n; nproc; lscpu | grep 'Model name'; uptime; git log -1 --format='commit %h %s'; date -u +%FT%TZ
  echo "bench: $bench"; echo "busy loop pid $busy"; } > "$out/summary.txt"
python -m perfguard run --bench "$bench" --rounds 3 > "$out/record.log" 2>&1
git checkout -q -b plant main
python -c "from perfguard.calibrate.planting import planted_source; print(planted_source(1.0))" >> attention/registry.py
git commit -q -am "planted: every forward 2x (a busy loop of its own CPU time)"
git checkout -q -b aa main
check() {  # $1 kind (aa / plant), $2 index
  git checkout -q "$1"
  echo "# $1 $2" >> attention/ring.py
  git commit -q -am "$1 $2: a comment"
  local rc=0 start=$SECONDS
  python -m perfguard check --baseline main --all --bench "$bench" --no-verify \
    --json "$out/$1-$2.json" > "$out/$1-$2.log" 2>&1 || rc=$?
  echo "$1 $2: exit $rc, $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/summary.txt"
}
for i in $(seq 1 "$n"); do
  check aa "$i"
  check plant "$i"
done
date -u +%FT%TZ >> "$out/summary.txt"
python "$here/docs/perf/verdicts_calibration_sum.py" "$out" | tee -a "$out/summary.txt"
