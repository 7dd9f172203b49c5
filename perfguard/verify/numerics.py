"""Tolerances per device × dtype, and the numerical settings verification pins and records.

The tolerance is a bound on the *relative* error ``‖out − ref‖ / ‖ref‖`` against the float64
reference, for outputs and input gradients alike.  float32 on CPU is computed exactly in float32,
so 1e-5 leaves two orders of magnitude above its rounding error; on CUDA float32 matmuls may go
through TF32 (10-bit mantissa) inside kernels that ignore the global switch, hence 1e-3; bfloat16
(8-bit mantissa) and float16 (11-bit) get the usual flash-attention tolerances.

Implementations have been known to switch TF32 on globally (DarcStar's "improved" did, in its
constructor).  Verification pins TF32 off and the float32 matmul precision to "highest" before
every row, records the settings it ran under in the report, and notes when an implementation
changed them (restoring them afterwards, so one implementation cannot loosen the next one's check).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

TOLERANCES: dict[tuple[str, torch.dtype], float] = {
    ("cpu", torch.float32): 1e-5,
    ("cpu", torch.bfloat16): 2e-2,
    ("cpu", torch.float16): 1e-2,
    ("cuda", torch.float32): 1e-3,
    ("cuda", torch.bfloat16): 2e-2,
    ("cuda", torch.float16): 1e-2,
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerance(device: str, dtype: torch.dtype) -> float:
    return TOLERANCES[(device, dtype)]


def numerics_settings() -> dict[str, Any]:
    """The global switches that change float32 results, as recorded in the report."""
    settings: dict[str, Any] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": dtype_name(torch.get_default_dtype()),
        "cpu_intra_op_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        settings["cuda_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        settings["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
        settings["cuda_matmul_allow_bf16_reduced_precision_reduction"] = (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        )
        settings["cuda_matmul_allow_fp16_reduced_precision_reduction"] = (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        )
    return settings


def pin_numerics() -> None:
    """TF32 off, float32 matmuls at full precision, float32 default dtype, one CPU thread.

    One intra-op thread: the CPU configurations are tiny (n = 91), so a second thread buys
    nothing, and on a busy 2-core runner OpenMP's spin-waiting made the default matrix 5× slower
    (docs/perf/verify.md).  Numbers do not depend on it beyond rounding.
    """
    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("highest")
    torch.set_default_dtype(torch.float32)
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


@contextmanager
def restored_global_settings() -> Iterator[None]:
    """Put back the caller's settings after a whole verify run (tests and library users)."""
    threads, precision, default = (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.get_default_dtype(),
    )
    tf32 = (
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        if torch.cuda.is_available()
        else None
    )
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
        torch.set_default_dtype(default)
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


@contextmanager
def pinned_numerics(notes: list[str]) -> Iterator[None]:
    """Pin the settings for one row; afterwards note (and undo) anything the implementation changed."""
    pin_numerics()
    before = numerics_settings()
    grad_enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        after = numerics_settings()
        changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        if changed:
            notes.append(
                "implementation changed global numerics settings (restored for the next row): "
                + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items())
            )
        pin_numerics()
        torch.set_grad_enabled(grad_enabled)
