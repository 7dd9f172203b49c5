"""How exact one call is: its output and input gradients against a float64 reference (issue 31).

``perfguard verify`` is pass/fail against a tolerance per dtype; a change that makes an
implementation ten times less exact but still inside it passes silently.  The accuracy benchmarks
(``Accuracy.track_*_error`` in the suite) store the error itself with every round, so that a
check compares it base against HEAD like a work count, and the history site draws it over time.

What is measured, per case (implementation x length x dtype of the profile, the suite's own
inputs, seed and output gradient), not causal like the timed call (``Accuracy.track_*_error``)
and causal (``Accuracy.track_*_error_causal``, for implementations that declare
``supports_causal``):

- the relative L2 error ``‖x − ref‖ / ‖ref‖`` of the output, and of the gradient of each input
  (q, k, v; a multihead module's query, key, value) against the reference's; a gradient's
  denominator is at least :data:`GRAD_FLOOR` x the largest reference gradient, as in ``verify``
  (a gradient that is exactly zero in exact arithmetic would turn rounding into an enormous
  relative error);
- the largest absolute difference of each, kept in the result's info.

The reference is perfguard's own, not the guarded package's: code under review must not be able
to change what it is measured against.  It is the count-weighted softmax attention of the
implementation's declared pattern (``attention_pattern``, docs/design.md: a count of 0 hides a key,
2 counts it twice), computed in float64 **one head at a time**, in blocks of query rows over the key
columns they reach, with a hand-written backward that recomputes the probabilities: memory for one
block's scores, not for all heads (256 MiB of float64 per block of 2048 rows at 16K tokens).  A
multihead module's projections, sub-LayerNorm and output projection (the multihead contract) run
through autograd in float64 around it.  The causal reference is the same computation on the
declared *causal* pattern (``attention_pattern(..., is_causal=True)``): how causality applies to a
dilated pattern (inside each segment's kept positions) is the implementation's declared semantics,
exactly what ``verify`` checks a causal call against; there is no second, causal reference.
Implementations that compute the same function on the same inputs share one reference per process
(:mod:`perfguard.engine.reference_cache`: equal pattern, inputs and module, bit-identical values).

The distributed suite measures the same errors of the whole sequence spread over its ranks
(``group``): each rank computes its rows of the reference from every rank's keys and values
(:mod:`perfguard.engine.sequence_group`), and the norms add up over the ranks, so every rank
stores the same number, the error of the whole distributed call against the float64 reference.

Deterministic on the CPU (same seed, same inputs, same kernels).  A GPU kernel that is not
bit-deterministic moves the error by far less than the 2x a check gates on
(docs/perf/accuracy.md).
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from perfguard.engine import cases, guarded
from perfguard.engine.dilation import MODES, function_counts
from perfguard.engine.reference_cache import REFERENCES
from perfguard.engine.sequence_group import SequenceGroup
from perfguard.engine.suite import ACCURACY_TENSORS

#: The tensors whose error is measured, in the order of the suite's benchmarks.
TENSORS = ACCURACY_TENSORS
#: A gradient's denominator is at least this times the largest reference gradient (here and in
#: ``verify``): ∂/∂k of a query row with a single key is 0 in exact arithmetic (its softmax is
#: constant), and relative to 0 rounding noise would read as an enormous error.
GRAD_FLOOR = 1e-3


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


def measure(case: cases.Case, *, causal: bool = False, group: SequenceGroup | None = None) -> Errors:
    """The errors of ``case``'s module on its own inputs (an eager forward and backward).

    ``causal``: the module called with ``is_causal=True`` against the reference of its declared
    causal pattern (``attention_pattern(..., is_causal=True)``: how causality applies to a dilated
    pattern is the implementation's semantics, docs/design.md, as in ``verify``).  ``group``: the
    case is this rank's shard of a sequence spread over a torch.distributed group (the distributed
    suite); the reference is the whole sequence's, computed sharded (:func:`reference`), and the
    errors are the whole sequence's, the same number on every rank.
    """
    started = time.perf_counter()
    sharded = group is not None
    group = group or SequenceGroup(0, (case.seq_len,))
    if sharded and group.seq_len > MAX_SHARDED_LEN:
        raise cases.Unsupported(
            f"the float64 reference of {group.seq_len} tokens needs the declared ({group.seq_len} x "
            f"{group.seq_len}) pattern of every head: the distributed suite measures its error up to "
            f"{MAX_SHARDED_LEN} tokens (the distributed-quick profile; docs/perf/accuracy.md)"
        )
    module = case.module
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in case.inputs)
    grad_out = _grad_out(leaves[0], case.device, group if sharded else None)
    kwargs = {"is_causal": True} if causal else {}
    with torch.enable_grad():
        raw = module(*leaves, **kwargs)
        out = raw[0] if case.multihead else raw
        grads = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
    out = out.detach()
    counts = _pattern(case, causal, group.seq_len)
    density = float(counts.count_nonzero().item()) / counts.numel()
    rows = counts[:, group.start : group.end]

    compute = functools.partial(_computed, case, rows, grad_out, group)
    if sharded:  # every rank's rows of the whole sequence: computed with the other ranks, every time
        want = list(compute())
    else:  # equal reference inputs (pattern, inputs, module), one computation per process
        module_inputs = (case.module, case.multihead, case.inputs)
        want = list(REFERENCES.values(counts, *module_inputs, cases.GRAD_OUT_SEED, compute))
    del counts, rows, compute
    got = [out, *(g if g is not None else torch.zeros_like(w) for g, w in zip(grads, want[1:], strict=True))]
    norms = [_norms(x, r) for x, r in zip(got, want, strict=True)]
    diff, size, bad = (
        [n[0] for n in norms],
        [n[1] for n in norms],
        [n[3] for n in norms],
    )
    max_abs = [n[2] for n in norms]
    if group.world > 1:  # the whole sequence's norms: the squares add up over the ranks
        squares = group.sum([d * d for d in diff] + [s * s for s in size], case.device)
        diff, size = (
            [math.sqrt(v) for v in squares[: len(diff)]],
            [math.sqrt(v) for v in squares[len(diff) :]],
        )
        worst = group.max(max_abs + bad, case.device)
        max_abs, bad = worst[: len(max_abs)], worst[len(max_abs) :]
    # a gradient's denominator is at least GRAD_FLOOR x the largest reference gradient (see there)
    floor = GRAD_FLOOR * max(size[1:])
    relative, largest = {}, {}
    for i, name in enumerate(TENSORS):
        den = max(size[i], floor if i else 0.0)
        relative[name] = math.inf if bad[i] else (diff[i] / den if den > 0 else diff[i])
        largest[name] = max_abs[i]
    if case.device == "cuda":
        torch.cuda.synchronize()
    return Errors(relative, largest, time.perf_counter() - started, density)


#: The longest sequence whose float64 reference the distributed suite computes: the declared pattern
#: is one ``(heads, n, n)`` tensor before each rank keeps its rows (4 GiB of int32 per head at 32K
#: tokens).  The ``distributed`` profile's 128K-1M tokens are skipped with this reason.
MAX_SHARDED_LEN = cases.CPU_MAX_SEQ_LEN


def _computed(
    case: cases.Case, rows: torch.Tensor, grad_out: torch.Tensor, group: SequenceGroup
) -> tuple[torch.Tensor, ...]:
    """The float64 reference's output and input gradients of ``case`` on the pattern ``rows``."""
    ref_leaves = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in case.inputs)
    with torch.enable_grad():
        ref = reference(case.module, case.multihead, ref_leaves, rows, gather=group.gather)
        ref_grads = torch.autograd.grad(ref, ref_leaves, grad_out.to(torch.float64))
    return (ref.detach(), *ref_grads)


def _grad_out(like: torch.Tensor, device: str, group: SequenceGroup | None) -> torch.Tensor:
    """The output gradient: seeded like ``cases.Case.forward_backward``'s; in a group, this rank's
    rows of one drawn for the whole sequence (the same at every number of ranks)."""
    if group is None:
        return cases.seeded_grad_out(tuple(like.shape), like.dtype, device, cases.GRAD_OUT_SEED)
    [made] = group.randn(
        like.shape[0], tuple(like.shape[2:]), 1, seed=cases.GRAD_OUT_SEED, device=device, dtype=like.dtype
    )
    return made


def _norms(x: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float, float]:
    """``‖x − ref‖``, ``‖ref‖``, the largest ``|x − ref|`` and 1.0 if ``x`` is not finite, in float64."""
    diff = x.detach().to(torch.float64) - ref.detach().to(torch.float64)
    bad = 0.0 if bool(torch.isfinite(diff).all()) else 1.0
    largest = float(diff.abs().max().item()) if diff.numel() and not bad else math.inf if bad else 0.0
    return (
        float(torch.linalg.vector_norm(diff).item()),
        float(torch.linalg.vector_norm(ref.detach().to(torch.float64)).item()),
        largest,
        bad,
    )


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


def _pattern(case: cases.Case, causal: bool, n: int) -> torch.Tensor:
    """The declared pattern ``(heads, n, n)`` of the case's core for a sequence of ``n`` tokens
    (the case's own length, or the whole sequence of a distributed case), on the case's device."""
    core = _core(case)
    heads = case.module.num_heads if case.multihead else case.inputs[0].shape[2]
    if getattr(core, "attention_pattern", None) is None:
        what = guarded.computes(guarded.current().get(case.impl))
        if what in ("dense", *MODES):  # what verify's reference holds it to: the declared function
            return function_counts(what, n, heads, case.config, is_causal=causal, device=case.device)
        raise NoPattern(
            f"{type(core).__name__} has no attention_pattern and declares computes={what!r}: the accuracy "
            "benchmarks need the pattern the implementation computes (docs/design.md)"
        )
    counts = declared_pattern(core, n, causal=causal, num_heads=heads, device=case.device)
    if not isinstance(counts, torch.Tensor) or counts.shape != (heads, n, n):
        raise NoPattern(f"attention_pattern gave {type(counts).__name__}, not a ({heads}, {n}, {n}) tensor")
    return counts.to(case.device)


def reference(
    module: torch.nn.Module,
    multihead: bool,
    leaves: tuple[torch.Tensor, ...],
    counts: torch.Tensor,
    *,
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The float64 output of ``counts`` (the declared pattern) on ``leaves``, differentiable in them.

    Core modules: q, k, v ``(batch, n, heads, dim)``.  Multihead modules (the contract of
    docs/design.md: ``q_proj``, ``k_proj``, ``v_proj``, ``attention`` with ``softmax_scale``,
    ``norm`` or None, ``out_proj``, ``num_heads``): query, key, value ``(batch, n, embed_dim)``.
    ``leaves`` in float64; ``counts`` ``(heads, n, n)``, causal or not as the caller built it.

    Sharded (the distributed suite): ``leaves`` are this rank's rows of the sequence, ``counts``
    the pattern's rows of this rank's queries over every key ``(heads, rows, n)``, and ``gather``
    (:meth:`perfguard.engine.sequence_group.SequenceGroup.gather`) gives every rank's keys and values
    (after the projections): each rank computes its rows of the whole sequence's reference, and the
    gradients of its keys and values from every rank's queries.
    """
    gather = gather or (lambda x: x)
    core = getattr(module, "attention", None) if multihead else module
    scale = getattr(core, "softmax_scale", None)
    if not multihead:
        q, k, v = leaves
        return _HeadwiseAttention.apply(q, gather(k), gather(v), counts, scale)
    b, n, e = leaves[0].shape
    h = module.num_heads
    q = _linear(leaves[0], module.q_proj).view(b, n, h, e // h)
    k = gather(_linear(leaves[1], module.k_proj).view(b, n, h, e // h))
    v = gather(_linear(leaves[2], module.v_proj).view(b, n, h, e // h))
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


#: Query rows per block of the reference: a block reads only the key columns its rows' counts reach
#: (a causal pattern's blocks about half of them), and holds ``BLOCK_ROWS x n`` float64 scores.
BLOCK_ROWS = 2048


class Block(NamedTuple):
    """Query rows ``[r0, r1)`` of one head over key columns ``[c0, c1)``: from the first to the last
    key any row of the block counts (``c0 == c1``: no keys at all).  ``keyless``: which of the rows
    count no key (their softmax would be NaN: they get 0), None when every row has one."""

    r0: int
    r1: int
    c0: int
    c1: int
    keyless: torch.Tensor | None = None


def _blocks(counts: torch.Tensor) -> list[Block]:
    """One head's ``(m, n)`` counts cut into blocks of :data:`BLOCK_ROWS` query rows (:class:`Block`):
    two reads of the counts and one copy to the host, for the whole head."""
    m, n = counts.shape
    starts = list(range(0, m, BLOCK_ROWS))
    reached = torch.stack([counts[r0 : r0 + BLOCK_ROWS].amax(dim=0) > 0 for r0 in starts])
    cols = torch.arange(n, device=counts.device)
    first = torch.where(reached, cols, n).amin(dim=-1)
    last = torch.where(reached, cols, -1).amax(dim=-1) + 1
    has_keys = counts.amax(dim=1) > 0 if n else torch.zeros(m, dtype=torch.bool, device=counts.device)
    on_host = has_keys.cpu()
    blocks = []
    for r0, c0, c1 in zip(starts, first.tolist(), last.tolist(), strict=True):
        r1 = min(r0 + BLOCK_ROWS, m)
        keyless = None if bool(on_host[r0:r1].all()) else ~has_keys[r0:r1]
        blocks.append(Block(r0, r1, min(c0, c1), c1, keyless))
    return blocks


def _log_counts(counts: torch.Tensor) -> torch.Tensor:
    """``log c`` for every count value ``c`` in ``0..max(counts)`` in float64 (``log 0 = -inf``: a
    hidden key): a table that :func:`_probs` gathers from, instead of converting every count to
    float64 and taking its logarithm in each block (two passes over the scores fewer)."""
    low, top = (int(x) for x in torch.aminmax(counts)) if counts.numel() else (0, 0)
    if low < 0:  # a negative count would index the table from its end
        raise ValueError(f"the declared pattern has a negative count ({low}): counts are multiplicities")
    return torch.arange(top + 1, dtype=torch.float64, device=counts.device).log_()


class _HeadwiseAttention(torch.autograd.Function):
    """Count-weighted softmax attention in float64, one (batch, head) at a time, forward and backward.

    ``probs = c·exp(l) / Σ c·exp(l)`` over the keys with a positive count (the softmax of
    ``l + log c``); a query without keys gets 0.  The backward recomputes each head's
    probabilities instead of keeping them: memory is one block's scores, whatever the number of
    heads.  Each head runs in blocks of :data:`BLOCK_ROWS` query rows over the key columns their
    counts reach (:func:`_blocks`): the keys outside have a count of 0 in every row of the block,
    so the softmax over the rest is the same function (a causal pattern skips about half the
    scores).  q: ``(batch, m, heads, dim)``, k, v: ``(batch, n, heads, dim)`` float64 (``m < n``:
    a rank's queries over the whole sequence's keys); counts: ``(heads, m, n)``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, counts: torch.Tensor, scale: float | None
    ) -> torch.Tensor:
        scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        out = torch.zeros_like(q)
        blocks = [_blocks(counts[h]) for h in range(q.shape[2])]
        table = _log_counts(counts)
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                for block in blocks[h]:
                    r0, r1, c0, c1, _ = block
                    if c1 == c0:
                        continue
                    probs = _probs(q[b, r0:r1, h], k[b, c0:c1, h], counts[h], block, table, scale)
                    out[b, r0:r1, h] = probs @ v[b, c0:c1, h]
                    del probs
        ctx.save_for_backward(q, k, v, counts, out, table)
        ctx.scale, ctx.blocks = scale, blocks
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, counts, out, table = ctx.saved_tensors
        scale = ctx.scale
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                for block in ctx.blocks[h]:
                    r0, r1, c0, c1, _ = block
                    if c1 == c0:
                        continue
                    probs = _probs(q[b, r0:r1, h], k[b, c0:c1, h], counts[h], block, table, scale)
                    do = grad_out[b, r0:r1, h]
                    dv[b, c0:c1, h] += probs.T @ do
                    # softmax backward: dS = P ∘ (dP − rowsum(dO ∘ O)), in dP's memory
                    ds = (
                        (do @ v[b, c0:c1, h].T)
                        .sub_((do * out[b, r0:r1, h]).sum(-1, keepdim=True))
                        .mul_(probs)
                    )
                    del probs
                    dq[b, r0:r1, h] = scale * (ds @ k[b, c0:c1, h])
                    dk[b, c0:c1, h] += scale * (ds.T @ q[b, r0:r1, h])
                    del ds
        return dq, dk, dv, None, None


def _probs(
    q: torch.Tensor, k: torch.Tensor, counts: torch.Tensor, block: Block, table: torch.Tensor, scale: float
) -> torch.Tensor:
    """One block's ``(rows, keys)`` float64 probabilities (see :class:`_HeadwiseAttention`): the
    softmax of ``scale·q·kᵀ + log c``, the scaling and the table's ``log c`` (gathered by count)
    added in the matrix product's epilogue (one pass over the scores, not four)."""
    logits = torch.addmm(table[counts[block.r0 : block.r1, block.c0 : block.c1]], q, k.T, alpha=scale)
    probs = torch.softmax(logits, dim=-1)
    del logits
    if block.keyless is not None:  # a row whose keys are all hidden reads NaN above: 0 instead
        probs[block.keyless] = 0.0
    return probs


def relative_error(x: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    """``‖x − ref‖ / max(‖ref‖, floor)`` in float64; inf for a non-finite ``x`` (a zero
    reference compares absolutely).  ``floor``: see :data:`GRAD_FLOOR`."""
    diff = x.detach().to(torch.float64) - ref.detach().to(torch.float64)
    if not bool(torch.isfinite(diff).all()):
        return math.inf
    den = max(float(torch.linalg.vector_norm(ref.detach().to(torch.float64)).item()), floor)
    num = float(torch.linalg.vector_norm(diff).item())
    return num / den if den > 0 else num
