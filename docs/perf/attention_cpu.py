"""Forward time of every core implementation on CPU (the evidence behind the factory's CPU rule).

Run from the repository root: ``python docs/perf/attention_cpu.py [--seq-len 8192] [--threads 2]``.
Prints a Markdown table: median of ``torch.utils.benchmark`` blocked_autorange, causal forward under
``no_grad``, float32, 1 x n x 8 x 64, segments [512, 1024, 2048], rates [1, 2, 4].
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import date
from pathlib import Path

import torch
from torch.utils import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention import factory

CFG = {"segment_lengths": [512, 1024, 2048], "dilation_rates": [1, 2, 4]}
EXTRA = {"ring": {"ring_size": 4}, "hilbert_ring": {"ring_size": 4}, "block_sparse_ring": {"block_size": 128}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, args.seq_len, 8, 64, generator=gen) for _ in range(3))
    print(
        f"{date.today()} · {platform.processor() or platform.machine()} · torch {torch.__version__} · "
        f"{args.threads} threads · 1x{args.seq_len}x8x64 fp32 causal forward"
    )
    print("| impl | median s | vs dilated |\n| --- | ---: | ---: |")
    base = None
    for name in ("dilated", "improved", "ring", "hilbert_ring", "block_sparse_ring"):
        module = factory.create_dilated_attention(name, **CFG, **EXTRA.get(name, {})).eval()
        with torch.no_grad():
            module(q, k, v, is_causal=True)  # warm-up: plans and caches
            timer = benchmark.Timer(
                stmt="m(q, k, v, is_causal=True)",
                globals={"m": module, "q": q, "k": k, "v": v},
                num_threads=args.threads,
            )
            median = timer.blocked_autorange(min_run_time=2.0).median
        base = base or median
        note = " (its own block-sparse pattern, 90% skipped)" if name == "block_sparse_ring" else ""
        print(f"| {name}{note} | {median:.3f} | {base / median:.1f}x |")


if __name__ == "__main__":
    main()
