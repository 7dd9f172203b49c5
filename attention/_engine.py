"""The segment engine behind ``improved``, ``ring`` and ``hilbert_ring``.

It executes a :mod:`attention._plan` — dense, mask-free attention pieces over (query chunk, key
chunk) pairs, each a *strided view* of q, k and v (nothing is gathered) — with fused kernels that
return their log-sum-exp (:mod:`attention._kernels`), and merges every query chunk's pieces in one
pass (:mod:`attention._merge`: two Triton kernels on CUDA).  One chunk is ``improved``;
``ring_size`` chunks visited chunk-pair by chunk-pair is the single-device ring (a query chunk's
piece outputs live from its first pair to its last, so the attention intermediates are
O(n / ring_size)); with ``torch.distributed`` each rank holds one chunk and key/value chunks travel
around the ring.

Gradients are exact, mixture weights included: :class:`SegmentAttentionFunction` saves the
merged output and LSE and runs every piece's kernel backward on views of them (the ring-attention
identity, see :mod:`attention._kernels`); the pieces' dq, dk, dv are summed into the sequence
layout by :func:`attention._merge.sum_parts`.  In training with dropout the fused path cannot
replay the kernels' random masks, so :func:`differentiable_forward` computes the same pieces with
plain autograd ops and dropout on the probabilities (single device only).

Nothing here reads a tensor's values on the host or builds a tensor from host data: the plan is
pure Python integers, so a call launches a fixed sequence of kernels (CUDA-graph capturable, and
never waits for the GPU; tests/test_attention_sync.py checks it op by op).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from attention._kernel_selection import KernelSet
from attention._lse import attention_with_lse, compute_dtype
from attention._merge import merge_parts, sum_parts
from attention._part import Part
from attention._plan import Call, Piece, build_pieces, fold, split_call


@dataclass
class SegmentPlan:
    """Everything static about one call: configuration, chunking, visiting order, kernels."""

    seq_len: int
    num_heads: int
    segment_lengths: tuple[int, ...]
    dilation_rates: tuple[int, ...]
    mode: str
    bounds: tuple[tuple[int, int], ...]
    pairs: tuple[tuple[int, int], ...]  # visiting order of (query chunk, key chunk)
    is_causal: bool
    scale: float
    kernels: KernelSet
    # at most this many query rows (B · H' · lq) per kernel call; None: one call per folded piece
    # (the one-device engines); the sequence-parallel ring bounds it (attention._plan.split_call)
    max_call_rows: int | None = None
    _pieces: dict[tuple[int, int], list[Piece]] = field(default_factory=dict)
    _calls: dict[tuple, list[Call]] = field(default_factory=dict)

    def pieces(self, q_chunk: int, k_chunk: int) -> list[Piece]:
        key = (q_chunk, k_chunk)
        if key not in self._pieces:
            self._pieces[key] = build_pieces(
                seq_len=self.seq_len,
                num_heads=self.num_heads,
                segment_lengths=self.segment_lengths,
                dilation_rates=self.dilation_rates,
                mode=self.mode,
                bounds=self.bounds,
                q_chunk=q_chunk,
                k_chunk=k_chunk,
                is_causal=self.is_causal,
            )
        return self._pieces[key]

    def calls(self, piece: Piece, batch: int, q_batch_rows: int, k_batch_rows: int) -> list[Call]:
        key = (id(piece), batch, q_batch_rows, k_batch_rows)
        if key not in self._calls:
            calls = fold(piece, batch, q_batch_rows, k_batch_rows)
            if self.max_call_rows is not None:
                calls = [sub for call in calls for sub in split_call(call, piece.lq, self.max_call_rows)]
            self._calls[key] = calls
        return self._calls[key]


class PlanCache:
    """A small LRU of plans per module."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._plans: OrderedDict[tuple, SegmentPlan] = OrderedDict()

    def get(self, key: tuple, build) -> SegmentPlan:
        plan = self._plans.get(key)
        if plan is None:
            plan = build()
            self._plans[key] = plan
            if len(self._plans) > self.size:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan


# --------------------------------------------------------------------------------------------
# views
# --------------------------------------------------------------------------------------------
def _view(
    x: torch.Tensor, offset: int, sizes: tuple[int, int], strides: tuple[int, int], length: int, t_stride: int
):
    """Rows ``offset + i·strides[0] + j·strides[1] + t·t_stride`` of a contiguous ``(b, L, H[, d])``
    tensor as a ``(B, H', length[, d])`` view (no copy)."""
    if x.dim() == 4:
        d = x.shape[-1]
        return x.as_strided(
            (*sizes, length, d),
            (strides[0] * d, strides[1] * d, t_stride * d, 1),
            x.storage_offset() + offset * d,
        )
    return x.as_strided((*sizes, length), (strides[0], strides[1], t_stride), x.storage_offset() + offset)


def _q_part(values, lse, call: Call, piece: Piece) -> Part:
    return Part(values, lse, call.q_offset, (*call.sizes, piece.lq), (*call.q_strides, piece.t_stride))


def key_part(values, call: Call, piece: Piece) -> Part:
    return Part(values, None, call.k_offset, (*call.sizes, piece.lk), (*call.k_strides, piece.t_stride))


def chunk(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Positions [lo, hi) of a (b, L, ...) tensor, contiguous (a view when batch is 1 or the chunk
    is everything, else a copy)."""
    part = x[:, lo:hi]
    return part if part.is_contiguous() else part.contiguous()


def sum_into_rows(parts: list[Part], dest: torch.Tensor, lo: int, hi: int) -> None:
    """Add the parts (geometry relative to positions [lo, hi)) into those rows of ``dest`` (a view
    when batch is 1; with batch > 1 and several chunks a copy, written back)."""
    view = dest[:, lo:hi]
    rows = view if view.is_contiguous() else view.contiguous()
    sum_parts(parts, rows, accumulate=True)
    if rows is not view:
        view.copy_(rows)


# --------------------------------------------------------------------------------------------
# concurrent kernel calls
# --------------------------------------------------------------------------------------------
_SIDE_STREAMS: dict[int, list] = {}  # per CUDA device index, created on first use, then reused


def concurrent_streams(device: torch.device) -> int:
    """How many CUDA streams a chunk pair's kernel calls are spread over (``ATTENTION_STREAMS``,
    default 4; 1 runs them one after another; always 1 off CUDA).

    Why: the calls are independent, and the short ones (a branch of few segments, an offset group)
    fill a fraction of an H100's SMs with a partial last wave; on several streams their waves and
    launch gaps overlap (docs/perf/attention.md).  The streams fork from the caller's stream and
    join it before the merge, so the calls stay ordered with everything around them, in eager
    mode and inside a CUDA graph capture alike.
    """
    raw = os.environ.get("ATTENTION_STREAMS", "4")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"ATTENTION_STREAMS must be a positive integer, got {raw!r}")
    return int(raw) if device.type == "cuda" else 1


def _side_streams(device: torch.device, n: int) -> list:
    index = device.index if device.index is not None else torch.cuda.current_device()
    streams = _SIDE_STREAMS.setdefault(index, [])
    while len(streams) < n:
        streams.append(torch.cuda.Stream(device=index))
    return streams[:n]


@contextlib.contextmanager
def spread(device: torch.device, calls: int) -> Iterator:
    """Yield ``on(i)``, a context that runs call ``i`` on its stream.

    Every side stream first waits for the caller's stream (so it sees q, k, v, and a block freed
    to its pool by the caller is only reused after the caller's earlier work), and the caller's
    stream waits for every side stream at the end (so what the calls wrote is complete before it
    is read).
    """
    n = min(concurrent_streams(device), calls)
    if n <= 1:
        yield lambda i: contextlib.nullcontext()
        return
    main = torch.cuda.current_stream(device)
    side = _side_streams(device, n)
    for stream in side:
        stream.wait_stream(main)
    try:
        yield lambda i: torch.cuda.stream(side[i % n])
    finally:
        for stream in side:
            main.wait_stream(stream)


# --------------------------------------------------------------------------------------------
# pieces of one chunk pair
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PackedKeys:
    """A key chunk given as the rows its calls read, not as a tensor: the chunk's length and each
    call's ``(k, v)`` of shape ``(B, H', lk, d)``, in :func:`piece_calls` order (the distributed
    ring sends a rank only the key/value rows its pieces read, packed; :mod:`attention._distributed`)."""

    length: int
    views: Sequence[tuple[torch.Tensor, torch.Tensor]]


def piece_calls(
    plan: SegmentPlan, pieces: Sequence[Piece], batch: int, q_len: int, k_len: int, heads: int
) -> list[tuple[Piece, Call]]:
    """The kernel calls of ``pieces`` for a ``(batch, q_len, heads, ·)`` query chunk and a
    ``(batch, k_len, heads, ·)`` key chunk, in the order the runs below make them."""
    return [(p, call) for p in pieces for call in plan.calls(p, batch, q_len * heads, k_len * heads)]


def key_view(x: torch.Tensor, piece: Piece, call: Call) -> torch.Tensor:
    """The ``(B, H', lk, d)`` view of the key (or value) chunk ``x`` that ``call`` of ``piece`` reads."""
    return _view(x, call.k_offset, call.sizes, call.k_strides, piece.lk, piece.t_stride)


def _calls_and_keys(
    plan: SegmentPlan, pieces: Sequence[Piece], qc: torch.Tensor, kc, vc, which: slice = slice(None)
) -> list:
    """(piece, call, k view, v view) of the calls ``which`` picks (all by default); ``kc`` a chunk
    tensor or :class:`PackedKeys` (holding the views of the picked calls only)."""
    b, lq, h = qc.shape[0], qc.shape[1], qc.shape[2]
    if isinstance(kc, PackedKeys):
        calls = piece_calls(plan, pieces, b, lq, kc.length, h)[which]
        return [(p, call, *kv) for (p, call), kv in zip(calls, kc.views, strict=True)]
    return [
        (p, call, key_view(kc, p, call), key_view(vc, p, call))
        for p, call in piece_calls(plan, pieces, b, lq, kc.shape[1], h)[which]
    ]


def run_pieces_forward(
    plan: SegmentPlan,
    pieces: Sequence[Piece],
    qc: torch.Tensor,
    kc,
    vc: torch.Tensor | None,
    which: slice = slice(None),
) -> tuple[list[Part], list]:
    """Every piece's kernel (or the calls ``which`` picks) on views of the contiguous chunks
    (``kc`` may be :class:`PackedKeys`, ``vc`` then None): the parts to merge, and each call's
    by-products (sequence metadata, RNG state) for its backward."""
    parts, auxes = [], []
    calls = _calls_and_keys(plan, pieces, qc, kc, vc, which)
    with spread(qc.device, len(calls)) as on:
        for i, (piece, call, kv, vv) in enumerate(calls):
            qv = _view(qc, call.q_offset, call.sizes, call.q_strides, piece.lq, piece.t_stride)
            with on(i):
                out, lse, aux = plan.kernels.forward(qv, kv, vv, piece.causal, plan.scale)
            parts.append(_q_part(out, lse, call, piece))
            auxes.append(aux)
    return parts, auxes


def run_pieces_backward(
    plan: SegmentPlan,
    pieces: Sequence[Piece],
    qc: torch.Tensor,
    kc,
    vc: torch.Tensor | None,
    oc: torch.Tensor,
    lc: torch.Tensor,
    doc: torch.Tensor,
    auxes: Sequence,
    which: slice = slice(None),
) -> tuple[list[Part], list[Part], list[Part]]:
    """Every piece's kernel backward (or the calls ``which`` picks, ``auxes`` theirs) with the
    *merged* output and LSE: dq, dk, dv parts (``kc`` as in :func:`run_pieces_forward`; the dk, dv
    parts' values are the calls' ``(B, H', lk, d)`` results, their geometry that of the key chunk)."""
    dq, dk, dv = [], [], []
    calls = _calls_and_keys(plan, pieces, qc, kc, vc, which)
    with spread(qc.device, len(calls)) as on:
        for i, ((piece, call, kv, vv), aux) in enumerate(zip(calls, auxes, strict=True)):
            geo_q = (call.q_offset, call.sizes, call.q_strides, piece.lq, piece.t_stride)
            with on(i):
                g = plan.kernels.backward(
                    _view(doc, *geo_q),
                    _view(qc, *geo_q),
                    kv,
                    vv,
                    _view(oc, *geo_q),
                    _view(lc, *geo_q).contiguous(),
                    aux,
                    piece.causal,
                    plan.scale,
                )
            dq.append(_q_part(g[0], None, call, piece))
            dk.append(key_part(g[1], call, piece))
            dv.append(key_part(g[2], call, piece))
    return dq, dk, dv


# --------------------------------------------------------------------------------------------
# forward / backward on one device (any visiting order)
# --------------------------------------------------------------------------------------------
class SegmentAttentionFunction(torch.autograd.Function):
    """Single-device engine: forward merges pieces, backward replays them with merged O and LSE."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        need_lse = any(ctx.needs_input_grad[:3])
        out, lse, auxes = single_device_forward(plan, q, k, v, keep_lse=need_lse)
        ctx.plan = plan
        ctx.auxes = auxes
        if need_lse:
            ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = single_device_backward(ctx.plan, q, k, v, out, lse, dout, ctx.auxes)
        return dq, dk, dv, None


def single_device_forward(
    plan: SegmentPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, keep_lse: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """Visit ``plan.pairs`` in order; a query chunk's parts are merged after its last pair.

    Returns the output, the merged LSE ``(b, n, h)`` (None unless ``keep_lse``: without gradients
    only one chunk's LSE is alive at a time) and the kernels' by-products per pair.
    """
    b, n, h, _ = q.shape
    cd = compute_dtype(q.dtype)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((b, n, h), dtype=cd, device=q.device) if keep_lse else None
    remaining: dict[int, int] = {}
    for a, _ in plan.pairs:
        remaining[a] = remaining.get(a, 0) + 1
    open_parts: dict[int, list[Part]] = {}
    auxes: dict[tuple[int, int], list] = {}
    for a, c in plan.pairs:
        (a0, a1), (c0, c1) = plan.bounds[a], plan.bounds[c]
        parts = open_parts.setdefault(a, [])
        pieces = plan.pieces(a, c)
        if pieces:
            new, auxes[(a, c)] = run_pieces_forward(
                plan, pieces, chunk(q, a0, a1), chunk(k, c0, c1), chunk(v, c0, c1)
            )
            parts.extend(new)
        remaining[a] -= 1
        if remaining[a] == 0:
            dest = out[:, a0:a1]
            dest_lse = lse[:, a0:a1] if lse is not None else None
            if dest.is_contiguous() and (dest_lse is None or dest_lse.is_contiguous()):
                merge_parts(
                    parts, dest, dest_lse if dest_lse is not None else _chunk_lse(b, a1 - a0, h, cd, q)
                )
            else:  # batch > 1 with several chunks: merge into contiguous buffers, then copy
                tmp, tmp_lse = (
                    torch.empty_like(dest, memory_format=torch.contiguous_format),
                    _chunk_lse(b, a1 - a0, h, cd, q),
                )
                merge_parts(parts, tmp, tmp_lse)
                dest.copy_(tmp)
                if dest_lse is not None:
                    dest_lse.copy_(tmp_lse)
            del open_parts[a]
    return out, lse, auxes


def _chunk_lse(b: int, length: int, h: int, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    return torch.empty((b, length, h), dtype=dtype, device=like.device)


def single_device_backward(
    plan: SegmentPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    auxes: dict,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dout = dout.contiguous()
    if len(plan.bounds) == 1:  # one chunk: every part summed straight into the gradients
        parts = run_pieces_backward(plan, plan.pieces(0, 0), q, k, v, out, lse, dout, auxes.get((0, 0), []))
        grads = []
        for x, ps in zip((q, k, v), parts, strict=True):
            g = torch.empty_like(x)
            sum_parts(ps, g)
            grads.append(g)
        return grads[0], grads[1], grads[2]
    cd = compute_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=cd, device=q.device)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(dq)
    for a, c in plan.pairs:
        pieces = plan.pieces(a, c)
        if not pieces:
            continue
        (a0, a1), (c0, c1) = plan.bounds[a], plan.bounds[c]
        dq_p, dk_p, dv_p = run_pieces_backward(
            plan,
            pieces,
            chunk(q, a0, a1),
            chunk(k, c0, c1),
            chunk(v, c0, c1),
            chunk(out, a0, a1),
            chunk(lse, a0, a1),
            chunk(dout, a0, a1),
            auxes[(a, c)],
        )
        for dest, ps, (lo, hi) in ((dq, dq_p, (a0, a1)), (dk, dk_p, (c0, c1)), (dv, dv_p, (c0, c1))):
            sum_into_rows(ps, dest, lo, hi)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _rows_index(part: Part, device: torch.device) -> torch.Tensor:
    """Destination rows of every (i, j, t) of a part, built on the device with arange (no host data)."""
    idx = torch.full((1, 1, 1), part.offset, dtype=torch.int64, device=device)
    for dim, (size, stride) in enumerate(zip(part.sizes, part.strides, strict=True)):
        shape = [1, 1, 1]
        shape[dim] = size
        idx = idx + torch.arange(size, device=device).view(shape) * stride
    return idx.reshape(-1)


def differentiable_forward(
    plan: SegmentPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float
) -> torch.Tensor:
    """The same pieces with plain autograd ops (used in training with dropout > 0).

    Uses the one-chunk pieces of the sequence (the function does not depend on the chunking);
    every piece's partial output and LSE is scattered into the global (batch, position, head)
    rows and merged with a scatter log-sum-exp, all differentiable; rows no branch keeps stay 0.
    """
    b, n, h, d = q.shape
    cd = compute_dtype(q.dtype)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    pieces = build_pieces(
        seq_len=n,
        num_heads=h,
        segment_lengths=plan.segment_lengths,
        dilation_rates=plan.dilation_rates,
        mode=plan.mode,
        bounds=((0, n),),
        q_chunk=0,
        k_chunk=0,
        is_causal=plan.is_causal,
    )
    outs, lses, rows = [], [], []
    for piece in pieces:
        for call in fold(piece, b, n * h, n * h):
            geo_q = (call.q_offset, call.sizes, call.q_strides, piece.lq, piece.t_stride)
            geo_k = (call.k_offset, call.sizes, call.k_strides, piece.lk, piece.t_stride)
            o, lse = attention_with_lse(
                _view(q, *geo_q),
                _view(k, *geo_k),
                _view(v, *geo_k),
                scale=plan.scale,
                causal=piece.causal,
                dropout_p=dropout_p,
            )
            outs.append(o.reshape(-1, d))
            lses.append(lse.reshape(-1))
            rows.append(_rows_index(_q_part(o, lse, call, piece), q.device))
    if not outs:
        return torch.zeros_like(q)
    out_all, lse_all, idx = torch.cat(outs), torch.cat(lses), torch.cat(rows)
    total = b * n * h
    top = torch.full((total,), -math.inf, dtype=cd, device=q.device)
    top = top.scatter_reduce(0, idx, lse_all.detach(), reduce="amax").index_select(0, idx)
    weight = torch.exp(lse_all - top)
    denom = torch.zeros(total, dtype=cd, device=q.device).index_add(0, idx, weight)
    numer = torch.zeros(total, d, dtype=cd, device=q.device).index_add(0, idx, weight.unsqueeze(-1) * out_all)
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return (numer / safe.unsqueeze(-1)).view(b, n, h, d).to(q.dtype)
