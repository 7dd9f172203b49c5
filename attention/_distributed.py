"""The ring across ranks: each rank holds one contiguous chunk of q, k and v.

Rank ``a`` computes the output rows of its own chunk.  At step ``s`` it holds the key/value chunk
of rank ``a − s`` (mod world size); while it attends to it, that chunk is already travelling on to
rank ``a + 1`` and the next one arriving from rank ``a − 1`` (``dist.batch_isend_irecv``; gloo on
CPU, NCCL on GPU).  Every rank runs the same number of steps: the largest chunk distance at which
any segment of any branch still connects two chunks (dilated attention is local to segments, so
when the largest segment fits in a chunk no key/value ever has to move).  Causal pairs whose key
chunk lies entirely after the query chunk are skipped (the chunk is still forwarded).

Backward: the same ring runs again; each key/value chunk travels with its gradient accumulators
(dk, dv), every rank adds its contribution, and after the last step one exchange sends each
accumulated dk/dv back to the rank that owns the chunk.  Gradients are exact (each piece's kernel
backward runs with the merged output and LSE, as on one device).  Dropout in training is not
supported across ranks (``NotImplementedError``).

Chunks may have different lengths (the sequence need not divide by the world size): lengths are
all-gathered once per forward, which is the only host synchronisation of the distributed path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from attention._engine import SegmentPlan, run_pieces_backward, run_pieces_forward
from attention._lse import compute_dtype
from attention._merge import merge_parts, sum_parts


def gather_shapes(q: torch.Tensor, group) -> list[tuple[int, int, int, int]]:
    """(batch, local_len, heads, head_dim) of every rank; ranks must agree on all but local_len."""
    world = dist.get_world_size(group)
    mine = torch.tensor(list(q.shape), dtype=torch.int64, device=q.device)
    allt = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(allt, mine, group=group)
    shapes = [tuple(int(x) for x in t.tolist()) for t in allt]
    ref = shapes[0]
    for r, s in enumerate(shapes):
        if (s[0], s[2], s[3]) != (ref[0], ref[2], ref[3]):
            raise ValueError(
                f"ring ranks disagree on (batch, num_heads, head_dim): rank 0 has {ref}, rank {r} has {s}; "
                "only the sequence dimension may differ between shards"
            )
        if s[1] <= 0:
            raise ValueError(f"rank {r} holds an empty shard {s}; every rank needs at least one position")
    return shapes


def chunks_connected(
    bounds: Sequence[tuple[int, int]], a: int, c: int, segment_lengths: Sequence[int], is_causal: bool
) -> bool:
    """Whether some segment of some branch spans both chunk ``a`` (queries) and ``c`` (keys)."""
    (qa0, qa1), (kc0, kc1) = bounds[a], bounds[c]
    if is_causal and kc0 >= qa1:
        return False
    return any(max(qa0 // w, kc0 // w) <= min((qa1 - 1) // w, (kc1 - 1) // w) for w in segment_lengths)


def ring_steps(bounds: Sequence[tuple[int, int]], segment_lengths: Sequence[int], is_causal: bool) -> int:
    """1 + the largest ring distance (a − c mod world) of a connected chunk pair, same on every rank."""
    world = len(bounds)
    far = 0
    for a in range(world):
        for c in range(world):
            if c != a and chunks_connected(bounds, a, c, segment_lengths, is_causal):
                far = max(far, (a - c) % world)
    return far + 1


def _peer(group, rank_in_group: int) -> int:
    return dist.get_global_rank(group, rank_in_group) if group is not None else rank_in_group


def _exchange(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], to: int, frm: int, group) -> list:
    """Send each ``send`` to rank ``to`` and receive each ``recv`` from rank ``frm``, in one batch."""
    ops = []
    for send, recv in pairs:
        ops.append(dist.P2POp(dist.isend, send, _peer(group, to), group))
        ops.append(dist.P2POp(dist.irecv, recv, _peer(group, frm), group))
    return dist.batch_isend_irecv(ops)


class DistributedRingFunction(torch.autograd.Function):
    """Sequence-parallel ring attention over the ranks of ``group`` (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, plan: SegmentPlan, group, steps: int):
        world, a = dist.get_world_size(group), dist.get_rank(group)
        b, la, h, d = q.shape
        cd = compute_dtype(q.dtype)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        parts = []
        auxes: dict[int, list] = {}
        kv = torch.cat([k.reshape(-1), v.reshape(-1)])
        for s in range(steps):
            c = (a - s) % world
            reqs, nxt = [], None
            if s < steps - 1:
                lc = plan.bounds[(a - s - 1) % world]
                nxt = torch.empty(2 * b * (lc[1] - lc[0]) * h * d, dtype=q.dtype, device=q.device)
                reqs = _exchange([(kv, nxt)], (a + 1) % world, (a - 1) % world, group)
            pieces = plan.pieces(a, c)
            if pieces:
                lc_len = plan.bounds[c][1] - plan.bounds[c][0]
                kc, vc = kv.view(2, b, lc_len, h, d).unbind(0)
                new, auxes[c] = run_pieces_forward(plan, pieces, q, kc, vc)
                parts.extend(new)
            for r in reqs:
                r.wait()
            if nxt is not None:
                kv = nxt
        out = torch.empty_like(q)
        lse = torch.empty((b, la, h), dtype=cd, device=q.device)
        merge_parts(parts, out, lse)
        ctx.plan, ctx.group, ctx.steps, ctx.auxes = plan, group, steps, auxes
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        plan, group, steps = ctx.plan, ctx.group, ctx.steps
        world, a = dist.get_world_size(group), dist.get_rank(group)
        b, la, h, d = q.shape
        cd = compute_dtype(q.dtype)
        dout = dout.contiguous()
        dq = torch.zeros(b, la, h, d, dtype=cd, device=q.device)
        kv = torch.cat([k.reshape(-1), v.reshape(-1)])
        dkv = torch.zeros(kv.numel(), dtype=cd, device=q.device)
        for s in range(steps):
            c = (a - s) % world
            lc_len = plan.bounds[c][1] - plan.bounds[c][0]
            pieces = plan.pieces(a, c)
            if pieces:
                kc, vc = kv.view(2, b, lc_len, h, d).unbind(0)
                dkc, dvc = dkv.view(2, b, lc_len, h, d).unbind(0)
                dq_p, dk_p, dv_p = run_pieces_backward(plan, pieces, q, kc, vc, out, lse, dout, ctx.auxes[c])
                sum_parts(dq_p, dq, accumulate=True)
                sum_parts(dk_p, dkc, accumulate=True)
                sum_parts(dv_p, dvc, accumulate=True)
            if s < steps - 1:
                nc = plan.bounds[(a - s - 1) % world]
                size = 2 * b * (nc[1] - nc[0]) * h * d
                nxt_kv = torch.empty(size, dtype=q.dtype, device=q.device)
                nxt_dkv = torch.empty(size, dtype=cd, device=q.device)
                reqs = _exchange([(kv, nxt_kv), (dkv, nxt_dkv)], (a + 1) % world, (a - 1) % world, group)
                for r in reqs:
                    r.wait()
                kv, dkv = nxt_kv, nxt_dkv
        if steps > 1:
            # the accumulated dk/dv of chunk (a − steps + 1) is here; send it home, receive ours
            mine = torch.empty(2 * b * la * h * d, dtype=cd, device=q.device)
            for r in _exchange([(dkv, mine)], (a - steps + 1) % world, (a + steps - 1) % world, group):
                r.wait()
            dkv = mine
        dk, dv = dkv.view(2, b, la, h, d).unbind(0)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None
