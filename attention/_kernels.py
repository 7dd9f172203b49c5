"""Fused attention kernels that return the log-sum-exp, and the exact math kernel.

The segment engine (:mod:`attention._engine`) runs many small dense attentions (one per branch,
group of segments and ring chunk pair) and merges them by log-sum-exp, so it needs kernels that
return the LSE in the forward pass and whose backward accepts an *arbitrary* output and LSE:
the backward of a part is run with the **merged** output and LSE (the ring-attention identity
``dS_i = P_i^global ⊙ (dO·V_iᵀ − rowsum(dO ⊙ O_global))``), which gives the exact gradient of
the merged result, mixture weights included.

PyTorch exposes such kernels only as private aten ops; which ones exist and accept a given
(device, dtype, head_dim) varies between releases.  :data:`KERNELS` holds each one's forward and
backward; which of them may run a call, in which order, and what happens when one fails is
:mod:`attention._kernel_selection`.  The ``math`` kernel always works (any device, dtype and
head_dim) and is exact.

Layout everywhere: ``q (B, H, Lq, d)``, ``k, v (B, H, Lk, d)``; outputs ``out (B, H, Lq, d)`` in
q's dtype and ``lse (B, H, Lq)`` in float32 (float64 for float64 inputs).  ``causal`` means
top-left aligned (used only with ``Lq == Lk`` on the same positions).  Every row of every call
has at least one visible key, so the LSE is always finite.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from attention._compiled import budgeted
from attention._fallback import ContextError, compile_blocked
from attention._lse import compute_dtype

_aten = torch.ops.aten


# --------------------------------------------------------------------------------------------
# math: exact, any device / dtype / head_dim
# --------------------------------------------------------------------------------------------
def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    cd = compute_dtype(q.dtype)
    s = torch.matmul(q.to(cd), k.to(cd).transpose(-1, -2)) * scale
    if causal:
        lq, lk = s.shape[-2], s.shape[-1]
        upper = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(upper, -math.inf)
    return s


def math_forward(q, k, v, causal, scale):
    s = _scores(q, k, scale, causal)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    out = torch.matmul(p, v.to(p.dtype)).to(q.dtype)
    return out, lse, None


def math_backward(dout, q, k, v, out, lse, aux, causal, scale):
    cd = compute_dtype(q.dtype)
    s = _scores(q, k, scale, causal)
    p = torch.exp(s - lse.to(cd).unsqueeze(-1))
    do = dout.to(cd)
    dv = torch.matmul(p.transpose(-1, -2), do)
    dp = torch.matmul(do, v.to(cd).transpose(-1, -2))
    delta = (do * out.to(cd)).sum(dim=-1, keepdim=True)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, k.to(cd)) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q.to(cd)) * scale
    return dq, dk, dv


# --------------------------------------------------------------------------------------------
# CPU flash (aten::_scaled_dot_product_flash_attention_for_cpu)
# --------------------------------------------------------------------------------------------
def _cpu_flash_forward(q, k, v, causal, scale):
    out, lse = _aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    return out, lse, None


def _cpu_flash_backward(dout, q, k, v, out, lse, aux, causal, scale):
    return _aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dout,
        q,
        k,
        v,
        out,
        lse.to(out.dtype if out.dtype == torch.float64 else torch.float32),
        0.0,
        causal,
        scale=scale,
    )


# --------------------------------------------------------------------------------------------
# CUDA: cuDNN, FlashAttention-2, memory-efficient (the SDPA backends, called with LSE)
# --------------------------------------------------------------------------------------------
def _cudnn_forward(q, k, v, causal, scale):
    res = _aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    out, lse_raw = res[0], res[1]
    b, h, lq = q.shape[0], q.shape[1], q.shape[2]
    lse = lse_raw.reshape(b, h, lq) if lse_raw.numel() == b * h * lq else lse_raw[..., :lq].reshape(b, h, lq)
    # cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset
    aux = (tuple(lse_raw.shape), res[2], res[3], res[4], res[5], res[6], res[7])
    return out, lse.float(), aux


def _cudnn_backward(dout, q, k, v, out, lse, aux, causal, scale):
    lse_shape, cum_q, cum_k, max_q, max_k, seed, offset = aux
    lse_raw = lse.float().reshape(lse_shape).contiguous()
    # strided views, as the forward reads them: the process crash of 2026-11-25 came from the
    # few-row calls CUDNN_MIN_LEN now keeps away, and dense copies cost 0.70 of 4.4 ms of
    # improved's backward at 32K tokens (H100, docs/perf/attention.md)
    dq, dk, dv = _aten._scaled_dot_product_cudnn_attention_backward(
        dout, q, k, v, out, lse_raw, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0, causal, scale=scale
    )[:3]
    return dq, dk, dv


def _flash_forward(q, k, v, causal, scale):
    res = _aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    out, lse = res[0], res[1]
    aux = (res[2], res[3], res[4], res[5], res[6], res[7])  # cum_q, cum_k, max_q, max_k, rng, unused
    return out, lse.float(), aux


def _flash_backward(dout, q, k, v, out, lse, aux, causal, scale):
    cum_q, cum_k, max_q, max_k, rng, unused = aux
    return _aten._scaled_dot_product_flash_attention_backward(
        dout,
        q,
        k,
        v,
        out,
        lse.float().contiguous(),
        cum_q,
        cum_k,
        max_q,
        max_k,
        0.0,
        causal,
        rng,
        unused,
        scale=scale,
    )


def _efficient_forward(q, k, v, causal, scale):
    out, lse_pad, seed, offset = _aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, causal, scale=scale
    )
    lq = q.shape[2]
    return out, lse_pad[..., :lq].float(), (lse_pad.shape[-1], seed, offset)


def _efficient_backward(dout, q, k, v, out, lse, aux, causal, scale):
    padded, seed, offset = aux
    lse_pad = torch.nn.functional.pad(lse.float(), (0, padded - lse.shape[-1])).contiguous()
    dq, dk, dv, _ = _aten._scaled_dot_product_efficient_attention_backward(
        dout, q, k, v, None, out, lse_pad, seed, offset, 0.0, [True, True, True, False], causal, scale=scale
    )
    return dq, dk, dv


# --------------------------------------------------------------------------------------------
# FlexAttention (torch.nn.attention.flex_attention): forward with LSE; backward runs the math
# kernel (flex's own backward cannot be given the merged output and LSE, and has no CPU path)
# --------------------------------------------------------------------------------------------
_FLEX_MASKS: dict = {}
_FLEX_COMPILED = None


def _flex_engine(*args: Any, **kwargs: Any) -> Any:
    """The engine's own function around ``flex_attention``: its own budget (:mod:`attention._compiled`)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(*args, **kwargs)


def _flex_fn(device: torch.device):
    global _FLEX_COMPILED
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention  # eager (a dense reference implementation): tests on the CPU
    if _FLEX_COMPILED is None:
        _FLEX_COMPILED = budgeted(_flex_engine)
    return _FLEX_COMPILED


def _flex_causal_mask(lq: int, lk: int, device: torch.device):
    key = (lq, lk, device)
    if key not in _FLEX_MASKS:
        from torch.nn.attention.flex_attention import create_block_mask

        def causal(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx

        _FLEX_MASKS[key] = create_block_mask(causal, None, None, lq, lk, device=device)
    return _FLEX_MASKS[key]


def _flex_forward(q, k, v, causal, scale):
    blocked = compile_blocked()  # as in attention.block_sparse: flex runs only through torch.compile
    if blocked:
        raise ContextError(f"{blocked}, and flex_attention runs only through it")
    mask = _flex_causal_mask(q.shape[2], k.shape[2], q.device) if causal else None
    q, k, v = q.detach(), k.detach(), v.detach()  # never differentiated through (CPU flex refuses)
    try:
        from torch.nn.attention.flex_attention import AuxRequest

        lse_kwargs = {"return_aux": AuxRequest(lse=True)}
    except ImportError:  # torch < 2.9
        lse_kwargs = {"return_lse": True}
    with warnings.catch_warnings():  # eager flex (CPU) warns that it is not compiled: it is a reference
        warnings.simplefilter("ignore", UserWarning)
        out, aux = _flex_fn(q.device)(q, k, v, block_mask=mask, scale=scale, **lse_kwargs)
    lse = aux.lse if hasattr(aux, "lse") else aux
    return out, lse.float(), None


# --------------------------------------------------------------------------------------------
# flash-attn and xformers (optional packages, CUDA only; layout (B, L, H, d))
# --------------------------------------------------------------------------------------------
def _flash_attn_forward(q, k, v, causal, scale):
    from flash_attn import flash_attn_func

    out, lse, _ = flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, scale, causal, return_attn_probs=True
    )
    return out.transpose(1, 2), lse.float(), None


def _flash_attn_backward(dout, q, k, v, out, lse, aux, causal, scale):
    import inspect

    from flash_attn.flash_attn_interface import _flash_attn_backward as backward

    t = [x.transpose(1, 2) for x in (dout, q, k, v, out)]
    grads = [torch.empty_like(x) for x in t[1:4]]
    names = inspect.signature(backward).parameters
    kwargs = {
        "dropout_p": 0.0,
        "softmax_scale": scale,
        "causal": causal,
        "alibi_slopes": None,
        "deterministic": True,
    }
    if "window_size_left" in names:
        kwargs.update(window_size_left=-1, window_size_right=-1)
    elif "window_size" in names:
        kwargs["window_size"] = (-1, -1)
    if "softcap" in names:
        kwargs["softcap"] = 0.0
    backward(*t, lse.float().contiguous(), *grads, **kwargs)
    return tuple(g.transpose(1, 2) for g in grads)


def _xformers_bias(causal: bool):
    if not causal:
        return None
    from xformers.ops.fmha.attn_bias import LowerTriangularMask

    return LowerTriangularMask()


def _xformers_forward(q, k, v, causal, scale):
    from xformers.ops import fmha

    out, lse = fmha.memory_efficient_attention_forward_requires_grad(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=_xformers_bias(causal), scale=scale
    )
    lq = q.shape[2]
    return out.transpose(1, 2), lse[..., :lq].float(), lse.shape[-1]


def _xformers_backward(dout, q, k, v, out, lse, aux, causal, scale):
    from xformers.ops import fmha

    padded = torch.nn.functional.pad(lse.float(), (0, aux - lse.shape[-1])).contiguous()
    t = [x.transpose(1, 2) for x in (dout, out, q, k, v)]
    dq, dk, dv = fmha.memory_efficient_attention_backward(
        t[0], t[1], padded, t[2], t[3], t[4], attn_bias=_xformers_bias(causal), scale=scale
    )
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


#: name -> (forward, backward) of every kernel (:mod:`attention._kernel_selection` picks one)
KERNELS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "math": (math_forward, math_backward),
    "cpu_flash": (_cpu_flash_forward, _cpu_flash_backward),
    "cudnn": (_cudnn_forward, _cudnn_backward),
    "flash": (_flash_forward, _flash_backward),
    "efficient": (_efficient_forward, _efficient_backward),
    "flex": (_flex_forward, math_backward),
    "flash_attn": (_flash_attn_forward, _flash_attn_backward),
    "xformers": (_xformers_forward, _xformers_backward),
}
