"""Implementations for testing ``perfguard verify``: correct ones, and one broken one per known bug class.

Each broken class reproduces a bug that earlier "verify" scripts let through
(research/dilated_attention.md §4–§8).  They are registered into real ``perfguard verify`` runs
the way users register their own kernels: entries (:func:`entry_for`, a
``perfguard.declare.Implementation``) in the registry a repository's ``[tool.perfguard]`` declares
(test_verify_cli.py writes such a repository).

The correct classes compute count-weighted softmax attention over :func:`dilated_pattern` in the
working dtype: the semantics written the plainest way, so the pass path has something to pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention._validation import validate_dilation_config, validate_qkv
from attention.pattern import dilated_pattern as semantics_pattern
from attention.pattern import head_group_sizes, kept_mask
from attention.registry import REGISTRY
from perfguard.declare import Implementation

# --------------------------------------------------------------------------- correct


def count_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, counts: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """Count-weighted softmax attention in q's dtype; rows without keys give 0 (no NaN)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    logits = torch.einsum("bphd,bkhd->bhpk", q, k) * scale
    logits = logits.masked_fill(counts == 0, float("-inf"))
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    p = torch.exp(logits - row_max) * counts.to(q.dtype)
    denom = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.einsum("bhpk,bkhd->bphd", p, v)


@lru_cache(maxsize=64)
def _cached_semantics_pattern(*args: object) -> torch.Tensor:
    return semantics_pattern(*args)  # type: ignore[arg-type]


class GoodCore(nn.Module):
    """Correct: the semantics of attention.pattern, computed densely in the working dtype."""

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
        self.segment_lengths = list(segment_lengths)
        self.dilation_rates = list(dilation_rates)
        self.mode = mode
        self.softmax_scale = softmax_scale
        self.dropout = dropout
        self.num_heads = num_heads
        self.validate()

    def validate(self) -> None:
        validate_dilation_config(self.segment_lengths, self.dilation_rates, self.mode)

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        heads = num_heads or self.num_heads
        args = (seq_len, heads, tuple(self.segment_lengths), tuple(self.dilation_rates), self.mode, is_causal)
        return _cached_semantics_pattern(*args).clone()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        _, n, h, _ = validate_qkv(q, k, v)
        counts = self.attention_pattern(n, is_causal, num_heads=h).to(q.device)
        return count_attention(q, k, v, counts, self.softmax_scale)


class GoodMultihead(nn.Module):
    """Correct multihead module of the design contract around a core."""

    core_class: type[nn.Module] = GoodCore

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
        **core_kwargs: object,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps, **factory) if layer_norm else None
        self.attention = self.make_core(
            list(segment_lengths), list(dilation_rates), mode, dropout, core_kwargs
        )
        for layer, gain in (
            (self.q_proj, 1.0),
            (self.k_proj, 1.0),
            (self.v_proj, gamma_init),
            (self.out_proj, gamma_init),
        ):
            nn.init.xavier_normal_(layer.weight, gain=gain)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def make_core(self, segs: list[int], rates: list[int], mode: str, dropout: float, kw: dict) -> nn.Module:
        return self.core_class(
            segment_lengths=segs,
            dilation_rates=rates,
            mode=mode,
            dropout=dropout,
            num_heads=self.num_heads,
            **kw,
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, None]:
        b, n, e = query.shape
        h = self.num_heads
        q = self.q_proj(query).view(b, n, h, e // h)
        k = self.k_proj(key).view(b, n, h, e // h)
        v = self.v_proj(value).view(b, n, h, e // h)
        x = self.attention(q, k, v, is_causal=is_causal).reshape(b, n, e)
        if self.norm is not None:
            x = self.norm(x)
        return self.out_proj(x), None


# --------------------------------------------------------------------------- broken, one per bug class


class HeadAxisCore(GoodCore):
    """§4.3: SDPA fed (b, n, h, d) as if it were (b, h, n, d): attention across heads, not the sequence."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=self.softmax_scale)


def _block_local_pattern(seq_len: int, heads: int, block: int, causal: bool) -> torch.Tensor:
    blk = torch.arange(seq_len) // block
    allowed = (blk[:, None] - blk[None, :]).abs() <= 1
    if causal:
        allowed &= torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    return allowed.to(torch.int32).expand(heads, seq_len, seq_len).clone()


class BlockSoftmaxSumCore(GoodCore):
    """§4.6: block-sparse attention that softmaxes each (query block, key block) on its own and sums.

    Its declared pattern (a local window of blocks) is honest; the normalisation is not.
    """

    def __init__(self, *, block_size: int = 8, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.block_size = block_size

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        return _block_local_pattern(seq_len, num_heads or self.num_heads or 1, self.block_size, is_causal)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        _, n, h, _ = validate_qkv(q, k, v)
        counts = self.attention_pattern(n, is_causal, num_heads=h).to(q.device)
        bs = self.block_size
        nb = math.ceil(n / bs)
        pad = nb * bs - n
        kp, vp = F.pad(k, (0, 0, 0, 0, 0, pad)), F.pad(v, (0, 0, 0, 0, 0, pad))
        cp = F.pad(counts, (0, pad)).view(h, n, nb, bs)
        scale = self.softmax_scale or 1.0 / math.sqrt(q.shape[-1])
        logits = torch.einsum("bphd,bkhd->bhpk", q, kp).view(-1, h, n, nb, bs) * scale
        logits = logits.masked_fill(cp == 0, float("-inf"))
        block_max = logits.amax(-1, keepdim=True)
        block_max = torch.where(torch.isfinite(block_max), block_max, torch.zeros_like(block_max)).detach()
        p = torch.exp(logits - block_max) * cp.to(q.dtype)
        denom = p.sum(-1, keepdim=True)
        p = p / torch.where(denom > 0, denom, torch.ones_like(denom))  # each block normalised on its own
        # ... and the blocks summed, never renormalised across the row
        return torch.einsum("bhpjk,bjkhd->bphd", p, vp.view(-1, nb, bs, h, vp.shape[-1]))


class RingNoMergeCore(GoodCore):
    """§4.4/§7: a ring over K/V chunks that softmaxes each chunk and sums, with no log-sum-exp merge."""

    def __init__(self, *, ring_size: int = 4, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ring_size = ring_size

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        _, n, h, _ = validate_qkv(q, k, v)
        counts = self.attention_pattern(n, is_causal, num_heads=h).to(q.device)
        chunk = math.ceil(n / self.ring_size)
        out = torch.zeros_like(q)
        for s in range(0, n, chunk):
            out = out + count_attention(
                q, k[:, s : s + chunk], v[:, s : s + chunk], counts[..., s : s + chunk], self.softmax_scale
            )
        return out


class UnwrittenRowCore(GoodCore):
    """A row left unwritten: the output buffer's last position is never filled."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        out = torch.zeros_like(q)
        y = super().forward(q, k, v, is_causal=is_causal)
        out[:, :-1] = y[:, :-1]
        return out


class TensorReturnMultihead(GoodMultihead):
    """§4.2/§8.9: returns the output tensor instead of (output, None)."""

    def forward(self, query, key, value, *, is_causal=False, need_weights=False):  # type: ignore[override]
        return super().forward(query, key, value, is_causal=is_causal)[0]


class CausalNaNRingCore(GoodCore):
    """§4.4: causal ring with an online softmax whose running max starts at the first chunk's max.

    A query whose keys all lie outside the first chunk has max = -inf there, and
    exp(-inf - -inf) = NaN poisons the row for good.  The non-causal path is correct.
    """

    def __init__(self, *, ring_size: int = 4, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ring_size = ring_size

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        if not is_causal:
            return super().forward(q, k, v)
        _, n, h, d = validate_qkv(q, k, v)
        counts = self.attention_pattern(n, True, num_heads=h).to(q.device)
        scale = self.softmax_scale or 1.0 / math.sqrt(d)
        chunk = math.ceil(n / self.ring_size)
        m = acc = denom = None
        for s in range(0, n, chunk):
            c = counts[..., s : s + chunk]
            logits = torch.einsum("bphd,bkhd->bhpk", q, k[:, s : s + chunk]) * scale
            logits = logits.masked_fill(c == 0, float("-inf"))
            m_new = (
                logits.amax(-1, keepdim=True)
                if m is None
                else torch.maximum(m, logits.amax(-1, keepdim=True))
            )
            p = torch.exp(logits - m_new) * c.to(q.dtype)
            pv = torch.einsum("bhpk,bkhd->bhpd", p, v[:, s : s + chunk])
            if m is None:
                acc, denom = pv, p.sum(-1, keepdim=True)
            else:
                alpha = torch.exp(m - m_new)
                acc, denom = acc * alpha + pv, denom * alpha + p.sum(-1, keepdim=True)
            m = m_new
        return (acc / denom).transpose(1, 2)


def sloppy_pattern(
    seq_len: int, heads: int, segs: Sequence[int], rates: Sequence[int], mode: str, causal: bool
) -> torch.Tensor:
    """The semantics without any argument checks (like the unofficial ports): swapped args go through."""
    counts = torch.zeros(heads, seq_len, seq_len, dtype=torch.int32)
    pos = torch.arange(seq_len)
    sizes = head_group_sizes(heads, len(segs))
    for i, (w, r) in enumerate(zip(segs, rates, strict=True)):
        if mode == "longnet":
            per = math.ceil(heads / r)
            members = [(hh, hh // per) for hh in range(heads)]
        else:
            start = sum(sizes[:i])
            members = [(hh, i % r) for hh in range(start, start + sizes[i])]
        same = (pos // w)[:, None] == (pos // w)[None, :]
        for hh, offset in members:
            keep = kept_mask(seq_len, w, r, offset)
            pair = keep[:, None] & keep[None, :] & same
            if causal:
                pair &= pos[None, :] <= pos[:, None]
            counts[hh] += pair.to(torch.int32)
    return counts


class SloppyCore(GoodCore):
    """A core that checks nothing and honestly declares whatever pattern its arguments give."""

    def validate(self) -> None:
        pass

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        heads = num_heads or self.num_heads or 1
        return sloppy_pattern(seq_len, heads, self.segment_lengths, self.dilation_rates, self.mode, is_causal)


class SwappedArgsMultihead(GoodMultihead):
    """§5/§8.10: passes segment_lengths and dilation_rates to its core the wrong way round."""

    core_class = SloppyCore

    def make_core(self, segs: list[int], rates: list[int], mode: str, dropout: float, kw: dict) -> nn.Module:
        return super().make_core(rates, segs, mode, dropout, kw)


# --------------------------------------------------------------------------- more ways to be wrong


class LyingPatternCore(BlockSoftmaxSumCore):
    """Declares the dilated semantics but computes (correctly normalised) block-local attention."""

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        return GoodCore.attention_pattern(self, seq_len, is_causal, num_heads=num_heads)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        _, n, h, _ = validate_qkv(q, k, v)
        counts = _block_local_pattern(n, h, self.block_size, is_causal).to(q.device)
        return count_attention(q, k, v, counts, self.softmax_scale)


class BlockPatternSneakCore(LyingPatternCore):
    """Claims to be the same function as ``dilated`` but honestly declares and computes a block pattern."""

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        return _block_local_pattern(seq_len, num_heads or self.num_heads or 1, self.block_size, is_causal)


class SparsityIgnoredCore(LyingPatternCore):
    """§4.6: says ``sparsity=0.9`` but always uses a 3-block local window, whatever the sparsity.

    Declared honestly and computed exactly: only the budget is ignored.
    """

    def __init__(self, *, sparsity: float = 0.9, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.sparsity = sparsity

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        return _block_local_pattern(seq_len, num_heads or self.num_heads or 1, self.block_size, is_causal)


class CrashingCore(GoodCore):
    """Its constructor raises (like upstream's factory entries that crash with a TypeError)."""

    def __init__(self, **kwargs: object) -> None:
        raise TypeError("__init__() got an unexpected keyword argument 'embed_dim'")


class CausalCrashCore(GoodCore):
    """Forward raises only with is_causal=True."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        if is_causal:
            raise RuntimeError("causal masking not implemented")
        return super().forward(q, k, v)


class JitterCore(GoodCore):
    """Adds run-to-run noise of relative size ``jitter`` (a nondeterministic reduction, exaggerated)."""

    jitter = 1e-7

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        out = super().forward(q, k, v, is_causal=is_causal)
        return out * (1 + self.jitter * torch.randn_like(out))


class BigJitterCore(JitterCore):
    jitter = 1e-2


class LeakyCausalPatternCore(GoodCore):
    """Declares a causal pattern that lets queries see later keys (the non-causal pattern)."""

    def attention_pattern(
        self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None
    ) -> torch.Tensor:
        return super().attention_pattern(seq_len, False, num_heads=num_heads)


# --------------------------------------------------------------------------- specs


def entry_for(name: str, cls: type[nn.Module], **fields: Any) -> Implementation:
    """A registry entry for a double, with the configurations and capabilities of ``dilated``
    (or ``multihead_dilated``): the doubles declare their own ``attention_pattern``."""
    multihead = issubclass(cls, GoodMultihead)
    like = REGISTRY["multihead_dilated" if multihead else "dilated"]
    copied = {f: getattr(like, f) for f in ("cpu", "gpu", "bench", "modes", "cpu_dtypes", "cuda_dtypes")}
    return Implementation(name, cls, multihead=multihead, computes="pattern", **{**copied, **fields})


GOOD = {
    s.name: s
    for s in (
        entry_for("good_core", GoodCore, same_function_as="dilated"),
        entry_for("good_multihead", GoodMultihead, same_function_as="multihead_dilated"),
    )
}

#: one broken implementation per bug class, and the check that must catch it
BROKEN_CASES = {
    "broken_head_axis": (
        entry_for("broken_head_axis", HeadAxisCore, same_function_as="dilated"),
        "reference",
    ),
    "broken_block_softmax_sum": (entry_for("broken_block_softmax_sum", BlockSoftmaxSumCore), "reference"),
    "broken_ring_no_lse": (
        entry_for("broken_ring_no_lse", RingNoMergeCore, same_function_as="dilated"),
        "reference",
    ),
    "broken_unwritten_row": (
        entry_for("broken_unwritten_row", UnwrittenRowCore, same_function_as="dilated"),
        "written",
    ),
    "broken_tensor_return": (entry_for("broken_tensor_return", TensorReturnMultihead), "return"),
    "broken_causal_nan": (
        entry_for("broken_causal_nan", CausalNaNRingCore, same_function_as="dilated"),
        "finite",
    ),
    "broken_swapped_args": (
        entry_for("broken_swapped_args", SwappedArgsMultihead, same_function_as="multihead_dilated"),
        "same_fn",
    ),
}
BROKEN = {name: spec for name, (spec, _) in BROKEN_CASES.items()}

MORE = {
    s.name: s
    for s in (
        entry_for("lying_pattern", LyingPatternCore, same_function_as="dilated"),
        entry_for("block_pattern_sneak", BlockPatternSneakCore, same_function_as="dilated"),
        entry_for("sparsity_ignored", SparsityIgnoredCore),
        entry_for("crashing", CrashingCore),
        entry_for("causal_crash", CausalCrashCore, same_function_as="dilated"),
        entry_for("jitter", JitterCore, same_function_as="dilated"),
        entry_for("big_jitter", BigJitterCore, same_function_as="dilated"),
        entry_for("leaky_causal_pattern", LeakyCausalPatternCore),
    )
}

#: the roots the doubles name in ``same_function_as``: the registry's own, declared
#: ``computes="dilated"`` (their pattern is held to perfguard's semantics, and so is every double's)
ROOTS = {name: REGISTRY[name] for name in ("dilated", "multihead_dilated")}

ALL = {**ROOTS, **GOOD, **BROKEN, **MORE}
