"""The dilated-attention semantics, written once, as data.

This module is the single definition of *which keys each query sees* (DESIGN.md, "Dilated
attention semantics").  Every implementation computes its ``attention_pattern`` from here, and
the float64 reference in :mod:`attention.reference` weights dense attention by the count tensor
built here, so "matches the reference" means "computes this definition".

Branch ``i`` has segment length ``w_i`` and dilation rate ``r_i``.  Inside segment ``j`` a head
taking part in branch ``i`` with offset ``o`` keeps positions ``j*w_i + o + t*r_i`` for
``t = 0, 1, ...`` while ``o + t*r_i < w_i`` and the position is ``< seq_len``.  The kept positions
of one segment attend to each other (causally if asked).  A head's keys for a query are the
*multiset* union over its branches, so :func:`dilated_pattern` counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attention._validation import validate_dilation_config, validate_heads_for_mode


@dataclass(frozen=True)
class BranchHeads:
    """The heads taking part in one branch and the offset each one reads."""

    branch: int
    segment_length: int
    dilation_rate: int
    heads: tuple[int, ...]
    offsets: tuple[int, ...]

    def groups(self) -> dict[int, tuple[int, ...]]:
        """Heads grouped by offset: heads sharing an offset see the same positions."""
        by_offset: dict[int, list[int]] = {}
        for h, o in zip(self.heads, self.offsets, strict=True):
            by_offset.setdefault(o, []).append(h)
        return {o: tuple(hs) for o, hs in sorted(by_offset.items())}


def head_group_sizes(num_heads: int, num_groups: int) -> list[int]:
    """Split heads into contiguous groups as evenly as possible, extra heads to the first groups."""
    base, extra = divmod(num_heads, num_groups)
    return [base + (1 if g < extra else 0) for g in range(num_groups)]


def branch_heads(
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
) -> list[BranchHeads]:
    """Which heads take part in each branch, with which offset (the two modes of DESIGN.md).

    - ``longnet``: every head in every branch, offset ``h // ceil(H / r_i)``.
    - ``head_groups``: heads split into G contiguous groups (extra heads to the first groups);
      group ``i`` only in branch ``i``, offset ``i % r_i``.
    """
    segs, rates = validate_dilation_config(segment_lengths, dilation_rates, mode)
    validate_heads_for_mode(num_heads, len(segs), mode)
    out: list[BranchHeads] = []
    if mode == "longnet":
        for i, (w, r) in enumerate(zip(segs, rates, strict=True)):
            per_group = math.ceil(num_heads / r)
            heads = tuple(range(num_heads))
            offsets = tuple(h // per_group for h in heads)
            out.append(BranchHeads(i, w, r, heads, offsets))
    else:
        start = 0
        for i, (size, w, r) in enumerate(
            zip(head_group_sizes(num_heads, len(segs)), segs, rates, strict=True)
        ):
            heads = tuple(range(start, start + size))
            out.append(BranchHeads(i, w, r, heads, tuple(i % r for _ in heads)))
            start += size
    return out


def kept_mask(seq_len: int, segment_length: int, dilation_rate: int, offset: int) -> torch.Tensor:
    """Bool (seq_len,): positions kept by one (segment, rate, offset); padded tail never kept."""
    pos = torch.arange(seq_len)
    within = pos % segment_length
    return (within >= offset) & ((within - offset) % dilation_rate == 0)


def dilated_pattern(
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    is_causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Count tensor ``(H, seq_len, seq_len)``: how often key k is in query p's multiset, per head."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    counts = torch.zeros(num_heads, seq_len, seq_len, dtype=torch.int32, device=device)
    pos = torch.arange(seq_len, device=device)
    causal = (pos[None, :] <= pos[:, None]) if is_causal else None
    for bh in branch_heads(num_heads, segment_lengths, dilation_rates, mode):
        seg = pos // bh.segment_length
        same_segment = seg[:, None] == seg[None, :]
        for offset, heads in bh.groups().items():
            keep = kept_mask(seq_len, bh.segment_length, bh.dilation_rate, offset).to(pos.device)
            pair = keep[:, None] & keep[None, :] & same_segment
            if causal is not None:
                pair &= causal
            counts[list(heads)] += pair.to(torch.int32)
    return counts


def attended_pairs(counts: torch.Tensor) -> int:
    """Number of (head, query, key) pairs computed, counting multiplicity (FLOP accounting)."""
    return int(counts.sum(dtype=torch.int64).item())


def dilated_attended_pairs(
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    is_causal: bool = False,
) -> int:
    """Closed-form attended pairs without building the (H, n, n) tensor (used for TFLOP/s at 1M tokens)."""
    total = 0
    for bh in branch_heads(num_heads, segment_lengths, dilation_rates, mode):
        w, r = bh.segment_length, bh.dilation_rate
        for offset, heads in bh.groups().items():
            n_full, rest = divmod(seq_len, w)
            sizes = [_kept_in_segment(w, r, offset, w)] * n_full
            if rest:
                sizes.append(_kept_in_segment(w, r, offset, rest))
            per_head = sum(m * (m + 1) // 2 if is_causal else m * m for m in sizes)
            total += per_head * len(heads)
    return total


def _kept_in_segment(w: int, r: int, offset: int, length: int) -> int:
    """Kept positions of one segment of nominal length w that is cut to ``length`` positions."""
    limit = min(w, length)
    if offset >= limit:
        return 0
    return (limit - 1 - offset) // r + 1
