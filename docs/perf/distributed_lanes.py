# ruff: noqa: E501  (command lines and table rows are kept one per line)
"""How many lanes the distributed ring should use: time, host time and per-GPU memory (issue 15).

The sequence-parallel ring (``attention/_distributed.py``) cuts each shard's keys/values into
``ring_lanes`` sub-chunks so that a rank's memory beyond its shard stays small; every lane is one
more trip around the ring.  This measures the trade-off on the GPUs of one machine, eagerly (the
distributed suite's method: CUDA events, no graph capture), with the one-GPU ring (ring_size 8)
measured the same way as the N = 1 point:

- ``ms``: forward time per call, the slowest rank's, median of 10 calls after 3 warm-ups;
- ``host_ms``: the time the host needs to enqueue one call (no synchronisation): when it is close
  to ``ms`` the call is host-bound (kernel launches, Python), not GPU- or link-bound;
- ``peak``: the largest per-rank peak allocation during a forward beyond the inputs, and its
  ratio to the one-GPU ring's.

    torchrun --standalone --nproc-per-node 4 docs/perf/distributed_lanes.py --out $OUT   # (N = 4)
    python3 docs/perf/distributed_lanes.py --out $OUT --launch 1,2,4                   # every N

bfloat16, 1 x n x 12 x 64, the distributed profile's segments (``perfguard.profiles``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def measure(module, q, k, v, group) -> dict:
    import torch
    import torch.distributed as dist

    def call():
        with torch.no_grad():
            return module(q, k, v)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    times, host = [], []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if group:
            dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        call()
        end.record()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    row = {
        "ms": statistics.median(times) * 1e3,
        "host_ms": statistics.median(host) * 1e3,
        "peak": float(peak),
    }
    if group:
        t = torch.tensor([row["ms"], row["host_ms"], row["peak"]], device="cuda", dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        row = {"ms": t[0].item(), "host_ms": t[1].item(), "peak": t[2].item()}
    return row


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    from attention._plan import split_lengths
    from attention.ring import RingDilatedAttention
    from perfguard.profiles import distributed_dilation

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    group = world > 1
    if group:
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    rows = []
    for n in (int(x) for x in args.lengths.split(",")):
        la = split_lengths(n, world)[rank]
        gen = torch.Generator(device="cuda").manual_seed(rank)
        q, k, v = (torch.randn(1, la, 12, 64, generator=gen, device="cuda").bfloat16() for _ in range(3))
        cfg = distributed_dilation(n)
        for lanes in [int(x) for x in args.lanes.split(",")] if group else [0]:
            if group:
                module = RingDilatedAttention(**cfg, sequence_parallel=True, ring_lanes=lanes)
            else:
                module = RingDilatedAttention(**cfg, ring_size=8, sequence_parallel=False)
            row = {"tokens": n, "ranks": world, "lanes": lanes, **measure(module, q, k, v, group)}
            rows.append(row)
            del module
            torch.cuda.empty_cache()
        del q, k, v
    if rank == 0:
        with open(args.jsonl, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    if group:
        dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/lanes")))
    parser.add_argument("--lengths", default="131072,1048576")
    parser.add_argument("--lanes", default="1,2,4,8")
    parser.add_argument("--launch", default=None, help="group sizes to launch with torchrun, e.g. 1,2,4")
    parser.add_argument("--jsonl", type=Path, default=None)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("distributed_lanes.py measures NCCL groups of GPUs: no CUDA GPU here, nothing measured")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    args.jsonl = args.jsonl or args.out / "lanes.jsonl"
    if not args.launch:
        worker(args)
        return 0
    args.jsonl.unlink(missing_ok=True)
    from perfguard.engine.rank_group import LAUNCH_ENV  # NVLink multicast off, as in every perfguard group

    env = {**os.environ, **LAUNCH_ENV}
    for n in (int(x) for x in args.launch.split(",")):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), __file__,
               "--out", str(args.out), "--jsonl", str(args.jsonl), "--lengths", args.lengths, "--lanes", args.lanes]  # fmt: skip
        with open(args.out / f"lanes-N{n}.log", "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, check=False, cwd=ROOT)
    rows = [json.loads(x) for x in args.jsonl.read_text().splitlines()] if args.jsonl.exists() else []
    one = {r["tokens"]: r for r in rows if r["ranks"] == 1}
    print("| tokens | N | lanes | forward ms (eager) | host ms | peak / GPU | vs N=1 | bound 1.25/N |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in sorted(rows, key=lambda r: (r["tokens"], r["ranks"], r["lanes"])):
        ref = one.get(r["tokens"])
        vs = f"{r['peak'] / ref['peak']:.3f}" if ref and ref["peak"] else "–"
        print(f"| {r['tokens']} | {r['ranks']} | {r['lanes'] or 'ring_size 8'} | {r['ms']:.2f} | {r['host_ms']:.2f} | "
              f"{r['peak'] / 2**30:.3f} GiB | {vs} | {1.25 / r['ranks']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
