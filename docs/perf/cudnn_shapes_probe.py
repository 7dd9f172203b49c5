"""Which call shapes crash cuDNN's attention backward, and does the ring's chunked backward run now.

The ring's chunked backward killed the process (SIGSEGV inside cuDNN's attention backward) on an
H100 on 2026-11-25 (docs/perf/attention.md).  A segfault cannot be caught, so every probe runs in a
child process that prints a line before and after each call; the parent restarts the child after
the last shape that finished, and records the shape that was running when it died.

    python3 docs/perf/cudnn_shapes_probe.py --out $OUT      # GPU: both parts, ~1-2 min

1. ``grid``: the raw aten cuDNN forward + backward (the calls ``attention._kernels`` makes, no
   guard) on dense bf16 tensors ``(B, H, Lq, d=64)`` / ``(B, H, Lk, 64)`` for tiny and ordinary
   lengths: which shapes run, which raise, which kill the process.
2. ``ring``: ``RingDilatedAttention`` chunked (``single_shot_bytes=0``, ring_size 4 and 8) forward
   and backward on the GPU verification's shape (1 x 6139 x 8 x 64, bf16, causal and not) with the
   engine as committed (cuDNN only for calls of at least ``CUDNN_MIN_LEN`` rows), against the
   same module in one piece: the largest relative difference of the output and the q/k/v gradients.

Writes ``cudnn_shapes.json`` and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

GRID = [
    (b, h, lq, lk)
    for (b, h) in ((1, 1), (1, 8))
    for lq in (1, 2, 8, 32, 63, 64, 128)
    for lk in (1, 2, 8, 64, 128, 768)
]


def child_grid(start: int) -> None:
    """Run the grid from ``start``; one ``START i`` / ``END i status`` line per shape, flushed."""
    import torch

    from attention import _kernels as K

    for i in range(start, len(GRID)):
        b, h, lq, lk = GRID[i]
        print(f"START {i}", flush=True)
        gen = torch.Generator(device="cuda").manual_seed(i)
        q = torch.randn(b, h, lq, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, h, lk, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, h, lk, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
        status = "ok"
        try:
            out, lse, aux = K._cudnn_forward(q, k, v, False, 0.125)
            torch.cuda.synchronize()
        except Exception as exc:  # an error the engine's fallback would catch
            status = f"forward raised {type(exc).__name__}: {str(exc)[:80]}"
        else:
            try:
                K._cudnn_backward(torch.ones_like(out), q, k, v, out, lse, aux, False, 0.125)
                torch.cuda.synchronize()
            except Exception as exc:
                status = f"backward raised {type(exc).__name__}: {str(exc)[:80]}"
        print(f"END {i} {status}", flush=True)


def child_ring() -> None:
    """Chunked against one-piece ring, forward and backward, one JSON line per configuration."""
    import torch

    from attention._kernel_selection import CUDNN_MIN_LEN
    from attention.ring import RingDilatedAttention

    for ring_size in (4, 8):
        for causal in (False, True):
            row: dict[str, Any] = {"ring_size": ring_size, "causal": causal, "cudnn_min_len": CUDNN_MIN_LEN}
            print(f"START ring {ring_size} {causal}", flush=True)
            gen = torch.Generator(device="cuda").manual_seed(0)
            base = [
                torch.randn(1, 6139, 8, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(3)
            ]
            dout = torch.randn(1, 6139, 8, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
            results = []
            for single_shot in (0, None):
                kw = {} if single_shot is None else {"single_shot_bytes": single_shot}
                m = RingDilatedAttention(
                    segment_lengths=[2048, 4096, 8192], dilation_rates=[1, 2, 4], ring_size=ring_size, **kw
                ).cuda()
                q, k, v = (t.clone().requires_grad_(True) for t in base)
                t0 = time.perf_counter()
                out = m(q, k, v, is_causal=causal)
                out.backward(dout)
                torch.cuda.synchronize()
                results.append((out.float(), q.grad.float(), k.grad.float(), v.grad.float()))
                row["seconds_chunked" if single_shot == 0 else "seconds_one_piece"] = round(
                    time.perf_counter() - t0, 3
                )
            for name, a, b in zip(("out", "dq", "dk", "dv"), results[0], results[1], strict=True):
                row[f"rel_{name}"] = float((a - b).norm() / b.norm().clamp_min(1e-30))
            row["finite"] = all(bool(torch.isfinite(t).all()) for t in results[0])
            print("ROW " + json.dumps(row), flush=True)


def parent(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "cudnn_shapes.log"
    log_path.write_text("", encoding="utf-8")

    def log(text: str) -> None:  # appended after each child, so a killed probe leaves its log
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(text)

    grid: dict[int, str] = {}
    start = early_deaths = 0
    while start < len(GRID):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "grid", "--start", str(start)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        log(proc.stdout + proc.stderr)
        running = None
        for line in proc.stdout.splitlines():
            if line.startswith("START "):
                running = int(line.split()[1])
            elif line.startswith("END "):
                _, i, status = line.split(" ", 2)
                grid[int(i)] = status
                running = None
        if proc.returncode == 0:
            break
        finished = sum(1 for line in proc.stdout.splitlines() if line.startswith("END "))
        early_deaths = early_deaths + 1 if finished == 0 else 0
        if early_deaths >= 3:  # dying before finishing any shape, again and again: not a shape's fault
            grid[start] = f"three children in a row died at once (exit {proc.returncode}); grid stopped"
            break
        if running is None:  # died before its first shape: give up on the grid
            grid[start] = f"child exit {proc.returncode} before the shape"
            running = start
        else:
            grid[running] = f"process died (exit {proc.returncode})"
        start = running + 1
    ring_rows: list[dict[str, Any]] = []
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "ring"], capture_output=True, text=True, cwd=ROOT, timeout=400
    )
    log(proc.stdout + proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("ROW "):
            ring_rows.append(json.loads(line[4:]))
    ring_exit = proc.returncode
    result = {
        "grid": [
            {"B": b, "H": h, "Lq": lq, "Lk": lk, "status": grid.get(i, "not reached")}
            for i, (b, h, lq, lk) in enumerate(GRID)
        ],
        "ring": ring_rows,
        "ring_exit": ring_exit,
    }
    (out / "cudnn_shapes.json").write_text(json.dumps(result, indent=1))
    bad = [r for r in result["grid"] if r["status"] not in ("ok", "not reached")]
    unreached = sum(r["status"] == "not reached" for r in result["grid"])
    ran = len(GRID) - len(bad) - unreached
    print(f"grid: {ran} of {len(GRID)} shapes ran cuDNN fwd+bwd, {unreached} not reached; the others:")
    for r in bad:
        print(f"  B={r['B']} H={r['H']} Lq={r['Lq']} Lk={r['Lk']}: {r['status']}")
    print(f"ring chunked vs one piece (exit {ring_exit}):")
    for r in ring_rows:
        print(
            f"  ring_size {r['ring_size']} causal {r['causal']}: out {r['rel_out']:.2e} dq {r['rel_dq']:.2e} "
            f"dk {r['rel_dk']:.2e} dv {r['rel_dv']:.2e} finite {r['finite']} "
            f"({r['seconds_chunked']} s chunked, {r['seconds_one_piece']} s one piece, first calls)"
        )
    return 0 if ring_exit == 0 and len(ring_rows) == 4 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/cudnn_probe")))
    ap.add_argument("--child", choices=("grid", "ring"))
    ap.add_argument("--start", type=int, default=0)
    args = ap.parse_args()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if args.child == "grid":
        child_grid(args.start)
        return 0
    if args.child == "ring":
        child_ring()
        return 0
    return parent(args.out)


if __name__ == "__main__":
    sys.exit(main())
