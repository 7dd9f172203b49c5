"""One rank of the two-process ring test (run by tests/test_attention_distributed.py).

Usage: ``python ring_worker.py RANK WORLD INIT_FILE OUT_DIR``.  Builds the same inputs as the
test (seeded), keeps this rank's contiguous shard, runs the sequence-parallel ring forward and
backward for every case, and saves the output and input-gradient shards to ``OUT_DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.helpers.ring_cases import CASES, make_inputs, shard_bounds  # noqa: E402


def main() -> None:
    rank, world, init_file, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for case in CASES:
            q, k, v, grad_out = make_inputs(case)
            start, end = shard_bounds(case["seq_len"], world)[rank]
            ql, kl, vl = (t[:, start:end].clone().requires_grad_() for t in (q, k, v))
            module = case["cls"](**case["kwargs"])
            out = module(ql, kl, vl, is_causal=case["causal"])
            out.backward(grad_out[:, start:end])
            torch.save(
                {"out": out.detach(), "dq": ql.grad, "dk": kl.grad, "dv": vl.grad},
                out_dir / f"{case['id']}-rank{rank}.pt",
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
