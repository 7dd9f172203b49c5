"""The ring across ranks: each rank holds one contiguous chunk (shard) of q, k and v.

Rank ``a`` computes the output rows of its own shard.  At step ``s`` it attends to key/value rows
of rank ``a − s`` (mod world size), which rank ``a − s`` sent it directly; every rank runs the same
number of steps: the largest shard distance at which any segment of any branch still connects two
shards (dilated attention is local to segments, so when the largest segment fits in a shard no
key/value ever has to move).  Causal pairs whose key shard lies entirely after the query shard
are skipped (nothing is sent for them).

**Only the rows that are read travel.**  Across shards, a dilated branch reads one position in
``r`` of the key shard (and only the branches whose segments cross a shard boundary do), so rank
``a − s`` packs exactly the key/value rows of the pieces rank ``a`` computes against it, one
contiguous buffer per step (k and v of every kernel call, each in the call's own
``(B, H', lk, d)`` layout: :class:`attention._engine.PackedKeys`), and sends it in one message; the
receiver runs the kernels on the packed views.  With the ``distributed`` profile's segments
(the largest one the whole sequence, rate 64 at 128K tokens) that is 1/64-1/512 of the shard
instead of the whole shard, so the buffers in flight are small and one trip around the ring (one
"lane") is enough: per step one pack, one send/receive and one piece (docs/perf/distributed.md).

**Overlap.**  The next step's send/receive is issued before this step's attention and waited
after it (the first one overlaps the rank's attention to its own shard), forward and backward.

**Lanes: only where memory needs them.**  A rank's own q, k, v and output are 1/N of the
sequence; everything else must be too, and small.  :mod:`attention._ring_memory` bounds what a
rank holds besides them during a forward (the largest piece being merged, and three packed
buffers: the one attended, the next arriving, the next leaving) and cuts each shard's keys/values
into the fewest ``lanes`` sub-chunks (a power of two) that keep it within bound; the ring runs
once per lane.  Kernel calls (at most 1/``CALL_SHARE`` of the shard's rows each) are merged
into the output one at a time (:func:`attention._merge.merge_online`: the output and a float32
LSE are the running state), so no call's output outlives its merge.  On the causal diagonal the
shard's own sub-chunks meet each other as square causal / unmasked pieces.

Backward: the same lanes and steps again; the receiving rank gets the packed key/value rows once
more, runs each piece's kernel backward with the merged output and LSE (exact, as on one device),
and sends the pieces' dk/dv (float32, packed the same way) straight back to the owner, which
adds them into its float32 dk/dv (:class:`attention._row_sums.RowSums`: only the rows each part
covers, in the rows' own geometry; a part that is the first to reach its rows is copied into them).
Dropout in training is not supported across ranks (``NotImplementedError``).

Shards may have different lengths (the sequence need not divide by the world size): lengths are
all-gathered once per forward, which is the only host synchronisation of the distributed path;
under CUDA-graph capture the lengths of the last eager call are used (:func:`gather_shapes`), so
the whole distributed call, its NCCL sends and receives included, can be captured and replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from attention._engine import (
    PackedKeys,
    SegmentPlan,
    chunk,
    key_part,
    key_view,
    piece_calls,
    run_pieces_backward,
    run_pieces_forward,
)
from attention._lse import compute_dtype
from attention._merge import merge_online
from attention._part import Part
from attention._plan import Call, Piece, chunk_bounds, chunks_connected, split_lengths
from attention._row_sums import RowSums

#: The shapes the last eager call of each (group, local shape, device) gathered: what a call under
#: CUDA-graph capture uses (a graph replays fixed shapes; the all-gather's read-back to the host
#: cannot be captured), see :func:`gather_shapes`.
_GATHERED: dict[tuple, list[tuple[int, int, int, int]]] = {}


def gather_shapes(q: torch.Tensor, group) -> list[tuple[int, int, int, int]]:
    """(batch, local_len, heads, head_dim) of every rank; ranks must agree on all but local_len.

    Under CUDA-graph capture (``torch.cuda.graph``) nothing is gathered: the shapes are those the
    last eager call with this rank's shape gathered.  Every rank captures the same call after
    running it eagerly (``torch.cuda.graphs`` asks for warm-up calls anyway), so they agree; a
    capture with no eager call before it is an error that says so.
    """
    key = (id(group), tuple(q.shape), q.device)
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        if key not in _GATHERED:
            raise RuntimeError(
                "sequence-parallel ring under CUDA-graph capture: run one eager call with these shapes "
                "first (the shard lengths of every rank are gathered on the host, which a graph cannot do)"
            )
        return _GATHERED[key]
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
    if len(_GATHERED) > 64:  # shapes of calls long gone: keep the cache small
        _GATHERED.clear()
    _GATHERED[key] = shapes
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
        """The rank whose key/value rows this rank attends to at ``step`` (and sends them)."""
        return (self.rank - step) % self.world

    def target(self, step: int) -> int:
        """The rank that attends to this rank's key/value rows at ``step`` (this rank sends to it)."""
        return (self.rank + step) % self.world

    def visits(self, lane: int, step: int) -> list[tuple[int, int]]:
        """(query chunk, key chunk) pairs this rank computes at (lane, step)."""
        key = self.sub(self.holder(step), lane)
        if step == 0 and self.is_causal:  # the diagonal: the shard's own sub-chunks, square or before
            return [(self.sub(self.rank, i), key) for i in range(lane, self.lanes)]
        return [(self.shard(self.rank), key)]

    def work(self) -> list[tuple[int, int]]:
        """Every (lane, step) in the order every rank runs them."""
        return [(lane, step) for lane in range(self.lanes) for step in range(self.steps)]

    def pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple(p for lane, step in self.work() for p in self.visits(lane, step))


def schedule_for(
    lengths: Sequence[int], rank: int, segment_lengths: Sequence[int], is_causal: bool, lanes: int
) -> RingSchedule:
    """The schedule of one call: steps from the shard geometry, ``lanes`` bounded by the shortest
    shard."""
    steps = ring_steps(chunk_bounds(lengths), segment_lengths, is_causal)
    return RingSchedule(len(lengths), rank, steps, max(1, min(lanes, *lengths)), bool(is_causal))


# --------------------------------------------------------------------------------------------
# packing and exchanging the rows that travel
# --------------------------------------------------------------------------------------------
def _peer(group, rank_in_group: int) -> int:
    return dist.get_global_rank(group, rank_in_group) if group is not None else rank_in_group


def _numel(piece: Piece, call: Call, d: int) -> int:
    return call.sizes[0] * call.sizes[1] * piece.lk * d


def _views(buf: torch.Tensor, calls: Sequence[tuple[Piece, Call]], d: int) -> list[tuple[torch.Tensor, ...]]:
    """Each call's two ``(B, H', lk, d)`` blocks of a packed buffer (k then v, or dk then dv)."""
    out, offset = [], 0
    for piece, call in calls:
        shape = (*call.sizes, piece.lk, d)
        n = _numel(piece, call, d)
        stride = (call.sizes[1] * piece.lk * d, piece.lk * d, d, 1)
        out.append((buf.as_strided(shape, stride, offset), buf.as_strided(shape, stride, offset + n)))
        offset += 2 * n
    return out


def _empty(calls: Sequence[tuple[Piece, Call]], d: int, like: torch.Tensor, dtype: torch.dtype):
    return torch.empty(2 * sum(_numel(p, c, d) for p, c in calls), dtype=dtype, device=like.device)


@dataclass
class _Step:
    """One remote (lane, step) of this rank: the calls it sends rows for (to :meth:`RingSchedule.
    target`) and the calls it computes on rows it receives (from :meth:`RingSchedule.holder`)."""

    lane: int
    step: int
    send_calls: list[tuple[Piece, Call]]
    recv_calls: list[tuple[Piece, Call]]
    send_rows: tuple[int, int]  # this rank's sub-chunk the sent rows come from, relative to the shard
    recv_len: int  # length of the holder's sub-chunk


class _Ring:
    """The remote steps of one call and their exchanges (``dist.batch_isend_irecv``: gloo on the
    CPU, NCCL on GPUs), issued ahead of the compute and waited after it."""

    def __init__(self, plan: SegmentPlan, sched: RingSchedule, group, q: torch.Tensor) -> None:
        self.plan, self.sched, self.group = plan, sched, group
        b, la, h, self.d = q.shape
        a = sched.rank
        base = plan.bounds[sched.shard(a)][0]

        def length(chunk_index: int) -> int:
            lo, hi = plan.bounds[chunk_index]
            return hi - lo

        self.steps: list[_Step] = []
        for lane, step in sched.work():
            if step == 0:
                continue
            to, frm = sched.target(step), sched.holder(step)
            mine, theirs = sched.sub(a, lane), sched.sub(frm, lane)
            send = plan.pieces(sched.shard(to), mine)
            recv = plan.pieces(sched.shard(a), theirs)
            lo, hi = plan.bounds[mine]
            self.steps.append(
                _Step(
                    lane,
                    step,
                    piece_calls(plan, send, b, length(sched.shard(to)), hi - lo, h),
                    piece_calls(plan, recv, b, la, length(theirs), h),
                    (lo - base, hi - base),
                    length(theirs),
                )
            )

    def _exchange(self, send: torch.Tensor | None, to: int, recv: torch.Tensor | None, frm: int) -> list:
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send, _peer(self.group, to), self.group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, _peer(self.group, frm), self.group))
        return dist.batch_isend_irecv(ops) if ops else []

    def send_keys(self, j: int, k: torch.Tensor, v: torch.Tensor) -> _Pending:
        """Start step ``j``'s key/value exchange: pack this rank's rows for the target, receive
        the holder's."""
        st, sched = self.steps[j], self.sched
        send = recv = None
        if st.send_calls:
            lo, hi = st.send_rows
            kc, vc = chunk(k, lo, hi), chunk(v, lo, hi)
            send = _empty(st.send_calls, self.d, k, k.dtype)
            for (piece, call), (kb, vb) in zip(
                st.send_calls, _views(send, st.send_calls, self.d), strict=True
            ):
                kb.copy_(key_view(kc, piece, call))
                vb.copy_(key_view(vc, piece, call))
        if st.recv_calls:
            recv = _empty(st.recv_calls, self.d, k, k.dtype)
        reqs = self._exchange(send, sched.target(st.step), recv, sched.holder(st.step))
        return _Pending(reqs, send, recv)

    def keys(self, j: int, recv: torch.Tensor | None) -> PackedKeys | None:
        st = self.steps[j]
        return PackedKeys(st.recv_len, _views(recv, st.recv_calls, self.d)) if recv is not None else None

    def send_grads(self, j: int, dk_parts: Sequence[Part], dv_parts: Sequence[Part], like: torch.Tensor):
        """Start step ``j``'s gradient exchange: the pieces' dk/dv back to the holder, this rank's
        from the target."""
        st, sched = self.steps[j], self.sched
        cd = compute_dtype(like.dtype)
        send = recv = None
        if st.recv_calls:
            send = _empty(st.recv_calls, self.d, like, cd)
            for (kb, vb), pk, pv in zip(_views(send, st.recv_calls, self.d), dk_parts, dv_parts, strict=True):
                kb.copy_(pk.values)
                vb.copy_(pv.values)
        if st.send_calls:
            recv = _empty(st.send_calls, self.d, like, cd)
        reqs = self._exchange(send, sched.holder(st.step), recv, sched.target(st.step))
        return _Pending(reqs, send, recv)

    def add_grads(self, j: int, recv: torch.Tensor | None, dk: RowSums, dv: RowSums) -> None:
        """Sum the dk/dv received for step ``j`` into this rank's rows of ``dk``, ``dv``."""
        if recv is None:
            return
        st = self.steps[j]
        views = _views(recv, st.send_calls, self.d)
        lo, hi = st.send_rows
        for i, dest in enumerate((dk, dv)):
            parts = [
                key_part(blocks[i], call, piece)
                for (piece, call), blocks in zip(st.send_calls, views, strict=True)
            ]
            dest.add(parts, lo, hi)


@dataclass
class _Pending:
    """An exchange in flight: its requests, and the buffers that must live until it completes."""

    reqs: list
    send: torch.Tensor | None
    recv: torch.Tensor | None

    def wait(self) -> torch.Tensor | None:
        for r in self.reqs:
            r.wait()
        self.send = None
        return self.recv


def _visits(plan: SegmentPlan, sched: RingSchedule, lane: int, step: int):
    """The (query chunk, key chunk) pairs of (lane, step) that have pieces: each with its pieces and
    the query chunk's positions [q0, q1) relative to this rank's shard."""
    base = plan.bounds[sched.shard(sched.rank)][0]
    for qi, kc in sched.visits(lane, step):
        pieces = plan.pieces(qi, kc)
        if pieces:
            lo, hi = plan.bounds[qi]
            yield qi, kc, pieces, lo - base, hi - base


def _own(plan: SegmentPlan, sched: RingSchedule, lane: int, k: torch.Tensor, v: torch.Tensor):
    """This rank's key/value sub-chunk ``lane`` and its rows relative to the shard."""
    base = plan.bounds[sched.shard(sched.rank)][0]
    lo, hi = plan.bounds[sched.sub(sched.rank, lane)]
    return chunk(k, lo - base, hi - base), chunk(v, lo - base, hi - base), lo - base, hi - base


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


def _one_by_one(plan: SegmentPlan, pieces, qc: torch.Tensor, kc):
    """Each piece with its own keys (``kc``, or its calls' share of :class:`PackedKeys`) and the
    slice of the visit's calls it makes (to find its kernels' by-products)."""
    start = 0
    b, lq, h = qc.shape[0], qc.shape[1], qc.shape[2]
    for piece in pieces:
        length = kc.length if isinstance(kc, PackedKeys) else kc.shape[1]
        n = len(piece_calls(plan, [piece], b, lq, length, h))
        keys = PackedKeys(kc.length, kc.views[start : start + n]) if isinstance(kc, PackedKeys) else kc
        yield piece, keys, slice(start, start + n)
        start += n


def _call_by_call(plan: SegmentPlan, pieces, qc: torch.Tensor, kc):
    """Each kernel call of the pieces: its piece, its keys (``kc``, or its view of
    :class:`PackedKeys`), its index among the visit's calls (its by-products) and among its piece's
    calls (``which``).  Forward and backward run them one at a time, calls bounded by the plan's
    ``max_call_rows``: one call's output (forward) or gradients and kernel workspace (backward)
    alive, not a whole piece's (the rate-1 branch's piece is the whole shard)."""
    for piece, keys, calls in _one_by_one(plan, pieces, qc, kc):
        for j in range(calls.stop - calls.start):
            one = PackedKeys(keys.length, keys.views[j : j + 1]) if isinstance(keys, PackedKeys) else keys
            yield piece, one, calls.start + j, slice(j, j + 1)


def _attend(plan: SegmentPlan, pieces, qc: torch.Tensor, kc, vc, out, lse, q0: int, q1: int) -> list:
    """Every kernel call, each merged into the output before the next runs (one call's output
    alive; :func:`_call_by_call`)."""
    auxes = []
    for piece, keys, _, which in _call_by_call(plan, pieces, qc, kc):
        parts, aux = run_pieces_forward(plan, [piece], qc, keys, vc, which)
        _merge_rows(parts, out, lse, q0, q1)
        auxes.extend(aux)
        del parts
    return auxes


class DistributedRingFunction(torch.autograd.Function):
    """Sequence-parallel ring attention over the ranks of ``group`` (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, plan: SegmentPlan, group, sched: RingSchedule):
        b, la, h, _ = q.shape
        cd = compute_dtype(q.dtype)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        ring = _Ring(plan, sched, group, q)
        ahead = ring.send_keys(0, k, v) if ring.steps else None
        out = torch.zeros_like(q)
        lse = torch.full((b, la, h), float("-inf"), dtype=cd, device=q.device)
        auxes: dict[tuple[int, int], list] = {}
        j = 0
        for lane, step in sched.work():
            if step == 0:
                kk, vv, _, _ = _own(plan, sched, lane, k, v)
            else:
                kk, vv = ring.keys(j, ahead.wait()), None
                ahead = ring.send_keys(j + 1, k, v) if j + 1 < len(ring.steps) else None
                j += 1
            for qi, kc, pieces, q0, q1 in _visits(plan, sched, lane, step):
                auxes[(qi, kc)] = _attend(plan, pieces, chunk(q, q0, q1), kk, vv, out, lse, q0, q1)
            del kk, vv
        ctx.plan, ctx.group, ctx.sched, ctx.auxes = plan, group, sched, auxes
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        plan, group, sched = ctx.plan, ctx.group, ctx.sched
        cd = compute_dtype(q.dtype)
        dout = dout.contiguous()
        dq, dk, dv = (RowSums(x.shape, cd, q.device) for x in (q, k, v))
        ring = _Ring(plan, sched, group, q)
        ahead = ring.send_keys(0, k, v) if ring.steps else None
        home: tuple[int, _Pending] | None = None  # the last step's gradients on their way back
        j = 0
        for lane, step in sched.work():
            if step == 0:
                kk, vv, k0, k1 = _own(plan, sched, lane, k, v)
            else:
                kk, vv = ring.keys(j, ahead.wait()), None
                ahead = ring.send_keys(j + 1, k, v) if j + 1 < len(ring.steps) else None
            dk_all, dv_all = [], []
            for qi, kc, pieces, q0, q1 in _visits(plan, sched, lane, step):
                rows = [chunk(x, q0, q1) for x in (q, out, lse, dout)]
                auxes = ctx.auxes[(qi, kc)]
                for piece, keys, i, which in _call_by_call(plan, pieces, rows[0], kk):  # one call's grads
                    dq_p, dk_p, dv_p = run_pieces_backward(
                        plan, [piece], rows[0], keys, vv, rows[1], rows[2], rows[3], auxes[i : i + 1], which
                    )
                    dq.add(dq_p, q0, q1)
                    if step == 0:
                        dk.add(dk_p, k0, k1)
                        dv.add(dv_p, k0, k1)
                    else:  # sent home in one message after the step
                        dk_all.extend(dk_p)
                        dv_all.extend(dv_p)
                    del dq_p, dk_p, dv_p
            if step > 0:
                sent = ring.send_grads(j, dk_all, dv_all, q)
                if home is not None:
                    ring.add_grads(home[0], home[1].wait(), dk, dv)
                home = (j, sent)
                j += 1
            del kk, vv
        dq_out = dq.result().to(q.dtype)  # complete here: one float32 sum converted and freed at a time,
        del dq  # not the three sums and their three conversions alive together (2 shards less)
        if home is not None:
            ring.add_grads(home[0], home[1].wait(), dk, dv)
        dk_out = dk.result().to(k.dtype)
        del dk
        return dq_out, dk_out, dv.result().to(v.dtype), None, None, None
