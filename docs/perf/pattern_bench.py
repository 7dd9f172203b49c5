"""Time the attention-pattern builders at the registry's GPU configuration (docs/perf/verify.md).

    python docs/perf/pattern_bench.py                  # CPU: new builders, and the old loop for comparison
    python docs/perf/pattern_bench.py --device cuda    # on the GPU runner (the old loop is CPU-only)

For each mode × causal case: ``dilated_pattern`` (vectorised, on ``--device``), the block-sparse
``attention_pattern`` of the registry's ``block_sparse_ring`` GPU config, and (CPU, unless
``--no-old``) the builder as it was before: a loop over head groups, each an ``(n, n)`` boolean op
added to ``counts[list(heads)]``.  Every new pattern is checked equal to the old one when both ran.
Prints one JSON object per line, then a summary table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention.pattern import branch_heads, dilated_pattern, kept_mask
from attention.registry import REGISTRY


def old_dilated_pattern(
    seq_len: int, num_heads: int, segs: list[int], rates: list[int], mode: str, is_causal: bool
) -> torch.Tensor:
    """The builder before the vectorised one (attention/pattern.py at 8da1860), on the CPU."""
    counts = torch.zeros(num_heads, seq_len, seq_len, dtype=torch.int32)
    pos = torch.arange(seq_len)
    causal = (pos[None, :] <= pos[:, None]) if is_causal else None
    for bh in branch_heads(num_heads, segs, rates, mode):
        seg = pos // bh.segment_length
        same_segment = seg[:, None] == seg[None, :]
        for offset, heads in bh.groups().items():
            keep = kept_mask(seq_len, bh.segment_length, bh.dilation_rate, offset)
            pair = keep[:, None] & keep[None, :] & same_segment
            if causal is not None:
                pair &= causal
            counts[list(heads)] += pair.to(torch.int32)
    return counts


def timed(fn, device: torch.device) -> tuple[float, torch.Tensor]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-old", action="store_true", help="skip the old CPU loop (slow)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = REGISTRY["dilated"].gpu
    n, h = gpu.shape.seq_len, gpu.shape.num_heads
    segs, rates = list(gpu.kwargs["segment_lengths"]), list(gpu.kwargs["dilation_rates"])
    sparse_spec = REGISTRY["block_sparse_ring"]
    sparse = sparse_spec.build("gpu")
    rows = []
    timed(lambda: dilated_pattern(64, h, segs, rates, device=device), device)  # warm-up (CUDA context)
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            new_s, new = timed(
                partial(dilated_pattern, n, h, segs, rates, mode, causal, device=device), device
            )
            row = {"n": n, "heads": h, "mode": mode, "causal": causal, "device": str(device)}
            row["dilated_pattern_s"] = round(new_s, 4)
            if not args.no_old:
                old_s, old = timed(partial(old_dilated_pattern, n, h, segs, rates, mode, causal), device)
                row["old_loop_cpu_s"] = round(old_s, 4)
                row["equal"] = bool(torch.equal(new.cpu(), old))
                del old
            del new
            build_sparse = partial(sparse.attention_pattern, n, causal, num_heads=h, device=device)
            sparse_s, counts = timed(build_sparse, device)
            row["block_sparse_pattern_s"] = round(sparse_s, 4)
            del counts
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, device {device}")
    keys = [k for k in rows[0] if k.endswith("_s")]
    print("mode        causal  " + "  ".join(f"{k:>22}" for k in keys))
    for row in rows:
        cells = "  ".join(f"{row[k]:>22.3f}" for k in keys)
        print(f"{row['mode']:<11} {row['causal']!s:<7} {cells}")


if __name__ == "__main__":
    main()
