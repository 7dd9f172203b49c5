"""perfguard's own tensors that outlive a case sit in a pool of their own
(perfguard.engine.held_memory), so that a case's peak memory is the same after other cases as
alone (issue 26's rule, docs/perf/fidelity.md)."""

from __future__ import annotations

import pytest
import torch

from perfguard.engine.held_memory import held
from perfguard.engine.timing.memory import peak_memory

MIB = 1 << 20


def test_held_allocates_as_usual_on_the_cpu() -> None:
    with held("cpu"):
        t = torch.ones(3)
    assert t.device.type == "cpu" and float(t.sum()) == 3.0


@pytest.mark.cuda
def test_a_tensor_held_between_cases_does_not_change_the_next_cases_peak() -> None:
    """The caching allocator gives a 1-10 MiB request a 20 MiB segment.  A 5 MiB tensor kept in the
    default pool pins its segment: ``empty_cache`` cannot release it, and a later 14.5 MiB request
    gets the 15 MiB remainder unsplit (counted whole, 15 MiB) where alone it gets a 16 MiB segment
    split (14.5 MiB).  Held in perfguard's own pool, the 5 MiB leave the default pool empty."""

    def case() -> torch.Tensor:
        return torch.empty(29 * MIB // 2, dtype=torch.uint8, device="cuda")

    case()
    alone = peak_memory(case, "cuda").peak_bytes
    kept = torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")
    after_default = peak_memory(case, "cuda").peak_bytes
    del kept
    with held("cuda"):
        kept = torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")
    after_held = peak_memory(case, "cuda").peak_bytes
    assert alone == 29 * MIB // 2
    assert after_default != alone  # the mechanism (the control): a pinned segment's remainder
    assert after_held == alone
    del kept
