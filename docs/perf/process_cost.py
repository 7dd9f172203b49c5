"""Where the time of one benchmark process goes (GPU): the phases of an asv suite benchmark, timed.

Mimics what ``asv_benchmarks/bench_attention.py`` does in one process, for a few implementations,
and prints seconds per phase: torch import, CUDA init, building the case, first call, warm-up,
eager samples, graph capture, graph samples, peak-memory pass.  Run on the GPU machine from the
repository root:  python3 docs/perf/process_cost.py [impl:seq_len ...]
"""

from __future__ import annotations

import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402

t_import = time.perf_counter() - t0

from perfguard import profiles  # noqa: E402
from perfguard.engine import cases, timing  # noqa: E402


def phases(impl: str, seq_len: int, which: str) -> dict[str, float]:
    out: dict[str, float] = {}
    t = time.perf_counter()
    torch.cuda.init()
    torch.cuda.synchronize()
    out["cuda_init"] = time.perf_counter() - t
    t = time.perf_counter()
    timing.pin_settings("cuda")
    case = cases.build(impl, seq_len, "bfloat16", "cuda", profiles.PROFILES["production"])
    torch.cuda.synchronize()
    out["build"] = time.perf_counter() - t
    fn = case.forward() if which == "fwd" else case.forward_backward()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    out["first_call"] = time.perf_counter() - t
    t = time.perf_counter()
    result = timing.time_call(fn, "cuda")
    out["time_call"] = time.perf_counter() - t
    out["warmup"] = result.info.get("warmup_s", 0.0)
    out["samples"] = len(result.samples)
    out["median_ms"] = result.median * 1e3
    out["method"] = result.method  # type: ignore[assignment]
    t = time.perf_counter()
    timing.peak_memory(fn, "cuda")
    out["memory"] = time.perf_counter() - t
    return out


if __name__ == "__main__":
    wanted = sys.argv[1:] or ["improved:4096", "dilated:4096", "block_sparse_ring:4096", "ring:4096"]
    print(f"torch import {t_import:.2f} s")
    for spec in wanted:
        impl, n = spec.split(":")
        for which in ("fwd", "fwdbwd"):
            t = time.perf_counter()
            row = phases(impl, int(n), which)
            total = time.perf_counter() - t
            cells = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            print(f"{impl}:{n} {which} total={total:.2f} {cells}", flush=True)
