"""Where does the first forward+backward of one case go in a fresh process?  (issue 26)

``perfguard fidelity`` found ``multihead_block_sparse_ring`` at 4096 tokens (bfloat16, CUDA) not
finishing its first forward+backward alone in 450 s, while the full round measures it in seconds.
This runs the benchmark's own steps (perfguard.engine.cases: build, a forward, then forward+backward) in
a fresh process and prints every thread's Python stack each ``--every`` seconds while a step runs:

    python docs/perf/first_call_probe.py multihead_block_sparse_ring 4096 --every 30 --limit 150
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("impl")
    parser.add_argument("seq_len", type=int)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--limit", type=float, default=150.0)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.every, repeat=True, file=sys.stderr)
    started = time.perf_counter()

    def step(what: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        now = time.perf_counter()
        print(f"{what}: {now - t0:.2f} s (at {now - started:.1f} s)", flush=True)
        if time.perf_counter() - started > args.limit:
            print("limit reached", flush=True)
            os._exit(3)

    import torch

    from perfguard import profiles
    from perfguard.engine import cases

    device = "cuda" if torch.cuda.is_available() else "cpu"
    profile = profiles.PROFILES["production" if device == "cuda" else "quick"]
    case = cases.build(args.impl, args.seq_len, args.dtype, device, profile)
    built_s = time.perf_counter() - started
    print(f"built {args.impl} {args.seq_len} on {device} in {built_s:.1f} s", flush=True)
    fwd = case.forward()
    fb = case.forward_backward()
    step("forward, first call", fwd)
    step("forward, second call", fwd)
    step("forward+backward, first call", fb)
    step("forward+backward, second call", fb)
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
