"""The aten ops of one sequence-parallel ring forward, per rank, on the CPU (gloo): where the
host time of the distributed forward goes (docs/perf/distributed.md; issue 33's gate: at most 250
at 4 ranks and 128K tokens).

Op counts do not depend on head_dim, so a small one keeps the CPU run cheap; the geometry (ranks,
length, the ``distributed`` profile's segments, lanes) is the GPU run's.  The lanes are what the
module would choose on a GPU for the profile's shape (``--lanes gpu``, the default: bfloat16,
1 x n x 12 x 64, asked of ``RingDilatedAttention.lanes_for``), what it chooses for the CPU run's
own small float32 shape (``--lanes cpu``), or a number (``ring_lanes``).

    python docs/perf/distributed_ops.py --ranks 4 --tokens 131072            # the GPU's choice
    python docs/perf/distributed_ops.py --ranks 4 --tokens 131072 --lanes 8  # forced lanes
    python docs/perf/distributed_ops.py --ranks 4 --tokens 131072 --backward # forward + backward
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: The ``distributed`` profile's shape on GPUs (perfguard/profiles.py): heads, head_dim, bytes per element.
GPU_SHAPE = (12, 64, 2)
CPU_HEAD_DIM = 8


def _module(n: int, lanes: int | None):
    from attention import RingDilatedAttention
    from perfguard.profiles import distributed_dilation

    return RingDilatedAttention(**distributed_dilation(n), sequence_parallel=True, ring_lanes=lanes)


def choose_lanes(choice: str, n: int, world: int) -> int | None:
    """``ring_lanes`` for the run: the GPU's choice, None (the CPU run's own), or the number given."""
    from attention._plan import split_lengths

    if choice == "cpu":
        return None
    if choice == "gpu":
        heads, head_dim, element_size = GPU_SHAPE
        return _module(n, None).lanes_for(split_lengths(n, world), 1, heads, head_dim, element_size)
    return int(choice)


def _worker(rank: int, world: int, n: int, lanes: int | None, port: int, backward: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from attention._plan import split_lengths
    from perfguard.engine.work import dispatch_counts

    module = _module(n, lanes)
    gen = torch.Generator().manual_seed(rank)
    la = split_lengths(n, world)[rank]
    q, k, v, grad = (torch.randn(1, la, GPU_SHAPE[0], CPU_HEAD_DIM, generator=gen) for _ in range(4))
    if backward:
        q, k, v = (t.requires_grad_() for t in (q, k, v))

        def call() -> None:
            module(q, k, v).backward(grad)
    else:

        def call() -> None:
            with torch.no_grad():
                module(q, k, v)

    call()
    counts = dispatch_counts(call)
    if rank == 0:
        used = lanes or module.lanes_for(split_lengths(n, world), 1, GPU_SHAPE[0], CPU_HEAD_DIM, 4)
        what = "forward+backward" if backward else "forward"
        print(f"{world} ranks, {n} tokens, {used} lane(s): {counts.ops} aten ops per {what} on rank 0")
        for name, count in sorted(counts.op_counts.items(), key=lambda x: -x[1]):
            print(f"  {count:5d} {name}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--lanes", default="gpu", help="gpu (the default), cpu, or a number: ring_lanes")
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--backward", action="store_true", help="count a forward and its backward")
    args = ap.parse_args()
    if args.lanes not in ("gpu", "cpu") and not (args.lanes.isdigit() and int(args.lanes) > 0):
        ap.error(f"--lanes must be gpu, cpu or a positive number, got {args.lanes!r}")
    lanes = choose_lanes(args.lanes, args.tokens, args.ranks)
    mp.spawn(_worker, args=(args.ranks, args.tokens, lanes, args.port, args.backward), nprocs=args.ranks)


if __name__ == "__main__":
    main()
