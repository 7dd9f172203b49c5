"""Every number of issue 18 ("Fast attention, part 2", "Done when") in one run.

Sections (bf16, batch 1, 12 heads, head_dim 64, ``mode="longnet"``, rates [1, 2, 4]):

1. ``improved`` forward (CUDA-graph replay) and forward+backward against SDPA on *pre-gathered*
   contiguous segments (per branch ``(segments, heads, w/r, d)``, the gather not timed; SDPA picks
   its kernel) at 8K, 32K, 128K, 512K, segments [2048, 4096, 8192] (issue 8's configuration).
2. ``ring`` (ring_size 8) against ``improved`` at 1K, 4K, 16K, forward, graph replay, with the
   production profile's segments (``[n/4, n/2, n]`` below 8K, [2048, 4096, 8192] from 8K).
3. ``ring`` at 128K: attention intermediates (peak allocation beyond inputs and output, forward
   under ``no_grad``) of ring_size 8 against ring_size 1, and its time against ``improved``.
4. ``block_sparse_ring`` at 90 % sparsity, 32K, block 128, local window, against dense SDPA
   (FlashAttention-2) on the same shape: the first call's wall time (compile cost in a fresh
   process) and the speed-up of a few FlexAttention ``kernel_options`` (the default first).
5. Backends: ``improved`` forward on every attention kernel ``attention.backends`` finds here,
   per sequence length (graph replay; eager where capture fails), and the kernels not available
   with why.
6. ``torch.profiler`` kernel tables of ``improved`` forward and backward at 32K and 128K: the
   top kernels by device time, their counts, and the total kernel count.

Timing: median of CUDA-event samples, L2 flushed (256 MiB zeroed) before each sample outside the
timed region, >= 0.3 s warm-up.  Every section catches its own failure and the run goes on.

    python3 docs/perf/attention_bench.py            # the GPU run, about 3 minutes on an H100
    python3 docs/perf/attention_bench.py --smoke    # tiny sizes, CPU allowed: checks the script

Writes ``attention_bench.json`` and ``attention_bench.md`` into ``$OUT`` (or the current
directory) and prints the Markdown tables last.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention import (
    BlockSparseRingDilatedAttention,
    ImprovedDilatedAttention,
    RingDilatedAttention,
    backends,
)
from attention.pattern import dilated_attended_pairs

HEADS, DIM = 12, 64
ISSUE_SEGS, RATES = [2048, 4096, 8192], [1, 2, 4]
SECTIONS = ("improved", "ring", "block-sparse", "backends", "kernels")
#: engine variants the improved and kernels sections compare (``--variants``): the merge
#: (``ATTENTION_MERGE``: the fused Triton merge on CUDA, or plain torch as before issue 18's
#: second part) and the streams a chunk pair's kernel calls are spread over (``ATTENTION_STREAMS``)
VARIANTS: dict[str, tuple[str, str]] = {
    "default": (os.environ.get("ATTENTION_MERGE", "auto"), os.environ.get("ATTENTION_STREAMS", "4")),
    "serial": ("auto", "1"),
    "torch": ("torch", "1"),
}


def use_variant(name: str) -> None:
    """Switch the engine to variant ``name`` for the calls that follow (read at every call)."""
    os.environ["ATTENTION_MERGE"], os.environ["ATTENTION_STREAMS"] = VARIANTS[name]


class Bench:
    """Device, dtype, timing and the rows of one run."""

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.cuda = torch.cuda.is_available() and not (smoke and os.environ.get("BENCH_CPU"))
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        self.samples = 5 if smoke else 25
        self.warmup_s = 0.05 if smoke else 0.3
        self.rows: list[dict] = []
        self.failures: list[str] = []
        self._flush_buf: torch.Tensor | None = None

    # -- timing ---------------------------------------------------------------------------------
    def _flush(self) -> None:
        if not self.cuda:
            return
        if self._flush_buf is None:
            self._flush_buf = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
        self._flush_buf.zero_()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], object], *, graph: bool) -> tuple[float, str]:
        """(median ms, method): a CUDA-graph replay when asked and capture works, else eager."""
        call, method = fn, "eager"
        if graph and self.cuda:
            try:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        fn()
                torch.cuda.current_stream().wait_stream(stream)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    fn()
                call, method = g.replay, "graph"
            except Exception as exc:  # report and time eagerly
                self.failures.append(f"graph capture failed, timed eagerly: {exc!r}"[:300])
                torch.cuda.synchronize()
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < self.warmup_s or n < 3:
            call()
            n += 1
        self._sync()
        out = []
        for _ in range(self.samples):
            self._flush()
            if self.cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                call()
                e.record()
                torch.cuda.synchronize()
                out.append(s.elapsed_time(e))
            else:
                t0 = time.perf_counter()
                call()
                out.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(out), method

    def first_call_s(self, fn: Callable[[], object]) -> float:
        """Wall time of a call that is the first of its kind in the process (plans, compilation)."""
        self._sync()
        t0 = time.perf_counter()
        fn()
        self._sync()
        return time.perf_counter() - t0

    def peak_extra_bytes(self, fn: Callable[[], torch.Tensor]) -> int | None:
        """Peak allocation of one call beyond what existed before it and beyond its output."""
        if not self.cuda:
            fn()
            return None
        fn()
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        return int(peak - out.numel() * out.element_size())

    # -- data -----------------------------------------------------------------------------------
    def qkv(self, n: int, *, grad: bool = False) -> list[torch.Tensor]:
        g = torch.Generator(device=self.device).manual_seed(n)
        return [
            torch.randn(1, n, HEADS, DIM, device=self.device, dtype=self.dtype, generator=g).requires_grad_(
                grad
            )
            for _ in range(3)
        ]

    def record(self, **row: object) -> None:
        self.rows.append(row)
        print(json.dumps(row, default=str), flush=True)

    def section(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # the other sections still produce numbers
            self.failures.append(f"section {name} failed: {exc!r}"[:600])
            traceback.print_exc()
        print(f"-- section {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def production_dilation(n: int) -> dict[str, list[int]]:
    """perfguard's production profile (perfguard.profiles.dilation_for), copied to stay standalone."""
    if n >= 8192:
        segments = list(ISSUE_SEGS)
    else:
        top = max(16, 1 << (max(n, 1) - 1).bit_length())
        segments = [top // 4, top // 2, top]
    return {"segment_lengths": segments, "dilation_rates": list(RATES)}


def scaled(segs: list[int], n: int, smoke: bool) -> list[int]:
    return [max(4, s // 64) for s in segs] if smoke else segs


def tflops(n: int, segs: list[int], ms: float, *, backward: bool = False) -> float:
    pairs = dilated_attended_pairs(n, HEADS, segs, RATES, "longnet")
    return 4 * pairs * DIM * (3.5 if backward else 1.0) / (ms * 1e-3) / 1e12


# ------------------------------------------------------------------------------------------------
# 1. improved vs SDPA on pre-gathered segments
# ------------------------------------------------------------------------------------------------
def pregathered(b: Bench, n: int, segs: list[int], grad: bool) -> list[list[torch.Tensor]]:
    out = []
    for w, r in zip(segs, RATES, strict=True):
        w = min(w, n)
        g = torch.Generator(device=b.device).manual_seed(w)
        out.append(
            [
                torch.randn(
                    n // w, HEADS, w // r, DIM, device=b.device, dtype=b.dtype, generator=g
                ).requires_grad_(grad)
                for _ in range(3)
            ]
        )
    return out


def kernel_name(module: torch.nn.Module) -> str:
    """The attention kernel the module's (latest) plan runs on, after any run-time fallback."""
    plans = list(module._plans._plans.values())
    return plans[-1].kernels.name if plans else "?"


def improved_vs_sdpa(b: Bench, n: int, variants: list[str]) -> None:
    """Both ratios of the issue for each engine variant, against one SDPA reference."""
    segs = scaled(ISSUE_SEGS, n, b.smoke)
    q, k, v = b.qkv(n)
    branches = pregathered(b, n, segs, grad=False)

    def sdpa_fwd() -> None:
        for bq, bk, bv in branches:
            F.scaled_dot_product_attention(bq, bk, bv)

    with torch.no_grad():
        t_sdpa_f, m_sdpa_f = b.time_ms(sdpa_fwd, graph=True)
    qg, kg, vg = b.qkv(n, grad=True)
    grad_out = torch.randn_like(qg)
    bg = pregathered(b, n, segs, grad=True)
    ones = [torch.ones_like(x[0]) for x in bg]

    def sdpa_fb() -> None:
        for (bq, bk, bv), go in zip(bg, ones, strict=True):
            F.scaled_dot_product_attention(bq, bk, bv).backward(go)

    t_sdpa_fb, m_sdpa_fb = b.time_ms(sdpa_fb, graph=True)
    for variant in variants:
        use_variant(variant)
        improved = ImprovedDilatedAttention(segment_lengths=segs, dilation_rates=RATES)
        with torch.no_grad():
            first_f = b.first_call_s(lambda m=improved: m(q, k, v))
            t_imp, m_imp = b.time_ms(lambda m=improved: m(q, k, v), graph=True)
        b.record(
            bench="improved-forward",
            variant=variant,
            n=n,
            method=f"{m_imp}/{m_sdpa_f}",
            kernel=kernel_name(improved),
            first_call_s=first_f,
            sdpa_pregathered_ms=t_sdpa_f,
            improved_ms=t_imp,
            improved_tflops=tflops(n, segs, t_imp),
            improved_vs_sdpa=t_sdpa_f / t_imp,
        )

        def imp_fb(m: torch.nn.Module = improved) -> None:
            m(qg, kg, vg).backward(grad_out)

        first_fb = b.first_call_s(imp_fb)
        t_imp, m_imp = b.time_ms(imp_fb, graph=True)
        b.record(
            bench="improved-forward+backward",
            variant=variant,
            n=n,
            method=f"{m_imp}/{m_sdpa_fb}",
            first_call_s=first_fb,
            sdpa_pregathered_ms=t_sdpa_fb,
            improved_ms=t_imp,
            improved_tflops=tflops(n, segs, t_imp, backward=True),
            improved_vs_sdpa=t_sdpa_fb / t_imp,
        )
        for x in (qg, kg, vg):
            x.grad = None


# ------------------------------------------------------------------------------------------------
# 2-3. ring
# ------------------------------------------------------------------------------------------------
def ring_short(b: Bench, n: int) -> None:
    cfg = production_dilation(n)
    cfg["segment_lengths"] = scaled(cfg["segment_lengths"], n, b.smoke) if b.smoke else cfg["segment_lengths"]
    improved = ImprovedDilatedAttention(**cfg)
    ring = RingDilatedAttention(**cfg, ring_size=8)
    q, k, v = b.qkv(n)
    with torch.no_grad():
        t_ring, m_ring = b.time_ms(lambda: ring(q, k, v), graph=True)
        t_imp, m_imp = b.time_ms(lambda: improved(q, k, v), graph=True)
    b.record(
        bench="ring-short",
        n=n,
        method=f"{m_ring}/{m_imp}",
        chunks=len(ring._chunk_lengths(q)),
        ring8_ms=t_ring,
        improved_ms=t_imp,
        ring8_over_improved=t_ring / t_imp,
    )


def ring_long(b: Bench, n: int) -> None:
    segs = scaled(ISSUE_SEGS, n, b.smoke)
    # the smoke run is tiny: force chunking there so the chunked path is exercised
    extra = {"single_shot_bytes": 0} if b.smoke else {}
    ring1 = RingDilatedAttention(segment_lengths=segs, dilation_rates=RATES, ring_size=1)
    ring8 = RingDilatedAttention(segment_lengths=segs, dilation_rates=RATES, ring_size=8, **extra)
    improved = ImprovedDilatedAttention(segment_lengths=segs, dilation_rates=RATES)
    q, k, v = b.qkv(n)
    with torch.no_grad():
        m1 = b.peak_extra_bytes(lambda: ring1(q, k, v))
        m8 = b.peak_extra_bytes(lambda: ring8(q, k, v))
        t8, m_ring = b.time_ms(lambda: ring8(q, k, v), graph=True)
        ti, m_imp = b.time_ms(lambda: improved(q, k, v), graph=True)
    b.record(
        bench="ring-long",
        n=n,
        method=f"{m_ring}/{m_imp}",
        chunks=len(ring8._chunk_lengths(q)),
        ring1_extra_bytes=m1,
        ring8_extra_bytes=m8,
        ring8_over_ring1_memory=(m8 / m1) if m1 else None,
        ring8_ms=t8,
        improved_ms=ti,
        ring8_over_improved=t8 / ti,
    )


# ------------------------------------------------------------------------------------------------
# 4. block-sparse
# ------------------------------------------------------------------------------------------------
KERNEL_OPTIONS: list[dict] = [
    {},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3},
]


def block_sparse(b: Bench, n: int) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = b.qkv(n)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    block = 16 if b.smoke else 128
    options_list = KERNEL_OPTIONS[:1] if b.smoke else KERNEL_OPTIONS
    backend = "auto" if b.cuda else "flex"

    def dense() -> None:
        kinds = [SDPBackend.FLASH_ATTENTION] if b.cuda else [SDPBackend.MATH]
        with sdpa_kernel(kinds):
            F.scaled_dot_product_attention(qt, kt, vt)

    with torch.no_grad():
        t_dense, m_dense = b.time_ms(dense, graph=True)
        for options in options_list:
            module = BlockSparseRingDilatedAttention(
                segment_lengths=scaled(ISSUE_SEGS, n, b.smoke),
                dilation_rates=RATES,
                sparsity=0.9,
                block_size=block,
                pattern="local_window",
                backend=backend,
                kernel_options=options,
            )
            first_s = b.first_call_s(lambda module=module: module(q, k, v))
            try:
                t_bs, m_bs = b.time_ms(lambda module=module: module(q, k, v), graph=True)
            except Exception as exc:  # an option the kernel cannot compile: report it
                b.failures.append(f"block-sparse kernel_options {options}: {exc!r}"[:300])
                continue
            b.record(
                bench="block-sparse",
                n=n,
                method=f"{m_bs}/{m_dense}",
                sparsity=0.9,
                block_size=block,
                kernel_options=options,
                first_call_s=first_s,
                block_sparse_ms=t_bs,
                dense_flash_ms=t_dense,
                speedup=t_dense / t_bs,
            )


# ------------------------------------------------------------------------------------------------
# 5. backends
# ------------------------------------------------------------------------------------------------
def backends_table(b: Bench, lengths: list[int]) -> None:
    rows = backends.available(b.device, b.dtype, DIM)
    for name, why in rows:
        if why is not None:
            b.record(bench="backend", backend=name, available=False, reason=why)
            continue
        too_slow = False
        for n in lengths:
            if too_slow:
                break
            if name in ("math", "flex") and n > (1024 if b.smoke else 32768):
                # math: O(segment²) fp32 scores per branch; flex: one compile per piece shape, and
                # past Dynamo's recompile limit it would run eagerly (dense): shorter lengths only
                continue
            segs = scaled(ISSUE_SEGS, n, b.smoke)
            module = ImprovedDilatedAttention(segment_lengths=segs, dilation_rates=RATES, backend=name)
            q, k, v = b.qkv(n)
            try:
                with torch.no_grad():
                    first_s = b.first_call_s(lambda module=module, q=q, k=k, v=v: module(q, k, v))
                    t, method = b.time_ms(lambda module=module, q=q, k=k, v=v: module(q, k, v), graph=True)
            except Exception as exc:
                b.record(bench="backend", backend=name, n=n, available=True, error=repr(exc)[:200])
                continue
            if first_s > 60:
                b.failures.append(
                    f"backend {name}: first call {first_s:.0f} s at {n}; longer lengths skipped"
                )
                lengths = [x for x in lengths if x <= n]
            b.record(
                bench="backend",
                backend=name,
                n=n,
                available=True,
                method=method,
                first_call_s=first_s,
                forward_ms=t,
                tflops=tflops(n, segs, t),
            )
            del q, k, v


# ------------------------------------------------------------------------------------------------
# 6. profiler kernel tables
# ------------------------------------------------------------------------------------------------
def _self_device_us(evt) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(evt, attr):
            return float(getattr(evt, attr))
    return 0.0


def kernel_table(b: Bench, n: int, variant: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    use_variant(variant)
    segs = scaled(ISSUE_SEGS, n, b.smoke)
    improved = ImprovedDilatedAttention(segment_lengths=segs, dilation_rates=RATES)
    q, k, v = b.qkv(n, grad=True)
    grad_out = torch.randn_like(q)
    improved(q, k, v).backward(grad_out)  # plans, kernels compiled
    b._sync()
    activities = [ProfilerActivity.CUDA] if b.cuda else [ProfilerActivity.CPU]
    out = improved(q, k, v)
    b._sync()
    for phase in ("forward", "backward"):
        with profile(activities=activities) as prof:
            if phase == "forward":
                out = improved(q, k, v)
            else:
                out.backward(grad_out)
            b._sync()
        events = prof.key_averages()
        if b.cuda:
            kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
            timed = [(e.key, e.count, _self_device_us(e)) for e in kernels]
        else:
            timed = [(e.key, e.count, float(e.self_cpu_time_total)) for e in events]
        timed.sort(key=lambda x: -x[2])
        b.record(
            bench="kernels",
            variant=variant,
            n=n,
            phase=phase,
            unit="device us" if b.cuda else "CPU us (smoke run)",
            kernel_calls=sum(c for _, c, _ in timed),
            total_us=sum(t for *_, t in timed),
            top=[[name[:90], count, round(us, 1)] for name, count, us in timed[:8]],
        )


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def _fmt(x: object, spec: str = ".3g") -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else format(x, spec)
    return str(x)


def markdown(b: Bench, info: dict) -> str:
    lines = [
        f"attention_bench: {info['device']}, torch {info['torch']}, CUDA {info['cuda']}, "
        f"Triton {info['triton']}, variants {info['variants']}, {info['date']}, "
        f"`{info['command']}`{' (SMOKE RUN: tiny sizes, numbers meaningless)' if b.smoke else ''}",
        "",
        "| issue 18 target | n | measured | target | met |",
        "| --- | ---: | ---: | ---: | --- |",
    ]

    def target(label: str, n: object, value: float | None, goal: float, at_least: bool) -> None:
        ok = None if value is None else (value >= goal if at_least else value <= goal)
        met = "–" if ok is None else ("yes" if ok else "NO")
        lines.append(f"| {label} | {n} | {_fmt(value)} | {'>=' if at_least else '<='} {goal} | {met} |")

    for r in b.rows:
        if r["bench"] == "improved-forward":
            label = f"improved fwd / SDPA pre-gathered [{r['variant']}]"
            target(label, r["n"], r["improved_vs_sdpa"], 0.9, True)
        elif r["bench"] == "improved-forward+backward":
            label = f"improved fwd+bwd / SDPA pre-gathered [{r['variant']}]"
            target(label, r["n"], r["improved_vs_sdpa"], 0.8, True)
        elif r["bench"] == "ring-short":
            target("ring(8) / improved time", r["n"], r["ring8_over_improved"], 1.5, False)
        elif r["bench"] == "ring-long":
            target("ring(8) / ring(1) extra memory", r["n"], r["ring8_over_ring1_memory"], 0.25, False)
            target("ring(8) / improved time", r["n"], r["ring8_over_improved"], 1.3, False)
    sparse = [r for r in b.rows if r["bench"] == "block-sparse"]
    if sparse:
        best = max(sparse, key=lambda r: r["speedup"])
        target(
            f"block_sparse_ring 90% / dense flash (best of {len(sparse)}: {best['kernel_options']})",
            best["n"],
            best["speedup"],
            8,
            True,
        )
    lines += ["", "| kind | n | times (ms) / ratio | method |", "| --- | ---: | --- | --- |"]
    for r in b.rows:
        if r["bench"] in ("improved-forward", "improved-forward+backward"):
            lines.append(
                f"| {r['bench']} [{r['variant']}] | {r['n']} | improved {_fmt(r['improved_ms'])} "
                f"({r.get('kernel', 'auto')}), SDPA {_fmt(r['sdpa_pregathered_ms'])}, "
                f"{_fmt(r['improved_tflops'])} TFLOP/s, first call {_fmt(r['first_call_s'])} s "
                f"| {r['method']} |"
            )
        elif r["bench"] in ("ring-short", "ring-long"):
            mem = ""
            if r["bench"] == "ring-long":
                r8, r1 = (r[k] / 2**20 if r[k] else None for k in ("ring8_extra_bytes", "ring1_extra_bytes"))
                mem = f", extra MiB ring8 {_fmt(r8)} ring1 {_fmt(r1)}"
            lines.append(
                f"| {r['bench']} ({r['chunks']} chunks) | {r['n']} | ring8 {_fmt(r['ring8_ms'])}, "
                f"improved {_fmt(r['improved_ms'])}{mem} | {r['method']} |"
            )
        elif r["bench"] == "block-sparse":
            lines.append(
                f"| block-sparse {r['kernel_options']} | {r['n']} | {_fmt(r['block_sparse_ms'])} vs dense "
                f"{_fmt(r['dense_flash_ms'])} = {_fmt(r['speedup'])}x, "
                f"first call {_fmt(r['first_call_s'])} s "
                f"| {r['method']} |"
            )
    lengths = sorted({r["n"] for r in b.rows if r["bench"] == "backend" and "n" in r})
    names = list(dict.fromkeys(r["backend"] for r in b.rows if r["bench"] == "backend"))
    if names:
        lines += [
            "",
            "improved forward per attention kernel (ms, graph replay; first call s in brackets)",
            "",
            "| backend | " + " | ".join(str(n) for n in lengths) + " |",
            "| --- |" + " ---: |" * len(lengths),
        ]
        for name in names:
            rs = [r for r in b.rows if r["bench"] == "backend" and r["backend"] == name]
            if len(rs) == 1 and not rs[0]["available"]:
                lines.append(f"| {name} | not available: {rs[0]['reason']} |" + " |" * (len(lengths) - 1))
                continue
            cells = []
            for n in lengths:
                r = next((x for x in rs if x.get("n") == n), None)
                if r is None:
                    cells.append("–")
                elif "error" in r:
                    cells.append("error")
                else:
                    cells.append(f"{_fmt(r['forward_ms'])} ({_fmt(r['first_call_s'], '.2g')})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for r in b.rows:
        if r["bench"] == "kernels":
            lines += [
                "",
                f"improved {r['phase']} at {r['n']} [{r['variant']}]: {r['kernel_calls']} kernel calls, "
                f"{_fmt(r['total_us'])} {r['unit']}",
                "",
                "| kernel | calls | us |",
                "| --- | ---: | ---: |",
            ]
            lines += [f"| `{name}` | {count} | {us} |" for name, count, us in r["top"]]
    if b.failures:
        lines += ["", "failures:", *[f"- {f}" for f in b.failures]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes (CPU allowed): checks that the script runs"
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)",
    )
    parser.add_argument(
        "--variants",
        default="default",
        help=f"comma-separated engine variants for the improved and kernels sections: {','.join(VARIANTS)} "
        "(default: the engine as configured)",
    )
    parser.add_argument("--tag", default="", help="suffix of the output files (several runs in one $OUT)")
    args = parser.parse_args()
    sections = args.sections.split(",")
    variants = args.variants.split(",")
    unknown = [x for x in sections if x not in SECTIONS] + [x for x in variants if x not in VARIANTS]
    if unknown:
        parser.error(f"unknown section or variant: {', '.join(unknown)}")
    b = Bench(args.smoke)
    torch.backends.cuda.matmul.allow_tf32 = False
    info = {
        "device": torch.cuda.get_device_name(0) if b.cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python3", *sys.argv]),
        "dtype": str(b.dtype),
        "variants": {name: VARIANTS[name] for name in variants},
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    print(json.dumps(info), flush=True)
    t0 = time.perf_counter()
    big = [512, 1024] if args.smoke else [8192, 32768, 131072, 524288]
    with warnings.catch_warnings(record=True) as caught:
        # every RuntimeWarning (a kernel refusing strided views or failing, the Triton merge
        # failing) changes what is measured: keep them all and report them
        warnings.simplefilter("always", RuntimeWarning)
        if "improved" in sections:
            for n in big:
                b.section(f"improved {n}", lambda n=n: improved_vs_sdpa(b, n, variants))
        use_variant(variants[-1])  # the other sections run the last variant
        if "ring" in sections:
            for n in [64, 128, 256] if args.smoke else [1024, 4096, 16384]:
                b.section(f"ring {n}", lambda n=n: ring_short(b, n))
            b.section("ring long", lambda: ring_long(b, 1024 if args.smoke else 131072))
        if "block-sparse" in sections:
            b.section("block-sparse", lambda: block_sparse(b, 512 if args.smoke else 32768))
        if "backends" in sections:
            b.section(
                "backends", lambda: backends_table(b, [256, 1024] if args.smoke else [4096, 32768, 131072])
            )
        if "kernels" in sections:
            for variant in variants:
                for n in [512] if args.smoke else [32768, 131072]:
                    b.section(f"kernels {n} {variant}", lambda n=n, v=variant: kernel_table(b, n, v))
    for w in caught:
        if issubclass(w.category, RuntimeWarning):
            b.failures.append(f"warning: {str(w.message)[:300]}")
    from attention import _merge

    for failed in _merge.TRITON_FALLBACK.reasons.values():
        b.failures.append(f"the Triton merge was switched off, torch merged from then on: {failed[:300]}")
    info["wall_s"] = round(time.perf_counter() - t0, 1)
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"attention_bench{args.tag}.json").write_text(
        json.dumps({"info": info, "rows": b.rows, "failures": b.failures}, indent=1, default=str)
    )
    text = markdown(b, info)
    (out_dir / f"attention_bench{args.tag}.md").write_text(text)
    print(f"\n(total {info['wall_s']} s; JSON and Markdown in {out_dir})\n")
    print(text)


if __name__ == "__main__":
    main()
