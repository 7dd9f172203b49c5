"""A GPU smoke check of the one-part Triton merge (``attention._merge_triton.merge_into``) against
the torch running merge, bf16 and float32, dilated overlapping parts: prints the largest
difference and exits 1 when the kernel fails or differs beyond the dtype's rounding.

    python3 docs/perf/merge_into_gpu_check.py
"""

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import attention._merge as mm
import attention._merge_triton as mt
from attention._part import Part

gen = torch.Generator(device="cuda").manual_seed(0)
worst = 0.0
for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2 * 2**-8)):
    n, h, d = 65536, 12, 64
    parts = [
        Part(torch.randn(1, h, n // r, d, device="cuda", generator=gen).to(dtype),
             2 * torch.randn(1, h, n // r, device="cuda", generator=gen), 0, (1, h, n // r), (0, 1, r * h))
        for r in (1, 4, 16)
    ]  # fmt: skip
    o_t = torch.zeros(1, n, h, d, device="cuda", dtype=dtype)
    l_t = torch.full((1, n, h), -math.inf, device="cuda")
    o_p, l_p = o_t.clone(), l_t.clone()
    for p in parts:
        mt.merge_into(p, o_t, l_t)
        mm._merge_one_torch(p, o_p, l_p)
    diff = ((o_t.float() - o_p.float()).abs().max() / o_p.float().abs().max()).item()
    ldiff = (l_t - l_p).abs().max().item()
    print(f"merge_into {dtype}: output differs by {diff:.2e} (relative to the largest), lse by {ldiff:.2e}")
    if not (diff <= tol and ldiff <= 1e-4):
        sys.exit(1)
print("merge_into on CUDA ok")
