"""The float64 reference every verification compares against.

Dense softmax attention, computed in float64, with each (query, key) logit weighted by the count
from an attention pattern (:func:`attention.pattern.dilated_pattern` or an implementation's own
``attention_pattern``).  A count of 0 excludes the key; a count of 2 counts it twice, which is
exactly the log-sum-exp mixture of the LongNet branches.  A query with no keys gets output 0.

It is deliberately the plainest formulation: O(n^2) memory, no tricks, differentiable, so that
gradients of an implementation can be checked against it too.  The count weighting is the
softmax of ``logits + log(counts)`` (mathematically ``c·exp(l) / Σ c·exp(l)``): one fused softmax
forward and backward instead of a chain of elementwise ops over ``(batch, H, n, n)`` float64
tensors, which at the GPU verification size (2.4 GB each) is what the reference's time and memory
are made of.  The softmax, which does not depend on ``v``, is computed once for several ``v``
sharing ``q`` and ``k`` (:func:`reference_attentions`; ``perfguard verify`` runs every module with
two ``v``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def attention_probs(
    q: torch.Tensor, k: torch.Tensor, counts: torch.Tensor, softmax_scale: float | None = None
) -> torch.Tensor:
    """Count-weighted softmax probabilities in float64, ``(batch, num_heads, query, key)``.

    q, k: ``(batch, seq_len, num_heads, head_dim)``; counts: ``(num_heads, seq_len, seq_len)``
    non-negative integers (query p, key k), on any device (moved to q's when elsewhere).
    ``probs[b, h, p, k] = c·exp(l) / Σ c·exp(l)`` over the keys with a positive count, written as
    the softmax of ``l + log c`` (``log 0 = -inf`` hides a key); a query without keys gets 0.
    Differentiable in q and k.
    """
    _, n, h, d = q.shape
    if counts.shape != (h, n, n):
        raise ValueError(f"counts must have shape {(h, n, n)}, got {tuple(counts.shape)}")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    counts = counts.to(q.device)
    has_keys = (counts > 0).any(dim=-1, keepdim=True)  # (h, n, 1)
    log_weights = torch.log(counts.to(torch.float64).clamp_min(0.0))
    log_weights = log_weights.masked_fill_(~has_keys, 0.0)  # a row without keys: finite, zeroed below
    logits = torch.einsum("bphd,bkhd->bhpk", q.to(torch.float64) * scale, k.to(torch.float64))
    return torch.softmax(logits + log_weights, dim=-1) * has_keys


def _apply(probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bhpk,bkhd->bphd", probs, v.to(torch.float64))


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    counts: torch.Tensor,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """Count-weighted softmax attention in float64.

    q, k, v: ``(batch, seq_len, num_heads, head_dim)``; counts: ``(num_heads, seq_len, seq_len)``
    integers (query p, key k).  Returns float64 ``(batch, seq_len, num_heads, head_dim)``.
    """
    return _apply(attention_probs(q, k, counts, softmax_scale), v)


def reference_attentions(
    q: torch.Tensor,
    k: torch.Tensor,
    values: Sequence[torch.Tensor],
    counts: torch.Tensor,
    softmax_scale: float | None = None,
) -> list[torch.Tensor]:
    """:func:`reference_attention` for several ``v`` with the same q and k: one softmax, one output each."""
    probs = attention_probs(q, k, counts, softmax_scale)
    return [_apply(probs, v) for v in values]


def declared_pattern(
    core: torch.nn.Module,
    seq_len: int,
    is_causal: bool,
    num_heads: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``core.attention_pattern(...)`` on ``device``.

    The ``device=`` keyword is part of the contract (docs/design.md); a module written before it
    (an outside implementation) gets the call it knows and its pattern is moved afterwards.
    """
    fn = core.attention_pattern
    if device is not None and _accepts_device(fn):
        return fn(seq_len, is_causal=is_causal, num_heads=num_heads, device=device)
    counts = fn(seq_len, is_causal=is_causal, num_heads=num_heads)
    return counts.to(device) if device is not None and isinstance(counts, torch.Tensor) else counts


def _accepts_device(fn: object) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return any(p.name == "device" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def multihead_reference(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    *,
    counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """float64 reference of a multihead module, built from its parameters and its core's pattern.

    Relies on the multihead contract (docs/design.md): ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj`` (``nn.Linear``), ``norm`` (``nn.LayerNorm`` or ``None``, the MAGNETO sub-LN
    applied before ``out_proj``), ``attention`` (the core module, with ``attention_pattern`` and
    ``softmax_scale``), ``num_heads``.  Input and output: ``(batch, seq_len, embed_dim)``.
    ``counts`` (``(num_heads, n, n)``): the pattern to weight by, when the caller already holds
    the core's; by default the core's ``attention_pattern``, built on the inputs' device.
    """
    return multihead_references(module, query, key, [value], is_causal, counts=counts)[0]


def multihead_references(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    values: Sequence[torch.Tensor],
    is_causal: bool = False,
    *,
    counts: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """:func:`multihead_reference` for several ``value`` with the same query and key (one softmax)."""

    def linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        w = layer.weight.to(torch.float64)
        bias = layer.bias.to(torch.float64) if layer.bias is not None else None
        return F.linear(x.to(torch.float64), w, bias)

    b, n, e = query.shape
    h = module.num_heads
    d = e // h
    q = linear(query, module.q_proj).view(b, n, h, d)
    k = linear(key, module.k_proj).view(b, n, h, d)
    core = module.attention
    if counts is None:
        counts = declared_pattern(core, n, is_causal, h, query.device)
    probs = attention_probs(q, k, counts, softmax_scale=getattr(core, "softmax_scale", None))
    norm = module.norm
    outputs = []
    for value in values:
        x = _apply(probs, linear(value, module.v_proj).view(b, n, h, d)).reshape(b, n, e)
        if norm is not None:
            weight = norm.weight.to(torch.float64) if norm.weight is not None else None
            bias = norm.bias.to(torch.float64) if norm.bias is not None else None
            x = F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)
        outputs.append(linear(x, module.out_proj))
    return outputs


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64 (NaN or inf anywhere gives inf; ref of 0 compares absolutely)."""
    diff = out.detach().to(torch.float64) - ref.detach().to(torch.float64)
    if not torch.isfinite(diff).all():
        return math.inf
    num = torch.linalg.vector_norm(diff).item()
    den = torch.linalg.vector_norm(ref.detach().to(torch.float64)).item()
    return num / den if den > 0 else num
