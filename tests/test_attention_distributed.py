"""The ring on two real processes (gloo, CPU) computes what one process computes.

Two worker processes (``tests/helpers/ring_worker.py``) join a gloo group through a file store,
each holds its contiguous shard of q, k, v (91 positions split 46 + 45, so segments of 32 cross
the shard boundary and key/value chunks travel around the ring), and runs forward and backward.
The concatenated shards must equal the single-process ring and the float64 reference, outputs
and input gradients, causal and not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attention.reference import reference_attention, relative_error
from tests.helpers.gloo_ranks import run_ranks
from tests.helpers.ring_cases import CASES, make_inputs

WORLD = 2
WORKER = Path(__file__).parent / "helpers" / "ring_worker.py"


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, torch.Tensor]]:
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available in this build")
    tmp = tmp_path_factory.mktemp("ring")
    run_ranks(WORKER, WORLD, tmp, timeout=240, what="ring workers")
    result = {}
    for case in CASES:
        parts = [torch.load(tmp / f"{case['id']}-rank{r}.pt") for r in range(WORLD)]
        result[case["id"]] = {key: torch.cat([p[key] for p in parts], dim=1) for key in parts[0]}
    return result


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_two_processes_equal_one(case: dict, shards: dict) -> None:
    q, k, v, grad_out = make_inputs(case)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    module = case["cls"](**case["kwargs"], ring_size=WORLD)
    out = module(q, k, v, is_causal=case["causal"])
    out.backward(grad_out)
    got = shards[case["id"]]
    for key, single in (("out", out), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        assert relative_error(got[key], single) <= 1e-6, f"{case['id']}: {key} differs from one process"
    counts = module.attention_pattern(case["seq_len"], case["causal"], num_heads=q.shape[2])
    ref = reference_attention(q, k, v, counts)
    assert relative_error(got["out"], ref) <= 1e-5
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out.double())
    for key, rg in zip(("dq", "dk", "dv"), ref_grads, strict=True):
        assert relative_error(got[key], rg) <= 1e-5, f"{case['id']}: {key} vs reference"


def test_ring_steps_only_as_far_as_segments_reach() -> None:
    """Chunks that no segment connects are never visited (and never sent)."""
    from attention._distributed import ring_steps
    from attention._plan import chunk_bounds

    bounds = chunk_bounds([16, 16, 16, 16])
    assert ring_steps(bounds, [8, 16], is_causal=False) == 1  # segments fit inside chunks
    assert ring_steps(bounds, [32], is_causal=True) == 2  # a segment spans two chunks
    assert ring_steps(bounds, [64], is_causal=True) == 4
    assert ring_steps(bounds, [32], is_causal=False) == 4  # non-causal also looks forward (a−c = −1)


def test_the_next_steps_exchange_overlaps_this_steps_attention(tmp_path: Path) -> None:
    """Forward and backward issue step s + 1's send/receive before step s's attention kernels run
    (and the first one before the rank's attention to its own shard), so the transfer hides under
    compute; the order of the dispatched ops on 3 gloo ranks shows it (``helpers/ring_order.py``)."""
    import json

    worker = Path(__file__).parent / "helpers" / "ring_order.py"
    world = 3
    run_ranks(worker, world, tmp_path, timeout=240, what="ring_order workers")
    for rank in range(world):
        order = json.loads((tmp_path / f"order-{rank}.json").read_text())
        for phase, kernel in (("forward", "attend"), ("backward", "attend_backward")):
            ops = order[phase]
            kernels = [i for i, op in enumerate(ops) if op == kernel]
            sends = [i for i, op in enumerate(ops) if op == "send"]
            # rank 0, forward: send recv attend attend | send recv attend | attend
            # backward: send recv attend' attend' | send recv attend' | send recv attend' | send recv
            # (the first key/value message before the rank's own shard's kernels)
            assert len([i for i in sends if i < kernels[0]]) == 1, (rank, phase, ops)
            assert ops.index("recv") < kernels[0], (rank, phase, ops)
            # step 2's keys/values leave before step 1's kernel (the second-to-last) runs
            assert sends[1] < kernels[-2], (rank, phase, ops)
            if phase == "backward":  # step 1's dk/dv go home before step 2's kernel runs
                assert len(sends) == 4 and sends[2] < kernels[-1], (rank, ops)
