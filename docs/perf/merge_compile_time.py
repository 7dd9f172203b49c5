"""Compile time of the Triton merge kernels for sm_90, on the CPU (no GPU needed: ptxas is a host tool).

Why: the fused merge (attention/_merge_triton.py) is opt-in because its first call in a process
cost 22-25 s of compilation on an H100 (2026-11-25).  This measures what the kernel's block shape
does to that cost, in a fresh Triton cache for every compile.

    pip install triton==3.6.0            # the device's version; nothing else changes
    python docs/perf/merge_compile_time.py --rows 128,32 --parts 4,5,8
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import attention._merge_triton as mt

_CONSTEXPR = ("NUM", "HAS_PRIOR", "ACCUMULATE", "BLOCK_R", "BLOCK_D", "WIDE", "VEC")


def _signature(kernel: triton.JITFunction, pointers: dict[str, str]) -> dict[str, str]:
    """bf16 values, float32 LSEs and accumulators, int32 integers (what a bf16 forward passes)."""
    out = {}
    for name in kernel.arg_names:
        if name in pointers:
            out[name] = pointers[name]
        elif name in _CONSTEXPR:
            out[name] = "constexpr"
        elif name in {f"v{i}" for i in range(mt.SLOTS)}:
            out[name] = "*bf16"
        elif name in {f"l{i}" for i in range(mt.SLOTS)}:
            out[name] = "*fp32"
        else:
            out[name] = "i32"  # every integer of a destination below 2**30 rows
    return out


def compile_seconds(which: str, parts: int, rows: int, head_dim: int = 64) -> tuple[float, int, str]:
    """(seconds, cubin bytes, PTX) of one compile for sm_90 in an empty cache, with what the JIT
    assumes of aligned tensors (16-byte pointers) and the switches a bf16 forward passes."""
    if which == "merge":
        kernel = mt._merge_kernel
        sig = _signature(kernel, {"out": "*bf16", "lse_out": "*fp32", "prior_o": "*fp32", "prior_l": "*fp32"})
        const = {"NUM": parts, "HAS_PRIOR": False, "BLOCK_R": rows, "BLOCK_D": head_dim}
    else:
        kernel = mt._sum_kernel
        sig = _signature(kernel, {"dest": "*fp32"})
        const = {"NUM": parts, "ACCUMULATE": False, "BLOCK_R": rows, "BLOCK_D": head_dim}
    const.update(WIDE=False, VEC=8)  # below 2**30 rows, every row 16-byte aligned
    # what the JIT assumes of a 16-byte aligned pointer and of head_dim 64 (a multiple of 16)
    aligned = [i for i, (name, t) in enumerate(sig.items()) if t.startswith("*") or name == "D"]
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        src = ASTSource(
            fn=kernel,
            signature=sig,
            constexprs={(kernel.arg_names.index(k),): v for k, v in const.items()},
            attrs={(i,): [["tt.divisibility", 16]] for i in aligned},
        )
        started = time.perf_counter()
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        return time.perf_counter() - started, len(compiled.asm["cubin"]), compiled.asm["ptx"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="128,32", help="BLOCK_R values (rows per program)")
    ap.add_argument("--parts", default="4,5,8", help="parts per launch (NUM)")
    ap.add_argument("--kernels", default="merge,sum")
    args = ap.parse_args()
    print(f"triton {triton.__version__}, sm_90, head_dim 64, load average {os.getloadavg()[0]:.1f}")
    print("| kernel | parts | rows per program | compile s | cubin KiB | global loads | divisions |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for which in args.kernels.split(","):
        for parts in (int(p) for p in args.parts.split(",")):
            for rows in (int(r) for r in args.rows.split(",")):
                seconds, size, ptx = compile_seconds(which, parts, rows)
                loads = ", ".join(sorted(set(re.findall(r"ld\.global[.\w]*", ptx))))
                divisions = len(re.findall(r"\b(?:div|rem)\.[su]", ptx))
                cells = [which, parts, rows, f"{seconds:.1f}", size // 1024, loads, divisions]
                print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
