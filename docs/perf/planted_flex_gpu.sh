#!/usr/bin/env bash
# Issue 26 on one GPU: a planted slowdown inside block_sparse_ring's FlexAttention path at 16K
# tokens (a GPU spin of ~0.07 ms after the flex kernel, ~+30% of its 0.238 ms forward on an H200)
# must fail a production check naming block_sparse_ring (and its multihead module) only.
#   bash docs/perf/planted_flex_gpu.sh "$OUT"
# The copy becomes main (the baseline) and a branch 'planted' with one commit on top.
set -u
out=${1:?usage: planted_flex_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh
git checkout -q -b planted
python3 - <<'PY'
from pathlib import Path
p = Path("attention/block_sparse.py")
s = p.read_text()
old = "        return out.transpose(1, 2).contiguous()\n"
assert s.count(old) == 1
s = s.replace(old, "        if n == 16384:  # planted (docs/perf/planted_flex_gpu.sh)\n"
              "            torch.cuda._sleep(140_000)\n" + old)
p.write_text(s)
PY
git -c user.name=perfguard -c user.email=perfguard@localhost commit -qam "planted: +0.07 ms in block_sparse_ring's flex path at 16K"
t0=$SECONDS
PERFGUARD_DB="sqlite:////tmp/planted.db" timeout "${CHECK_TIMEOUT:-500}" python3 -m perfguard check --baseline main \
  --profile production ${ROUNDS:+--rounds "$ROUNDS"} --no-verify --json "$out/check.json" --markdown "$out/check.md" 2>&1 \
  | while IFS= read -r line; do printf '%5d %s\n' $((SECONDS - t0)) "$line"; done > "$out/check.log"
echo "check rc=${PIPESTATUS[0]} $((SECONDS - t0)) s" > "$out/summary.txt"
python3 - "$out/check.json" <<'PY' >> "$out/summary.txt" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
items = d.get("items") or d.get("check", {}).get("items") or []
for i in items:
    if i.get("verdict") in ("regression", "failed", "broken"):
        print(i.get("verdict"), i.get("impl"), i.get("benchmark"), i.get("params_key"), i.get("ratio"))
print("exit", d.get("exit_code", d.get("check", {}).get("exit_code")))
PY
grep -E "^ *[0-9]+ (HEAD|base|commit|merge|re-measur|stage|perfguard check)" "$out/check.log" | cut -c1-160 | tail -20
cat "$out/summary.txt"
