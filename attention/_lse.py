"""Softmax attention that also returns its log-sum-exp, and the log-sum-exp merge.

Every implementation in this package computes dilated attention as a set of *partial* softmax
attentions (one per branch, segment, ring chunk or key block) whose results are combined by their
log-sum-exp (LSE): with ``lse_i = log Σ_k exp(s_ik)`` over the keys of part i,

    out = Σ_i exp(lse_i − L) · out_i,   L = log Σ_i exp(lse_i),

which is exactly one softmax over the union (multiset) of all the parts' keys.  Summing separately
normalised parts, or weighting them without the LSE, is the classic bug of earlier implementations
(research/dilated_attention.md §4.4, §4.6); this module is the one place that does it right.

Rows without any key are legal (padding, a head that a branch does not keep, a causal chunk
entirely in the future): they get output 0 and LSE −inf, and neither the forward nor the gradient
ever produces NaN for them (no ``exp(−inf − (−inf))``, no ``log(0)`` on a differentiated path).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (fp32, bf16, fp16) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax attention over the last two dims, differentiable, NaN-free for empty rows.

    q: ``(..., Lq, d)``, k, v: ``(..., Lk, d)``; ``mask`` broadcastable to ``(..., Lq, Lk)``
    (True = the key is visible); ``causal`` adds ``key index <= query index`` (top-left aligned).
    Returns ``out (..., Lq, d)`` and ``lse (..., Lq)`` in :func:`compute_dtype` of q's dtype.
    Dropout (inverted, on the normalised probabilities) is applied when ``dropout_p > 0``; the
    caller decides (only in training).  The LSE is always computed without dropout, so merging
    dropped-out parts by their LSE equals dropout on the merged probabilities.
    """
    cd = compute_dtype(q.dtype)
    scores = torch.matmul(q.to(cd), k.to(cd).transpose(-1, -2)) * scale
    lq, lk = scores.shape[-2], scores.shape[-1]
    if causal:
        tril = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        mask = tril if mask is None else mask & tril
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    row_max = scores.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    unnorm = torch.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    denom = unnorm.sum(dim=-1, keepdim=True)
    has_keys = denom > 0
    safe = torch.where(has_keys, denom, torch.ones_like(denom))
    probs = unnorm / safe
    lse = torch.where(has_keys, torch.log(safe) + row_max, torch.full_like(safe, -math.inf))
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    out = torch.matmul(probs, v.to(cd))
    return out, lse.squeeze(-1)


def merge_stacked(outs: torch.Tensor, lses: torch.Tensor, dim: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial results stacked along ``dim``: outs ``(..., d)``, lses the same without ``d``.

    Differentiable (gradients flow through the mixture weights, unlike torchscale's no-grad
    weights).  Entries whose parts are all empty (every LSE −inf) give output 0 and LSE −inf.
    """
    top = lses.amax(dim=dim, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lses - top)
    denom = weights.sum(dim=dim, keepdim=True)
    has = denom > 0
    safe = torch.where(has, denom, torch.ones_like(denom))
    out = (weights.unsqueeze(-1) * outs).sum(dim=dim) / safe.squeeze(dim).unsqueeze(-1)
    lse = torch.where(has, torch.log(safe) + top, torch.full_like(safe, -math.inf)).squeeze(dim)
    return out, lse
