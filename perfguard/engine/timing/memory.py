"""Peak GPU memory of one call, measured in its own eager calls before any capture."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Memory:
    """Peak allocated bytes beyond what was allocated before the call."""

    peak_bytes: int
    info: dict[str, Any] = field(default_factory=dict)


def peak_memory(fn: Callable[[], Any], device: str, *, passes: int = 2) -> Memory:
    """Peak bytes the tensors of ``fn()`` request beyond those requested before it (CUDA only).

    ``fn`` must have been called once already (workspaces, autotuning).  ``passes`` measured
    calls; the value is the last, and all are recorded so a non-deterministic peak shows.

    The number is the caching allocator's *requested* bytes (``requested_bytes.all``: what the
    tensors asked for), not its allocated bytes.  Allocated bytes count each block the allocator
    hands out, rounded up, and a cached block whole when splitting it would leave too little, so
    the same call's allocated peak depended on which segments earlier cases of the round (or
    torch's own lazily made workspaces) had pinned: ``ring`` 4K forward+backward was 57.4 MiB in
    a round and 56.4 MiB alone (issue 26); after ``empty_cache`` before each call and perfguard's
    own tensors moved out of the default pool (:mod:`perfguard.engine.held_memory`), 10 of 54
    peaks of an H200 round still differed from the case alone by 0.5-0.9 MiB (0aa3e72,
    docs/perf/fidelity.md).  Requested bytes do not depend on where a block comes from: the
    peak is a property of the call.  The allocated peak is kept in the info
    (``allocated_peak_bytes``), as is the most reserved.
    """
    if device != "cuda":
        raise ValueError("peak GPU memory needs CUDA")
    values, allocated, reserved = [], [], []
    for _ in range(passes):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_stats()
        out = fn()
        torch.cuda.synchronize()
        after = torch.cuda.memory_stats()
        values.append(int(after["requested_bytes.all.peak"] - before["requested_bytes.all.current"]))
        allocated.append(int(after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"]))
        reserved.append(int(after["reserved_bytes.all.peak"]))
        del out
    return Memory(
        values[-1],
        {"passes": values, "allocated_peak_bytes": allocated[-1], "max_reserved_bytes": reserved[-1]},
    )
