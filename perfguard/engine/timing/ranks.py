"""The timers under ``torch.distributed``: the same number of calls on every rank, and the group's numbers.

Time-based counts would differ between ranks and deadlock a collective inside the timed call, so
every count and stop decision is agreed by all-reduce (:func:`agree`); :func:`slowest_rank` makes the
group's samples and :func:`per_rank` gathers one number from every rank.  Without ranks each is the
identity.
"""

from __future__ import annotations

import statistics

import torch

from perfguard.engine.timing.samples import Timing


def agree(value: float, op: str = "max") -> float:
    """The same number on every rank (all-reduce) when torch.distributed runs, else ``value``.

    Every loop whose length depends on a clock goes through this, so that all ranks make the same
    number of calls (a collective inside ``fn`` would otherwise wait forever on the rank that
    stopped first).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
    return float(t.item())


def _world() -> int:
    """The number of ranks when torch.distributed runs, else 1."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def distributed() -> bool:
    """Whether several ranks run (graph capture of collectives is not attempted then)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather_values(values: list[float]) -> list[list[float]]:
    """``values`` of every rank (all the same length), in rank order; ``[values]`` without ranks."""
    import torch.distributed as dist

    if _world() == 1:
        return [list(values)]
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    lengths = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(_world())]
    dist.all_gather(lengths, torch.tensor([len(values)], dtype=torch.int64, device=device))
    if len({int(t.item()) for t in lengths}) != 1:
        raise RuntimeError(f"ranks hold different numbers of values: {[int(t.item()) for t in lengths]}")
    out = [torch.empty_like(mine) for _ in range(_world())]
    dist.all_gather(out, mine)
    return [[float(x) for x in t.tolist()] for t in out]


def per_rank(value: float) -> list[float]:
    """``value`` of every rank, in rank order (``[value]`` without torch.distributed)."""
    return [v[0] for v in gather_values([float(value)])]


def slowest_rank(result: Timing) -> Timing:
    """The group's samples: each call's time on the rank that took longest (every rank calls this).

    Every rank made the same number of calls (the counts are agreed), and the calls run in lock
    step through the ring's exchanges, so sample ``i`` of every rank is the same call; the group is
    as fast as its slowest rank.  Each rank's median is kept (``info.rank_medians``), with the
    rank the group waited for most (``info.slowest_rank``).  Without ranks: ``result`` unchanged.
    """
    if _world() == 1:
        return result
    everyone = gather_values(result.samples)
    samples = [max(call) for call in zip(*everyone, strict=True)]
    medians = [statistics.median(s) for s in everyone]
    info = {
        **result.info,
        "ranks": len(everyone),
        "rank_medians": medians,
        "slowest_rank": max(range(len(medians)), key=medians.__getitem__),
        "per_call": "slowest rank",
    }
    return Timing(samples, result.method, info)
