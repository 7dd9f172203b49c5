"""Float32 gradient sums that are written where a part is the first to reach its rows, added elsewhere.

The sequence-parallel backward (:mod:`attention._distributed`) sums one kernel call's dq/dk/dv
part at a time into float32 tensors of its shard.  Zeroing those sums first and adding every part
costs, per float32 value, a 4-byte fill and a 10-byte add (read the sum, read the part, write the
sum).  The rate-1 branch's calls cover their rows densely and, at step 0, come before any other
call reaches those rows: on 2 H200s at 1M tokens their twelve contiguous adds took 4.4 ms and the
zero fills 1.0 ms of a rank's 46 ms forward+backward (docs/perf/distributed.md).  Here a part that
covers a run of rows nothing has written yet is *copied* into them (2 + 4 bytes); only rows that a
sparse part reaches first, or that no part reaches, are zeroed, and only once.

The result is bit-identical to "zero, then add every part": ``0.0 + x`` is ``x`` in float32, and
every other value gets the same additions in the same order.
"""

from __future__ import annotations

import bisect

import torch

from attention._merge import _check_dest, _dest_view
from attention._part import Part


class RowSums:
    """A float32 ``(B, L, H, d)`` sum of parts, with the (batch, position, head) rows written so far.

    ``add(parts, lo, hi)`` adds parts whose geometry is relative to positions ``[lo, hi)``;
    :meth:`result` zeroes what no part reached and returns the tensor.  With batch > 1 the rows of
    ``[lo, hi)`` are not contiguous and parts are added into a copy (the plain sum: zeroed first).
    """

    def __init__(self, shape: torch.Size | tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        b, self._length, self._heads, self._d = shape
        self._tracked = b == 1
        self.values = (torch.empty if self._tracked else torch.zeros)(shape, dtype=dtype, device=device)
        self._rows = self.values.view(-1, self._d)
        # written runs of rows [start, end), sorted and disjoint (all of them when zeroed up front)
        self._starts: list[int] = [] if self._tracked else [0]
        self._ends: list[int] = [] if self._tracked else [self._rows.shape[0]]

    def add(self, parts: list[Part], lo: int, hi: int) -> None:
        """Each part into its rows of positions ``[lo, hi)``: copied where nothing is written yet,
        added elsewhere (rows a sparse part spans are zeroed first where still unwritten)."""
        view = self.values[:, lo:hi]
        if not self._tracked:
            tmp = view.contiguous()
            for p in parts:
                _dest_view(tmp, p, self._d).add_(p.values)
            view.copy_(tmp)
            return
        _check_dest(view)
        base = lo * self._heads
        for p in parts:
            rows = _dest_view(view, p, self._d)
            first = base + p.offset
            end = first + sum(st * (sz - 1) for st, sz in zip(p.strides, p.sizes, strict=True)) + 1
            dense = rows.numel() == (end - first) * self._d
            if dense and self._unwritten(first, end):
                rows.copy_(p.values)
            else:
                self._zero_gaps(first, end)
                rows.add_(p.values)
            self._mark(first, end)

    def result(self) -> torch.Tensor:
        """The sum, rows no part reached zero."""
        self._zero_gaps(0, self._rows.shape[0])
        self._mark(0, self._rows.shape[0])
        return self.values

    def _unwritten(self, first: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, first) - 1
        if i >= 0 and self._ends[i] > first:
            return False
        j = bisect.bisect_left(self._starts, first)
        return j == len(self._starts) or self._starts[j] >= end

    def _zero_gaps(self, first: int, end: int) -> None:
        at = first
        i = max(0, bisect.bisect_right(self._starts, first) - 1)
        while at < end:
            if i < len(self._starts) and self._starts[i] <= at:
                at = max(at, self._ends[i])
                i += 1
                continue
            stop = min(end, self._starts[i]) if i < len(self._starts) else end
            self._rows[at:stop].zero_()
            at = stop

    def _mark(self, first: int, end: int) -> None:
        i = bisect.bisect_left(self._ends, first)  # the first run that ends at or after `first`
        j = bisect.bisect_right(self._starts, end)  # runs from i to j-1 touch [first, end)
        if i < j:
            first, end = min(first, self._starts[i]), max(end, self._ends[j - 1])
        self._starts[i:j] = [first]
        self._ends[i:j] = [end]
