#!/usr/bin/env bash
# Issue 32 on one GPU: what a check costs, with the baseline stored, when a pull request changes one
# implementation's own module (a comment in attention/block_sparse.py: block_sparse_ring and the
# multihead module built on it) and when it changes only a docs page.  Both with verification and
# the default rounds; the one-module check twice (two pull requests: the second finds the
# untrusted trust domain's compilation caches warm, as a runner's are).  First main is recorded (`perfguard run`, 3 rounds) with the selection the
# check narrows to (perfguard.gate.selection.narrowed), so that "the baseline stored" holds.
#   bash docs/perf/reach_check_gpu.sh "$OUT"
set -u
out=${1:?usage: reach_check_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
git checkout -q -B one-module main && printf '\n# a comment\n' >> attention/block_sparse.py && git commit -qam one-module
git checkout -q -B one-module-2 main && printf '\n# another comment\n' >> attention/block_sparse.py && git commit -qam one-module-2
git checkout -q -B docs-only main && echo "One more sentence." >> docs/ci.md && git commit -qam docs-only
timed() {  # label, then the command: its wall time and exit code, the check's "measuring" line
  local label=$1; shift
  local t0=$SECONDS
  "$@" > "$out/$label.log" 2>&1 && rc=0 || rc=$?
  echo "$label: exit $rc, $((SECONDS - t0)) s; $(grep -m1 -E '^measuring' "$out/$label.log" || true)" | tee -a "$out/reach_summary.txt"
}
export PERFGUARD_DB="sqlite:////tmp/reach.db"
git checkout -q main && timed record-main timeout 200 python3 -m perfguard run --bench "\\('(?:block_sparse_ring|multihead_block_sparse_ring)',"
git checkout -q one-module && timed one-module timeout 250 python3 -m perfguard check --baseline main
# the same kind of pull request again: pull-request code's compilation caches are warm now
git checkout -q one-module-2 && timed one-module-warm timeout 200 python3 -m perfguard check --baseline main
git checkout -q docs-only && timed docs-only timeout 120 python3 -m perfguard check --baseline main
git checkout -q main
