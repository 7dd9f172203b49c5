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
    """Peak allocated bytes of ``fn()`` beyond the allocation before it (CUDA only).

    ``fn`` must have been called once already (workspaces, autotuning).  ``passes`` measured
    calls; the value is the last, and all are recorded so a non-deterministic peak shows.

    Every measured call starts from an allocator with no free cached blocks (``empty_cache``):
    the caching allocator hands a request a whole cached block when splitting it would leave too
    little, and counts the whole block as allocated, so the same call's peak used to depend on
    which blocks earlier cases of the round had left behind (``ring`` 4K forward+backward: 57.4
    MiB in a round, 56.4 MiB alone, issue 26).  From an empty cache the peak is a property of
    the call alone.
    """
    if device != "cuda":
        raise ValueError("peak GPU memory needs CUDA")
    values = []
    reserved = []
    for _ in range(passes):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        values.append(int(torch.cuda.max_memory_allocated() - base))
        reserved.append(int(torch.cuda.max_memory_reserved()))
        del out
    return Memory(values[-1], {"passes": values, "max_reserved_bytes": reserved[-1]})
