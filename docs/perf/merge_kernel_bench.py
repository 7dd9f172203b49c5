"""The merge and gradient-sum kernels alone, on the parts ``improved`` really produces.

Why: the fused Triton merge first ran at 9.4 ms for a 32K-token forward on an H100 (the attention
itself 0.80 ms), because without alignment hints Triton loaded one element at a time and gave each
thread 16 rows to locate by 64-bit division (docs/perf/attention.md).  This times each kernel
against the bytes it must move (every part read once, the destination written once), for a few
rows-per-program choices, and checks its result against the plain-torch merge.

    python3 docs/perf/merge_kernel_bench.py                 # on the GPU, ~30 s
    python3 docs/perf/merge_kernel_bench.py --lengths 2048  # the CPU: torch only (no timing meaning)

bf16, 1 x n x 12 x 64, segments [2048, 4096, 8192], rates [1, 2, 4] (issue 18's configuration).
Timing: median of CUDA-event samples of 20 back-to-back calls, after warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention import ImprovedDilatedAttention
from attention import _merge as merge_mod
from attention._engine import run_pieces_forward
from attention._lse import compute_dtype
from attention._part import Part

HEADS, DIM, SEGS, RATES = 12, 64, [2048, 4096, 8192], [1, 2, 4]


def parts_of(n: int, device: torch.device, dtype: torch.dtype):
    """The parts ``improved``'s forward merges at length ``n`` (one chunk), and a destination."""
    g = torch.Generator(device=device).manual_seed(n)
    q, k, v = (torch.randn(1, n, HEADS, DIM, device=device, dtype=dtype, generator=g) for _ in range(3))
    module = ImprovedDilatedAttention(segment_lengths=[min(s, n) for s in SEGS], dilation_rates=RATES)
    plan = module._plan(q, False, module._chunk_lengths(q))
    parts, _ = run_pieces_forward(plan, plan.pieces(0, 0), q, k, v)
    return parts, torch.empty_like(q), torch.empty((1, n, HEADS), dtype=compute_dtype(dtype), device=device)


def time_us(fn, cuda: bool, reps: int = 20, samples: int = 15) -> float:
    for _ in range(3):
        fn()
    if not cuda:
        return float("nan")
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / reps)
    return statistics.median(out)


def bench_length(n: int, blocks: list[int], cuda: bool, mt) -> list[dict]:
    """Every kernel at length ``n``: one row each (also printed)."""
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    parts, out, lse = parts_of(n, device, dtype)
    moved = sum(p.values.numel() * p.values.element_size() + p.lse.numel() * 4 for p in parts)
    moved += out.numel() * out.element_size() + lse.numel() * 4
    ref_o, ref_l = torch.empty_like(out), torch.empty_like(lse)
    merge_mod.merge_torch(parts, ref_o, ref_l)
    grads = [Part(p.values, None, p.offset, p.sizes, p.strides) for p in parts]
    ref_g = torch.empty_like(out)
    merge_mod.sum_torch(grads, ref_g)
    sum_moved = sum(p.values.numel() * p.values.element_size() for p in parts) + out.numel() * 2
    rows: list[dict] = []

    def row(kernel: str, block: object, us: float, moved_bytes: int, diff: float) -> None:
        r = {"n": n, "kernel": kernel, "rows_per_program": block, "us": us, "parts": len(parts)}
        r |= {"GBps": moved_bytes / us / 1e3 if us == us else None, "max_abs_diff": diff}
        rows.append(r)
        gbps = "–" if r["GBps"] is None else f"{r['GBps']:.0f}"
        print(f"| {n} | {kernel} | {block} | {us:.1f} | {gbps} | {diff:.2e} |", flush=True)

    row("merge torch", "–", time_us(lambda: merge_mod.merge_torch(parts, out, lse), cuda), moved, 0.0)
    row("sum torch", "–", time_us(lambda: merge_mod.sum_torch(grads, out), cuda), sum_moved, 0.0)
    if mt is None:
        return rows
    default_block = mt._block_r
    for block in blocks:
        mt._block_r = lambda block_d, block=block: block
        try:
            us = time_us(lambda: mt.merge(parts, out, lse), cuda)
            row("merge triton", block, us, moved, (out.float() - ref_o.float()).abs().max().item())
            us = time_us(lambda: mt.sum_rows(grads, out, accumulate=False), cuda)
            row("sum triton", block, us, sum_moved, (out.float() - ref_g.float()).abs().max().item())
        finally:
            mt._block_r = default_block
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="8192,32768,131072,524288")
    ap.add_argument("--rows", default="16,32,64", help="rows per program of the Triton kernels")
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    mt = None
    if cuda:
        from attention import _merge_triton

        mt = _merge_triton if _merge_triton.AVAILABLE else None
    print(f"{torch.cuda.get_device_name(0) if cuda else 'cpu'}, torch {torch.__version__}")
    print("| n | kernel | rows/program | us | GB/s | max abs diff vs torch |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    rows = []
    for n in (int(x) for x in args.lengths.split(",")):
        rows += bench_length(n, [int(x) for x in args.rows.split(",")], cuda, mt)
        if cuda:
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
