"""One float64 reference per function and inputs, not per implementation (issue 31: what the
accuracy pass costs a round).

A production round measures the errors of nine implementations at three lengths, causal and not,
and most of them compute the *same* function on the same inputs: ``dilated``, ``improved``,
``ring`` and ``hilbert_ring`` declare the same pattern, and the multihead modules built from the
same seed hold the same projections.  Their float64 reference (dense ``n x n`` scores per head,
forward and backward) was 0.35 s of each 0.5 s accuracy pass at 16K tokens on an H200
(docs/perf/accuracy.md).  Within one process (a round worker) a reference is computed once and
reused by every later case whose reference inputs are *equal*:

- the declared pattern: per head, a 64-bit fingerprint (:func:`fingerprint`), computed on the
  device; two different patterns collide with probability ~2^-64 per head, and a pattern is the
  code under test's own declaration either way (it could declare any pattern it likes; verify
  holds the computation to the declaration);
- the inputs, the multihead module's parameters and its scale, its norm's settings: exactly
  (``torch.equal``);
- the output gradient: its seed (one draw per shape, :func:`perfguard.engine.cases.seeded_grad_out`).

A reused reference is the same tensors the computation would give (the float64 reference is
deterministic on one device), so a reused error is the recomputed one, bit for bit.  The entries
stay on the device they were computed on, bounded by bytes (:data:`MAX_BYTES`, least recently
used first out), in perfguard's own memory pool (:mod:`perfguard.engine.held_memory`): the
default pool that the code under test allocates from holds nothing of them between cases, and the
memory benchmarks count the bytes a call requests, so what the cache holds does not enter them.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from perfguard.engine.held_memory import held

#: What the cache may hold, in bytes of reference tensors (a 16K-token reference of 12 heads x 64
#: is 4 x 100 MB in float64; the production profile's shared references fit in ~2.6 GB).
MAX_BYTES = 4 << 30

_MIX = (-7046029254386353131, -4658895280553007687, -7723592293110705685)  # splitmix64's, as int64


def _splitmix(numel: int, device: torch.device) -> torch.Tensor:
    """splitmix64 of 0..numel-1 as int64 (two's-complement wraparound): fixed pseudo-random weights."""
    x = torch.arange(numel, device=device, dtype=torch.int64) * _MIX[0]
    x ^= x >> 30
    x *= _MIX[1]
    x ^= x >> 27
    x *= _MIX[2]
    x ^= x >> 31
    return x


@functools.lru_cache(maxsize=4)
def _column_weights(m: int, device: torch.device) -> torch.Tensor:
    """:data:`PROBES` x ``m`` pseudo-random int8 weights (the low byte of splitmix64)."""
    return (_splitmix(PROBES * m, device) & 0xFF).to(torch.uint8).view(torch.int8).view(PROBES, m)


@functools.lru_cache(maxsize=4)
def _sum_weights(numel: int, device: torch.device) -> torch.Tensor:
    return _splitmix(numel, device)


#: Random int8 combinations of each key column that the GEMM fingerprint takes (see there).
PROBES = 32
#: Counts the GEMM fingerprint takes exactly: int8, and column sums of ``m`` rows that fit int32
#: (``m · 127 · 128 < 2^31``).
_MAX_COUNT, _MAX_ROWS = 127, (2**31 - 1) // (127 * 128)


def _gemm_fits(head: torch.Tensor) -> bool:
    """Whether :func:`fingerprint` may take its int8 matrix-product path for one head's ``(m, n)`` counts."""
    m, n = head.shape
    if head.is_floating_point() or head.is_complex() or m % 8 or n % 8 or not 0 < m <= _MAX_ROWS:
        return False
    low, high = torch.aminmax(head.to(torch.int32) if head.dtype == torch.bool else head)
    return int(low) >= 0 and int(high) <= _MAX_COUNT


def _head_fingerprint(head: torch.Tensor, sum_weights: Callable[[], torch.Tensor]) -> tuple[str, int]:
    """One head's fingerprint (see :func:`fingerprint`), named by the path that computed it.
    ``sum_weights``: the elementwise sum's ``m x n`` weights, drawn once per count tensor."""
    m, n = head.shape
    if _gemm_fits(head):
        with held(head.device):  # kept between cases: out of the default pool
            w, mix = _column_weights(m, head.device), _sum_weights(PROBES * n, head.device)
        try:
            return "gemm", int((torch._int_mm(w, head.to(torch.int8)) * mix.view(PROBES, n)).sum())
        except RuntimeError:  # a build whose int8 GEMM refuses this shape or device: the sum below
            pass
    flat = head.reshape(-1)
    bits = flat.to(torch.float64).view(torch.int64) if flat.is_floating_point() else flat  # exact values
    return "sum", int((bits * sum_weights()).sum())


def fingerprint(counts: torch.Tensor) -> tuple[tuple[str, int], ...]:
    """One 64-bit fingerprint per head of a ``(heads, m, n)`` count tensor.

    A head of counts 0..127 on a shape of multiples of 8 (every pattern of the profiles): its key
    columns are first reduced by an int8 matrix product, ``S = W·C`` with :data:`PROBES` fixed
    pseudo-random int8 rows ``W`` (``torch._int_mm``: exact int32 sums, one read of the counts as
    int8), then ``Σ S[j]·w[j] mod 2^64`` with splitmix64 weights ``w``.  Two heads that differ have
    a column ``d ≠ 0`` where they differ; each random row misses it (``W[r]·d = 0``) with
    probability ≤ 1/256, all 32 with ≤ 2^-256, and the sum collides with ~2^-64.  It replaced
    ``Σ C[i]·w[i]`` over every count with materialised int64 weights: 30 of a cache hit's 68 ms of
    device time at 16K tokens on an H200 (docs/perf/accuracy.md).

    Other heads (negative, floating, larger counts, odd shapes) take that elementwise sum: floating
    counts by their bits.  Each value names its path, so the two kinds never compare equal.
    """
    sum_weights = functools.cache(lambda: _splitmix(counts[0].numel(), counts.device))
    return tuple(_head_fingerprint(counts[h], sum_weights) for h in range(counts.shape[0]))


@dataclass
class _Entry:
    pattern: tuple[tuple[str, int], ...]
    shape: tuple[int, ...]
    inputs: tuple[torch.Tensor, ...]
    params: tuple[torch.Tensor, ...]
    settings: tuple
    grad_seed: int
    values: tuple[torch.Tensor, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.values, *self.inputs, *self.params))

    def matches(self, other: _Entry) -> bool:
        return (
            self.pattern == other.pattern
            and self.shape == other.shape
            and self.settings == other.settings
            and self.grad_seed == other.grad_seed
            and _equal(self.inputs, other.inputs)
            and _equal(self.params, other.params)
        )


def _equal(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and x.device == y.device and torch.equal(x, y)
        for x, y in zip(a, b, strict=True)
    )


def _module_key(module: torch.nn.Module, multihead: bool) -> tuple[tuple[torch.Tensor, ...], tuple]:
    """What of the module the reference reads besides the pattern: its parameters (multihead) and
    its settings (scale; heads, the norm's shape and eps)."""
    core = getattr(module, "attention", None) if multihead else module
    scale = getattr(core, "softmax_scale", None)
    if not multihead:
        return (), (False, scale)
    params = tuple(p.detach() for p in module.parameters())
    norm = getattr(module, "norm", None)
    norm_key = None if norm is None else (tuple(norm.normalized_shape), float(norm.eps))
    return params, (True, scale, int(module.num_heads), norm_key)


class ReferenceCache:
    """Float64 references of this process, reused across cases with equal reference inputs."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self.hits = 0
        self.misses = 0

    def values(
        self,
        counts: torch.Tensor,
        module: torch.nn.Module,
        multihead: bool,
        inputs: Sequence[torch.Tensor],
        grad_seed: int,
        compute: Callable[[], tuple[torch.Tensor, ...]],
    ) -> tuple[torch.Tensor, ...]:
        """The reference's output and input gradients for these reference inputs: a stored one when
        everything it was computed from is equal, else ``compute()`` (stored for the next case)."""
        params, settings = _module_key(module, multihead)
        probe = _Entry(
            fingerprint(counts), tuple(counts.shape), tuple(t.detach() for t in inputs), params, settings,
            grad_seed, (),
        )  # fmt: skip
        for key, entry in self._entries.items():
            if entry.matches(probe):
                self._entries.move_to_end(key)
                self.hits += 1
                return entry.values
        self.misses += 1
        values = tuple(t.detach() for t in compute())
        probe.values = values
        if probe.nbytes > self.max_bytes:
            return values
        with held(counts.device):  # kept out of the pool the code under test allocates from
            probe.values = tuple(t.clone() for t in values)
            probe.inputs = tuple(t.clone() for t in probe.inputs)  # the case may change its own later
            probe.params = tuple(t.clone() for t in probe.params)
        self._entries[self._next] = probe
        self._next += 1
        while sum(e.nbytes for e in self._entries.values()) > self.max_bytes:
            self._entries.popitem(last=False)
        return probe.values

    def clear(self) -> None:
        self._entries.clear()


#: The round worker's references (one process measures one side's code: nothing crosses sides).
REFERENCES = ReferenceCache()
