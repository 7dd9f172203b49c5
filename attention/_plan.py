"""Which dense attentions compute dilated attention over a sequence cut into chunks.

Dilated attention is block-diagonal after gathering: inside one segment of branch ``(w, r)``, the
positions kept with offset ``o`` attend densely to each other.  This module turns the semantics
of :mod:`attention.pattern` into a static list of *pieces*, each one dense attention with no mask
at all (so it can run on a fused kernel), for a sequence cut into contiguous chunks (the ring):

- **interior piece** (query chunk == key chunk): all segments of a branch that lie entirely
  inside the chunk, all heads of the branch at once.  Every head keeps exactly ``w/r`` positions
  of a full segment (``w % r == 0``), so this is one ``(segments, heads, w/r, d)`` attention,
  causal inside the segment when ``is_causal``;
- **boundary piece**: one segment that crosses a chunk boundary or the end of the sequence, one
  offset group of heads, the kept positions of that segment inside the query chunk against those
  inside the key chunk.  Same chunk: square, causal when ``is_causal``.  Key chunk before the
  query chunk: every key precedes every query, no mask.  Key chunk after the query chunk with
  ``is_causal``: skipped (entirely in the future).

A piece never has a row without keys, so kernels never see a fully masked row.  Piece indices
are *flat* rows ``position_in_chunk * num_heads + head`` of a chunk viewed as
``(batch, chunk_len * num_heads, head_dim)``, so gathering is one ``index_select``.

The plan depends only on shapes and configuration (never on data), so it is built once per
(seq_len, heads, chunking, causal, device) and cached; forward passes then launch a fixed
sequence of kernels (CUDA-graph capturable, no host synchronisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attention.pattern import branch_heads


@dataclass(frozen=True)
class Piece:
    """One dense attention: flat query rows of chunk ``q_chunk`` against key rows of ``k_chunk``."""

    branch: int
    q_chunk: int
    k_chunk: int
    q_index: torch.Tensor  # (P, heads, mq) flat rows into the query chunk
    k_index: torch.Tensor  # (P, heads, mk) flat rows into the key chunk
    causal: bool

    @property
    def batch_groups(self) -> int:
        return self.q_index.shape[0]

    @property
    def heads(self) -> int:
        return self.q_index.shape[1]

    @property
    def pairs(self) -> int:
        """Attended (query, key) pairs per batch element, for FLOP accounting."""
        p, h, mq = self.q_index.shape
        mk = self.k_index.shape[2]
        return p * h * (mq * (mq + 1) // 2 if self.causal else mq * mk)


def chunk_bounds(lengths: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Contiguous chunks from their lengths: ((start, end), ...)."""
    out, start = [], 0
    for n in lengths:
        out.append((start, start + n))
        start += n
    return tuple(out)


def split_lengths(seq_len: int, parts: int) -> tuple[int, ...]:
    """``seq_len`` split into ``parts`` contiguous chunks as evenly as possible (first ones longer)."""
    base, extra = divmod(seq_len, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def _kept_range(seg_lo: int, offset: int, rate: int, lo: int, hi: int) -> tuple[int, int]:
    """t-range [t0, t1) of kept positions ``seg_lo + offset + t*rate`` that fall in [lo, hi)."""
    base = seg_lo + offset
    t0 = max(0, -(-(lo - base) // rate))
    t1 = max(0, -(-(hi - base) // rate))
    return t0, t1


def build_pieces(
    *,
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str,
    bounds: Sequence[tuple[int, int]],
    q_chunk: int,
    k_chunk: int,
    is_causal: bool,
    device: torch.device,
    fuse: bool = True,
) -> list[Piece]:
    """The pieces of one (query chunk, key chunk) pair (module docstring), fused by :func:`coalesce`."""
    qa0, qa1 = bounds[q_chunk]
    kc0, kc1 = bounds[k_chunk]
    if qa0 >= qa1 or kc0 >= kc1:
        return []
    if is_causal and kc0 >= qa1:  # key chunk entirely in the future
        return []
    same = q_chunk == k_chunk
    h = num_heads
    pieces: list[Piece] = []
    for bh in branch_heads(num_heads, segment_lengths, dilation_rates, mode):
        w, r = bh.segment_length, bh.dilation_rate
        lo_j = max(qa0 // w, kc0 // w)
        hi_j = min((qa1 - 1) // w, (kc1 - 1) // w)
        if lo_j > hi_j:
            continue
        heads = torch.tensor(bh.heads, dtype=torch.int64, device=device)
        offsets = torch.tensor(bh.offsets, dtype=torch.int64, device=device)
        boundary = list(range(lo_j, hi_j + 1))
        if same:
            first_inner = -(-qa0 // w)
            end_inner = min(qa1, seq_len) // w  # exclusive
            if end_inner > first_inner:
                m = w // r
                seg = torch.arange(first_inner, end_inner, device=device)
                t = torch.arange(m, device=device)
                pos = seg[:, None, None] * w + offsets[None, :, None] + t[None, None, :] * r  # (S, hb, m)
                flat = (pos - qa0) * h + heads[None, :, None]
                pieces.append(Piece(bh.branch, q_chunk, k_chunk, flat, flat, is_causal))
                boundary = [j for j in boundary if not first_inner <= j < end_inner]
        for j in boundary:
            seg_lo, seg_hi = j * w, min((j + 1) * w, seq_len)
            for offset, group in bh.groups().items():
                tq0, tq1 = _kept_range(seg_lo, offset, r, max(qa0, seg_lo), min(qa1, seg_hi))
                tk0, tk1 = _kept_range(seg_lo, offset, r, max(kc0, seg_lo), min(kc1, seg_hi))
                if tq1 <= tq0 or tk1 <= tk0:
                    continue
                g = torch.tensor(group, dtype=torch.int64, device=device)
                q_pos = seg_lo + offset + torch.arange(tq0, tq1, device=device) * r
                k_pos = seg_lo + offset + torch.arange(tk0, tk1, device=device) * r
                q_flat = ((q_pos[None, :] - qa0) * h + g[:, None])[None]  # (1, hg, mq)
                k_flat = ((k_pos[None, :] - kc0) * h + g[:, None])[None]
                pieces.append(Piece(bh.branch, q_chunk, k_chunk, q_flat, k_flat, is_causal and same))
    return coalesce(pieces) if fuse else pieces


def coalesce(pieces: Sequence[Piece]) -> list[Piece]:
    """Pieces of one branch with the same query/key lengths and mask, fused into one piece.

    Inside one branch the pieces of a chunk pair touch disjoint query rows (different segments or
    offset groups), and the segments and heads of a piece are independent attentions, so they can
    share one kernel call as ``(1, Σ P·heads, m)``.  A ring whose chunks are shorter than the
    segments otherwise runs one piece per segment, offset group and chunk pair (336 per call for
    the ``ring`` benchmark at 1K tokens with ``ring_size=8``), each a dozen launches.  Pieces of
    different branches are never fused: they overlap in rows (every head is in every branch in
    ``longnet`` mode) and must be merged by log-sum-exp.  Only boundary pieces (one segment each)
    are fused; an interior piece keeps its ``(segments, heads, m)`` layout, the one measured on
    GPUs (docs/perf/attention.md), and a piece alone in its group is kept as is.
    """
    groups: dict[tuple[int, int, int, bool], list[Piece]] = {}
    out = []
    for piece in pieces:
        if piece.batch_groups > 1:  # an interior piece: its segments already share one call
            out.append(piece)
            continue
        key = (piece.branch, piece.q_index.shape[2], piece.k_index.shape[2], piece.causal)
        groups.setdefault(key, []).append(piece)
    for (_, mq, mk, _), group in groups.items():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        q_index = torch.cat([p.q_index.reshape(-1, mq) for p in group])[None]
        k_index = torch.cat([p.k_index.reshape(-1, mk) for p in group])[None]
        out.append(Piece(first.branch, first.q_chunk, first.k_chunk, q_index, k_index, first.causal))
    return out


def hilbert_curve(side: int) -> list[tuple[int, int]]:
    """Points (x, y) of the Hilbert curve filling a ``side x side`` grid (side a power of two)."""
    points = []
    for d in range(side * side):
        x = y = 0
        s, t = 1, d
        while s < side:
            rx = 1 & (t // 2)
            ry = 1 & (t ^ rx)
            if ry == 0:
                if rx == 1:
                    x, y = s - 1 - x, s - 1 - y
                x, y = y, x
            x += s * rx
            y += s * ry
            t //= 4
            s *= 2
        points.append((x, y))
    return points


def hilbert_pairs(chunks: int) -> list[tuple[int, int]]:
    """All (query chunk, key chunk) pairs of a ``chunks x chunks`` grid in Hilbert-curve order.

    For a non-power-of-two count, the curve of the next power of two is walked and points outside
    the grid are dropped, which keeps consecutive pairs close (locality of the chunks touched).
    """
    side = 1
    while side < chunks:
        side *= 2
    return [(y, x) for x, y in hilbert_curve(side) if x < chunks and y < chunks]


def ring_pairs(chunks: int) -> list[tuple[int, int]]:
    """Query-chunk-major ring order: chunk a meets key chunks a, a-1, a-2, ... (mod chunks)."""
    return [(a, (a - s) % chunks) for a in range(chunks) for s in range(chunks)]
