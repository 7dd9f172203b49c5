"""How many lanes the sequence-parallel ring needs: a bound of what a rank holds besides its shard.

A rank's own q, k, v and output are 1/N of the sequence; everything else it holds during a call
must be too, and small.  :func:`transient_bytes` bounds it (interval arithmetic over every rank,
lane and step); :func:`lanes_for` takes the fewest lanes that keep it within
:data:`TRANSIENT_SHARE` of the shard's output.  Every lane is another trip around the ring, so no
more than memory needs (docs/perf/distributed.md).  Used by :mod:`attention.ring` and
:mod:`attention._distributed`; on its own because it is arithmetic on shapes, no tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from attention._plan import chunk_bounds, split_lengths
from attention.pattern import branch_heads

#: What a rank may hold besides its inputs, output and LSE during a forward, as a share of its
#: output shard: the ``distributed`` profile's one-lane forward needs 1.19 of it (the rate-1
#: branch's piece over the whole shard, 1.09, plus the packed buffers), which keeps a rank's peak
#: at ~2.2 output shards, under the issue-33 bound of 1.25/N of one GPU's peak (~2.4 shards).
TRANSIENT_SHARE = 1.25


def transient_bytes(
    lengths: Sequence[int],
    lanes: int,
    *,
    batch: int,
    heads: int,
    head_dim: int,
    element_size: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str,
) -> int:
    """An upper bound of what a rank holds during a forward with ``lanes`` besides its q, k, v,
    output and LSE, on any rank: the largest piece being merged (its values, its float32 LSE and
    the merge's two float32 row temporaries) plus three of the largest packed key/value buffer
    (the one attended, the next arriving, the next leaving).  Since the forward merges a piece one
    kernel call at a time (calls of at most ``1/attention.ring.CALL_SHARE`` of the shard's rows),
    the piece term over-counts the rate-1 branch up to 4x: the bound holds, loosely; lanes are
    chosen on it unchanged (one lane at every length of the ``distributed`` profile).

    Per branch (segment ``w``, rate ``r``, ``hb`` heads), a piece against key sub-chunk ``c`` covers
    one in ``r`` of the query rows that the segments meeting ``c`` hold, and what shard ``a``
    receives of ``c`` is one in ``r`` of the rows of ``c`` that the segments meeting shard ``a``
    hold: interval arithmetic on the positions, causality ignored (a bound)."""
    shards = chunk_bounds(lengths)
    world = len(lengths)
    subs = [[(lo + s, lo + e) for s, e in chunk_bounds(split_lengths(hi - lo, lanes))] for lo, hi in shards]
    branches = [
        (bh.segment_length, bh.dilation_rate, len(bh.heads))
        for bh in branch_heads(heads, segment_lengths, dilation_rates, mode)
    ]

    def reach(lo: int, hi: int, w: int) -> tuple[int, int]:
        """The positions of the segments of length ``w`` that meet [lo, hi)."""
        return (lo // w) * w, ((hi - 1) // w + 1) * w

    def kept(x: tuple[int, int], y: tuple[int, int], r: int) -> int:
        return -(-max(0, min(x[1], y[1]) - max(x[0], y[0])) // r)

    piece = packed = 0
    for a, rows in enumerate(shards):
        for step in range(world):
            for c in subs[(a - step) % world]:
                sent = 0
                for w, r, hb in branches:
                    crossing = kept(c, reach(*rows, w), r)
                    if step == 0 or crossing:
                        piece = max(piece, hb * kept(rows, reach(*c, w), r))
                    sent += hb * crossing if step else 0
                packed = max(packed, sent)
    row = head_dim * element_size
    return batch * (piece * (row + 12) + 3 * packed * 2 * row)


#: At most this many lanes (the most the ring used before issue 33): each is another trip around
#: the ring, and every lane adds a bfloat16 rounding of the running output per step (the error
#: grew x4.6 at 8 ranks with 64 lanes, docs/perf/distributed.md); past it the bound may not hold.
MAX_LANES = 8


def lanes_for(
    lengths: Sequence[int],
    *,
    batch: int,
    heads: int,
    head_dim: int,
    element_size: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str,
) -> int:
    """The fewest lanes (1, 2, 4, …, at most the shortest shard and :data:`MAX_LANES`) whose
    :func:`transient_bytes` stay within :data:`TRANSIENT_SHARE` of the longest shard's output:
    every lane is another trip around the ring (host work per step), so no more than memory
    needs.  Cached: the same shapes ask again at every call."""
    shape = (batch, heads, head_dim, element_size)
    return _lanes_for(tuple(lengths), *shape, tuple(segment_lengths), tuple(dilation_rates), mode)


@functools.lru_cache(maxsize=256)
def _lanes_for(lengths, batch, heads, head_dim, element_size, segment_lengths, dilation_rates, mode) -> int:
    budget = TRANSIENT_SHARE * batch * max(lengths) * heads * head_dim * element_size
    shape = {"batch": batch, "heads": heads, "head_dim": head_dim, "element_size": element_size}
    pattern = {"segment_lengths": segment_lengths, "dilation_rates": dilation_rates, "mode": mode}
    most = min(*lengths, MAX_LANES)
    lanes = 1
    while lanes < most:
        if transient_bytes(lengths, lanes, **shape, **pattern) <= budget:
            return lanes
        lanes *= 2
    return most
