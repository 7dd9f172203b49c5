"""``RingDilatedAttention``: dilated attention over ``ring_size`` key/value chunks.

The sequence is cut into ``ring_size`` contiguous chunks.  Query chunk ``a`` meets key/value
chunks ``a, a−1, a−2, …`` in turn; every chunk pair contributes the dense pieces of the segments
that span both chunks (:mod:`attention._plan`: strided views of q, k and v, nothing gathered);
after its last pair, chunk ``a``'s piece outputs are merged by log-sum-exp in one pass
(:mod:`attention._merge`).  Only one query chunk's piece outputs are alive at a time, so the
attention intermediates are O(n / ring_size).
Causal masking uses global positions: a key chunk entirely after the query chunk is skipped,
a chunk before it needs no mask, the diagonal chunk is causal inside each segment; a row with no
visible key is 0, never NaN.  The result is exactly ``dilated``'s function (same pattern).

**Short sequences in one piece.** Chunking exists to bound memory; when the whole problem's
intermediates (:func:`single_shot_bytes`) fit in ``single_shot_bytes`` (64 MiB by default, so
≤ 16K tokens × 12 heads × 64 in bf16 with the production segments), the ring computes it as
``improved`` does, in one chunk: a few large kernel calls instead of a ring of small ones (the
ring was 4-25x slower than ``improved`` at 1K-16K tokens on an H100, launch-bound).  Above it,
the extra memory is O(n / ring_size); ``single_shot_bytes=0`` always chunks.

Distributed: when ``torch.distributed`` is initialised with more than one rank (or with
``sequence_parallel=True``), each rank passes its own contiguous shard of q, k and v (sequence
split; shards may differ in length) and gets its output shard back; each rank sends every other
only the key/value rows that its pieces read (:mod:`attention._distributed`): one shard per rank
(``ring_size``, if given, must equal the world size); once a shard exceeds ``single_shot_bytes``
its keys/values are cut into as many sub-chunks ("lanes", ``ring_lanes`` to choose) as keep what a
rank holds besides its shard within a bound (:meth:`RingDilatedAttention.lanes_for`; one for the
``distributed`` profile).  Pass ``sequence_parallel=False`` to keep the single-device ring under
data parallelism, where every rank holds whole sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attention._distributed import (
    DistributedRingFunction,
    RingSchedule,
    gather_shapes,
    schedule_for,
)
from attention._engine_base import SegmentEngineAttention
from attention._plan import ring_pairs, split_lengths
from attention._ring_memory import lanes_for
from attention.pattern import branch_heads

SINGLE_SHOT_BYTES = 64 * 2**20
#: A sequence-parallel kernel call holds at most 1/CALL_SHARE of the shard's query rows x heads.
#: Measured on 2 H200s (128K-1M tokens, docs/perf/distributed.md): the rate-1 branch as one call
#: made the backward's peak 12.1 output shards, 5.0 of them its cuDNN backward's gradients and
#: float32 workspace, over the bound of 1.25/N of one GPU's.
CALL_SHARE = 4


def single_shot_bytes(
    batch: int,
    seq_len: int,
    num_heads: int,
    head_dim: int,
    element_size: int,
    segment_lengths: Sequence[int],
    dilation_rates: Sequence[int],
    mode: str,
) -> int:
    """Attention intermediates of one forward in one piece (``improved``'s): every branch's
    kernel output and LSE (``heads · n / r`` rows each) and the merged LSE."""
    rows = 0
    for bh in branch_heads(num_heads, segment_lengths, dilation_rates, mode):
        rows += len(bh.heads) * -(-seq_len // bh.dilation_rate)
    return batch * (rows * (head_dim * element_size + 4) + seq_len * num_heads * 4)


class RingDilatedAttention(SegmentEngineAttention):
    """Dilated attention computed chunk pair by chunk pair around a ring (module docstring)."""

    def __init__(
        self,
        *,
        segment_lengths: Sequence[int],
        dilation_rates: Sequence[int],
        mode: str = "longnet",
        softmax_scale: float | None = None,
        dropout: float = 0.0,
        num_heads: int | None = None,
        ring_size: int | None = None,
        sequence_parallel: bool | None = None,
        process_group: Any = None,
        backend: str = "auto",
        single_shot_bytes: int = SINGLE_SHOT_BYTES,
        ring_lanes: int | None = None,
    ) -> None:
        super().__init__(
            segment_lengths=segment_lengths,
            dilation_rates=dilation_rates,
            mode=mode,
            softmax_scale=softmax_scale,
            dropout=dropout,
            num_heads=num_heads,
            backend=backend,
        )
        if ring_size is not None and (
            isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size <= 0
        ):
            raise ValueError(f"ring_size must be a positive int or None, got {ring_size!r}")
        if (
            isinstance(single_shot_bytes, bool)
            or not isinstance(single_shot_bytes, int)
            or single_shot_bytes < 0
        ):
            raise ValueError(f"single_shot_bytes must be an int >= 0, got {single_shot_bytes!r}")
        if ring_lanes is not None and (
            isinstance(ring_lanes, bool) or not isinstance(ring_lanes, int) or ring_lanes <= 0
        ):
            raise ValueError(f"ring_lanes must be a positive int or None, got {ring_lanes!r}")
        self.ring_size = ring_size
        self.ring_lanes = ring_lanes
        self.single_shot_bytes = single_shot_bytes
        self.sequence_parallel = sequence_parallel
        self.process_group = process_group

    # -- single device --------------------------------------------------------------------------
    def _chunk_lengths(self, q: torch.Tensor) -> tuple[int, ...]:
        b, n, h, d = q.shape
        if single_shot_bytes(
            b, n, h, d, q.element_size(), self.segment_lengths, self.dilation_rates, self.mode
        ) <= (self.single_shot_bytes):
            return (n,)
        return split_lengths(n, min(self.ring_size or 1, n))

    def _pairs(self, chunks: int) -> tuple[tuple[int, int], ...]:
        return tuple(ring_pairs(chunks))

    # -- distributed ----------------------------------------------------------------------------
    def _distributed(self) -> bool:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
        if self.sequence_parallel is None:
            return ready and dist.get_world_size(self.process_group) > 1
        if self.sequence_parallel and not ready:
            raise ValueError("sequence_parallel=True needs torch.distributed to be initialised")
        return bool(self.sequence_parallel)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        if not self._distributed():
            return super().forward(q, k, v, is_causal=is_causal)
        import torch.distributed as dist

        self._check_inputs(q, k, v)
        group = self.process_group
        world = dist.get_world_size(group)
        if self.ring_size is not None and self.ring_size != world:
            raise ValueError(
                f"sequence-parallel ring: ring_size={self.ring_size} must equal the world size {world} "
                "(one chunk per rank), or be None"
            )
        if self._dropout_p() > 0.0:
            raise NotImplementedError(
                "dropout in training is not supported by the sequence-parallel ring; use dropout=0 or eval()"
            )
        lengths = tuple(s[1] for s in gather_shapes(q, group))
        b, _, h, d = q.shape
        lanes = self.lanes_for(lengths, b, h, d, q.element_size())
        sched = schedule_for(lengths, dist.get_rank(group), self.segment_lengths, is_causal, lanes)
        # the plan is global (global positions); this rank only visits its own query shard
        plan = self._plan_global(q, sum(lengths), lengths, is_causal, sched)
        return DistributedRingFunction.apply(q, k, v, plan, group, sched)

    def lanes_for(
        self, lengths: Sequence[int], batch: int, heads: int, head_dim: int, element_size: int
    ) -> int:
        """How many lanes a sequence-parallel call on shards of ``lengths`` uses: ``ring_lanes``
        if given; one while the longest shard fits in ``single_shot_bytes`` as one piece; else
        the fewest memory allows (:func:`attention._ring_memory.lanes_for`).  The same on every
        rank (a function of the all-gathered lengths), and callable for shapes this process does
        not hold (docs/perf/distributed_ops.py asks it what a GPU would choose)."""
        if self.ring_lanes:
            return self.ring_lanes
        pattern = (self.segment_lengths, self.dilation_rates, self.mode)
        one_piece = single_shot_bytes(batch, max(lengths), heads, head_dim, element_size, *pattern)
        if one_piece <= self.single_shot_bytes:
            return 1
        shape = {"batch": batch, "heads": heads, "head_dim": head_dim, "element_size": element_size}
        return lanes_for(
            lengths, **shape, segment_lengths=pattern[0], dilation_rates=pattern[1], mode=pattern[2]
        )

    def _plan_global(self, q, n, lengths, is_causal, sched: RingSchedule):
        from attention._engine import SegmentPlan
        from attention._kernel_selection import KernelSet

        d = q.shape[-1]
        h = q.shape[2]
        scale = self._scale(d)
        key = ("dist", n, h, d, q.dtype, q.device, bool(is_causal), lengths, sched, scale, self.backend)

        def build() -> SegmentPlan:
            return SegmentPlan(
                seq_len=n,
                num_heads=h,
                segment_lengths=self.segment_lengths,
                dilation_rates=self.dilation_rates,
                mode=self.mode,
                bounds=RingSchedule.chunk_bounds(lengths, sched.lanes),
                pairs=sched.pairs(),
                is_causal=bool(is_causal),
                scale=scale,
                kernels=KernelSet(q.device, q.dtype, d, self.backend),
                # the backward holds one call's gradients and workspace at a time: a quarter of
                # the shard's rows x heads per call keeps them ~1.2 output shards (issue 33)
                max_call_rows=max(1, max(lengths) * h // CALL_SHARE),
            )

        return self._plans.get(key, build)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ring_size={self.ring_size}"
