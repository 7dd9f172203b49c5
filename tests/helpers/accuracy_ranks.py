"""One rank of the sharded accuracy test (``python accuracy_ranks.py RANK WORLD INIT_FILE OUT_DIR``,
started by tests/test_distributed_error.py).

Builds this rank's case of the distributed suite (``perfguard.engine.shards``, the
``distributed-quick`` profile at :data:`SEQ_LEN` tokens) for every implementation and causal flag
of :data:`CASES`, measures its errors as the suite does (``accuracy.measure(..., group=...)``), and
saves them with this rank's inputs and its rows of the float64 reference (output and input
gradients) computed sharded, for the test to put the sequence together again.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SEQ_LEN = 512
#: (implementation, causal): a core module and a multihead one (its projections around the gather)
CASES = (("ring", False), ("ring", True), ("multihead_ring", False), ("multihead_ring", True))


def main() -> None:
    from perfguard import profiles
    from perfguard.engine import accuracy, shards
    from perfguard.engine.sequence_group import SequenceGroup

    rank, world, init_file, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        profile = profiles.PROFILES["distributed-quick"]
        for impl, causal in CASES:
            case = shards.build(impl, SEQ_LEN, "float32", "cpu", profile)
            group = SequenceGroup.current(SEQ_LEN)
            errors = accuracy.measure(case, causal=causal, group=group)
            rows = accuracy._pattern(case, causal, SEQ_LEN)[:, group.start : group.end]
            leaves = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in case.inputs)
            ref = accuracy.reference(case.module, case.multihead, leaves, rows, gather=group.gather)
            grad_out = accuracy._grad_out(case.inputs[0], "cpu", group).to(torch.float64)
            grads = torch.autograd.grad(ref, leaves, grad_out)
            torch.save(
                {
                    "inputs": [t.clone() for t in case.inputs],
                    "reference": [ref.detach(), *grads],
                    "relative": errors.relative,
                    "max_abs": errors.max_abs,
                },
                out_dir / f"{impl}-{int(causal)}-{rank}.pt",
            )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
