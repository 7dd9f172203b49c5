"""What every core module shares: the configuration, its checks, and ``attention_pattern``.

The configuration is validated once, at construction, so a swapped ``segment_lengths`` /
``dilation_rates`` or a bad mode fails before any tensor is touched; the input checks run at every
forward (shapes can change between calls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from attention._validation import (
    validate_dilation_config,
    validate_heads_for_mode,
    validate_qkv,
    validate_scale_and_dropout,
)
from attention.pattern import dilated_attended_pairs, dilated_pattern


class DilatedAttentionBase(nn.Module):
    """Configuration and pattern of a core dilated-attention module (no forward of its own).

    Keyword-only arguments (docs/design.md): ``segment_lengths``, ``dilation_rates``, ``mode``
    (``"longnet"`` or ``"head_groups"``), ``softmax_scale`` (``None`` = ``1/sqrt(head_dim)``),
    ``dropout`` (on attention probabilities, only in training), ``num_heads`` (optional, only
    used by :meth:`attention_pattern` when it is not given there).
    """

    def __init__(
        self,
        *,
        segment_lengths: Sequence[int],
        dilation_rates: Sequence[int],
        mode: str = "longnet",
        softmax_scale: float | None = None,
        dropout: float = 0.0,
        num_heads: int | None = None,
    ) -> None:
        super().__init__()
        segs, rates = validate_dilation_config(segment_lengths, dilation_rates, mode)
        validate_scale_and_dropout(softmax_scale, dropout)
        if num_heads is not None:
            validate_heads_for_mode(num_heads, len(segs), mode)
        self.segment_lengths: tuple[int, ...] = segs
        self.dilation_rates: tuple[int, ...] = rates
        self.mode = mode
        self.softmax_scale = softmax_scale
        self.dropout = float(dropout)
        self.num_heads = num_heads

    # -- helpers for subclasses -------------------------------------------------------------
    def _check_inputs(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
        b, n, h, d = validate_qkv(q, k, v)
        validate_heads_for_mode(h, len(self.segment_lengths), self.mode)
        return b, n, h, d

    def _scale(self, head_dim: int) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(head_dim)

    def _dropout_p(self) -> float:
        """Dropout is applied only in training (never in eval, never twice)."""
        return self.dropout if (self.training and self.dropout > 0.0) else 0.0

    def _resolve_heads(self, num_heads: int | None) -> int:
        h = num_heads if num_heads is not None else self.num_heads
        if h is None:
            raise ValueError(
                f"{type(self).__name__}.attention_pattern needs num_heads: pass num_heads= here or to the "
                "constructor"
            )
        return h

    # -- public -----------------------------------------------------------------------------
    def attention_pattern(
        self,
        seq_len: int,
        is_causal: bool = False,
        *,
        num_heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Count tensor ``(H, seq_len, seq_len)`` of the function this module computes.

        Built on ``device`` (default: torch's default device, the CPU unless changed): verification
        asks for it on the GPU it runs on, where an ``(8, 6139, 6139)`` pattern takes milliseconds
        and never crosses the PCIe bus.
        """
        return dilated_pattern(
            seq_len,
            self._resolve_heads(num_heads),
            self.segment_lengths,
            self.dilation_rates,
            self.mode,
            is_causal,
            device=device,
        )

    def attended_pairs(self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None) -> int:
        """``attention_pattern(...).sum()`` without building it: the (head, query, key) pairs one call
        computes, counting multiplicity (what perfguard's FLOP counts use at 1M tokens)."""
        heads = self._resolve_heads(num_heads)
        return dilated_attended_pairs(
            seq_len, heads, self.segment_lengths, self.dilation_rates, self.mode, is_causal
        )

    def extra_repr(self) -> str:
        return (
            f"segment_lengths={list(self.segment_lengths)}, dilation_rates={list(self.dilation_rates)}, "
            f"mode={self.mode!r}, softmax_scale={self.softmax_scale}, dropout={self.dropout}"
        )
