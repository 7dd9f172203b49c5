"""``nn.MultiheadAttention``-style modules around each core (docs/design.md, "Multihead modules").

Every module here has the same shape: q/k/v projections, the core dilated attention over
``num_heads`` heads, the MAGNETO sub-LayerNorm on the merged heads, ``out_proj``.  Constructor
arguments after ``(embed_dim, num_heads)`` are keyword-only, so the swapped
``dilation_rates``/``segment_lengths`` positional orders of earlier implementations cannot happen
(research/dilated_attention.md §8.10).

``forward`` **always** returns ``(output, None)``: the attention weights of dilated attention
are never materialised (that is the point of it), so ``need_weights=True`` is accepted for
drop-in compatibility with ``nn.MultiheadAttention`` call sites but still returns ``None`` weights.
Unpacking ``out, _ = mha(...)`` is therefore always safe (§8.9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from attention.registry import core_class


class _MultiheadDilatedBase(nn.Module):
    """Projections + core + sub-LN + output projection.

    Which core a subclass wraps is its row's ``core`` in :data:`attention.registry.IMPLEMENTATIONS`,
    resolved at construction (keeps ``import attention.multihead`` light).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        segment_lengths: Sequence[int],
        dilation_rates: Sequence[int],
        mode: str = "longnet",
        dropout: float = 0.0,
        bias: bool = True,
        layer_norm: bool = True,
        layer_norm_eps: float = 1e-5,
        gamma_init: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **core_kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive int, got {embed_dim!r}")
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim must be divisible by num_heads: embed_dim={embed_dim}, num_heads={num_heads} "
                f"(remainder {embed_dim % num_heads})"
            )
        if not gamma_init > 0:
            raise ValueError(f"gamma_init must be positive, got {gamma_init}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.gamma_init = float(gamma_init)
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.attention = core_class(type(self))(
            segment_lengths=segment_lengths,
            dilation_rates=dilation_rates,
            mode=mode,
            dropout=dropout,
            num_heads=num_heads,
            **core_kwargs,
        )
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **factory) if layer_norm else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """MAGNETO init: xavier-normal q/k (gain 1), v/out with gain ``gamma_init``, zero biases."""
        nn.init.xavier_normal_(self.q_proj.weight)
        nn.init.xavier_normal_(self.k_proj.weight)
        nn.init.xavier_normal_(self.v_proj.weight, gain=self.gamma_init)
        nn.init.xavier_normal_(self.out_proj.weight, gain=self.gamma_init)
        for layer in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, None]:
        """``(batch, seq_len, embed_dim)`` in and out; ``(output, None)`` whatever ``need_weights``."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"{name} must be (batch, seq_len, embed_dim={self.embed_dim}), got shape {tuple(t.shape)}"
                )
        if not (query.shape == key.shape == value.shape):
            raise ValueError(
                f"query, key and value must have the same shape, got {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        b, n, _ = query.shape
        h, d = self.num_heads, self.head_dim
        q = self.q_proj(query).view(b, n, h, d)
        k = self.k_proj(key).view(b, n, h, d)
        v = self.v_proj(value).view(b, n, h, d)
        x = self.attention(q, k, v, is_causal=is_causal).reshape(b, n, self.embed_dim)
        if self.norm is not None:
            x = self.norm(x)
        return self.out_proj(x), None

    def attention_pattern(
        self,
        seq_len: int,
        is_causal: bool = False,
        *,
        num_heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """The core's pattern over this module's heads, built on ``device``."""
        return self.attention.attention_pattern(
            seq_len, is_causal, num_heads=num_heads or self.num_heads, device=device
        )

    def attended_pairs(self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None) -> int:
        """The core's attended pairs over this module's heads (``attention_pattern(...).sum()``)."""
        return self.attention.attended_pairs(seq_len, is_causal, num_heads=num_heads or self.num_heads)

    @property
    def softmax_scale(self) -> float | None:
        return self.attention.softmax_scale

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, gamma_init={self.gamma_init}"


class MultiheadDilatedAttention(_MultiheadDilatedBase):
    """Multihead module around :class:`attention.dilated.DilatedAttention`."""


class ImprovedMultiheadDilatedAttention(_MultiheadDilatedBase):
    """Multihead module around :class:`attention.improved.ImprovedDilatedAttention`."""


class RingMultiheadDilatedAttention(_MultiheadDilatedBase):
    """Multihead module around :class:`attention.ring.RingDilatedAttention` (``ring_size=`` passes on)."""


class HilbertRingMultiheadDilatedAttention(_MultiheadDilatedBase):
    """Multihead module around :class:`attention.hilbert.HilbertRingDilatedAttention`.

    Not one of the nine registry names; it is what ``create_multihead_dilated_attention("hilbert_ring")``
    builds, so every core name has a multihead module.
    """


class BlockSparseRingMultiheadDilatedAttention(_MultiheadDilatedBase):
    """Multihead module around :class:`attention.block_sparse.BlockSparseRingDilatedAttention`."""
