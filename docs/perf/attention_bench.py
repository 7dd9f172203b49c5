"""Reproduce every number of issue 8 ("fast attention on Hopper") in one run.

Work: bf16, batch 1, 12 heads, head_dim 64, segments [2048, 4096, 8192], rates [1, 2, 4],
``mode="longnet"`` (the configuration of gpu_timing.md §11).  Attended-pair TFLOP/s as in
gpu_timing.md §3: forward = 4 · batch · pairs · head_dim with ``pairs`` the (head, query, key)
pairs the pattern computes (``attention.pattern.dilated_attended_pairs``, multiplicity counted);
forward + backward = 3.5 × forward.

The yardstick is SDPA on *pre-gathered contiguous* tensors of the same attended work: per
branch, q/k/v already laid out as ``(segments, heads, w/r, d)`` (the gather is not timed), the
three SDPA calls timed back to back.  ``improved`` has to reach ≥ 90 % of its TFLOP/s.

Timing: median of CUDA-event samples, L2 flushed (256 MiB zeroed) before each sample outside the
timed region, ≥ 1 s warm-up; ``eager`` times the Python call, ``graph`` a CUDA-graph replay of it
(launch overhead removed).  Peak memory: ``max_memory_allocated`` minus what was allocated before
the call, minus the output, measured in its own pass.

Run on the GPU machine: ``python3 docs/perf/attention_bench.py`` (``--quick`` for a smoke run).
Prints a table and writes ``attention_bench.json`` into ``$OUT`` (or the current directory).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention import (
    BlockSparseRingDilatedAttention,
    DilatedAttention,
    ImprovedDilatedAttention,
    RingDilatedAttention,
)
from attention.pattern import dilated_attended_pairs

SEGS, RATES, HEADS, DIM = [2048, 4096, 8192], [1, 2, 4], 12, 64
DTYPE = torch.bfloat16
_FLUSH: torch.Tensor | None = None


def _flush() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    _FLUSH.zero_()


def time_ms(fn: Callable[[], object], *, graph: bool, samples: int = 30, warmup_s: float = 1.0) -> float:
    """Median milliseconds of ``fn`` (eager) or of a CUDA-graph replay of it; NaN (with the error
    printed) when the call or its graph capture fails, so one failure does not end the run."""
    try:
        return _time_ms(fn, graph=graph, samples=samples, warmup_s=warmup_s)
    except Exception as exc:  # a benchmark run reports every failure and goes on
        print(f"  timing failed ({'graph' if graph else 'eager'}): {exc!r}"[:400], flush=True)
        torch.cuda.synchronize()
        return float("nan")


def _time_ms(fn: Callable[[], object], *, graph: bool, samples: int, warmup_s: float) -> float:
    call = fn
    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        call = g.replay
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < warmup_s or n < 10:
        call()
        n += 1
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        _flush()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e))
    return statistics.median(out)


def peak_extra_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Peak allocation of one call beyond what existed before it and beyond its output."""
    fn()
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    out_bytes = out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0
    return int(peak - out_bytes)


def qkv(n: int, *, grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(n)
    return tuple(
        torch.randn(1, n, HEADS, DIM, device="cuda", dtype=DTYPE, generator=g).requires_grad_(grad)
        for _ in range(3)
    )


def pregathered(n: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per branch, contiguous (segments, heads, w/r, d) q/k/v with the attended work of longnet mode."""
    out = []
    for w, r in zip(SEGS, RATES, strict=True):
        w = min(w, n)
        nseg, m = n // w, w // r
        g = torch.Generator(device="cuda").manual_seed(w)
        out.append(
            tuple(torch.randn(nseg, HEADS, m, DIM, device="cuda", dtype=DTYPE, generator=g) for _ in range(3))
        )
    return out


def tflops(n: int, ms: float, *, backward: bool = False) -> float:
    pairs = dilated_attended_pairs(n, HEADS, SEGS, RATES, "longnet")
    flop = 4 * pairs * DIM * (3.5 if backward else 1.0)
    return flop / (ms * 1e-3) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer samples (smoke run)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows: list[dict] = []
    info = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python3", *sys.argv]),
    }
    print(info, flush=True)

    def record(**row: object) -> None:
        rows.append(row)
        print(row, flush=True)

    improved = ImprovedDilatedAttention(segment_lengths=SEGS, dilation_rates=RATES).cuda().eval()
    dilated = DilatedAttention(segment_lengths=SEGS, dilation_rates=RATES).cuda().eval()

    # 1. improved vs SDPA on pre-gathered tensors (forward, and forward+backward), and vs dilated.
    lengths = [8192, 32768] if args.quick else [8192, 32768, 131072, 524288]
    for n in lengths:
        run_section(f"forward n={n}", lambda n=n: forward_section(n, improved, dilated, record))

    run_section("ring", lambda: ring_section(args, improved, record))
    run_section("block-sparse", lambda: block_sparse_section(record))
    if not args.quick:
        run_section("1M", lambda: million_section(improved, record))
    finish(info, rows)


def forward_section(
    n: int, improved: torch.nn.Module, dilated: torch.nn.Module, record: Callable[..., None]
) -> None:
    # 1. improved vs SDPA on pre-gathered tensors (forward, and forward+backward), and vs dilated.
    q, k, v = qkv(n)
    branches = pregathered(n)

    def sdpa_fwd(branches=branches) -> None:
        for bq, bk, bv in branches:
            F.scaled_dot_product_attention(bq, bk, bv)

    with torch.no_grad():
        for method in ("eager", "graph"):
            graph = method == "graph"
            t_sdpa = time_ms(sdpa_fwd, graph=graph)
            t_imp = time_ms(lambda q=q, k=k, v=v: improved(q, k, v), graph=graph)
            record(
                bench="forward",
                n=n,
                method=method,
                sdpa_pregathered_ms=t_sdpa,
                improved_ms=t_imp,
                sdpa_tflops=tflops(n, t_sdpa),
                improved_tflops=tflops(n, t_imp),
                improved_vs_sdpa=t_sdpa / t_imp,
            )
            if n <= 32768:
                t_dil = time_ms(lambda q=q, k=k, v=v: dilated(q, k, v), graph=graph)
                record(
                    bench="forward-dilated",
                    n=n,
                    method=method,
                    dilated_ms=t_dil,
                    dilated_tflops=tflops(n, t_dil),
                    improved_over_dilated=t_dil / t_imp,
                )
    if n <= 131072:
        qg, kg, vg = qkv(n, grad=True)
        grad_out = torch.randn_like(qg)
        bg = [tuple(t.detach().requires_grad_(True) for t in br) for br in branches]

        def imp_fb(qg=qg, kg=kg, vg=vg, grad_out=grad_out) -> None:
            improved(qg, kg, vg).backward(grad_out)

        def sdpa_fb(bg=bg) -> None:
            for bq, bk, bv in bg:
                o = F.scaled_dot_product_attention(bq, bk, bv)
                o.backward(torch.ones_like(o))

        t_sdpa = time_ms(sdpa_fb, graph=False, samples=20)
        t_imp = time_ms(imp_fb, graph=False, samples=20)
        record(
            bench="forward+backward",
            n=n,
            method="eager",
            sdpa_pregathered_ms=t_sdpa,
            improved_ms=t_imp,
            sdpa_tflops=tflops(n, t_sdpa, backward=True),
            improved_tflops=tflops(n, t_imp, backward=True),
            improved_vs_sdpa=t_sdpa / t_imp,
        )
        del qg, kg, vg, grad_out, bg
    del q, k, v, branches
    torch.cuda.empty_cache()


def run_section(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:  # keep going: the other sections still produce numbers
        print(f"section {name} failed: {exc!r}"[:600], flush=True)
    torch.cuda.empty_cache()


def ring_section(args: argparse.Namespace, improved: torch.nn.Module, record: Callable[..., None]) -> None:
    # 2. ring: peak memory beyond inputs and outputs, ring_size 8 against 1, and time against improved.
    n = 32768 if args.quick else 131072
    q, k, v = qkv(n)
    with torch.no_grad():
        ring1 = RingDilatedAttention(segment_lengths=SEGS, dilation_rates=RATES, ring_size=1).cuda()
        ring8 = RingDilatedAttention(segment_lengths=SEGS, dilation_rates=RATES, ring_size=8).cuda()
        m1 = peak_extra_bytes(lambda: ring1(q, k, v))
        m8 = peak_extra_bytes(lambda: ring8(q, k, v))
        mi = peak_extra_bytes(lambda: improved(q, k, v))
        t8 = time_ms(lambda: ring8(q, k, v), graph=False)
        ti = time_ms(lambda: improved(q, k, v), graph=False)
        record(
            bench="ring-memory",
            n=n,
            ring1_extra_bytes=m1,
            ring8_extra_bytes=m8,
            improved_extra_bytes=mi,
            ring8_over_ring1=m8 / max(m1, 1),
            ring8_ms=t8,
            improved_ms=ti,
            ring8_over_improved=t8 / ti,
        )


def block_sparse_section(record: Callable[..., None]) -> None:
    # 3. block-sparse at 90 % sparsity against dense SDPA (flash) on the same shape.
    n = 32768
    q, k, v = qkv(n)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with torch.no_grad():
        bs = BlockSparseRingDilatedAttention(
            segment_lengths=SEGS, dilation_rates=RATES, sparsity=0.9, block_size=128, pattern="local_window"
        ).cuda()
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

        def dense_flash() -> None:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                F.scaled_dot_product_attention(qt, kt, vt)

        t_bs = time_ms(lambda: bs(q, k, v), graph=False)
        t_dense = time_ms(dense_flash, graph=False)
        record(
            bench="block-sparse",
            n=n,
            sparsity=0.9,
            block_sparse_ms=t_bs,
            dense_flash_ms=t_dense,
            speedup=t_dense / t_bs,
        )


def million_section(improved: torch.nn.Module, record: Callable[..., None]) -> None:
    # 4. one million tokens on one GPU (forward, bf16): improved and ring.
    n = 1 << 20
    q, k, v = qkv(n)
    ring8 = RingDilatedAttention(segment_lengths=SEGS, dilation_rates=RATES, ring_size=8).cuda()
    with torch.no_grad():
        for name, mod in (("improved", improved), ("ring8", ring8)):
            mem = peak_extra_bytes(lambda mod=mod: mod(q, k, v))
            t = time_ms(lambda mod=mod: mod(q, k, v), graph=False, samples=10)
            record(
                bench="1M",
                n=n,
                impl=name,
                ms=t,
                tflops=tflops(n, t),
                extra_bytes=mem,
                peak_gib=(mem + 4 * q.numel() * q.element_size()) / 2**30,
            )


def finish(info: dict, rows: list[dict]) -> None:
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / "attention_bench.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    print("\nsummary")
    for r in rows:
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
