"""Which attention kernels ``improved`` and ``ring`` can run on here, and why not the others.

Every segment-engine module takes ``backend=`` (:data:`attention._kernel_selection.BACKENDS`):

- ``auto``: the fastest available, with run-time fallback: ``cudnn`` → ``flash`` → ``efficient``
  on CUDA, ``cpu_flash`` on the CPU, then ``math``;
- ``cudnn``: cuDNN fused attention (``aten._scaled_dot_product_cudnn_attention``); CUDA sm80+,
  bf16/fp16, head_dim a multiple of 8 up to 128;
- ``flash``: FlashAttention-2 as built into torch (``aten._scaled_dot_product_flash_attention``);
  CUDA sm80+, bf16/fp16, head_dim a multiple of 8 up to 256;
- ``efficient``: the memory-efficient kernel; CUDA, float32 only (its half-precision backward is
  wrong when given a merged LSE on sm90, docs/perf/attention.md);
- ``math``: matmul + softmax, exact; everywhere, any dtype and head_dim;
- ``cpu_flash``: torch's CPU flash kernel; CPU, fp32/fp64/bf16;
- ``flex``: FlexAttention (``torch.compile``-d on CUDA, eager elsewhere), power-of-two head_dim
  >= 16; forward only: its backward runs ``math`` (flex's own backward cannot take the merged
  output and LSE, and has no CPU path);
- ``flash_attn``: the flash-attn package (``flash_attn_func`` with LSE, its ``_flash_attn_backward``);
  CUDA, when installed;
- ``xformers``: xformers' ``memory_efficient_attention`` forward/backward with LSE; CUDA, when
  installed.

:func:`available` lists them for one device (and dtype, head_dim) with the reason for each one
that cannot run, so a benchmark can time ``improved`` on every kernel this machine has and report
the rest as skipped with why; :func:`running` says which kernel a module asked for one runs now
(after a run-time fallback, another one).  Together with :data:`KERNELS` they are what perfguard's
kernel comparison reads (the registry names this module as ``improved``'s ``kernels``).
"""

from __future__ import annotations

import torch

from attention._kernel_selection import BACKENDS, KernelSet, unavailable_reason

KERNELS = tuple(b for b in BACKENDS if b != "auto")


def available(
    device: torch.device | str, dtype: torch.dtype = torch.bfloat16, head_dim: int = 64
) -> list[tuple[str, str | None]]:
    """``[(backend, None if it can run else why not), ...]`` for every kernel, in table order.

    Pure capability checks (dtype, head_dim, compute capability, the op or package existing);
    a kernel that passes them can still fail at run time, and the engine then falls back with a
    ``RuntimeWarning`` (docs/attention.md).  Never initialises CUDA unless ``device`` is CUDA.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return [(name, "no CUDA device") for name in KERNELS]
    return [(name, unavailable_reason(name, dev, dtype, head_dim)) for name in KERNELS]


def names(device: torch.device | str, dtype: torch.dtype = torch.bfloat16, head_dim: int = 64) -> list[str]:
    """The backends that can run here (the ``None`` rows of :func:`available`)."""
    return [name for name, why in available(device, dtype, head_dim) if why is None]


def running(device: torch.device | str, dtype: torch.dtype, head_dim: int, kernel: str) -> str:
    """The kernel a plain call of a module built with ``backend=kernel`` runs first now: ``kernel``,
    or the one the engine fell back to for the rest of the process (docs/attention.md, "Fallbacks")."""
    return KernelSet(torch.device(device), dtype, head_dim, kernel).name
