#!/usr/bin/env bash
# Issue 31 on one GPU, in one device call (docs/perf/accuracy.md):
#   1. a full production round (every benchmark, the accuracy pass included): what the accuracy
#      pass costs per round (each case's accuracy_s against the round's wall time);
#   2. a second round of the accuracy benchmarks alone, in a fresh process: are the GPU errors
#      repeatable (their spread against the 2x a check gates on)?
#   3. a branch whose ImprovedDilatedAttention.forward adds seeded noise at 8e-3 of the output's
#      mean magnitude (a bf16 drift about 3x its error, inside verify's 2e-2 bf16 tolerance),
#      checked against main's stored rounds: it must fail naming improved and multihead_improved.
#   bash docs/perf/accuracy_gpu.sh "$OUT"      (also runs on the CPU with the quick profile)
set -u
out=${1:?usage: accuracy_gpu.sh OUT_DIR}
source docs/perf/device_setup.sh 2>/dev/null || true
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
export PERFGUARD_DB="sqlite:////tmp/accuracy.db"
rm -f /tmp/accuracy.db
profile=${PROFILE:-production}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || uname -n
  git log -1 --format='commit %h %s'; date -u +'date %FT%TZ'; } > "$out/summary.txt"
git checkout -q -B less-exact main
python3 - <<'PY'
from pathlib import Path
p = Path("attention/improved.py")
p.write_text(p.read_text() + '''

# --- docs/perf/accuracy_gpu.sh: a bf16 drift about 3x the error, inside verify's tolerance ---
_exact_forward = ImprovedDilatedAttention.forward


def _less_exact_forward(self, *args, **kwargs):
    import torch

    out = _exact_forward(self, *args, **kwargs)
    noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.device, out.dtype)
    return out + 8e-3 * out.detach().abs().mean() * noise


ImprovedDilatedAttention.forward = _less_exact_forward
''')
PY
git commit -qam "less exact: noise at 8e-3 in improved's output"
git checkout -q main
t0=$SECONDS
timeout "${ROUND_TIMEOUT:-240}" python3 -m perfguard run --profile "$profile" --rounds 1 > "$out/round.log" 2>&1
echo "full round rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
t0=$SECONDS
timeout 150 python3 -m perfguard run --profile "$profile" --rounds 1 --bench Accuracy > "$out/accuracy_round.log" 2>&1
echo "accuracy round rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
git checkout -q less-exact
t0=$SECONDS
timeout 150 python3 -m perfguard check --baseline main --profile "$profile" --bench Accuracy --rounds 1 --no-verify \
  --json "$out/check.json" --markdown "$out/check.md" > "$out/check.log" 2>&1
echo "planted check rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
git checkout -q main
python3 docs/perf/accuracy_report.py /tmp/accuracy.db "$out" >> "$out/summary.txt" 2>&1
cat "$out/summary.txt"
