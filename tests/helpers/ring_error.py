"""The bf16 error of the sequence-parallel ring against the number of ranks (issue 33): cases,
inputs, and one rank's run (``python ring_error.py RANK WORLD INIT_FILE OUT_DIR``, started by
tests/test_distributed_error.py).

The same seeded inputs are split over 1, 2 and 4 gloo ranks; every rank runs forward and backward
in bfloat16 and saves its output and input-gradient shards.  Segments reach across every shard
(the largest is the sequence, as in the ``distributed`` profile), so key/value rows travel at
every N; ``single_shot_bytes=0`` makes the module choose its lanes by its memory bound, as it does
for long sequences on GPUs, and ``ring_lanes=8`` forces the geometry of the runs before issue 33.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SEQ_LEN, HEADS, HEAD_DIM = 2048, 4, 32
CONFIG = {"segment_lengths": [256, 512, 1024, 2048], "dilation_rates": [1, 2, 4, 8]}
#: case id -> the module's keyword arguments besides CONFIG
CASES = {"module-lanes": {"single_shot_bytes": 0}, "8-lanes": {"ring_lanes": 8}}
KEYS = ("out", "dq", "dk", "dv")


def make_inputs() -> tuple[torch.Tensor, ...]:
    """q, k, v and the output gradient, float32, from a fixed seed."""
    g = torch.Generator().manual_seed(33)
    return tuple(torch.randn(1, SEQ_LEN, HEADS, HEAD_DIM, generator=g) for _ in range(4))


def shard(world: int, rank: int) -> tuple[int, int]:
    size = SEQ_LEN // world
    return rank * size, (rank + 1) * size


def run(module: torch.nn.Module, lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Forward and backward of ``module`` in bfloat16 on positions [lo, hi): out, dq, dk, dv as float32."""
    q, k, v, grad = make_inputs()
    ql, kl, vl = (t[:, lo:hi].bfloat16().requires_grad_() for t in (q, k, v))
    out = module(ql, kl, vl)
    out.backward(grad[:, lo:hi].bfloat16())
    return {key: t.float() for key, t in zip(KEYS, (out.detach(), ql.grad, kl.grad, vl.grad), strict=True)}


def main() -> None:
    from attention.ring import RingDilatedAttention

    rank, world, init_file, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        lo, hi = shard(world, rank)
        for case, kwargs in CASES.items():
            module = RingDilatedAttention(**CONFIG, **kwargs, sequence_parallel=True)
            torch.save(run(module, lo, hi), out_dir / f"{case}-{rank}.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
