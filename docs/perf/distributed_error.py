"""The sequence-parallel ring's error against the number of ranks, on the CPU (gloo): issue 33.

Long-context ring implementations have been seen to lose accuracy as GPUs are added (one rounding
of the running output per merged part, per rank and step).  This measures ours: the same inputs,
split over N = 1, 2 and 4 gloo ranks, forward and backward in bfloat16 (and float32), every rank's
output and input-gradient shards gathered and compared with the float64 reference of the module's
own pattern (``attention_pattern``).  Lanes as the module chooses, as its memory bound chooses
for long sequences, and forced (8 sub-chunks a shard, ``ring_lanes=8``: the geometry of the GPU
runs before issue 33).

    python docs/perf/distributed_error.py [--tokens 2048] [--ranks 1,2,4]

Prints one Markdown table (relative L2 error of out, dq, dk, dv, on one device without a group
and at every N; and each N's largest error over one device's), the one docs/perf/distributed.md
quotes.  tests/test_distributed_error.py bounds the same errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention.reference import reference_attention, relative_error
from attention.ring import RingDilatedAttention

SEGMENTS = [256, 512, 1024, 2048]
RATES = [1, 2, 4, 8]
HEADS, HEAD_DIM = 4, 32
KEYS = ("out", "dq", "dk", "dv")
#: the module's own lanes (one at this size), the lanes its memory bound chooses for a long
#: sequence (``single_shot_bytes=0``: 1, 2, 4, 8 at N = 1, 2, 4, 8 here), 8 lanes forced
LANES = (("module", {}), ("membound", {"single_shot_bytes": 0}), ("8lanes", {"ring_lanes": 8}))


def _inputs(n: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(33)
    return tuple(torch.randn(1, n, HEADS, HEAD_DIM, generator=g) for _ in range(4))


def _bounds(n: int, world: int) -> list[tuple[int, int]]:
    size = n // world
    return [(r * size, (r + 1) * size) for r in range(world)]


def _rank(rank: int, world: int, n: int, init: str, out: str, cases: list[tuple]) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        q, k, v, grad = _inputs(n)
        lo, hi = _bounds(n, world)[rank]
        for name, dtype, causal, kwargs in cases:
            ql, kl, vl = (t[:, lo:hi].to(dtype).clone().requires_grad_() for t in (q, k, v))
            module = RingDilatedAttention(
                segment_lengths=SEGMENTS, dilation_rates=RATES, sequence_parallel=True, **kwargs
            )
            o = module(ql, kl, vl, is_causal=causal)
            o.backward(grad[:, lo:hi].to(dtype))
            shard = {"out": o.detach(), "dq": ql.grad, "dk": kl.grad, "dv": vl.grad}
            torch.save({key: t.float() for key, t in shard.items()}, Path(out) / f"{name}-{rank}.pt")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--ranks", default="1,2,4")
    args = ap.parse_args()
    n, worlds = args.tokens, [int(x) for x in args.ranks.split(",")]
    cases = [
        (f"{dt}-{'causal' if c else 'full'}-{lanes}", getattr(torch, dt), c, kw)
        for dt in ("bfloat16", "float32")
        for c in (False, True)
        for lanes, kw in LANES
    ]
    q, k, v, grad = (t.double().requires_grad_() for t in _inputs(n))
    refs = {}
    for causal in (False, True):
        counts = RingDilatedAttention(segment_lengths=SEGMENTS, dilation_rates=RATES).attention_pattern(
            n, causal, num_heads=HEADS
        )
        ref = reference_attention(q, k, v, counts)
        refs[causal] = dict(zip(KEYS, (ref, *torch.autograd.grad(ref, (q, k, v), grad)), strict=True))
    errors: dict[tuple[str, int | str], dict[str, float]] = {}
    for name, dtype, causal, _ in cases:  # the same computation on one device, no group
        ql, kl, vl = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        o = RingDilatedAttention(segment_lengths=SEGMENTS, dilation_rates=RATES)(ql, kl, vl, is_causal=causal)
        o.backward(grad.detach().to(dtype))
        got = dict(zip(KEYS, (o.detach(), ql.grad, kl.grad, vl.grad), strict=True))
        errors[(name, "one device")] = {
            key: relative_error(got[key].float(), refs[causal][key]) for key in KEYS
        }
    for world in worlds:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["OMP_NUM_THREADS"] = "1"
            mp.spawn(_rank, args=(world, n, f"{tmp}/store", tmp, cases), nprocs=world)
            for name, _, causal, _ in cases:
                parts = [torch.load(Path(tmp) / f"{name}-{r}.pt") for r in range(world)]
                got = {key: torch.cat([p[key] for p in parts], dim=1) for key in KEYS}
                errors[(name, world)] = {key: relative_error(got[key], refs[causal][key]) for key in KEYS}
    shape = f"1 x {n} x {HEADS} x {HEAD_DIM}"
    print(f"{n} tokens, {shape}, segments {SEGMENTS}, rates {RATES}, torch {torch.__version__}")
    print("| case | N | out | dq | dk | dv |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, *_ in cases:
        for world in ["one device", *worlds]:
            e = errors[(name, world)]
            print(f"| {name} | {world} | " + " | ".join(f"{e[key]:.2e}" for key in KEYS) + " |")
    for world in worlds:
        worst = max(
            (errors[(name, world)][key] / max(errors[(name, "one device")][key], 1e-30), name, key)
            for name, *_ in cases
            for key in KEYS
        )
        print(f"largest error at N={world} over one device's: x{worst[0]:.2f} ({worst[1]}, {worst[2]})")


if __name__ == "__main__":
    main()
