#!/usr/bin/env bash
# Issue 31: A/A of the accuracy metric over 20 checks on the CPU.  A fresh clone of this checkout in
# $1, main recorded (the accuracy benchmarks, 2 rounds), then 20 checks of 20 new commits that change
# nothing the suite runs (`--all`: every implementation measured, each HEAD measured fresh); every
# accuracy comparison counted.  0 false alarms is the bar.
#   bash docs/perf/accuracy_aa.sh /tmp/accuracy-aa
set -eu
out=${1:?usage: accuracy_aa.sh DIR}
n=${CHECKS:-20}
rm -rf "$out" && mkdir -p "$out"
git clone -q "$PWD" "$out/repo"
cd "$out/repo"
git checkout -q -B main
export PERFGUARD_DB="sqlite:///$out/history.db" GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
{ uname -n; nproc; uptime; git log -1 --format='commit %h'; date -u +%FT%TZ; } > "$out/summary.txt"
python -m perfguard run --bench Accuracy --rounds 2 > "$out/record.log" 2>&1
git checkout -q -b aa
for i in $(seq 1 "$n"); do
  git commit -q --allow-empty -m "A/A $i"
  rc=0
  python -m perfguard check --baseline main --all --bench Accuracy --rounds 1 --no-verify \
    --json "$out/check-$i.json" > "$out/check-$i.log" 2>&1 || rc=$?
  echo "check $i: exit $rc" >> "$out/summary.txt"
done
python - "$out" "$n" <<'PY' | tee -a "$out/summary.txt"
import json, sys
from pathlib import Path
out, n = Path(sys.argv[1]), int(sys.argv[2])
compared = alarms = 0
ratios = []
for i in range(1, n + 1):
    for item in json.loads((out / f"check-{i}.json").read_text())["items"]:
        if item["metric"] == "error" and item["verdict"] != "not affected":
            compared += 1
            alarms += item["verdict"] == "regression"
            ratios.append(item["ratio"])
print(f"{n} A/A checks: {alarms} accuracy false alarms in {compared} comparisons; "
      f"ratios {min(ratios):.4f}-{max(ratios):.4f}")
PY
