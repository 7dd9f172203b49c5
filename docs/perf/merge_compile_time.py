"""Compile time of the Triton merge kernels for sm_90, on the CPU (no GPU needed: ptxas is a host tool).

Why: the first fused merge (one kernel) cost 22-25 s of compilation at its first call on an H100
(2026-11-25), and then ran instruction-bound.  This measures, without a GPU, each kernel's compile
time and what it compiles to: the global loads (16-byte ``v4.b32`` vectors or single elements) and
the integer divisions in the PTX, in a fresh Triton cache for every compile.

    pip install triton==3.6.0            # the device's version; nothing else changes
    python docs/perf/merge_compile_time.py --parts 4,7,8
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

_CONSTEXPR = ("NUM", "HAS_PRIOR", "WITH_LSE", "WEIGHTED", "BLOCK", "BLOCK_R", "BLOCK_D", "WIDE", "VEC")


def _signature(kernel: triton.JITFunction) -> dict[str, str]:
    """What a bf16 forward passes: bf16 values and output, float32 LSEs, an int32 map, int32
    integers (every destination below 2**30 rows)."""
    out = {}
    for name in kernel.arg_names:
        if name in _CONSTEXPR:
            out[name] = "constexpr"
        elif name == "idx":
            out[name] = "*i32"
        elif name in ("out", "prior_o") or (name[0] == "v" and name[1:].isdigit()):
            out[name] = "*bf16"
        elif name in ("lse_out", "prior_l", "wmap") or (name[0] == "l" and name[1:].isdigit()):
            out[name] = "*fp32"
        else:
            out[name] = "i32"
    return out


def compile_seconds(which: str, parts: int, rows: int, head_dim: int = 64) -> tuple[float, int, str]:
    """(seconds, cubin bytes, PTX) of one compile for sm_90 in an empty cache, with what the JIT
    assumes of aligned tensors (16-byte pointers, head_dim a multiple of 16)."""
    if which == "locate":
        kernel = mt._locate_kernel
        const = {"NUM": parts, "HAS_PRIOR": False, "WITH_LSE": True, "BLOCK": mt._LOCATE_ROWS, "WIDE": False}
    else:
        kernel = mt._combine_kernel
        const = {"NUM": parts, "HAS_PRIOR": False, "WEIGHTED": True, "BLOCK_R": rows, "BLOCK_D": head_dim}
        const.update(WIDE=False, VEC=8)
    sig = _signature(kernel)
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
    ap.add_argument("--rows", default="32", help="BLOCK_R values of the combine kernel (rows per program)")
    ap.add_argument("--parts", default="4,7,8", help="parts per launch (NUM)")
    ap.add_argument("--kernels", default="locate,combine")
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
