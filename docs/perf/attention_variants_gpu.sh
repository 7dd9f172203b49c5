#!/usr/bin/env bash
# Issue 18 on one GPU, in one device call: the engine variants side by side, then the exactness
# checks of the new defaults.  Run from the repository root on the lent machine (wheels carried):
#
#   BACKENDS=1 bash docs/perf/attention_variants_gpu.sh "$OUT" [VARIANTS]   # default: torch,serial,default
#
# 0. merge_kernel_bench.py: the merge and gradient-sum kernels alone, GB/s against the bytes moved.
# 1. attention_bench.py, sections improved + ring + kernels, variants torch (the plain-torch merge,
#    calls in order), serial (the fused Triton merge, calls in order) and default (the fused merge,
#    calls spread over 4 streams): every ratio of the issue per variant, the first call of
#    each (Triton compiles with an empty cache: a fresh machine), kernel tables at 32K and 128K.
# 2. perfguard verify --device cuda with the defaults (bf16 + fp32, all implementations).
# 3. The CUDA numerics and sync tests with the defaults (cuDNN's backward on views: the ring's
#    chunked backward crashed cuDNN before the CUDNN_MIN_LEN rule; a crash here ends that step).
# 4. With BACKENDS=1: one production round of the suite's Backends.track_time stored in
#    $1/backends.db (the history site's backends table: `perfguard site --db sqlite:///backends.db`).
# Results into $1 (logs in logs.tgz: 8 files at most come back); a short table last.
set -u
out=${1:?usage: attention_variants_gpu.sh OUT_DIR [VARIANTS]}
variants=${2:-torch,serial,default}
source docs/perf/device_setup.sh
export TRITON_CACHE_DIR=/tmp/triton-cache-cold
rm -rf "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/summary.txt" 2>&1
tests=(tests/test_attention_numerics.py tests/test_attention_sync.py -m cuda -q -rs -p no:cacheprovider)

if [ "${MERGE_BENCH:-1}" = 1 ]; then
  t0=$SECONDS
  timeout 120 python3 docs/perf/merge_kernel_bench.py > "$out/merge_kernels.md" 2>&1
  echo "merge kernels rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"
fi

t0=$SECONDS
OUT="$out" timeout 200 python3 docs/perf/attention_bench.py --sections improved,ring,kernels \
  --variants "$variants" --tag=-variants > "$out/bench.log" 2>&1
echo "bench rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"

t0=$SECONDS
timeout 140 python3 -m perfguard verify --device cuda --json "$out/verify.json" > "$out/verify.log" 2>&1
echo "verify rc=$? $((SECONDS - t0)) s" >> "$out/summary.txt"

t0=$SECONDS
timeout 200 python3 -m pytest "${tests[@]}" > "$out/tests.log" 2>&1
echo "cuda tests (defaults) rc=$? $((SECONDS - t0)) s: $(tail -1 "$out/tests.log")" >> "$out/summary.txt"

if [ "${BACKENDS:-0}" = 1 ]; then
  t0=$SECONDS
  timeout $((570 - SECONDS)) python3 -m perfguard run --profile production --bench 'Backends\.track_time' --rounds 1 \
    --db "sqlite:///$out/backends.db" > "$out/backends.log" 2>&1
  echo "backends run rc=$? $((SECONDS - t0)) s: $(tail -1 "$out/backends.log")" >> "$out/summary.txt"
fi
(cd "$out" && tar czf logs.tgz ./*.log && rm -f ./*.log)

sed -n '/^| issue 18 target/,/^$/p' "$out/attention_bench-variants.md" 2>/dev/null
grep -h "first call" "$out/attention_bench-variants.md" 2>/dev/null | cut -c1-200
grep -h "triton\|torch" "$out/merge_kernels.md" 2>/dev/null | grep -v "^cpu\|NVIDIA"
cat "$out/summary.txt"
