"""Where the measuring passes keep device tensors that outlive one case: a pool of their own.

A round measures many cases in one process, and a few tensors of perfguard's own live from one
case to the next: the shared float64 references (:mod:`perfguard.engine.reference_cache`), the
seeded output gradient of each shape (:func:`perfguard.engine.cases.seeded_grad_out`), the
fingerprint's weights.  In the caching allocator's default pool such a tensor pins the segment it
sits in: ``torch.cuda.empty_cache()`` before a measured call (:mod:`perfguard.engine.timing.memory`)
cannot release that segment, and its free remainder is then handed to the next case's requests, a
whole block counted as allocated when it is not split.  So a case's peak memory depended on which
cases ran before it: on an H200 at e4b8d99, 20 of 54 peak-memory numbers of a full production round
differed from the same case alone, by 0.05-1.5 MiB (docs/perf/fidelity.md).

Allocated under :func:`held`, they go to a private ``torch.cuda.MemPool`` instead: the default
pool that the code under test allocates from holds nothing between cases, as in a case alone.  The
pool's bytes still count in ``torch.cuda.memory_allocated`` (the memory benchmarks measure above
what was allocated before the call, so they do not enter a case's peak).  On the CPU (no caching
allocator) :func:`held` does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_POOLS: dict[int, torch.cuda.MemPool] = {}


@contextlib.contextmanager
def held(device: torch.device | str | None = None) -> Iterator[None]:
    """Allocate this thread's CUDA tensors of the block in perfguard's own pool (module docstring).

    ``device``: the CUDA device the tensors go to (default: the current one); a CPU device, or a
    machine without CUDA, allocates as usual."""
    where = torch.device(device) if device is not None else None
    if not torch.cuda.is_available() or (where is not None and where.type != "cuda"):
        yield
        return
    index = where.index if where is not None and where.index is not None else torch.cuda.current_device()
    pool = _POOLS.get(index)
    if pool is None:
        with torch.cuda.device(index):
            pool = _POOLS[index] = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool, device=index):
        yield
