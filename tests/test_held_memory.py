"""A case's peak memory is a property of the call, not of what ran before it in the process
(issue 26's rule, docs/perf/fidelity.md): perfguard's own tensors that outlive a case sit in a
pool of their own (perfguard.engine.held_memory), and the peak counts the bytes tensors request
(perfguard.engine.timing.memory), not the allocator's blocks."""

from __future__ import annotations

import pytest
import torch

from perfguard.engine import held_memory
from perfguard.engine.held_memory import held
from perfguard.engine.timing.memory import peak_memory

MIB = 1 << 20


def test_held_allocates_as_usual_on_the_cpu() -> None:
    with held("cpu"):
        t = torch.ones(3)
    assert t.device.type == "cpu" and float(t.sum()) == 3.0


@pytest.mark.cuda
def test_the_peak_is_the_bytes_requested_whatever_the_allocator_rounds_or_keeps() -> None:
    """1000 bytes are 1000 (the allocator's block is 1024); the same call's peak is equal after a
    tensor held in the default pool, after one held in perfguard's pool, and alone."""

    def odd() -> torch.Tensor:
        return torch.empty(1000, dtype=torch.uint8, device="cuda")

    def case() -> torch.Tensor:
        return torch.empty(29 * MIB // 2 + 4321, dtype=torch.uint8, device="cuda")

    odd()
    case()
    assert peak_memory(odd, "cuda").peak_bytes == 1000
    alone = peak_memory(case, "cuda").peak_bytes
    assert alone == 29 * MIB // 2 + 4321
    kept = torch.empty(5 * MIB + 7, dtype=torch.uint8, device="cuda")
    assert peak_memory(case, "cuda").peak_bytes == alone
    del kept
    with held("cuda"):
        kept = torch.empty(5 * MIB + 7, dtype=torch.uint8, device="cuda")
    assert peak_memory(case, "cuda").peak_bytes == alone
    del kept


@pytest.mark.cuda
def test_a_held_tensor_lives_in_perfguards_own_pool() -> None:
    with held("cuda"):
        kept = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    plain = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    pool = held_memory._POOLS[torch.cuda.current_device()]

    def pool_of(t: torch.Tensor) -> tuple:
        for segment in torch.cuda.memory_snapshot():
            if segment["address"] <= t.data_ptr() < segment["address"] + segment["total_size"]:
                return tuple(segment["segment_pool_id"])
        raise AssertionError("no segment holds the tensor")

    assert pool_of(kept) == tuple(pool.id) and pool_of(plain) != tuple(pool.id)
