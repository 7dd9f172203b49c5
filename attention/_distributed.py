"""The ring across ranks: each rank holds one contiguous chunk (shard) of q, k and v.

Rank ``a`` computes the output rows of its own shard.  At step ``s`` it holds key/value data of
rank ``a − s`` (mod world size); while it attends to it, that data is already travelling on to
rank ``a + 1`` and the next arriving from rank ``a − 1`` (``dist.batch_isend_irecv``; gloo on
CPU, NCCL on GPU).  Every rank runs the same number of steps: the largest shard distance at which
any segment of any branch still connects two shards (dilated attention is local to segments, so
when the largest segment fits in a shard no key/value ever has to move).  Causal pairs whose key
shard lies entirely after the query shard are skipped (the data is still forwarded).

**Lanes: memory that shrinks as 1/N.**  A rank's own q, k, v and output are 1/N of the sequence;
everything else must be too, and small.  So once a shard's one-piece intermediates exceed the
module's ``single_shot_bytes``, each shard's keys/values are cut into ``lanes`` sub-chunks and the
ring runs once per lane: what travels, and what is alive on a rank besides its inputs and output,
is the key/value sub-chunks in flight and the pieces of the whole query shard against one of
them, merged into the output at once by log-sum-exp (:func:`attention._merge.merge_online`: the
output and a float32 LSE are the running state), so no piece outlives its step.  The lane count
keeps the sub-chunks in flight at half the output's size (:func:`lanes_for`): 4 lanes when a lane
has at most 2 steps (one sub-chunk arriving at a time), 8 beyond (one attended while the next
arrives).  Every lane costs a trip around the ring, and the eager forward is host-bound (~1 ms of
host time per lane and step on an H200 host), so fewer lanes are faster: measured on 2 H200s at
128K tokens, 1 / 4 / 8 lanes took 2.8 / 8.8 / 15.1 ms with a per-GPU peak of 1.15 / 0.52 / 0.39x
the one-GPU ring's whole-sequence peak (docs/perf/distributed.md); ``ring_lanes`` chooses.  The
query side is the whole shard (one set of kernel calls per sub-chunk), except on the causal
diagonal, where the shard's own sub-chunks meet each other as square causal / unmasked pieces.

Backward: the same lanes and ring run again; each key/value sub-chunk travels with its float32
gradient accumulators (dk, dv), every rank adds its contribution, and after a lane's last step one
exchange sends each accumulated dk/dv back to the rank that owns the sub-chunk.  Gradients are
exact (each piece's kernel backward runs with the merged output and LSE, as on one device).
Dropout in training is not supported across ranks (``NotImplementedError``).

Shards may have different lengths (the sequence need not divide by the world size): lengths are
all-gathered once per forward, which is the only host synchronisation of the distributed path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from attention._engine import SegmentPlan, chunk, run_pieces_backward, run_pieces_forward, sum_into_rows
from attention._lse import compute_dtype
from attention._merge import merge_online, sum_parts
from attention._part import Part
from attention._plan import chunk_bounds, chunks_connected, split_lengths


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


def ring_steps(bounds: Sequence[tuple[int, int]], segment_lengths: Sequence[int], is_causal: bool) -> int:
    """1 + the largest ring distance (a − c mod world) of a connected chunk pair, same on every rank."""
    world = len(bounds)
    far = 0
    for a in range(world):
        for c in range(world):
            if c != a and chunks_connected(bounds, a, c, segment_lengths, is_causal):
                far = max(far, (a - c) % world)
    return far + 1


@dataclass(frozen=True)
class RingSchedule:
    """Who holds what when: the plan's chunks are every shard's ``lanes`` sub-chunks (index
    ``shard · lanes + lane``) followed by the shards themselves (index ``world · lanes + shard``)."""

    world: int
    rank: int
    steps: int
    lanes: int
    is_causal: bool

    @staticmethod
    def chunk_bounds(lengths: Sequence[int], lanes: int) -> tuple[tuple[int, int], ...]:
        """Sub-chunk bounds of every shard, then the shard bounds (the plan's ``bounds``)."""
        shards = chunk_bounds(lengths)
        fine = []
        for (lo, _), n in zip(shards, lengths, strict=True):
            fine.extend((lo + s, lo + e) for s, e in chunk_bounds(split_lengths(n, lanes)))
        return (*fine, *shards)

    def sub(self, shard: int, lane: int) -> int:
        return shard * self.lanes + lane

    def shard(self, shard: int) -> int:
        return self.world * self.lanes + shard

    def holder(self, step: int) -> int:
        """The shard whose key/value sub-chunks this rank holds at ``step``."""
        return (self.rank - step) % self.world

    def visits(self, lane: int, step: int) -> list[tuple[int, int]]:
        """(query chunk, key chunk) pairs this rank computes at (lane, step)."""
        key = self.sub(self.holder(step), lane)
        if step == 0 and self.is_causal:  # the diagonal: the shard's own sub-chunks, square or before
            return [(self.sub(self.rank, i), key) for i in range(lane, self.lanes)]
        return [(self.shard(self.rank), key)]

    def pairs(self) -> tuple[tuple[int, int], ...]:
        every = (self.visits(lane, step) for lane in range(self.lanes) for step in range(self.steps))
        return tuple(p for visits in every for p in visits)


def lanes_for(steps: int) -> int:
    """Lanes that keep the key/value sub-chunks in flight at half of the shard's output: with at
    most 2 steps one pair (k, v) arrives while the local one is read in place (2/L shards), beyond
    that one pair is attended while the next arrives (4/L shards)."""
    return 4 if steps <= 2 else 8


def schedule_for(
    lengths: Sequence[int], rank: int, segment_lengths: Sequence[int], is_causal: bool, lanes: int | None
) -> RingSchedule:
    """The schedule of one call: steps from the shard geometry; ``lanes`` (None: :func:`lanes_for`)
    bounded by the shortest shard."""
    steps = ring_steps(chunk_bounds(lengths), segment_lengths, is_causal)
    lanes = lanes_for(steps) if lanes is None else lanes
    return RingSchedule(len(lengths), rank, steps, max(1, min(lanes, *lengths)), bool(is_causal))


def _peer(group, rank_in_group: int) -> int:
    return dist.get_global_rank(group, rank_in_group) if group is not None else rank_in_group


def _exchange(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], to: int, frm: int, group) -> list:
    """Send each ``send`` to rank ``to`` and receive each ``recv`` from rank ``frm``, in one batch."""
    ops = []
    for send, recv in pairs:
        ops.append(dist.P2POp(dist.isend, send, _peer(group, to), group))
        ops.append(dist.P2POp(dist.irecv, recv, _peer(group, frm), group))
    return dist.batch_isend_irecv(ops)


def _visits(plan: SegmentPlan, sched: RingSchedule, lane: int, step: int):
    """The (query chunk, key chunk) pairs of (lane, step) that have pieces: each with its pieces and
    the query chunk's positions [q0, q1) relative to this rank's shard."""
    base = plan.bounds[sched.shard(sched.rank)][0]
    for qi, kc in sched.visits(lane, step):
        pieces = plan.pieces(qi, kc)
        if pieces:
            lo, hi = plan.bounds[qi]
            yield qi, kc, pieces, lo - base, hi - base


def _kv(plan: SegmentPlan, sub: int, k: torch.Tensor, v: torch.Tensor, base: int) -> list[torch.Tensor]:
    """This rank's key/value sub-chunk ``sub`` (what travels): views when batch is 1, no copy."""
    lo, hi = plan.bounds[sub]
    return [chunk(k, lo - base, hi - base), chunk(v, lo - base, hi - base)]


def _empty(plan: SegmentPlan, sub: int, like: torch.Tensor, count: int, dtype=None) -> list[torch.Tensor]:
    """``count`` receive buffers shaped like sub-chunk ``sub`` of ``like`` (b, ·, h, d)."""
    lo, hi = plan.bounds[sub]
    b, _, h, d = like.shape
    dtype = dtype or like.dtype
    return [torch.empty(b, hi - lo, h, d, dtype=dtype, device=like.device) for _ in range(count)]


def _merge_rows(parts: list[Part], out: torch.Tensor, lse: torch.Tensor, lo: int, hi: int) -> None:
    """Merge ``parts`` (geometry relative to positions [lo, hi)) into the running out / LSE."""
    rows, rows_lse = out[:, lo:hi], lse[:, lo:hi]
    if rows.is_contiguous() and rows_lse.is_contiguous():
        merge_online(parts, rows, rows_lse)
        return
    tmp, tmp_lse = rows.contiguous(), rows_lse.contiguous()  # batch > 1: merge into copies, write back
    merge_online(parts, tmp, tmp_lse)
    rows.copy_(tmp)
    rows_lse.copy_(tmp_lse)


class DistributedRingFunction(torch.autograd.Function):
    """Sequence-parallel ring attention over the ranks of ``group`` (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, plan: SegmentPlan, group, sched: RingSchedule):
        world, a = sched.world, sched.rank
        b, la, h, _ = q.shape
        cd = compute_dtype(q.dtype)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        base = plan.bounds[sched.shard(a)][0]
        out = torch.zeros_like(q)
        lse = torch.full((b, la, h), float("-inf"), dtype=cd, device=q.device)
        auxes: dict[tuple[int, int], list] = {}
        for lane in range(sched.lanes):
            kv = _kv(plan, sched.sub(a, lane), k, v, base)
            for s in range(sched.steps):
                reqs, nxt = [], None
                if s < sched.steps - 1:
                    nxt = _empty(plan, sched.sub(sched.holder(s + 1), lane), k, 2)
                    reqs = _exchange(list(zip(kv, nxt, strict=True)), (a + 1) % world, (a - 1) % world, group)
                kk, vv = kv
                for qi, kc, pieces, q0, q1 in _visits(plan, sched, lane, s):
                    parts, auxes[(qi, kc)] = run_pieces_forward(plan, pieces, chunk(q, q0, q1), kk, vv)
                    _merge_rows(parts, out, lse, q0, q1)
                    del parts
                for r in reqs:
                    r.wait()
                if nxt is not None:
                    kv = nxt
        ctx.plan, ctx.group, ctx.sched, ctx.auxes = plan, group, sched, auxes
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        plan, group, sched = ctx.plan, ctx.group, ctx.sched
        world, a = sched.world, sched.rank
        b, la, h, d = q.shape
        cd = compute_dtype(q.dtype)
        base = plan.bounds[sched.shard(a)][0]
        dout = dout.contiguous()
        dq = torch.zeros(b, la, h, d, dtype=cd, device=q.device)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        for lane in range(sched.lanes):
            kv = _kv(plan, sched.sub(a, lane), k, v, base)
            dkv = [torch.zeros(x.shape, dtype=cd, device=q.device) for x in kv]
            for s in range(sched.steps):
                kk, vv = kv
                dkk, dvv = dkv
                for qi, kc, pieces, q0, q1 in _visits(plan, sched, lane, s):
                    rows = [chunk(x, q0, q1) for x in (q, out, lse, dout)]
                    dq_p, dk_p, dv_p = run_pieces_backward(
                        plan, pieces, rows[0], kk, vv, rows[1], rows[2], rows[3], ctx.auxes[(qi, kc)]
                    )
                    sum_into_rows(dq_p, dq, q0, q1)
                    sum_parts(dk_p, dkk, accumulate=True)
                    sum_parts(dv_p, dvv, accumulate=True)
                if s < sched.steps - 1:
                    nxt = sched.sub(sched.holder(s + 1), lane)
                    nxt_kv, nxt_dkv = _empty(plan, nxt, k, 2), _empty(plan, nxt, k, 2, cd)
                    pairs = list(zip(kv + dkv, nxt_kv + nxt_dkv, strict=True))
                    for r in _exchange(pairs, (a + 1) % world, (a - 1) % world, group):
                        r.wait()
                    kv, dkv = nxt_kv, nxt_dkv
            lo, hi = plan.bounds[sched.sub(a, lane)]
            if sched.steps > 1:
                # the accumulated dk/dv of sub-chunk `lane` of shard (a − steps + 1) is here: send it home
                mine = _empty(plan, sched.sub(a, lane), k, 2, cd)
                home, sender = (a - sched.steps + 1) % world, (a + sched.steps - 1) % world
                for r in _exchange(list(zip(dkv, mine, strict=True)), home, sender, group):
                    r.wait()
                dkv = mine
            dk[:, lo - base : hi - base] = dkv[0]
            dv[:, lo - base : hi - base] = dkv[1]
        return dq.to(q.dtype), dk, dv, None, None, None
