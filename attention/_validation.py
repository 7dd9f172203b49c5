"""Argument checks shared by every implementation.

Earlier implementations of these classes accepted swapped ``segment_lengths`` and
``dilation_rates`` or mismatched q/k/v silently and produced wrong numbers.  Every check here
raises ``ValueError`` naming the offending numbers, so a bad configuration fails at construction
(or at the first forward for shape problems) instead of producing plausible garbage.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MODES = ("longnet", "head_groups")


def validate_dilation_config(
    segment_lengths: Sequence[int], dilation_rates: Sequence[int], mode: str = "longnet"
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check one (segment_lengths, dilation_rates, mode) configuration and return it as tuples."""
    if isinstance(segment_lengths, (int, float)) or isinstance(dilation_rates, (int, float)):
        raise ValueError(
            f"segment_lengths and dilation_rates must be sequences of ints, got "
            f"segment_lengths={segment_lengths!r}, dilation_rates={dilation_rates!r}"
        )
    segs = tuple(segment_lengths)
    rates = tuple(dilation_rates)
    if not segs or not rates:
        raise ValueError(
            f"segment_lengths and dilation_rates must not be empty, got {list(segs)} and {list(rates)}"
        )
    if len(segs) != len(rates):
        raise ValueError(
            f"segment_lengths and dilation_rates must have the same length, got "
            f"{len(segs)} segment lengths {list(segs)} and {len(rates)} dilation rates {list(rates)}"
        )
    for name, values in (("segment_lengths", segs), ("dilation_rates", rates)):
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be positive ints, got {list(values)}")
    for w, r in zip(segs, rates, strict=True):
        if w % r != 0:
            raise ValueError(
                f"each segment length must be a multiple of its dilation rate: segment {w} with rate {r} "
                f"(segment_lengths={list(segs)}, dilation_rates={list(rates)}); did you swap them?"
            )
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return segs, rates


def validate_heads_for_mode(num_heads: int, num_branches: int, mode: str) -> None:
    """``head_groups`` needs at least one head per branch; otherwise a branch would have no heads."""
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    if mode == "head_groups" and num_heads < num_branches:
        raise ValueError(
            f"mode='head_groups' splits the heads into one group per branch: num_heads={num_heads} "
            f"is fewer than the {num_branches} branches"
        )


def validate_scale_and_dropout(softmax_scale: float | None, dropout: float) -> None:
    if softmax_scale is not None and not softmax_scale > 0:
        raise ValueError(f"softmax_scale must be positive or None, got {softmax_scale}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def validate_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """q, k, v must be (batch, seq_len, num_heads, head_dim) of one shape, device and dtype."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D (batch, seq_len, num_heads, head_dim), got shape {tuple(t.shape)}"
            )
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"q, k and v must have the same shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, n, h, d = q.shape
    if min(b, n, h, d) <= 0:
        raise ValueError(f"q, k and v must have no empty dimension, got shape {tuple(q.shape)}")
    return b, n, h, d
