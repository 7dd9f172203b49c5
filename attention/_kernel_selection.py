"""Which attention kernel runs a call: what each one can run here, the order ``auto`` tries them
in, and the chain that falls back from one that fails.

Every backend is guarded by a capability check (:func:`unavailable_reason`: dtype, head_dim,
compute capability, the op or package existing), and a backend that raises at run time falls back
to the next one with a ``RuntimeWarning``: for that call only, or — after two failures in a row in
plain calls — for the rest of the process for that (device type, dtype, head_dim)
(:mod:`attention._fallback` says why; a failure under a dispatch mode, graph capture or tracing is
never recorded).  A kernel that rejects strided views is given contiguous copies under the same
rule.  The ``math`` kernel (:mod:`attention._kernels`) always works and ends every chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attention._fallback import ContextError, Fallback, is_kernel_failure
from attention._kernels import KERNELS, math_backward, math_forward

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
                out, lse, _ = math_forward(q, k, v, causal, scale)
                return out, lse, ("math", None)
            key = self._key(name)
            try:
                out, lse, aux = self._run(name, key, "", KERNELS[name][0], (q, k, v), (causal, scale))
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
                grads = self._run(name, key, "backward", KERNELS[name][1], tensors, rest)
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
        return math_backward(dout, q, k, v, out, lse, None, causal, scale)
