"""Probe which attention kernels (with log-sum-exp) a GPU's torch offers and how fast each is.

Why: ``ImprovedDilatedAttention`` merges dilated branches by log-sum-exp, so it needs a fused
kernel that returns the LSE.  This script lists the private aten ops that do, checks each
against SDPA's public result, and times them (CUDA events, L2 flush, median) on the work of
gpu_timing.md §11: dilated segments of 1 x n x 12 x 64, segments [2048, 4096, 8192], rates
[1, 2, 4], pre-gathered into contiguous (batch*segments, heads, w/r, d) tensors.

Run: ``python docs/perf/probe_kernels.py`` on a CUDA machine (prints a table; writes JSON to $OUT).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def timeit(fn, reps: int = 50, warmup_s: float = 0.5) -> float:
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < warmup_s or n < 5:
        fn()
        n += 1
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def main() -> None:
    out_dir = os.environ.get("OUT", ".")
    dev = torch.device("cuda")
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
    ops = {
        n: hasattr(torch.ops.aten, n)
        for n in (
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_efficient_attention",
            "_flash_attention_forward",
            "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_cudnn_attention_backward",
            "_scaled_dot_product_efficient_attention_backward",
            "_efficient_attention_forward",
        )
    }
    print(json.dumps(ops, indent=1))
    for name in (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_flash_attention_backward",
    ):
        if hasattr(torch.ops.aten, name):
            print(name, getattr(torch.ops.aten, name).default._schema)
    rows = []
    segs, rates, h, d = [2048, 4096, 8192], [1, 2, 4], 12, 64
    for n in (8192, 32768, 131072):
        for w, r in zip(segs, rates, strict=True):
            ww = min(w, n)
            nseg = n // ww
            m = ww // r
            q, k, v = (torch.randn(nseg, h, m, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * nseg * h * m * m * d
            ref = F.scaled_dot_product_attention(q, k, v)
            cands = {"sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v)}
            if ops["_scaled_dot_product_flash_attention"]:
                cands["flash_lse"] = lambda q=q, k=k, v=v: torch.ops.aten._scaled_dot_product_flash_attention(
                    q, k, v, 0.0, False, False
                )
            if ops["_scaled_dot_product_cudnn_attention"]:
                cands["cudnn_lse"] = lambda q=q, k=k, v=v: torch.ops.aten._scaled_dot_product_cudnn_attention(
                    q, k, v, None, True, 0.0, False, False
                )
            if ops["_scaled_dot_product_efficient_attention"]:
                cands["eff_lse"] = lambda q=q, k=k, v=v: (
                    torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, False)
                )
            for name, fn in cands.items():
                try:
                    res = fn()
                    o = res if isinstance(res, torch.Tensor) else res[0]
                    err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                    ms = timeit(fn)
                    rows.append(dict(n=n, w=ww, r=r, kernel=name, ms=ms, tflops=flops / ms / 1e9, err=err))
                except Exception as exc:  # a probe reports every failure
                    rows.append(dict(n=n, w=ww, r=r, kernel=name, error=repr(exc)[:200]))
    for be in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (torch.randn(4, 12, 8192, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
        try:
            with sdpa_kernel(getattr(SDPBackend, be)):
                ms = timeit(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v))
            rows.append(
                dict(
                    n=8192 * 4,
                    kernel=f"sdpa[{be}] 4x12x8192x64",
                    ms=ms,
                    tflops=4 * 4 * 12 * 8192 * 8192 * 64 / ms / 1e9,
                )
            )
        except Exception as exc:
            rows.append(dict(kernel=f"sdpa[{be}]", error=repr(exc)[:200]))
    try:
        from torch.nn.attention.flex_attention import flex_attention

        q, k, v = (torch.randn(4, 12, 8192, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
        t0 = time.perf_counter()
        fa = torch.compile(flex_attention)
        fa(q, k, v)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        ms = timeit(lambda: fa(q, k, v))
        rows.append(
            dict(
                kernel="flex 4x12x8192x64",
                ms=ms,
                tflops=4 * 4 * 12 * 8192 * 8192 * 64 / ms / 1e9,
                compile_s=compile_s,
            )
        )
    except Exception as exc:
        rows.append(dict(kernel="flex", error=repr(exc)[:300]))
    with open(os.path.join(out_dir, "probe_kernels.json"), "w") as f:
        json.dump(
            dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, ops=ops, rows=rows),
            f,
            indent=1,
        )
    for r in rows:
        print(r, file=sys.stdout)


if __name__ == "__main__":
    main()
