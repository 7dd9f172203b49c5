"""Host work of the segment engine: aten ops per call, and CPU time per call, at benchmark shapes.

On a GPU the ring implementations at short lengths are launch-bound (docs/perf/calibration.md:
115-285 ms of host time per eager forward for 17-34 ms of GPU work on an H100), so the number of
operators one call dispatches is the quantity to cut.  It is the same on every device (the plan
and call sequence depend only on shapes), so it is counted here on the CPU, with a
``TorchDispatchMode`` that sees every aten op; view ops (no kernel) are counted apart.

    python docs/perf/ring_launches.py [--json PATH]

Shapes: the ``production`` profile's (1, n, 12, 64) at 1K, 4K and 16K tokens, segments
``[n/4, n/2, n]`` below 8K and ``[2048, 4096, 8192]`` from 8K (perfguard.profiles), rates
``[1, 2, 4]``, ``ring_size`` 8 for ``ring`` and ``hilbert_ring`` (the benchmark configuration),
bfloat16 (the benchmark dtype: the ring's one-piece rule depends on the element size); the rows
"(chunked)" force the ring's chunked path (``single_shot_bytes=0``), the path it takes at long
lengths.  CPU time is the median of 5 calls of forward (and forward+backward) after one warm-up,
process CPU time, on whatever CPU this runs on: compute is included, so it is only indicative.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention import create_dilated_attention
from perfguard.profiles import dilation_for

LENGTHS = (1024, 4096, 16384)
IMPLS = {
    "improved": ("improved", {}),
    "ring": ("ring", {"ring_size": 8}),
    "ring (chunked)": ("ring", {"ring_size": 8, "single_shot_bytes": 0}),
    "hilbert_ring": ("hilbert_ring", {"ring_size": 8}),
    "hilbert_ring (chunked)": ("hilbert_ring", {"ring_size": 8, "single_shot_bytes": 0}),
}
DTYPE = torch.bfloat16  # the benchmark dtype: the ring's one-piece rule depends on the element size
ATTENTION_OPS = ("_scaled_dot_product", "_flash_attention", "_efficient_attention", "_cudnn_attention")


class OpCounter(TorchDispatchMode):
    """Counts dispatched aten ops, views apart (a view launches no kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view:
            self.views += 1
        else:
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _cpu_ms(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def measure(label: str, n: int, causal: bool) -> dict:
    impl, extra = IMPLS[label]
    config = dilation_for(n)
    module = create_dilated_attention(impl, **config, **extra)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 12, 64, generator=gen).to(DTYPE).requires_grad_() for _ in range(3))
    module(q, k, v, is_causal=causal)  # plan built and cached, as in a benchmark's warm-up
    with OpCounter() as fwd:
        out = module(q, k, v, is_causal=causal)
    with OpCounter() as bwd:
        out.sum().backward()

    def forward() -> None:
        with torch.no_grad():
            module(q, k, v, is_causal=causal)

    def forward_backward() -> None:
        module(q, k, v, is_causal=causal).sum().backward()

    return {
        "impl": label,
        "chunks": len(module._chunk_lengths(q)),
        "forward_attention_calls": sum(
            c for op, c in fwd.ops.items() if op.removeprefix("aten.").startswith(ATTENTION_OPS)
        ),
        "seq_len": n,
        "causal": causal,
        "forward_ops": sum(fwd.ops.values()),
        "forward_views": fwd.views,
        "backward_ops": sum(bwd.ops.values()),
        "backward_views": bwd.views,
        "forward_top_ops": dict(fwd.ops.most_common(6)),
        "forward_cpu_ms": _cpu_ms(forward),
        "forward_backward_cpu_ms": _cpu_ms(forward_backward),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    rows = [measure(impl, n, causal) for impl in IMPLS for n in LENGTHS for causal in (False, True)]
    meta = {
        "commit": commit,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(json.dumps(meta))
    print(
        "| impl | seq_len | causal | chunks | fwd attention calls | fwd ops (views) | bwd ops (views) "
        "| fwd CPU ms | fwd+bwd CPU ms |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['impl']} | {r['seq_len']} | {r['causal']} | {r['chunks']} "
            f"| {r['forward_attention_calls']} "
            f"| {r['forward_ops']} ({r['forward_views']}) "
            f"| {r['backward_ops']} ({r['backward_views']}) | {r['forward_cpu_ms']:.1f} "
            f"| {r['forward_backward_cpu_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
