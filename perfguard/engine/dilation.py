"""Dilated attention as perfguard defines it: which keys each query sees, and how many pairs that is.

This is perfguard's own writing of DESIGN.md's "Dilated attention semantics", not the guarded
package's: ``perfguard verify``'s float64 reference of an entry declared ``computes="longnet"``,
``"head_groups"`` or ``"dilated"`` and the benchmarks' FLOP counts come from here, so code under
review can change neither what it is verified against nor the work it is credited with.

Branch ``i`` has segment length ``w_i`` and dilation rate ``r_i``.  Inside each segment of ``w_i``
positions a head that takes part in branch ``i`` with offset ``o`` keeps the positions
``o, o + r_i, o + 2 r_i, ...`` (relative to the segment's start; the segment cut by the end of the
sequence keeps those that exist).  The kept positions of a segment attend to each other (causally:
a query to keys at or before it).  A head's keys are the *multiset* union over its branches, so a
pattern counts.  Which heads take part where, with which offset (:func:`branch_offsets`):

- ``longnet``: every head in every branch, offset ``h // ceil(H / r_i)``;
- ``head_groups``: the heads in ``G`` contiguous groups (as even as possible, the extra heads to the
  first groups), group ``i`` only in branch ``i``, offset ``i mod r_i``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

MODES = ("longnet", "head_groups")


def branch_offsets(
    num_heads: int, segment_lengths: Sequence[int], dilation_rates: Sequence[int], mode: str
) -> list[tuple[int, int, tuple[int | None, ...]]]:
    """Per branch ``(segment length, rate, offset of each head or None where it takes no part)``.

    Raises ``ValueError`` for a configuration the semantics does not define.
    """
    segs, rates = [int(w) for w in segment_lengths], [int(r) for r in dilation_rates]
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not segs or len(segs) != len(rates):
        raise ValueError(f"need as many dilation rates as segment lengths, got {segs} and {rates}")
    if min(segs) <= 0 or min(rates) <= 0 or num_heads <= 0:
        raise ValueError(f"segments {segs}, rates {rates} and {num_heads} heads must be positive")
    if mode == "longnet":
        pairs = zip(segs, rates, strict=True)
        return [(w, r, tuple(h // math.ceil(num_heads / r) for h in range(num_heads))) for w, r in pairs]
    groups = len(segs)
    if num_heads < groups:
        raise ValueError(f"head_groups needs a head per branch: {num_heads} heads, {groups} branches")
    base, extra = divmod(num_heads, groups)
    out, start = [], 0
    for i, (w, r) in enumerate(zip(segs, rates, strict=True)):
        size = base + (1 if i < extra else 0)
        offsets = tuple(i % r if start <= h < start + size else None for h in range(num_heads))
        out.append((w, r, offsets))
        start += size
    return out


def dilated_pattern(
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    is_causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Count tensor ``(H, seq_len, seq_len)`` int32: how often key ``k`` is in query ``p``'s multiset.

    One ``(H, w, w)`` block per branch, added to each segment's diagonal block (the segment cut by
    the end of the sequence gets its top-left corner): built on ``device``.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    counts = torch.zeros(num_heads, seq_len, seq_len, dtype=torch.int32, device=device)
    for w, r, offsets in branch_offsets(num_heads, segment_lengths, dilation_rates, mode):
        width = min(w, seq_len)
        within = torch.arange(width, device=device)
        none = torch.zeros_like(within, dtype=torch.bool)  # a head that takes no part in the branch
        keep = torch.stack(
            [(within >= o) & ((within - o) % r == 0) if o is not None else none for o in offsets]
        )  # (H, width)
        block = keep[:, :, None] & keep[:, None, :]
        if is_causal:
            block = block.tril()
        block = block.to(torch.int32)
        for start in range(0, seq_len, w):
            size = min(width, seq_len - start)
            counts[:, start : start + size, start : start + size] += block[:, :size, :size]
    return counts


def dilated_attended_pairs(
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    is_causal: bool = False,
) -> int:
    """``dilated_pattern(...).sum()`` in closed form, without the ``(H, n, n)`` tensor (1M tokens)."""
    total = 0
    for w, r, offsets in branch_offsets(num_heads, segment_lengths, dilation_rates, mode):
        full, rest = divmod(seq_len, w)
        for o in offsets:
            if o is None:
                continue
            for length, segments in ((w, full), (rest, 1 if rest else 0)):
                kept = (length - 1 - o) // r + 1 if o < length else 0
                total += segments * (kept * (kept + 1) // 2 if is_causal else kept * kept)
    return total


def function_counts(
    what: str,
    n: int,
    heads: int,
    kwargs: dict,
    *,
    is_causal: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The ``(heads, n, n)`` counts of what a registry entry declares it ``computes``: ``"dense"``
    (every key; causally the lower triangle), or dilated attention in ``"longnet"`` /
    ``"head_groups"`` semantics with the ``segment_lengths`` and ``dilation_rates`` of ``kwargs``
    (the configuration the module was built with).  The one definition ``perfguard verify``'s
    reference and the accuracy benchmarks read for such entries (the module is not asked)."""
    if what == "dense":
        counts = torch.ones(heads, n, n, dtype=torch.int64, device=device)
        return torch.tril(counts) if is_causal else counts
    if what not in MODES:
        raise ValueError(f"computes={what!r} is not a declared function (dense, {', '.join(MODES)})")
    if "segment_lengths" not in kwargs or "dilation_rates" not in kwargs:
        raise ValueError(f"computes={what!r} needs segment_lengths and dilation_rates in the entry's config")
    segs, rates = tuple(kwargs["segment_lengths"]), tuple(kwargs["dilation_rates"])
    return dilated_pattern(n, heads, segs, rates, mode=what, is_causal=is_causal, device=device)
