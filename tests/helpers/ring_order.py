"""One rank of the ring's overlap test (tests/test_attention_distributed.py): the order in which a
forward and its backward issue sends, receives and attention kernels.

Usage: ``python ring_order.py RANK WORLD INIT_FILE OUT_DIR``.  Records, under a dispatch mode, the
sequence of ``send``, ``recv_`` and the CPU flash-attention forward/backward ops of one forward
and one backward on 3 gloo ranks, and writes it to ``OUT_DIR/order-RANK.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

#: recorded ops, by the short name the test reads
NAMES = {
    "send": "send",
    "recv_": "recv",
    "_scaled_dot_product_flash_attention_for_cpu": "attend",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "attend_backward",
}
#: 32 positions a rank; the 96-segment branch reaches every shard, so every step has pieces
CONFIG = {"segment_lengths": [8, 96], "dilation_rates": [1, 4]}


class Order(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = NAMES.get(func.overloadpacket.__name__)
        if name:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def main() -> None:
    from attention.ring import RingDilatedAttention

    rank, world, init_file, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(rank)
        q, k, v, grad = (torch.randn(1, 32, 4, 8, generator=g) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        module = RingDilatedAttention(**CONFIG, sequence_parallel=True)
        with Order() as forward:
            out = module(q, k, v)
        with Order() as backward:
            out.backward(grad)
        order = {"forward": forward.ops, "backward": backward.ops}
        (out_dir / f"order-{rank}.json").write_text(json.dumps(order))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
