"""The aten ops of one sequence-parallel ring forward, per rank, on the CPU (gloo): where the
host time of the distributed forward goes (docs/perf/distributed.md, "Scaling on nvidia-h200-x4").

Op counts do not depend on head_dim, so a small one keeps the CPU run cheap; the geometry (ranks,
length, segments, lanes) is the GPU run's.

    python docs/perf/distributed_ops.py --ranks 4 --tokens 131072 --lanes 8
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, world: int, n: int, lanes: int | None, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from attention import RingDilatedAttention
    from perfguard.engine.work import dispatch_counts

    module = RingDilatedAttention(
        segment_lengths=[2048, 8192, 32768, 131072],  # the distributed profile's at 128K
        dilation_rates=[1, 4, 16, 64],
        sequence_parallel=True,
        ring_lanes=lanes,
    )
    gen = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(1, n // world, 12, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        module(q, k, v)
        counts = dispatch_counts(lambda: module(q, k, v))
    if rank == 0:
        print(f"{world} ranks, {n} tokens, lanes {lanes}: {counts.ops} aten ops per forward on rank 0")
        for name, count in sorted(counts.op_counts.items(), key=lambda x: -x[1]):
            print(f"  {count:5d} {name}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--lanes", type=int, default=8, help="ring_lanes (0: the module's own choice)")
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    mp.spawn(_worker, args=(args.ranks, args.tokens, args.lanes or None, args.port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
