#!/usr/bin/env bash
# Issue 33 on 2 GPUs, in one device call: is the distributed suite's time a gate?
#   1. A/A: `perfguard check --baseline main --profile distributed` of main against itself on every
#      ring implementation at 128K tokens (every benchmark: forward and forward+backward time,
#      peak memory, work counts, communication), 2 rounds a side, time gated (graph replay).
#   2. Planted: a branch whose sequence-parallel forward ends with a GPU spin of ~0.5 ms (~+30% of
#      the 2-GPU forward at 128K on an H200, 1.64 ms), checked against main's stored rounds: it
#      must fail naming ring and what runs the same code (multihead_ring, hilbert_ring).
#   bash docs/perf/distributed_gate_gpu.sh "$OUT"       (SPIN=cycles, BENCH=regex to override)
set -u
out=${1:?usage: distributed_gate_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh 2>/dev/null || true  # shellcheck disable=SC1091
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
export PERFGUARD_DB="sqlite:////tmp/distributed-gate.db"
rm -f /tmp/distributed-gate.db
bench=${BENCH:-"\\('[a-z_]+', 131072,"}
spin=${SPIN:-975000}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  git log -1 --format='commit %h %s'; date -u +'date %FT%TZ'; } > "$out/summary.txt"
# a suspect is re-measured 3 rounds a side (default 5): both checks fit one call
printf '\n[tool.perfguard.retry]\nrounds = 3\n' >> pyproject.toml
git commit -qam "distributed_gate_gpu.sh: retry 3 rounds a side"
git checkout -q -b planted
python3 - "$spin" <<'PY'
import sys
from pathlib import Path
p = Path("attention/_distributed.py")
s = p.read_text()
old = "        ctx.save_for_backward(q, k, v, out, lse)\n"
assert s.count(old) == 1
s = s.replace(old, f"        torch.cuda._sleep({int(sys.argv[1])})  # planted (docs/perf/distributed_gate_gpu.sh)\n" + old)
p.write_text(s)
PY
git commit -qam "planted: a GPU spin at the end of the sequence-parallel forward"
git checkout -q main
check() {  # name, then the check's own arguments
  local name=$1; shift
  local t0=$SECONDS
  timeout "${CHECK_TIMEOUT:-270}" python3 -m perfguard check --baseline main --profile "${PROFILE:-distributed}" --bench "$bench" \
    --rounds 2 --no-verify --json "$out/$name.json" --markdown "$out/$name.md" "$@" > "$out/$name.log" 2>&1
  echo "$name check rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
  python3 - "$out/$name.json" <<'PY' >> "$out/summary.txt" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
for i in d.get("items", []):
    if i.get("gated") or i.get("verdict") in ("regression", "failed", "broken", "improvement"):
        ci = i.get("ci") or i.get("interval") or ""
        print(f"  {i.get('verdict'):<12} {i.get('benchmark', '').split('.', 1)[-1]:<36} {i.get('impl'):<15} "
              f"x{(i.get('ratio') or 0):.3f} {ci}")
PY
}
check aa
git checkout -q planted
check planted
git checkout -q main
cat "$out/summary.txt"
