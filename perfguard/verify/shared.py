"""What the rows of one ``perfguard verify`` run share: expected patterns and random inputs.

At the GPU configuration (n = 6139, H = 8) one count pattern is an ``(8, 6139, 6139)`` int32
tensor (1.2 GB), and every "same function" row × dtype × mode × causal case compares its own
declared pattern with the same expected one.  Building that expected pattern once per
(configuration, seq_len, heads, mode, causal, device) and keeping it on the device it is compared
on turns 72 builds into 4.  The random inputs of a case depend only on the shape, dtype, device
and seed, so they are drawn once per run too (each case gets fresh clones, so an implementation
that writes into its inputs cannot reach the next case).

What is *not* shared: each implementation's own ``attention_pattern`` is always called and compared
in full (``torch.equal`` on the device), and every reference is computed from the pattern the
implementation declared.  A cache makes a run faster, never less thorough.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

T = TypeVar("T")

#: expected patterns kept at once: the 2 modes × 2 causal flags of one configuration
PATTERN_SLOTS = 4
#: input sets kept at once (tens of MB each at the GPU configuration)
INPUT_SLOTS = 8


class LRU(Generic[T]):
    """A least-recently-used map that builds a missing value on demand; counts its hits and builds."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self.hits = 0
        self.builds = 0

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        if key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key]
        while len(self._items) >= self.size:  # free the oldest before building the next one
            self._items.popitem(last=False)
        value = build()
        self.builds += 1
        self._items[key] = value
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class RunCache:
    """The per-run caches (one per :func:`perfguard.verify.runner.run_verify` call)."""

    def __init__(self) -> None:
        self.patterns: LRU[torch.Tensor] = LRU(PATTERN_SLOTS)
        self.inputs: LRU[tuple[torch.Tensor, ...]] = LRU(INPUT_SLOTS)

    def clear(self) -> None:
        """Drop every cached tensor (and give cached CUDA blocks back to the driver)."""
        self.patterns.clear()
        self.inputs.clear()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
