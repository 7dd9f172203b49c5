"""Cases shared by the two-process ring test and its worker processes."""

from __future__ import annotations

import torch

from attention.hilbert import HilbertRingDilatedAttention
from attention.ring import RingDilatedAttention

_CFG = {"segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4]}

#: seq_len 91 = 3 * 32 - 5 splits into shards of 46 and 45; segments of 32 cross the shard
#: boundary, so key/value chunks really travel; the [4, 8] case fits in a shard (one step).
CASES = [
    {"id": "ring-full", "cls": RingDilatedAttention, "kwargs": _CFG, "causal": False, "seq_len": 91},
    {"id": "ring-causal", "cls": RingDilatedAttention, "kwargs": _CFG, "causal": True, "seq_len": 91},
    {
        "id": "ring-headgroups-causal",
        "cls": RingDilatedAttention,
        "kwargs": {**_CFG, "mode": "head_groups"},
        "causal": True,
        "seq_len": 91,
    },
    {
        "id": "hilbert-causal",
        "cls": HilbertRingDilatedAttention,
        "kwargs": _CFG,
        "causal": True,
        "seq_len": 91,
    },
    # lanes (attention/_distributed.py): ring_lanes=8 cuts each shard in 8 sub-chunks of 5-6
    # positions, so every lane's ring carries pieces of several branches across the shards;
    # single_shot_bytes=0 lets the memory bound choose (8 lanes longnet, 2 head_groups, here)
    {
        "id": "lanes-full",
        "cls": RingDilatedAttention,
        "kwargs": {**_CFG, "ring_lanes": 8},
        "causal": False,
        "seq_len": 91,
    },
    {
        "id": "lanes-causal",
        "cls": RingDilatedAttention,
        "kwargs": {**_CFG, "single_shot_bytes": 0},
        "causal": True,
        "seq_len": 91,
    },
    {
        "id": "lanes-headgroups-causal-hilbert",
        "cls": HilbertRingDilatedAttention,
        "kwargs": {**_CFG, "mode": "head_groups", "single_shot_bytes": 0},
        "causal": True,
        "seq_len": 91,
    },
    {
        "id": "local-segments",
        "cls": RingDilatedAttention,
        "kwargs": {"segment_lengths": [4, 8], "dilation_rates": [1, 2]},
        "causal": False,
        "seq_len": 40,
    },
]


def make_inputs(case: dict) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    return tuple(torch.randn(2, case["seq_len"], 5, 8, generator=g) for _ in range(4))


def shard_bounds(seq_len: int, world: int) -> list[tuple[int, int]]:
    base, extra = divmod(seq_len, world)
    out, start = [], 0
    for r in range(world):
        size = base + (1 if r < extra else 0)
        out.append((start, start + size))
        start += size
    return out
