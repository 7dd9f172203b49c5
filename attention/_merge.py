"""Merging the pieces' outputs by log-sum-exp, and summing their gradients, in the sequence layout.

Every piece (:mod:`attention._plan`) returns ``out (B, H', L, d)`` and ``lse (B, H', L)`` for rows
of the output given by its geometry (a :class:`Part`).  A (position, head) row is covered by at
most one piece per branch and by several branches, and its result is one softmax over all of them:

    out = Σ_p exp(lse_p − L) · out_p,   L = log Σ_p exp(lse_p)      (rows no piece covers: 0, −inf)

Two implementations compute exactly this:

- :mod:`attention._merge_triton` (CUDA with Triton): a locate kernel inverts every part's strided
  geometry once per destination row (an int32 map of source rows, and the merged LSE), then a
  combine kernel reads every part once, weighs it in float32 registers and writes each result
  row once (the plain-torch merge cost ~0.75 ms of a 1.5 ms forward at 32K tokens on an H100).
  At most :data:`attention._merge_triton.SLOTS` parts per launch; more are chained through a
  float32 accumulator.
- :func:`merge_torch` (CPU, or no Triton): ``as_strided`` views of the destination with the same
  geometry, a ``logaddexp`` pass and a weighted-sum pass per part.  Same function, same rounding
  up to the order of float32 additions (tests/test_attention_plan.py compares the two).

Gradients of the pieces (dq, dk, dv, each in the geometry of q or of k) are summed into the
sequence layout the same way, without weights (:func:`sum_parts`), optionally on top of what the
destination already holds (the ring accumulates over chunk pairs).
"""

from __future__ import annotations

import math
import os

import torch

from attention._fallback import Fallback
from attention._part import Part

#: the Triton merge switched off per device type (a Triton that cannot compile or run the kernels):
#: torch merges there (attention._fallback: only after two failures in a row in plain calls)
TRITON_FALLBACK = Fallback()


def nested(part: Part) -> bool:
    """Whether the part's row strides decompose uniquely by successive division: sorted by stride,
    each larger than the span of all smaller ones (what the Triton kernel's inverse mapping needs;
    pieces built by :mod:`attention._plan` always are)."""
    dims = sorted(((st, sz) for st, sz in zip(part.strides, part.sizes, strict=True) if sz > 1), reverse=True)
    return all(stride > sum(st * (sz - 1) for st, sz in dims[k + 1 :]) for k, (stride, _) in enumerate(dims))


def triton_merge_enabled(t: torch.Tensor, parts: list[Part] = ()) -> bool:
    """Whether the fused Triton merge runs: on CUDA when Triton is importable (``ATTENTION_MERGE``
    unset or ``auto``), never with ``ATTENTION_MERGE=torch``, and on any device with
    ``ATTENTION_MERGE=triton`` (the interpreter on the CPU: tests); never for float64 (exactness
    runs), nor where it is switched off for the process (:data:`TRITON_FALLBACK`).

    Its first call per part count compiles (a few seconds; perfguard's rounds keep Triton's cache
    on disk, so a machine pays it once): docs/perf/attention.md, "The Triton merge's compile time".
    """
    choice = os.environ.get("ATTENTION_MERGE", "auto")
    if choice not in ("auto", "torch", "triton"):
        raise ValueError(f"ATTENTION_MERGE must be auto, torch or triton, got {choice!r}")
    if choice == "torch" or t.dtype == torch.float64 or (choice == "auto" and t.device.type != "cuda"):
        return False
    from attention import _merge_triton

    # the kernels read whole rows of head_dim contiguous values and invert nested strides
    return (
        _merge_triton.AVAILABLE
        and t.device.type not in TRITON_FALLBACK.off
        and all(nested(p) for p in parts)
        and _merge_triton.supported(parts, t.shape[-1])
    )


def _triton_failed(dest: torch.Tensor, exc: Exception) -> None:
    TRITON_FALLBACK.failed(
        dest.device.type,
        exc,
        what=f"the Triton merge kernel on {dest.device.type}",
        instead="merging with plain torch ops",
        stacklevel=3,
    )


def _dest_view(dest: torch.Tensor, part: Part, row_elems: int) -> torch.Tensor:
    """The part's rows of ``dest`` (rows of ``row_elems`` contiguous values) as a strided view."""
    size = part.sizes if row_elems == 1 else (*part.sizes, row_elems)
    stride = tuple(s * row_elems for s in part.strides)
    if row_elems != 1:
        stride = (*stride, 1)
    return dest.as_strided(size, stride, dest.storage_offset() + part.offset * row_elems)


def _check_dest(*dests: torch.Tensor) -> None:
    # part geometry is in rows of a contiguous (b, L, H[, d]) tensor
    for dest in dests:
        if not dest.is_contiguous():
            raise ValueError("merge destinations must be contiguous (b, L, H[, d]) tensors")


def merge_parts(parts: list[Part], out: torch.Tensor, lse: torch.Tensor) -> None:
    """Write the log-sum-exp merge of ``parts`` into ``out (b, L, H, d)`` and ``lse (b, L, H)``."""
    _check_dest(out, lse)
    if triton_merge_enabled(out, parts):
        from attention._merge_triton import merge

        try:
            merge(parts, out, lse)
        except Exception as exc:  # a Triton/compiler failure must not make the module unusable
            _triton_failed(out, exc)  # merge_torch rewrites every row of out and lse
        else:
            TRITON_FALLBACK.succeeded(out.device.type)
            return
    merge_torch(parts, out, lse)


def merge_torch(parts: list[Part], out: torch.Tensor, lse: torch.Tensor) -> None:
    """The plain-torch merge (module docstring): one ``logaddexp`` and one weighted add per part."""
    d = out.shape[-1]
    cd = lse.dtype
    lse.fill_(-math.inf)
    for p in parts:
        view = _dest_view(lse, p, 1)
        view.copy_(torch.logaddexp(view, p.lse.to(cd)))
    acc = out if out.dtype == cd else torch.zeros(out.shape, dtype=cd, device=out.device)
    acc.zero_()
    for p in parts:
        weight = torch.exp(p.lse.to(cd) - _dest_view(lse, p, 1))
        _dest_view(acc, p, d).add_(weight.unsqueeze(-1) * p.values.to(cd))
    if acc is not out:
        out.copy_(acc)


def merge_online(parts: list[Part], out: torch.Tensor, lse: torch.Tensor) -> None:
    """Merge ``parts`` into a running result: ``out (b, L, H, d)`` and ``lse (b, L, H)`` already
    hold the merge of everything before (0 and −inf where nothing was merged yet), on the parts'
    own rows only, one part at a time, so the distributed ring (:mod:`attention._distributed`)
    never keeps the pieces of earlier steps.

    For each part, ``L' = logaddexp(L, lse_p)`` and ``out' = out + w·(out_p − out)`` with
    ``w = exp(lse_p − L')``.  With Triton (CUDA) one kernel per part computes it in float32 and
    rounds the output row once (:func:`attention._merge_triton.merge_into`); otherwise five torch
    kernels per part (``logaddexp``, ``exp``, ``lerp_`` on strided views), the weight rounded to
    the output's dtype.  Either way a bf16/fp16 output is rounded once per merged part (the
    one-pass :func:`merge_parts` rounds once per row): on 2 H200s the distributed output was
    2.3-3.0e-3 (relative) from the same computation in float32, the one-device ring's 2.2-2.4e-3
    (docs/perf/distributed.md).  float32 and float64 are exact to their rounding.
    """
    _check_dest(out, lse)
    for p in parts:
        if triton_merge_enabled(out, [p]) and p.lse is not None:
            from attention._merge_triton import merge_into

            try:
                merge_into(p, out, lse)  # a failure is at its compile, before any write
            except Exception as exc:
                _triton_failed(out, exc)
            else:
                TRITON_FALLBACK.succeeded(out.device.type)
                continue
        _merge_one_torch(p, out, lse)


def _merge_one_torch(p: Part, out: torch.Tensor, lse: torch.Tensor) -> None:
    d = out.shape[-1]
    cd = lse.dtype
    lse_view = _dest_view(lse, p, 1)
    merged = torch.logaddexp(lse_view, p.lse.to(cd))
    weight = torch.exp(p.lse.to(cd) - merged).unsqueeze(-1)
    _dest_view(out, p, d).lerp_(p.values.to(out.dtype), weight.to(out.dtype))
    lse_view.copy_(merged)


def sum_parts(parts: list[Part], dest: torch.Tensor, *, accumulate: bool = False) -> None:
    """``dest (b, L, H, d)`` = (its content if ``accumulate``, else 0) + Σ parts, row by row."""
    _check_dest(dest)
    if triton_merge_enabled(dest, parts):
        from attention._merge_triton import sum_rows

        try:
            sum_rows(parts, dest, accumulate=accumulate)
        except Exception as exc:  # as in merge_parts; sum_rows writes dest only in its last launch
            _triton_failed(dest, exc)
        else:
            TRITON_FALLBACK.succeeded(dest.device.type)
            return
    sum_torch(parts, dest, accumulate=accumulate)


def sum_torch(parts: list[Part], dest: torch.Tensor, *, accumulate: bool = False) -> None:
    d = dest.shape[-1]
    cd = torch.float64 if dest.dtype == torch.float64 else torch.float32
    if dest.dtype == cd:
        acc = dest
        if not accumulate:
            acc.zero_()
    else:
        acc = dest.to(cd) if accumulate else torch.zeros(dest.shape, dtype=cd, device=dest.device)
    for p in parts:
        _dest_view(acc, p, d).add_(p.values.to(cd))
    if acc is not dest:
        dest.copy_(acc)
