"""The segment engine behind ``improved``, ``ring`` and ``hilbert_ring``.

It executes a :mod:`attention._plan` — dense, mask-free attention pieces over (query chunk, key
chunk) pairs — with fused kernels that return their log-sum-exp (:mod:`attention._kernels`), and
merges the pieces into each query chunk's accumulator with the online-softmax update.  One chunk
is ``improved``; ``ring_size`` chunks visited chunk-pair by chunk-pair is the single-device ring
(only one query chunk's accumulator and one pair's gathered tensors are alive at a time, so the
attention intermediates are O(n / ring_size)); with ``torch.distributed`` each rank holds one
chunk and key/value chunks travel around the ring.

Gradients are exact, mixture weights included: :class:`SegmentAttentionFunction` saves the
merged output and LSE and runs every piece's kernel backward with them (the ring-attention
identity, see :mod:`attention._kernels`), scatter-adding dq, dk, dv.  In training with dropout the
fused path cannot replay the kernels' random masks, so :func:`differentiable_forward` computes the
same pieces with plain autograd ops and dropout on the probabilities (single device only).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from attention._kernels import KernelSet
from attention._lse import attention_with_lse, compute_dtype, merge_into
from attention._plan import Piece, build_pieces


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
    device: torch.device
    _pieces: dict[tuple[int, int], list[Piece]] = field(default_factory=dict)

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
                device=self.device,
            )
        return self._pieces[key]


class PlanCache:
    """A small LRU of plans per module (plans hold index tensors on the device)."""

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
# gathering helpers
# --------------------------------------------------------------------------------------------
def _rows(x: torch.Tensor) -> torch.Tensor:
    """(b, L, h, d) chunk -> (b, L*h, d) view of flat rows (no copy for slices of contiguous tensors)."""
    b, L, h, d = x.shape
    return x.reshape(b, L * h, d)


def _gather(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Flat rows (b, R, d) at ``index (P, hp, m)`` -> kernel layout (b*P, hp, m, d), contiguous."""
    b, _, d = rows.shape
    p, hp, m = index.shape
    return rows.index_select(1, index.reshape(-1)).view(b * p, hp, m, d)


def _gather_lse(lse_rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    b = lse_rows.shape[0]
    p, hp, m = index.shape
    return lse_rows.index_select(1, index.reshape(-1)).view(b * p, hp, m)


def _flat(x: torch.Tensor, b: int) -> torch.Tensor:
    """Kernel layout (b*P, hp, m, ...) -> flat rows (b, P*hp*m, ...)."""
    return x.reshape(b, -1, *x.shape[3:]) if x.dim() == 4 else x.reshape(b, -1)


# --------------------------------------------------------------------------------------------
# forward / backward on one device (any visiting order)
# --------------------------------------------------------------------------------------------
def _run_pieces_forward(
    plan: SegmentPlan,
    pieces: Sequence[Piece],
    q_rows: torch.Tensor,
    k_rows: torch.Tensor,
    v_rows: torch.Tensor,
    acc: torch.Tensor,
    acc_lse: torch.Tensor,
    fresh: list[bool],
) -> list:
    """Run pieces, merge them into their query chunk's (b, L*h, d) accumulator in place.

    Returns each kernel's by-products (sequence metadata, RNG state) for its backward.
    """
    b = q_rows.shape[0]
    auxes = []
    for piece in pieces:
        out, lse, aux = plan.kernels.forward(
            _gather(q_rows, piece.q_index),
            _gather(k_rows, piece.k_index),
            _gather(v_rows, piece.k_index),
            piece.causal,
            plan.scale,
        )
        idx = piece.q_index.reshape(-1)
        out_f = _flat(out, b).to(acc.dtype)
        lse_f = _flat(lse, b).to(acc_lse.dtype)
        if fresh[0]:
            # first piece of this accumulator touches each of its rows once: plain write
            acc.index_copy_(1, idx, out_f)
            acc_lse.index_copy_(1, idx, lse_f)
        else:
            merged, merged_lse = merge_into(
                acc.index_select(1, idx), acc_lse.index_select(1, idx), out_f, lse_f
            )
            acc.index_copy_(1, idx, merged)
            acc_lse.index_copy_(1, idx, merged_lse)
        fresh[0] = False
        auxes.append(aux)
    return auxes


def _run_pieces_backward(
    plan: SegmentPlan,
    pieces: Sequence[Piece],
    q_rows: torch.Tensor,
    k_rows: torch.Tensor,
    v_rows: torch.Tensor,
    out_rows: torch.Tensor,
    lse_rows: torch.Tensor,
    dout_rows: torch.Tensor,
    dq_rows: torch.Tensor,
    dk_rows: torch.Tensor,
    dv_rows: torch.Tensor,
    auxes: Sequence,
) -> None:
    b = q_rows.shape[0]
    for piece, aux in zip(pieces, auxes, strict=True):
        qg = _gather(q_rows, piece.q_index)
        kg = _gather(k_rows, piece.k_index)
        vg = _gather(v_rows, piece.k_index)
        og = _gather(out_rows, piece.q_index)
        dog = _gather(dout_rows, piece.q_index)
        lg = _gather_lse(lse_rows, piece.q_index)
        dq, dk, dv = plan.kernels.backward(dog, qg, kg, vg, og, lg, aux, piece.causal, plan.scale)
        qi, ki = piece.q_index.reshape(-1), piece.k_index.reshape(-1)
        dq_rows.index_add_(1, qi, _flat(dq, b).to(dq_rows.dtype))
        dk_rows.index_add_(1, ki, _flat(dk, b).to(dk_rows.dtype))
        dv_rows.index_add_(1, ki, _flat(dv, b).to(dv_rows.dtype))


class SegmentAttentionFunction(torch.autograd.Function):
    """Single-device engine: forward merges pieces, backward replays them with merged O and LSE."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: SegmentPlan) -> torch.Tensor:
        out, lse, auxes = single_device_forward(plan, q, k, v)
        ctx.plan = plan
        ctx.auxes = auxes
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout: torch.Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = single_device_backward(ctx.plan, q, k, v, out, lse, dout, ctx.auxes)
        return dq, dk, dv, None


def single_device_forward(
    plan: SegmentPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Visit ``plan.pairs`` in order; a query chunk's accumulator lives from its first pair to its last.

    Returns the output, the merged LSE ``(b, n, h)`` and the kernels' by-products per pair.
    """
    b, n, h, d = q.shape
    cd = compute_dtype(q.dtype)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.zeros_like(q)
    lse = torch.full((b, n, h), -math.inf, dtype=cd, device=q.device)
    remaining: dict[int, int] = {}
    for a, _ in plan.pairs:
        remaining[a] = remaining.get(a, 0) + 1
    accs: dict[int, tuple[torch.Tensor, torch.Tensor, list[bool]]] = {}
    auxes: dict[tuple[int, int], list] = {}
    for a, c in plan.pairs:
        (a0, a1), (c0, c1) = plan.bounds[a], plan.bounds[c]
        if a not in accs:
            la = a1 - a0
            accs[a] = (
                torch.zeros(b, la * h, d, dtype=cd, device=q.device),
                torch.full((b, la * h), -math.inf, dtype=cd, device=q.device),
                [True],
            )
        acc, acc_lse, fresh = accs[a]
        pieces = plan.pieces(a, c)
        if pieces:
            auxes[(a, c)] = _run_pieces_forward(
                plan, pieces, _rows(q[:, a0:a1]), _rows(k[:, c0:c1]), _rows(v[:, c0:c1]), acc, acc_lse, fresh
            )
        remaining[a] -= 1
        if remaining[a] == 0:
            la = a1 - a0
            out[:, a0:a1] = acc.view(b, la, h, d).to(q.dtype)
            lse[:, a0:a1] = acc_lse.view(b, la, h)
            del accs[a]
    return out, lse, auxes


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
    cd = compute_dtype(q.dtype)
    dout = dout.contiguous()
    dq = torch.zeros(q.shape, dtype=cd, device=q.device)
    dk = torch.zeros_like(dq)
    dv = torch.zeros_like(dq)
    b = q.shape[0]
    for a, c in plan.pairs:
        pieces = plan.pieces(a, c)
        if not pieces:
            continue
        (a0, a1), (c0, c1) = plan.bounds[a], plan.bounds[c]
        _run_pieces_backward(
            plan,
            pieces,
            _rows(q[:, a0:a1]),
            _rows(k[:, c0:c1]),
            _rows(v[:, c0:c1]),
            _rows(out[:, a0:a1]),
            lse[:, a0:a1].reshape(b, -1),
            _rows(dout[:, a0:a1]),
            _rows(dq[:, a0:a1]),
            _rows(dk[:, c0:c1]),
            _rows(dv[:, c0:c1]),
            auxes[(a, c)],
        )
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def differentiable_forward(
    plan: SegmentPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float
) -> torch.Tensor:
    """The same pieces with plain autograd ops (used in training with dropout > 0).

    Every piece's partial output and LSE is scattered into global (position, head) rows and merged
    with a scatter log-sum-exp, all differentiable; rows no branch keeps stay 0.
    """
    b, n, h, d = q.shape
    cd = compute_dtype(q.dtype)
    outs, lses, rows = [], [], []
    for a, c in plan.pairs:
        (a0, a1), (c0, c1) = plan.bounds[a], plan.bounds[c]
        qr, kr, vr = _rows(q[:, a0:a1]), _rows(k[:, c0:c1]), _rows(v[:, c0:c1])
        for piece in plan.pieces(a, c):
            o, lse = attention_with_lse(
                _gather(qr, piece.q_index),
                _gather(kr, piece.k_index),
                _gather(vr, piece.k_index),
                scale=plan.scale,
                causal=piece.causal,
                dropout_p=dropout_p,
            )
            outs.append(_flat(o, b))
            lses.append(_flat(lse, b))
            rows.append(piece.q_index.reshape(-1) + a0 * h)
    if not outs:
        return torch.zeros_like(q)
    out_all, lse_all, idx = torch.cat(outs, 1), torch.cat(lses, 1), torch.cat(rows)
    top = torch.full((b, n * h), -math.inf, dtype=cd, device=q.device)
    top = top.scatter_reduce(1, idx.expand(b, -1), lse_all.detach(), reduce="amax").index_select(1, idx)
    weight = torch.exp(lse_all - top)
    denom = torch.zeros(b, n * h, dtype=cd, device=q.device).index_add(1, idx, weight)
    numer = torch.zeros(b, n * h, d, dtype=cd, device=q.device).index_add(
        1, idx, weight.unsqueeze(-1) * out_all
    )
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return (numer / safe.unsqueeze(-1)).view(b, n, h, d).to(q.dtype)
