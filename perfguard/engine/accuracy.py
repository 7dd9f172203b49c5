"""How exact one call is: its output and input gradients against a float64 reference (issue 31).

``perfguard verify`` is pass/fail against a tolerance per dtype; a change that makes an
implementation ten times less exact but still inside it passes silently.  The accuracy benchmarks
(``Accuracy.track_*_error`` in the suite) store the error itself with every round, so that a
check compares it base against HEAD like a work count, and the history site draws it over time.

What is measured, per case (implementation x length x dtype of the profile, the suite's own
inputs, seed and output gradient, not causal like the timed call):

- the relative L2 error ``‖x − ref‖ / ‖ref‖`` of the output, and of the gradient of each input
  (q, k, v; a multihead module's query, key, value) against the reference's; a gradient's
  denominator is at least :data:`GRAD_FLOOR` x the largest reference gradient, as in ``verify``
  (a gradient that is exactly zero in exact arithmetic would turn rounding into an enormous
  relative error);
- the largest absolute difference of each, kept in the result's info.

The reference is perfguard's own, not the guarded package's: code under review must not be able
to change what it is measured against.  It is the count-weighted softmax attention of the
implementation's declared pattern (``attention_pattern``, docs/design.md: a count of 0 hides a key,
2 counts it twice), computed in float64 **one head at a time** with a hand-written backward that
recomputes each head's probabilities: O(n²) memory for one head, not for all of them, so 16K tokens
fit a GPU (2 GiB of float64 scores per head).  A multihead module's projections, sub-LayerNorm and
output projection (the multihead contract) run through autograd in float64 around it.

Deterministic on the CPU (same seed, same inputs, same kernels).  A GPU kernel that is not
bit-deterministic moves the error by far less than the 2x a check gates on
(docs/perf/accuracy.md).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from perfguard.engine import cases
from perfguard.engine.suite import ACCURACY_TENSORS

#: The tensors whose error is measured, in the order of the suite's benchmarks.
TENSORS = ACCURACY_TENSORS
#: A gradient's denominator is at least this times the largest reference gradient (here and in
#: ``verify``): ∂/∂k of a query row with a single key is 0 in exact arithmetic (its softmax is
#: constant), and relative to 0 rounding noise would read as an enormous error.
GRAD_FLOOR = 1e-3
#: The seed of the output gradient: the one ``cases.Case.forward_backward`` uses.
GRAD_OUT_SEED = 1


@dataclass(frozen=True)
class Errors:
    """The errors of one call against the float64 reference, per tensor of :data:`TENSORS`."""

    relative: dict[str, float]
    max_abs: dict[str, float]
    seconds: float  # what measuring them cost (the call, its backward and the reference)
    pattern_density: float
    info: dict[str, Any] = field(default_factory=dict)


class NoPattern(cases.Unsupported):
    """The implementation declares no pattern perfguard can build a reference from."""


def measure(case: cases.Case) -> Errors:
    """The errors of ``case``'s module on its own inputs (an eager forward and backward)."""
    started = time.perf_counter()
    module = case.module
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in case.inputs)
    gen = torch.Generator(device="cpu").manual_seed(GRAD_OUT_SEED)
    grad_out = torch.randn(leaves[0].shape, generator=gen).to(case.device, dtype=leaves[0].dtype)
    with torch.enable_grad():
        raw = module(*leaves)
        out = raw[0] if case.multihead else raw
        grads = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
    out = out.detach()
    counts = _pattern(case)
    ref_leaves = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in case.inputs)
    with torch.enable_grad():
        ref = reference(case.module, case.multihead, ref_leaves, counts)
        ref_grads = torch.autograd.grad(ref, ref_leaves, grad_out.to(torch.float64))
    density = float(counts.count_nonzero().item()) / counts.numel()
    del counts
    relative = {"output": relative_error(out, ref.detach(), 0.0)}
    max_abs = {"output": _max_abs(out, ref.detach())}
    floor = GRAD_FLOOR * max(float(torch.linalg.vector_norm(g).item()) for g in ref_grads)
    for name, g, rg in zip(TENSORS[1:], grads, ref_grads, strict=True):
        if g is None:  # an input the call ignores: its gradient is zero
            g = torch.zeros_like(rg)
        relative[name] = relative_error(g, rg, floor)
        max_abs[name] = _max_abs(g, rg)
    if case.device == "cuda":
        torch.cuda.synchronize()
    return Errors(relative, max_abs, time.perf_counter() - started, density)


# --------------------------------------------------------------------------------------------
# the reference
# --------------------------------------------------------------------------------------------


def _core(case: cases.Case) -> torch.nn.Module:
    core = getattr(case.module, "attention", None) if case.multihead else case.module
    if not isinstance(core, torch.nn.Module):
        raise NoPattern("the multihead module has no `attention` core module (docs/design.md contract)")
    return core


def declared_pattern(
    core: torch.nn.Module, seq_len: int, *, causal: bool, num_heads: int, device: torch.device | str | None
) -> Any:
    """``core.attention_pattern(...)`` on ``device`` (docs/design.md): what the module says it computes.

    The ``device=`` keyword is part of the contract; a module written before it gets the call it
    knows and its pattern is moved afterwards.  Not checked here (``verify`` says what is wrong).
    """
    fn = core.attention_pattern
    try:
        params = inspect.signature(fn).parameters.values()
        takes_device = any(p.name == "device" or p.kind is p.VAR_KEYWORD for p in params)
    except (TypeError, ValueError):
        takes_device = False
    if device is not None and takes_device:
        return fn(seq_len, is_causal=causal, num_heads=num_heads, device=device)
    counts = fn(seq_len, is_causal=causal, num_heads=num_heads)
    return counts.to(device) if device is not None and isinstance(counts, torch.Tensor) else counts


def _pattern(case: cases.Case) -> torch.Tensor:
    """The declared pattern ``(heads, n, n)`` of the case's core, on the case's device."""
    core = _core(case)
    if getattr(core, "attention_pattern", None) is None:
        raise NoPattern(
            f"{type(core).__name__} has no attention_pattern: the accuracy benchmarks need the "
            "pattern the implementation computes (docs/design.md)"
        )
    n = case.seq_len
    heads = case.module.num_heads if case.multihead else case.inputs[0].shape[2]
    counts = declared_pattern(core, n, causal=False, num_heads=heads, device=case.device)
    if not isinstance(counts, torch.Tensor) or counts.shape != (heads, n, n):
        raise NoPattern(f"attention_pattern gave {type(counts).__name__}, not a ({heads}, {n}, {n}) tensor")
    return counts.to(case.device)


def reference(
    module: torch.nn.Module, multihead: bool, leaves: tuple[torch.Tensor, ...], counts: torch.Tensor
) -> torch.Tensor:
    """The float64 output of ``counts`` (the declared pattern) on ``leaves``, differentiable in them.

    Core modules: q, k, v ``(batch, n, heads, dim)``.  Multihead modules (the contract of
    docs/design.md: ``q_proj``, ``k_proj``, ``v_proj``, ``attention`` with ``softmax_scale``,
    ``norm`` or None, ``out_proj``, ``num_heads``): query, key, value ``(batch, n, embed_dim)``.
    ``leaves`` in float64; ``counts`` ``(heads, n, n)``, causal or not as the caller built it.
    """
    core = getattr(module, "attention", None) if multihead else module
    scale = getattr(core, "softmax_scale", None)
    if not multihead:
        q, k, v = leaves
        return _HeadwiseAttention.apply(q, k, v, counts, scale)
    b, n, e = leaves[0].shape
    h = module.num_heads
    q = _linear(leaves[0], module.q_proj).view(b, n, h, e // h)
    k = _linear(leaves[1], module.k_proj).view(b, n, h, e // h)
    v = _linear(leaves[2], module.v_proj).view(b, n, h, e // h)
    x = _HeadwiseAttention.apply(q, k, v, counts, scale).reshape(b, n, e)
    norm = getattr(module, "norm", None)
    if norm is not None:
        weight = norm.weight.detach().to(torch.float64) if norm.weight is not None else None
        bias = norm.bias.detach().to(torch.float64) if norm.bias is not None else None
        x = F.layer_norm(x, norm.normalized_shape, weight, bias, norm.eps)
    return _linear(x, module.out_proj)


def _linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    bias = layer.bias.detach().to(torch.float64) if layer.bias is not None else None
    return F.linear(x, layer.weight.detach().to(torch.float64), bias)


class _HeadwiseAttention(torch.autograd.Function):
    """Count-weighted softmax attention in float64, one (batch, head) at a time, forward and backward.

    ``probs = c·exp(l) / Σ c·exp(l)`` over the keys with a positive count (the softmax of
    ``l + log c``); a query without keys gets 0.  The backward recomputes each head's
    probabilities instead of keeping them: memory is one head's ``n x n``, whatever the number of
    heads.  q, k, v: ``(batch, n, heads, dim)`` float64; counts: ``(heads, n, n)``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, counts: torch.Tensor, scale: float | None
    ) -> torch.Tensor:
        scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        out = torch.empty_like(q)
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                probs = _probs(q[b, :, h], k[b, :, h], counts[h], scale)
                out[b, :, h] = probs @ v[b, :, h]
                del probs
        ctx.save_for_backward(q, k, v, counts, out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, counts, out = ctx.saved_tensors
        scale = ctx.scale
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                probs = _probs(q[b, :, h], k[b, :, h], counts[h], scale)
                do = grad_out[b, :, h]
                dv[b, :, h] = probs.T @ do
                dp = do @ v[b, :, h].T
                # softmax backward: dS = P ∘ (dP − rowsum(dO ∘ O))
                ds = probs * (dp - (do * out[b, :, h]).sum(-1, keepdim=True))
                del probs, dp
                dq[b, :, h] = scale * (ds @ k[b, :, h])
                dk[b, :, h] = scale * (ds.T @ q[b, :, h])
                del ds
        return dq, dk, dv, None, None


def _probs(q: torch.Tensor, k: torch.Tensor, counts: torch.Tensor, scale: float) -> torch.Tensor:
    """One head's ``(n, n)`` float64 probabilities (see :class:`_HeadwiseAttention`)."""
    logits = (q @ k.T).mul_(scale)
    has_keys = (counts > 0).any(dim=-1, keepdim=True)
    logits.add_(torch.log(counts.to(torch.float64)).masked_fill_(~has_keys, 0.0))
    return torch.softmax(logits, dim=-1).mul_(has_keys)


def relative_error(x: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    """``‖x − ref‖ / max(‖ref‖, floor)`` in float64; inf for a non-finite ``x`` (a zero
    reference compares absolutely).  ``floor``: see :data:`GRAD_FLOOR`."""
    diff = x.detach().to(torch.float64) - ref.detach().to(torch.float64)
    if not bool(torch.isfinite(diff).all()):
        return math.inf
    den = max(float(torch.linalg.vector_norm(ref.detach().to(torch.float64)).item()), floor)
    num = float(torch.linalg.vector_norm(diff).item())
    return num / den if den > 0 else num


def _max_abs(x: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (x.detach().to(torch.float64) - ref).abs()
    return float(diff.max().item()) if diff.numel() else 0.0
