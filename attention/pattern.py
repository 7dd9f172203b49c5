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


def kept_mask(
    seq_len: int,
    segment_length: int,
    dilation_rate: int,
    offset: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bool (seq_len,): positions kept by one (segment, rate, offset); padded tail never kept."""
    pos = torch.arange(seq_len, device=device)
    within = pos % segment_length
    return (within >= offset) & ((within - offset) % dilation_rate == 0)


def segment_keep_masks(
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    device: torch.device | str | None = None,
) -> list[torch.Tensor]:
    """Per branch, bool ``(H, w_i)``: which positions of a segment each head keeps.

    Keeping depends only on the position inside the segment (``j*w + t`` is kept iff ``t`` is),
    so one row per head describes every segment of the branch, the one cut by the end of the
    sequence included (its first ``n mod w`` columns).  Heads that do not take part in a branch
    (``head_groups``) have an all-False row.  Built from :func:`branch_heads`, the one place that
    says which head reads which offset, without a Python loop over heads.
    """
    masks = []
    for bh in branch_heads(num_heads, segment_lengths, dilation_rates, mode):
        offset = torch.full((num_heads,), -1, dtype=torch.long)
        offset[torch.tensor(bh.heads, dtype=torch.long)] = torch.tensor(bh.offsets, dtype=torch.long)
        offset = offset.to(device)[:, None]  # (H, 1); -1: the head is not in this branch
        within = torch.arange(bh.segment_length, device=device)[None, :]  # (1, w)
        step = within - offset
        masks.append((offset >= 0) & (step >= 0) & (step % bh.dilation_rate == 0))
    return masks


def add_segment_blocks(counts: torch.Tensor, keep: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Add one branch to ``counts`` (H, n, n) in place: kept positions of a segment see each other.

    The branch's pairs lie in the diagonal ``w × w`` blocks of the (query, key) square and are the
    same in every segment, so one ``(H, w, w)`` pair mask is added to a strided view of all the
    full diagonal blocks at once (``H·n·w`` element updates instead of ``H·n²``), and its top-left
    corner to the block of the segment cut by the end of the sequence.  The blocks sit on the
    diagonal, so causality inside a block is the block's own lower triangle.
    """
    n = counts.shape[1]
    w = keep.shape[1]
    keep = keep[:, :n]  # a segment longer than the sequence: only its first n positions exist
    pair = keep[:, :, None] & keep[:, None, :]  # (H, min(w, n), min(w, n))
    if is_causal:
        pair = pair.tril()
    pair = pair.to(counts.dtype)  # adding ints is twice as fast as promoting bools on the fly
    full, rest = divmod(n, w)
    if full:
        square = counts[:, : full * w, : full * w]
        blocks = square.unflatten(1, (full, w)).unflatten(3, (full, w)).diagonal(dim1=1, dim2=3)
        blocks.add_(pair[..., None])  # (H, w, w, segments): a view into counts
    if rest:
        counts[:, full * w :, full * w :].add_(pair[:, :rest, :rest])
    return counts


def dilated_pattern(
    seq_len: int,
    num_heads: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str = "longnet",
    is_causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Count tensor ``(H, seq_len, seq_len)`` int32: how often key k is in query p's multiset, per head.

    Built directly on ``device`` (default: torch's default device), one vectorised update per
    branch (:func:`add_segment_blocks`): at the GPU verification size (n = 6139, H = 8) that is
    milliseconds on the GPU where a loop over head groups on the CPU took seconds.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    keeps = segment_keep_masks(num_heads, segment_lengths, dilation_rates, mode, device)
    counts = torch.zeros(num_heads, seq_len, seq_len, dtype=torch.int32, device=device)
    for keep in keeps:
        add_segment_blocks(counts, keep, is_causal)
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
