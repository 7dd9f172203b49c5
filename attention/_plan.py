"""Which dense attentions compute dilated attention, as strided views of q, k and v.

Dilated attention is block-diagonal after gathering: inside one segment of branch ``(w, r)``, the
heads that read offset ``o`` keep positions ``seg·w + o + t·r`` and attend densely to each other.
In the ``(batch, seq, heads, head_dim)`` layout those positions are equally spaced: a head's kept
rows are ``r·H`` rows apart (one row = the ``head_dim`` values of one (position, head)), the heads
of one offset group are adjacent rows, successive offset groups are ``H + c`` rows apart (``c``
heads per group, longnet) and successive segments ``w·H`` rows apart.  So every piece of work is a
**strided view** of the inputs that a fused kernel reads directly (cuDNN, FlashAttention-2, the
memory-efficient kernel and the CPU flash kernel all accept any strides with a contiguous last
dimension; issue 8 measured cuDNN on such views at the speed of pre-gathered tensors): nothing is
gathered or copied.

This module turns the semantics of :mod:`attention.pattern` into a static list of :class:`Piece`
for a sequence cut into contiguous chunks (``improved`` is one chunk, the ring several):

- a piece is one segment range × one run of offset groups × the heads of a group, the kept
  positions inside the query chunk against those inside the key chunk;
- same chunk: square, causal when ``is_causal``; key chunk before the query chunk: every key
  precedes every query, no mask; key chunk after it with ``is_causal``: skipped;
- pieces of consecutive segments with the same local ranges share one piece (a *segment axis*),
  and so do offset groups with the same head count and ranges (a *group axis*).

A piece never has a row without keys, so kernels never see a fully masked row.  Geometry is in
*rows* relative to the chunk tensors (batch excluded: its stride is known at call time, see
:func:`fold`).  The plan depends only on shapes and configuration (never on data) and is built
without touching a device, so forward passes launch a fixed sequence of kernels (CUDA-graph
capturable, no host synchronisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attention.pattern import branch_heads


@dataclass(frozen=True)
class Axis:
    """One axis of independent attention instances: its size and row strides in q and in k/v."""

    size: int
    q_stride: int
    k_stride: int


@dataclass(frozen=True)
class Piece:
    """A dense attention over strided views: rows ``offset + Σ index·stride + t·t_stride``."""

    branch: int
    q_chunk: int
    k_chunk: int
    q_offset: int  # first query row, relative to the query chunk (batch 0)
    k_offset: int  # first key row, relative to the key chunk
    axes: tuple[Axis, ...]  # instance axes (segments, offset groups, heads), size-1 axes dropped
    lq: int
    lk: int
    t_stride: int  # rows between consecutive kept positions (rate · num_heads)
    causal: bool

    @property
    def instances(self) -> int:
        out = 1
        for a in self.axes:
            out *= a.size
        return out

    @property
    def pairs(self) -> int:
        """Attended (query, key) pairs per batch element, for FLOP accounting."""
        per = self.lq * (self.lq + 1) // 2 if self.causal else self.lq * self.lk
        return self.instances * per

    def rows(self, which: str = "q") -> list[list[int]]:
        """Every instance's rows (``"q"`` or ``"k"``), batch 0: a plain-Python oracle for tests."""
        offset, length = (self.q_offset, self.lq) if which == "q" else (self.k_offset, self.lk)
        starts = [offset]
        for ax in self.axes:
            step = ax.q_stride if which == "q" else ax.k_stride
            starts = [s + i * step for s in starts for i in range(ax.size)]
        return [[s + t * self.t_stride for t in range(length)] for s in starts]


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


def chunks_connected(
    bounds: Sequence[tuple[int, int]], a: int, c: int, segment_lengths: Sequence[int], is_causal: bool
) -> bool:
    """Whether some segment of some branch spans both chunk ``a`` (queries) and ``c`` (keys)."""
    (qa0, qa1), (kc0, kc1) = bounds[a], bounds[c]
    if is_causal and kc0 >= qa1:
        return False
    return any(max(qa0 // w, kc0 // w) <= min((qa1 - 1) // w, (kc1 - 1) // w) for w in segment_lengths)


def _kept_range(seg_lo: int, offset: int, rate: int, lo: int, hi: int) -> tuple[int, int]:
    """t-range [t0, t1) of kept positions ``seg_lo + offset + t*rate`` that fall in [lo, hi)."""
    base = seg_lo + offset
    t0 = max(0, -(-(lo - base) // rate))
    t1 = max(0, -(-(hi - base) // rate))
    return t0, t1


@dataclass(frozen=True)
class _Group:
    offset: int
    first_head: int
    heads: int


def _offset_groups(bh) -> list[_Group]:
    """The branch's heads by offset, each group a contiguous head range (true in both modes)."""
    out = []
    for offset, heads in bh.groups().items():
        if list(heads) != list(range(heads[0], heads[0] + len(heads))):
            raise AssertionError(f"offset group {heads} is not a contiguous head range")
        out.append(_Group(offset, heads[0], len(heads)))
    return out


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
) -> list[Piece]:
    """The pieces of one (query chunk, key chunk) pair (module docstring)."""
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
        groups = _offset_groups(bh)
        # per segment: runs of offset groups with equal local ranges and head counts
        per_segment: list[tuple[int, tuple]] = []
        for j in range(lo_j, hi_j + 1):
            seg_lo, seg_hi = j * w, min((j + 1) * w, seq_len)
            runs: list[list] = []
            for g in groups:
                tq = _kept_range(seg_lo, g.offset, r, max(qa0, seg_lo), min(qa1, seg_hi))
                tk = _kept_range(seg_lo, g.offset, r, max(kc0, seg_lo), min(kc1, seg_hi))
                if tq[1] <= tq[0] or tk[1] <= tk[0]:
                    continue
                key = (tq, tk, g.heads)
                if runs and runs[-1][0] == key:
                    run = runs[-1]
                    step = (g.offset - run[1][-1].offset) * h + (g.first_head - run[1][-1].first_head)
                    if len(run[1]) == 1 or step == run[2]:
                        run[1].append(g)
                        run[2] = step
                        continue
                runs.append([key, [g], None])
            signature = tuple(
                (key, tuple((x.offset, x.first_head) for x in gs), step) for key, gs, step in runs
            )
            per_segment.append((j, signature))
        # consecutive segments with the same signature share one piece (a segment axis)
        i = 0
        while i < len(per_segment):
            j0, sig = per_segment[i]
            count = 1
            while i + count < len(per_segment) and per_segment[i + count][1] == sig:
                count += 1
            for (tq, tk, hc), members, step in sig:
                o0, h0 = members[0]
                seg_lo = j0 * w
                q_off = (seg_lo + o0 + tq[0] * r - qa0) * h + h0
                k_off = (seg_lo + o0 + tk[0] * r - kc0) * h + h0
                axes = [Axis(count, w * h, w * h), Axis(len(members), step or 0, step or 0), Axis(hc, 1, 1)]
                pieces.append(
                    Piece(
                        branch=bh.branch,
                        q_chunk=q_chunk,
                        k_chunk=k_chunk,
                        q_offset=q_off,
                        k_offset=k_off,
                        axes=tuple(a for a in axes if a.size > 1),
                        lq=tq[1] - tq[0],
                        lk=tk[1] - tk[0],
                        t_stride=r * h,
                        causal=is_causal and same,
                    )
                )
            i += count
    return pieces


# --------------------------------------------------------------------------------------------
# folding a piece onto a kernel's (B, H, L, d) layout
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One kernel call: ``(B, H', L)`` sizes and row strides of its q and k views, and offsets."""

    sizes: tuple[int, int]  # (B, H')
    q_strides: tuple[int, int]
    k_strides: tuple[int, int]
    q_offset: int  # rows from the query chunk tensor's first row (batch included)
    k_offset: int


def fold(piece: Piece, batch: int, q_batch_stride: int, k_batch_stride: int) -> list[Call]:
    """The kernel calls of one piece for ``batch`` sequences (batch strides in rows).

    The instance axes (batch, segments, groups, heads) are independent attentions; a kernel has
    two such axes (B and H), so axes whose strides chain (``outer = size·inner`` in q *and* k) are
    merged, the two largest become B and H, and the rest are looped over (separate calls).
    """
    axes = [(batch, q_batch_stride, k_batch_stride)] if batch > 1 else []
    axes += [(a.size, a.q_stride, a.k_stride) for a in piece.axes]
    merged = True
    while merged:
        merged = False
        axes.sort(key=lambda a: (a[1], a[2]))
        for i, inner in enumerate(axes):
            for j, outer in enumerate(axes):
                if i != j and outer[1] == inner[0] * inner[1] and outer[2] == inner[0] * inner[2]:
                    axes[i] = (inner[0] * outer[0], inner[1], inner[2])
                    del axes[j]
                    merged = True
                    break
            if merged:
                break
    axes.sort(key=lambda a: -a[0])
    kernel_axes = sorted(axes[:2], key=lambda a: -a[1])  # B = the larger stride, H = the smaller
    while len(kernel_axes) < 2:
        kernel_axes.append((1, 0, 0))
    loops = axes[2:]
    calls = []
    starts = [(0, 0)]
    for size, sq, sk in loops:
        starts = [(oq + i * sq, ok + i * sk) for oq, ok in starts for i in range(size)]
    for oq, ok in starts:
        calls.append(
            Call(
                sizes=(kernel_axes[0][0], kernel_axes[1][0]),
                q_strides=(kernel_axes[0][1], kernel_axes[1][1]),
                k_strides=(kernel_axes[0][2], kernel_axes[1][2]),
                q_offset=piece.q_offset + oq,
                k_offset=piece.k_offset + ok,
            )
        )
    return calls


def split_call(call: Call, lq: int, max_rows: int) -> list[Call]:
    """``call`` cut along its batch axis (``B``, else ``H'``) into the fewest calls of at most
    ``max_rows`` query rows (``B · H' · lq``) each: the same attention, in smaller kernel calls.

    Why: the sequence-parallel backward holds one call's gradients and its kernel's float32
    workspace at a time; the distributed profile's rate-1 branch is one call over the whole shard
    (32 segments x 12 heads at 128K tokens on 2 ranks), whose cuDNN backward alone held 5 output
    shards (docs/perf/distributed.md, issue 33).
    """
    b, h = call.sizes
    if b * h * lq <= max_rows:
        return [call]
    axis = 0 if b > 1 else 1
    size = call.sizes[axis]
    per = max(1, max_rows // (lq * (h if axis == 0 else b)))
    out = []
    for start in range(0, size, per):
        n = min(per, size - start)
        sizes = (n, h) if axis == 0 else (b, n)
        out.append(
            Call(
                sizes=sizes,
                q_strides=call.q_strides,
                k_strides=call.k_strides,
                q_offset=call.q_offset + start * call.q_strides[axis],
                k_offset=call.k_offset + start * call.k_strides[axis],
            )
        )
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
