"""Fused attention kernels that return the log-sum-exp, with an exact math fallback.

The segment engine (:mod:`attention._engine`) runs many small dense attentions (one per branch,
group of segments and ring chunk pair) and merges them by log-sum-exp, so it needs kernels that
return the LSE in the forward pass and whose backward accepts an *arbitrary* output and LSE:
the backward of a part is run with the **merged** output and LSE (the ring-attention identity
``dS_i = P_i^global ⊙ (dO·V_iᵀ − rowsum(dO ⊙ O_global))``), which gives the exact gradient of
the merged result, mixture weights included.

PyTorch exposes such kernels only as private aten ops; which ones exist and accept a given
(device, dtype, head_dim) varies between releases, so every backend here is guarded by a
capability check, and a backend that raises at run time is switched off for that
(device type, dtype, head_dim) with a warning and the next one is used.  The ``math`` backend
always works (any device, dtype and head_dim) and is exact.

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

from attention._lse import compute_dtype

BACKENDS = ("auto", "cudnn", "flash", "efficient", "cpu_flash", "math")

_aten = torch.ops.aten
_disabled: set[tuple[str, str, torch.dtype, int]] = set()
# kernels that rejected strided views (attention._plan feeds views): given contiguous copies
_contiguous: set[tuple[str, str, torch.dtype, int]] = set()


def _has(op: str) -> bool:
    return hasattr(_aten, op)


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


def _math_forward(q, k, v, causal, scale):
    s = _scores(q, k, scale, causal)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    out = torch.matmul(p, v.to(p.dtype)).to(q.dtype)
    return out, lse, None


def _math_backward(dout, q, k, v, out, lse, aux, causal, scale):
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


_IMPLS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "math": (_math_forward, _math_backward),
    "cpu_flash": (_cpu_flash_forward, _cpu_flash_backward),
    "cudnn": (_cudnn_forward, _cudnn_backward),
    "flash": (_flash_forward, _flash_backward),
    "efficient": (_efficient_forward, _efficient_backward),
}


def candidates(device: torch.device, dtype: torch.dtype, head_dim: int) -> list[str]:
    """Backends that can run (device, dtype, head_dim), fastest first (docs/perf/probe_kernels.md)."""
    half = dtype in (torch.float16, torch.bfloat16)
    out: list[str] = []
    if device.type == "cpu":
        if dtype in (torch.float32, torch.float64, torch.bfloat16) and _has(
            "_scaled_dot_product_flash_attention_for_cpu_backward"
        ):
            out.append("cpu_flash")
    elif device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        fused_half = half and major >= 8 and head_dim % 8 == 0
        if fused_half and head_dim <= 128 and _has("_scaled_dot_product_cudnn_attention_backward"):
            out.append("cudnn")
        if fused_half and head_dim <= 256 and _has("_scaled_dot_product_flash_attention_backward"):
            out.append("flash")
        # The memory-efficient kernel only for float32: its backward, given the merged output and
        # LSE of several parts, returned dq with a relative error of 0.65 for bfloat16 on an H100
        # (torch 2.11, tests/test_attention_numerics.py::test_cuda_each_kernel_backend,
        # docs/perf/attention.md); float32 passed.  Half precision has cuDNN and flash anyway.
        if (
            dtype == torch.float32
            and head_dim % 4 == 0
            and _has("_scaled_dot_product_efficient_attention_backward")
        ):
            out.append("efficient")
    out.append("math")
    return out


class KernelSet:
    """The kernel used for one (device, dtype, head_dim), with the run-time fallback chain."""

    def __init__(
        self, device: torch.device, dtype: torch.dtype, head_dim: int, backend: str = "auto"
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.device, self.dtype, self.head_dim = device, dtype, head_dim
        chain = candidates(device, dtype, head_dim)
        if backend != "auto":
            if backend not in chain:
                raise ValueError(
                    f"backend {backend!r} cannot run {device.type} {dtype} head_dim {head_dim}; "
                    f"available: {chain}"
                )
            chain = [backend, *(c for c in chain if c != backend and c == "math")]
        self.chain = chain

    def _key(self, name: str) -> tuple[str, str, torch.dtype, int]:
        return (name, self.device.type, self.dtype, self.head_dim)

    def _live(self) -> list[str]:
        return [c for c in self.chain if c == "math" or self._key(c) not in _disabled]

    @property
    def name(self) -> str:
        return self._live()[0]

    def _disable(self, name: str, exc: BaseException) -> None:
        _disabled.add(self._key(name))
        warnings.warn(
            f"attention kernel {name!r} failed on {self.device.type} {self.dtype} head_dim {self.head_dim} "
            f"({type(exc).__name__}: {str(exc)[:200]}); falling back to {self._live()[0]!r}",
            RuntimeWarning,
            stacklevel=3,
        )

    def _contiguous_only(self, name: str, exc: BaseException) -> None:
        _contiguous.add(self._key(name))
        warnings.warn(
            f"attention kernel {name!r} refused strided views on {self.device.type} {self.dtype} head_dim "
            f"{self.head_dim} ({type(exc).__name__}: {str(exc)[:200]}); "
            "copying its inputs to contiguous tensors",
            RuntimeWarning,
            stacklevel=3,
        )

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[str, Any]]:
        """Out and LSE of one call on (possibly strided) views; a kernel that rejects the strides
        is retried on contiguous copies (and fed copies from then on), one that fails on those
        too is switched off for this (device, dtype, head_dim)."""
        for name in self._live():
            copies = self._key(name) in _contiguous
            try:
                args = (q.contiguous(), k.contiguous(), v.contiguous()) if copies else (q, k, v)
                out, lse, aux = _IMPLS[name][0](*args, causal, scale)
                return out, lse, (name, aux)
            except RuntimeError as exc:
                if name == "math":
                    raise
                if not copies:
                    try:
                        out, lse, aux = _IMPLS[name][0](
                            q.contiguous(), k.contiguous(), v.contiguous(), causal, scale
                        )
                    except RuntimeError:
                        pass
                    else:
                        self._contiguous_only(name, exc)
                        return out, lse, (name, aux)
                self._disable(name, exc)
        raise AssertionError("unreachable: math never disabled")

    def backward(
        self,
        dout: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        aux: tuple[str, Any],
        causal: bool,
        scale: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        name, inner = aux
        if name != "math" and self._key(name) not in _disabled:
            tensors = (dout, q, k, v, out)
            if self._key(name) in _contiguous:
                tensors = tuple(t.contiguous() for t in tensors)
            try:
                return _IMPLS[name][1](*tensors, lse, inner, causal, scale)
            except RuntimeError as exc:
                try:
                    grads = _IMPLS[name][1](*(t.contiguous() for t in tensors), lse, inner, causal, scale)
                except RuntimeError:
                    self._disable(name, exc)
                else:
                    self._contiguous_only(name, exc)
                    return grads
        return _math_backward(dout, q, k, v, out, lse, None, causal, scale)
