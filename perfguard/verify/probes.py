"""Small measurements the checks are built from, each answering one question about one run.

Kept free of bookkeeping (that is :mod:`perfguard.verify.runner`) so each can be read, and tested,
on its own.  Every function returns a problem description (``str``) or ``None`` when all is well,
except those that compute a tensor or a number.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Sequence
from typing import Any

import torch

from perfguard.engine import accuracy
from perfguard.engine.accuracy import relative_error

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

#: A NaN bit pattern no computation produces (hardware NaNs are 0x7FC0.. / 0xFFC0..): 0x7FA5
#: repeated is a NaN in float16, bfloat16 and float32 alike, so one fill poisons every dtype.
POISON_WORD = 0x7FA5
_POISON_BITS = {2: 0x7FA5, 4: 0x7FA57FA5, 8: 0x7FA57FA57FA57FA5}
_INT_OF_WIDTH = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def describe(exc: BaseException) -> str:
    """``Type: message (at file:line)`` in one line, short enough for a table footnote."""
    message = " ".join(str(exc).split()) or "(no message)"
    if len(message) > 300:
        message = message[:297] + "..."
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {_short_path(last.filename)}:{last.lineno})"
    return f"{type(exc).__name__}: {message}{where}"


def _short_path(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/")
    for anchor in ("attention", "perfguard", "torch", "tests", "site-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return "/".join(parts[-2:])


# --------------------------------------------------------------------------- the module's pattern


def core_of(module: torch.nn.Module, multihead: bool) -> torch.nn.Module:
    """The core attention module: the module itself, or a multihead module's ``attention``."""
    if not multihead:
        return module
    core = getattr(module, "attention", None)
    if not isinstance(core, torch.nn.Module):
        raise AttributeError("multihead module has no `attention` core module (docs/design.md contract)")
    return core


def declared_pattern(
    module: torch.nn.Module,
    multihead: bool,
    seq_len: int,
    num_heads: int,
    causal: bool,
    device: torch.device | str | None = None,
) -> Any:
    """What the implementation says it computes: its core's ``attention_pattern``, on ``device``.

    Built there by the module itself (``device=``, docs/design.md); a module without that keyword
    builds it where it does and the result is moved.
    """
    return accuracy.declared_pattern(
        core_of(module, multihead), seq_len, causal=causal, num_heads=num_heads, device=device
    )


def pattern_problem(pattern: Any, num_heads: int, seq_len: int, causal: bool) -> str | None:
    """Is this a count tensor at all: non-negative integers (H, n, n), lower-triangular if causal."""
    if not isinstance(pattern, torch.Tensor):
        return f"attention_pattern returned {type(pattern).__name__}, not a Tensor"
    if pattern.dtype == torch.bool or pattern.is_floating_point() or pattern.is_complex():
        return f"attention_pattern has dtype {pattern.dtype}; counts must be an integer tensor"
    expected = (num_heads, seq_len, seq_len)
    if tuple(pattern.shape) != expected:
        return f"attention_pattern has shape {tuple(pattern.shape)}, expected (H, n, n) = {expected}"
    low = int(pattern.min().item())
    if low < 0:
        return f"attention_pattern has negative counts (min {low})"
    if int(pattern.max().item()) == 0:
        return "attention_pattern attends to nothing (every count is 0)"
    if causal:
        upper = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=pattern.device), 1)
        leak = (pattern != 0) & upper
        if bool(leak.any()):
            h, p, k = (int(i) for i in leak.nonzero()[0])
            return (
                f"attention_pattern with is_causal=True lets query {p} see later key {k} (head {h}); "
                f"{int(leak.sum())} such pairs"
            )
    return None


def sparsity_problem(core: torch.nn.Module, pattern: torch.Tensor) -> str | None:
    """A block-sparse core's pattern must show its ``sparsity`` (DESIGN.md; non-causal patterns).

    ``sparsity`` is the fraction of the nb² (query block, key block) pairs skipped, so about
    ``round((1 − sparsity)·nb²)`` pairs are active (±1 for rounding); the diagonal is the floor
    (every query needs its own block).  Upstream's block-sparse class ignored its sparsity
    entirely (research/dilated_attention.md §4.6): this is the check for that.
    """
    sparsity, block = getattr(core, "sparsity", None), getattr(core, "block_size", None)
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)):
        return None
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        return None
    seen = (pattern != 0).any(dim=0)
    n = seen.shape[-1]
    nb = -(-n // block)
    padded = torch.zeros(nb * block, nb * block, dtype=torch.bool, device=seen.device)
    padded[:n, :n] = seen
    active = int(padded.view(nb, block, nb, block).any(dim=3).any(dim=1).sum().item())
    expected = max(nb, round((1.0 - sparsity) * nb * nb))
    if abs(active - expected) <= 1:
        return None
    return (
        f"declares sparsity {sparsity:g} (about {expected} of {nb}x{nb} block pairs of {block} active) "
        f"but its pattern has {active} active ({1 - active / nb**2:.3f} skipped)"
    )


def pattern_density(pattern: torch.Tensor) -> float:
    return int(torch.count_nonzero(pattern).item()) / max(1, pattern.numel())


def pattern_difference(declared: torch.Tensor, expected: torch.Tensor, what: str) -> str | None:
    """Where two count tensors differ, said with one example; ``None`` if equal (every element)."""
    expected = expected.to(device=declared.device, dtype=declared.dtype)
    if declared.shape == expected.shape and torch.equal(declared, expected):
        return None
    differ = declared != expected
    count = int(differ.sum().item())
    h, p, k = (int(i) for i in differ.nonzero()[0])
    got, want = int(declared[h, p, k]), int(expected[h, p, k])
    return (
        f"declared pattern differs from {what} at {count} of {differ.numel()} (head, query, key) counts, "
        f"e.g. head {h}, query {p}, key {k}: declared {got}, expected {want}"
    )


# --------------------------------------------------------------------------- running the module


def forward(module: torch.nn.Module, inputs: Inputs, causal: bool) -> Any:
    with torch.enable_grad():
        return module(*inputs, is_causal=causal)


def unwrap(raw: Any, multihead: bool) -> tuple[torch.Tensor | None, str | None]:
    """The output tensor, and what is wrong with the return value (``None`` if it keeps the contract).

    The output is taken from a wrong return value too where there is one (a tensor, or a tuple
    starting with one), so the other checks still say whether the numbers are right.
    """
    if multihead:
        if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], torch.Tensor) and raw[1] is None:
            return raw[0], None
        if isinstance(raw, torch.Tensor):
            return raw, "returned a plain Tensor; multihead modules must return exactly (output, None)"
        if isinstance(raw, (tuple, list)):
            kinds = ", ".join(type(x).__name__ for x in raw)
            out = raw[0] if raw and isinstance(raw[0], torch.Tensor) else None
            return (
                out,
                f"returned {type(raw).__name__} of ({kinds}); multihead modules must return (output, None)",
            )
        return None, f"returned {type(raw).__name__}; multihead modules must return (output, None)"
    if isinstance(raw, torch.Tensor):
        return raw, None
    if isinstance(raw, (tuple, list)) and raw and isinstance(raw[0], torch.Tensor):
        return raw[0], f"returned a {type(raw).__name__} of {len(raw)}; core modules return a Tensor"
    return None, f"returned {type(raw).__name__}; core modules return a Tensor"


def shape_problem(out: torch.Tensor, like: torch.Tensor) -> str | None:
    problems = []
    if out.shape != like.shape:
        problems.append(f"shape {tuple(out.shape)} != {tuple(like.shape)}")
    if out.dtype != like.dtype:
        problems.append(f"dtype {out.dtype} != {like.dtype}")
    if out.device != like.device:
        problems.append(f"device {out.device} != {like.device}")
    return "output " + ", ".join(problems) if problems else None


def input_grads(out: torch.Tensor, inputs: Inputs, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """Gradients of ``<out, grad_out>`` with respect to the inputs only (module parameters untouched)."""
    return torch.autograd.grad(out, inputs, grad_out, allow_unused=True)


def nonfinite_problem(name: str, t: torch.Tensor) -> str | None:
    bad = ~torch.isfinite(t.detach())
    count = int(bad.sum().item())
    if count == 0:
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    kinds = "NaN" if bool(torch.isnan(t).any()) else "inf"
    return f"{name} has {count} of {t.numel()} elements {kinds}/inf, first at index {first}"


def reference(
    module: torch.nn.Module,
    multihead: bool,
    inputs: Inputs,
    pattern: torch.Tensor,
    causal: bool,
    grad_out: torch.Tensor | None,
    other_value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, torch.Tensor | None]:
    """The float64 reference output of the declared pattern, its input gradients if asked, and
    the reference output with ``v`` replaced by ``other_value`` if given.

    perfguard's own reference (:func:`perfguard.engine.accuracy.reference`), never the guarded
    package's: the code under review must not be able to change what it is checked against.
    """
    leaves = tuple(t.detach().to(torch.float64).requires_grad_(grad_out is not None) for t in inputs)
    counts = pattern
    if multihead and getattr(module, "num_heads", None) != pattern.shape[0]:
        # the declared pattern is the core's over its own heads: the reference needs the module's
        n = inputs[0].shape[1]
        counts = declared_pattern(module, True, n, module.num_heads, causal, device=inputs[0].device)
    other = None
    if other_value is not None:
        with torch.no_grad():
            swapped = (leaves[0].detach(), leaves[1].detach(), other_value.detach().to(torch.float64))
            other = accuracy.reference(module, multihead, swapped, counts)
    with torch.enable_grad() if grad_out is not None else torch.no_grad():
        ref = accuracy.reference(module, multihead, leaves, counts)
        if grad_out is None:
            return ref.detach(), None, other
        grads = torch.autograd.grad(ref, leaves, grad_out.to(torch.float64))
    return ref.detach(), tuple(g.detach() for g in grads), other


def fmt_err(err: float, tol: float) -> str:
    return "rel err inf (non-finite values)" if math.isinf(err) else f"rel err {err:.3g} > {tol:g}"


# --------------------------------------------------------------------------- unwritten outputs


def poison_allocator(like: torch.Tensor) -> None:
    """Leave a freed block of ``like``'s size filled with the poison NaN in the allocator.

    On CUDA the caching allocator hands that block to the next allocation of the same size (the
    implementation's output buffer, typically); on CPU glibc usually does the same.  An output
    element that is never written then still holds the poison, which no computation produces.
    Best effort by nature, so :func:`unwritten_rows` does not rely on it alone.
    """
    words = max(1, (like.numel() * like.element_size() + 1) // 2)
    block = torch.full((words,), POISON_WORD, dtype=torch.int16, device=like.device)
    del block


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(_INT_OF_WIDTH[t.element_size()])


def unwritten_rows(
    out_a: torch.Tensor,
    out_b: torch.Tensor,
    ref_a: torch.Tensor,
    ref_b: torch.Tensor,
    row_dims: Sequence[str],
) -> str | None:
    """Output rows (one query position: per head for core modules) that the implementation never wrote.

    Runs A and B differ only in ``v``/``value``, so every row whose reference has keys must come
    out different.  A row is reported unwritten when

    - it still holds the allocator poison (any element), or
    - it is input-dependent by the reference but bit-identical in A and B (an untouched zero or
      stale buffer, including one reused from the previous call), or
    - it is input-dependent but exactly zero.

    Robust against whatever the buffer held before: zeros, stale data and the poison are all
    caught by at least one rule, whichever allocator state the implementation met.
    """
    width = out_a.shape[-1]
    a, b = out_a.detach().reshape(-1, width), out_b.detach().reshape(-1, width)
    ra, rb = ref_a.reshape(-1, width), ref_b.reshape(-1, width)
    typical = ra.norm(dim=-1).mean().clamp_min(1e-30)
    dependent = (ra - rb).norm(dim=-1) > 1e-3 * typical
    bits_a, bits_b = _bits(a), _bits(b)
    poison = _POISON_BITS[a.element_size()]
    poisoned = ((bits_a == poison) | (bits_b == poison)).any(dim=-1)
    finite = torch.isfinite(a).all(dim=-1) & torch.isfinite(b).all(dim=-1)
    identical = (bits_a == bits_b).all(dim=-1) & finite & dependent
    zero = ((a == 0).all(dim=-1) | (b == 0).all(dim=-1)) & dependent
    bad = poisoned | identical | zero
    count = int(bad.sum().item())
    if count == 0:
        return None
    reasons = [
        label
        for label, mask in (
            ("still poisoned", poisoned),
            ("unchanged when v changes", identical),
            ("all zero", zero),
        )
        if bool(mask.any())
    ]
    first = int(bad.nonzero()[0, 0])
    index = torch.unravel_index(torch.tensor(first), tuple(out_a.shape[:-1]))
    where = ", ".join(f"{dim} {int(i)}" for dim, i in zip(row_dims, index, strict=True))
    return f"{count} of {bad.numel()} output rows left unwritten ({'; '.join(reasons)}), e.g. {where}"


def run_difference(
    first: Sequence[torch.Tensor | None], second: Sequence[torch.Tensor | None]
) -> tuple[bool, float]:
    """Whether two runs are bit-identical, and the largest relative difference between them."""
    identical, worst = True, 0.0
    for x, y in zip(first, second, strict=True):
        if x is None or y is None:
            continue
        if x.shape != y.shape:
            return False, math.inf
        if torch.equal(_bits(x), _bits(y)):
            continue
        identical = False
        worst = max(worst, relative_error(y, x))
    return identical, worst
