"""Fused attention kernels that return the log-sum-exp, with an exact math fallback.

The segment engine (:mod:`attention._engine`) runs many small dense attentions (one per branch,
group of segments and ring chunk pair) and merges them by log-sum-exp, so it needs kernels that
return the LSE in the forward pass and whose backward accepts an *arbitrary* output and LSE:
the backward of a part is run with the **merged** output and LSE (the ring-attention identity
``dS_i = P_i^global ⊙ (dO·V_iᵀ − rowsum(dO ⊙ O_global))``), which gives the exact gradient of
the merged result, mixture weights included.

PyTorch exposes such kernels only as private aten ops; which ones exist and accept a given
(device, dtype, head_dim) varies between releases, so every backend here is guarded by a
capability check, and a backend that raises at run time falls back to the next one with a
``RuntimeWarning``: for that call only, or — after two failures in a row in plain calls — for the
rest of the process for that (device type, dtype, head_dim) (:mod:`attention._fallback` says why;
a failure under a dispatch mode, graph capture or tracing is never recorded).  A kernel that
rejects strided views is given contiguous copies under the same rule.  The ``math`` backend always
works (any device, dtype and head_dim) and is exact.

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

from attention._fallback import ContextError, Fallback, compile_blocked, is_kernel_failure
from attention._lse import compute_dtype

BACKENDS = ("auto", "cudnn", "flash", "efficient", "cpu_flash", "math", "flex", "flash_attn", "xformers")
# offered by ``auto``, fastest first; the others run only when asked for by name
AUTO_ORDER = ("cudnn", "flash", "efficient", "cpu_flash", "math")

_aten = torch.ops.aten
#: kernels switched off, per (name, device type, dtype, head_dim): the next one of the chain runs
KERNEL_FALLBACK = Fallback()
#: kernels that rejected strided views (attention._plan feeds views): given contiguous copies
STRIDES_FALLBACK = Fallback()


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


def _flex_fn(device: torch.device):
    global _FLEX_COMPILED
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention  # eager (a dense reference implementation): tests on the CPU
    if _FLEX_COMPILED is None:
        _FLEX_COMPILED = torch.compile(flex_attention, dynamic=False)
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


_IMPLS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "math": (_math_forward, _math_backward),
    "cpu_flash": (_cpu_flash_forward, _cpu_flash_backward),
    "cudnn": (_cudnn_forward, _cudnn_backward),
    "flash": (_flash_forward, _flash_backward),
    "efficient": (_efficient_forward, _efficient_backward),
    "flex": (_flex_forward, _math_backward),
    "flash_attn": (_flash_attn_forward, _flash_attn_backward),
    "xformers": (_xformers_forward, _xformers_backward),
}
# errors a backend can raise at run time before the next one runs (optional packages change
# their private signatures between releases: a TypeError there is a failure of that backend;
# an out-of-memory error is a RuntimeError too, and attention._fallback lets it propagate)
_FAILURES = (RuntimeError, TypeError, NotImplementedError, ImportError)

#: cuDNN's attention takes a call only when both its query and key lengths reach this.  Its
#: backward *crashes the process* (SIGSEGV in plan creation, not an error that a fallback could
#: catch) on some tiny shapes whose forward runs: the ring's boundary pieces, a few rows long, did
#: so on an H100 (torch 2.11, 2026-11-25, docs/perf/attention.md), and cuDNN-frontend reports the
#: same for ``B = H = Sq = 1`` (issue 1071).  Its forward rejects ``Sq = Sk = 1`` with an error,
#: which used to switch cuDNN off for every later call of that dtype.  Calls this short are cheap
#: on any kernel: they go to the next one of the chain (flash in half precision).
CUDNN_MIN_LEN = 64


def _takes(name: str, q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether kernel ``name`` may run a call of these shapes (a per-call rule, not a failure)."""
    return name != "cudnn" or min(q.shape[-2], k.shape[-2]) >= CUDNN_MIN_LEN


def candidates(device: torch.device, dtype: torch.dtype, head_dim: int) -> list[str]:
    """Backends ``auto`` may use for (device, dtype, head_dim), fastest first
    (docs/perf/probe_kernels.md); :func:`unavailable_reason` says why the others are not."""
    return [name for name in AUTO_ORDER if unavailable_reason(name, device, dtype, head_dim) is None]


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def unavailable_reason(name: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why backend ``name`` cannot run (device, dtype, head_dim) here, or None when it can."""
    half = dtype in (torch.float16, torch.bfloat16)
    if name == "math":
        return None
    if name == "cpu_flash":
        if device.type != "cpu":
            return "CPU only"
        if dtype not in (torch.float32, torch.float64, torch.bfloat16):
            return f"no {dtype} path"
        if not _has("_scaled_dot_product_flash_attention_for_cpu_backward"):
            return "this torch has no CPU flash kernel"
        return None
    if name == "flex":
        if not _importable("torch.nn.attention.flex_attention"):
            return "this torch has no FlexAttention"
        if head_dim < 16 or head_dim & (head_dim - 1):
            return "FlexAttention needs a power-of-two head_dim >= 16"
        return None
    if device.type != "cuda":
        return "CUDA only"
    major, _ = torch.cuda.get_device_capability(device)
    fused_half = half and major >= 8 and head_dim % 8 == 0
    if name == "cudnn":
        if not fused_half or head_dim > 128:
            return "bf16/fp16 on sm80+ with head_dim a multiple of 8, <= 128"
        if not _has("_scaled_dot_product_cudnn_attention_backward"):
            return "this torch has no cuDNN attention"
        return None
    if name == "flash":
        if not fused_half or head_dim > 256:
            return "bf16/fp16 on sm80+ with head_dim a multiple of 8, <= 256"
        if not _has("_scaled_dot_product_flash_attention_backward"):
            return "this torch has no FlashAttention-2 kernel"
        return None
    if name == "efficient":
        # Only for float32: its backward, given the merged output and LSE of several parts,
        # returned dq with a relative error of 0.65 for bfloat16 on an H100 (torch 2.11,
        # tests/test_attention_numerics.py::test_cuda_each_kernel_backend, docs/perf/attention.md);
        # float32 passed.  Half precision has cuDNN and flash anyway.
        if dtype != torch.float32 or head_dim % 4:
            return "float32 only here (wrong half-precision gradients with a merged LSE on sm90)"
        if not _has("_scaled_dot_product_efficient_attention_backward"):
            return "this torch has no memory-efficient kernel"
        return None
    if name == "flash_attn":
        if not _importable("flash_attn"):
            return "the flash-attn package is not installed"
        return None if fused_half else "bf16/fp16 on sm80+ with head_dim a multiple of 8"
    if name == "xformers":
        if not _importable("xformers"):
            return "the xformers package is not installed"
        return None
    raise ValueError(f"unknown attention backend {name!r}; known: {BACKENDS[1:]}")


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
            reason = unavailable_reason(backend, device, dtype, head_dim)
            if reason is not None:
                raise ValueError(
                    f"backend {backend!r} cannot run {device.type} {dtype} head_dim {head_dim} ({reason}); "
                    f"available: {chain}"
                )
            chain = [backend, *(c for c in chain if c != backend and c == "math")]
        self.chain = chain

    def _key(self, name: str) -> tuple[str, str, torch.dtype, int]:
        return (name, self.device.type, self.dtype, self.head_dim)

    def _live(self) -> list[str]:
        return [c for c in self.chain if c == "math" or self._key(c) not in KERNEL_FALLBACK.off]

    @property
    def name(self) -> str:
        """The kernel a plain call runs first (the chain less what is off for the process)."""
        return self._live()[0]

    def _describe(self, name: str) -> str:
        return f"attention kernel {name!r} on {self.device.type} {self.dtype} head_dim {self.head_dim}"

    def _run(
        self, name: str, key: tuple, phase: str, fn: Callable[..., Any], tensors: tuple, rest: tuple
    ) -> Any:
        """``fn(*tensors, *rest)`` on the views as they are, or on contiguous copies when this
        kernel rejects strides (for this call, or for the process: ``STRIDES_FALLBACK``)."""
        if key in STRIDES_FALLBACK.off:
            return fn(*(t.contiguous() for t in tensors), *rest)
        try:
            result = fn(*tensors, *rest)
        except _FAILURES as exc:
            if isinstance(exc, ContextError) or not is_kernel_failure(exc):
                raise
            try:
                result = fn(*(t.contiguous() for t in tensors), *rest)
            except _FAILURES as again:
                if not is_kernel_failure(again):
                    raise
                raise exc from None  # fails on copies too: a failure of the kernel, not of strides
            STRIDES_FALLBACK.failed(
                key,
                exc,
                what=f"{self._describe(name)} on strided views" + (" (backward)" if phase else ""),
                instead="copying its inputs to contiguous tensors",
                phase=phase,
                stacklevel=4,
            )
            return result
        STRIDES_FALLBACK.succeeded(key, phase)
        return result

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[str, Any]]:
        """Out and LSE of one call on (possibly strided) views: the first kernel of the chain that
        takes these shapes and runs; each one that fails falls back to the next
        (:mod:`attention._fallback` decides for how long)."""
        live = [name for name in self._live() if _takes(name, q, k)]
        for i, name in enumerate(live):
            if name == "math":
                out, lse, _ = _math_forward(q, k, v, causal, scale)
                return out, lse, ("math", None)
            key = self._key(name)
            try:
                out, lse, aux = self._run(name, key, "", _IMPLS[name][0], (q, k, v), (causal, scale))
            except _FAILURES as exc:
                nxt = live[i + 1]
                KERNEL_FALLBACK.failed(
                    key, exc, what=self._describe(name), instead=f"falling back to {nxt!r}"
                )
                continue
            KERNEL_FALLBACK.succeeded(key)
            return out, lse, (name, aux)
        raise AssertionError("unreachable: math is always live")

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
        """The gradients of one call, by the backward of the kernel its forward ran (the math
        backward when that one fails, or is off for the process: exact with any kernel's LSE)."""
        name, inner = aux
        key = self._key(name)
        if name != "math" and key not in KERNEL_FALLBACK.off:
            tensors, rest = (dout, q, k, v, out), (lse, inner, causal, scale)
            try:
                grads = self._run(name, key, "backward", _IMPLS[name][1], tensors, rest)
            except _FAILURES as exc:
                KERNEL_FALLBACK.failed(
                    key,
                    exc,
                    what=f"the backward of {self._describe(name)}",
                    instead="falling back to the math backward",
                    phase="backward",
                )
            else:
                KERNEL_FALLBACK.succeeded(key, "backward")
                return grads
        return _math_backward(dout, q, k, v, out, lse, None, causal, scale)
