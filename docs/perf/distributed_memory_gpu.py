# ruff: noqa: E501
"""What a rank holds at its peak during the sequence-parallel ring's forward+backward (issue 33).

Under torchrun (one rank per GPU): the distributed suite's case (``perfguard.engine.shards``) at
``--tokens``, one warm forward+backward, then one more with the CUDA caching allocator's history
recorded (``torch.cuda.memory._record_memory_history``, Python stacks).  Rank 0 replays the trace,
finds the moment of the peak and prints the tensors alive then, largest first, each with the
innermost ``attention/`` frame that allocated it, in units of the rank's bf16 output shard.

    torchrun --standalone --nproc-per-node 2 docs/perf/distributed_memory_gpu.py --tokens 131072
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def where(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if "/attention/" in name:
            return f"{name.rsplit('/attention/', 1)[-1]}:{f.get('line')} {f.get('name')}"
    for f in frames:
        if "/perfguard/" in f.get("filename", ""):
            return f"perfguard/{f['filename'].rsplit('/perfguard/', 1)[-1]}:{f.get('line')} {f.get('name')}"
    return frames[0].get("name", "?") if frames else "?"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=131072)
    parser.add_argument("--pass", dest="pass_name", default="forward_backward")
    parser.add_argument("--shapes", action="store_true", help="also log every cuDNN backward call's shapes")
    args = parser.parse_args()
    import torch

    from perfguard import profiles
    from perfguard.engine import rank_group, shards

    group = rank_group.join("cuda")
    calls = []
    if args.shapes:  # what each cuDNN backward call was given and allocated (diagnosis only)
        from attention import _kernels

        inner = _kernels._cudnn_backward

        def logged(dout, q, k, v, *rest):
            grads = inner(dout, q, k, v, *rest)
            calls.append(
                (
                    tuple(q.shape),
                    q.stride(),
                    tuple(k.shape),
                    [(tuple(g.shape), g.stride(), g.untyped_storage().nbytes()) for g in grads],
                )
            )
            return grads

        for name, kernel in list(vars(_kernels).items()):
            if kernel is inner:
                setattr(_kernels, name, logged)
        for key, value in list(_kernels.KERNELS.items()):
            if isinstance(value, tuple) and inner in value:
                _kernels.KERNELS[key] = tuple(logged if f is inner else f for f in value)
    profile = profiles.PROFILES["distributed"]
    case = shards.build("ring", args.tokens, "bfloat16", "cuda", profile)
    fn = case.forward() if args.pass_name == "forward" else case.forward_backward()
    fn()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    calls.clear()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated() - base
    if group.writer:
        shard = case.inputs[0].numel() * case.inputs[0].element_size()
        live: dict[int, tuple[int, str]] = {}
        total = best = 0
        at_peak: dict[int, tuple[int, str]] = {}
        for device_trace in snap["device_traces"]:
            for e in device_trace:
                if e["action"] == "alloc":
                    live[e["addr"]] = (e["size"], where(e.get("frames", [])))
                    total += e["size"]
                    if total > best:
                        best, at_peak = total, dict(live)
                elif e["action"] in ("free_requested",) and e["addr"] in live:
                    total -= live.pop(e["addr"])[0]
        print(
            f"{args.tokens} tokens, {group.world} ranks, {args.pass_name}: peak beyond the inputs {peak / 2**20:.0f} MiB = {peak / shard:.2f} output shards "
            f"(traced: {best / 2**20:.0f} MiB allocated during the call at its peak)"
        )
        by_site = collections.Counter()
        for size, site in at_peak.values():
            by_site[site] += size
        for site, size in by_site.most_common(25):
            print(f"  {size / 2**20:9.1f} MiB  {size / shard:5.2f} shards  {site}")
        sizes = collections.Counter(
            (size, site) for size, site in at_peak.values() if "_cudnn_backward" in site
        )
        for (size, site), count in sorted(sizes.items(), reverse=True)[:12]:
            print(f"  at the peak: {count} x {size / 2**20:.2f} MiB from {site}")
        for call in calls[:40]:
            print("  cudnn backward call: q", call[0], call[1], "k", call[2], "grads", call[3])
    rank_group.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
