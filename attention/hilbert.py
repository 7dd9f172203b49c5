"""``HilbertRingDilatedAttention``: the ring, visiting chunk pairs in Hilbert-curve order.

The ``ring_size × ring_size`` grid of (query chunk, key chunk) pairs is walked along a Hilbert
curve instead of query-chunk-major, so consecutive steps touch neighbouring chunks (locality of
the q and k/v chunks in cache).  The log-sum-exp merge is order-independent, and causal masking
is decided per pair from *global* positions (:mod:`attention._plan`), never from the position in
the visiting order, so the function is exactly ``dilated``'s with or without ``is_causal``
(the Hilbert-permuted causal mask of earlier implementations cannot happen: nothing is permuted).

Cost of the order: several query chunks are open at once, so their piece outputs are
alive together (O(n), like ``improved``), unlike the plain ring's one at a time.  Across ranks
(``torch.distributed``) every rank holds one query chunk and the visiting order is the ring's
communication order, so the distributed path is the same as :class:`RingDilatedAttention`'s.
"""

from __future__ import annotations

from attention._plan import hilbert_pairs
from attention.ring import RingDilatedAttention


class HilbertRingDilatedAttention(RingDilatedAttention):
    """Ring dilated attention visiting chunk pairs along a Hilbert curve (module docstring)."""

    def _pairs(self, chunks: int) -> tuple[tuple[int, int], ...]:
        return tuple(hilbert_pairs(chunks))
