#!/usr/bin/env bash
# Issue 32 on the CPU: what a check costs when the change reaches nothing, one implementation, or
# (with --all) everything.  A fresh clone of this checkout in $1 (main = HEAD), main recorded with
# `perfguard run` (the quick profile, 3 rounds), then three checks with the baseline stored, each
# with verification and the default rounds:
#   docs           a docs/ page changes                         (reaches nothing)
#   dilated        a comment in attention/dilated.py            (reaches what imports it)
#   dilated --all  the same branch, every implementation measured (what every check cost before)
#   bash docs/perf/reach_check_cpu.sh /tmp/reach-cpu
set -eu
out=${1:?usage: reach_check_cpu.sh DIR}
rm -rf "$out" && mkdir -p "$out"
git clone -q "$PWD" "$out/repo"
cd "$out/repo"
git checkout -q -B main
export PERFGUARD_DB="sqlite:///$out/history.db" GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
git checkout -q -b docs main && echo "One more sentence." >> docs/ci.md && git commit -qam docs
git checkout -q -b dilated main && printf '\n# a comment\n' >> attention/dilated.py && git commit -qam dilated
git checkout -q main
timed() {  # label, then the command: its wall time and exit code, the check's "measuring" line
  local label=$1; shift
  local t0=$SECONDS
  "$@" > "$out/$label.log" 2>&1 && rc=0 || rc=$?
  echo "$label: exit $rc, $((SECONDS - t0)) s; $(grep -m1 -E '^measuring' "$out/$label.log" || true)" | tee -a "$out/summary.txt"
}
{ uname -n; nproc; uptime; git log -1 --format='commit %h'; date -u +%FT%TZ; } > "$out/summary.txt"
timed record python -m perfguard run
git checkout -q docs && timed docs python -m perfguard check --baseline main
git checkout -q dilated && timed dilated python -m perfguard check --baseline main
timed dilated-all python -m perfguard check --baseline main --all
cat "$out/summary.txt"
