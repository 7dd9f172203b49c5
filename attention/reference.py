"""The float64 reference every verification compares against.

Dense softmax attention, computed in float64, with each (query, key) logit weighted by the count
from an attention pattern (:func:`attention.pattern.dilated_pattern` or an implementation's own
``attention_pattern``).  A count of 0 excludes the key; a count of 2 counts it twice, which is
exactly the log-sum-exp mixture of the LongNet branches.  A query with no keys gets output 0.

It is deliberately the slowest, plainest formulation: O(n^2) memory, no tricks, differentiable,
so that gradients of an implementation can be checked against it too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


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
    _, n, h, d = q.shape
    if counts.shape != (h, n, n):
        raise ValueError(f"counts must have shape {(h, n, n)}, got {tuple(counts.shape)}")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    weights = counts.to(device=q.device, dtype=torch.float64)  # (h, n, n)
    logits = torch.einsum("bphd,bkhd->bhpk", q64, k64) * scale
    visible = weights > 0
    logits = torch.where(visible, logits, torch.full_like(logits, -math.inf))
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    unnorm = torch.exp(logits - row_max) * weights  # masked entries: exp(-inf) = 0
    denom = unnorm.sum(dim=-1, keepdim=True)
    probs = unnorm / torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.einsum("bhpk,bkhd->bphd", probs, v64)


def multihead_reference(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
) -> torch.Tensor:
    """float64 reference of a multihead module, built from its parameters and its core's pattern.

    Relies on the multihead contract (docs/design.md): ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj`` (``nn.Linear``), ``norm`` (``nn.LayerNorm`` or ``None``, the MAGNETO sub-LN
    applied before ``out_proj``), ``attention`` (the core module, with ``attention_pattern`` and
    ``softmax_scale``), ``num_heads``.  Input and output: ``(batch, seq_len, embed_dim)``.
    """

    def linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        w = layer.weight.to(torch.float64)
        bias = layer.bias.to(torch.float64) if layer.bias is not None else None
        return F.linear(x.to(torch.float64), w, bias)

    b, n, e = query.shape
    h = module.num_heads
    d = e // h
    q = linear(query, module.q_proj).view(b, n, h, d)
    k = linear(key, module.k_proj).view(b, n, h, d)
    v = linear(value, module.v_proj).view(b, n, h, d)
    core = module.attention
    counts = core.attention_pattern(n, is_causal=is_causal, num_heads=h)
    x = reference_attention(q, k, v, counts, softmax_scale=getattr(core, "softmax_scale", None))
    x = x.reshape(b, n, e)
    norm = module.norm
    if norm is not None:
        weight = norm.weight.to(torch.float64) if norm.weight is not None else None
        bias = norm.bias.to(torch.float64) if norm.bias is not None else None
        x = F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)
    return linear(x, module.out_proj)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``‖out − ref‖ / ‖ref‖`` in float64 (NaN or inf anywhere gives inf; ref of 0 compares absolutely)."""
    diff = out.detach().to(torch.float64) - ref.detach().to(torch.float64)
    if not torch.isfinite(diff).all():
        return math.inf
    num = torch.linalg.vector_norm(diff).item()
    den = torch.linalg.vector_norm(ref.detach().to(torch.float64)).item()
    return num / den if den > 0 else num
