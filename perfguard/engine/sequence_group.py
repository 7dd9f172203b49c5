"""One sequence spread over the ranks of a torch.distributed group: this rank's rows of it.

The distributed suite (``bench_distributed``) gives rank ``r`` of ``N`` the contiguous positions
``split_lengths(n, N)[r]`` of q, k and v.  Two things need the *sequence*, not the shard:

- **inputs that are the same at every N** (:meth:`SequenceGroup.randn`): the rows are drawn in
  blocks of :data:`BLOCK` positions, each from its own seed, and each rank draws only the blocks
  its rows touch; rows ``[a, b)`` hold the same numbers whatever the number of ranks.  The error
  against the float64 reference at N = 1, 2, 4 (the accuracy page's "error against the number of
  ranks") is then the error of one computation distributed N ways, not of N different draws;
- **the float64 reference of the whole sequence, computed sharded** (:mod:`perfguard.engine.accuracy`):
  every rank's queries need every key and value (:meth:`SequenceGroup.gather`, differentiable:
  its backward sums the ranks' gradients of the gathered rows and keeps this rank's), and the
  norms of the errors add up over the ranks (:meth:`SequenceGroup.sum`, :meth:`SequenceGroup.max`).

With one rank (or no process group) every collective is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: Positions drawn from one seed: a shard boundary anywhere inside a block still gives every row
#: the same numbers (the rank draws the whole block and keeps its rows).
BLOCK = 256


def shard_lengths(seq_len: int, ranks: int) -> tuple[int, ...]:
    """``seq_len`` positions split into ``ranks`` contiguous shards as evenly as possible, the first
    ones one longer: rank ``r`` holds ``sum(lengths[:r])`` up to ``sum(lengths[:r + 1])``.

    perfguard's split, part of the contract a sequence-parallel module follows
    (docs/guarding-your-package.md)."""
    base, extra = divmod(seq_len, ranks)
    return tuple(base + (1 if r < extra else 0) for r in range(ranks))


@dataclass(frozen=True)
class SequenceGroup:
    """This rank's place in a sequence spread over ``len(lengths)`` ranks."""

    rank: int
    lengths: tuple[int, ...]

    @classmethod
    def current(cls, seq_len: int) -> SequenceGroup:
        """The group of this process (rank 0 of 1 without torch.distributed)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
        else:
            rank, world = 0, 1
        return cls(rank, shard_lengths(seq_len, world))

    @property
    def world(self) -> int:
        return len(self.lengths)

    @property
    def seq_len(self) -> int:
        return sum(self.lengths)

    @property
    def start(self) -> int:
        return sum(self.lengths[: self.rank])

    @property
    def end(self) -> int:
        return self.start + self.lengths[self.rank]

    def randn(
        self, batch: int, tail: tuple[int, ...], count: int, *, seed: int, device: str, dtype: torch.dtype
    ) -> list[torch.Tensor]:
        """``count`` tensors ``(batch, this rank's rows, *tail)`` of standard normal float32 numbers
        (cast to ``dtype``), the rows of sequence-long tensors that are the same at every N."""
        first, last = self.start // BLOCK, (self.end - 1) // BLOCK
        parts: list[list[torch.Tensor]] = [[] for _ in range(count)]
        for block in range(first, last + 1):
            gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + block)
            lo = max(self.start - block * BLOCK, 0)
            hi = min(self.end - block * BLOCK, BLOCK)
            for made in parts:
                drawn = torch.randn((batch, BLOCK, *tail), generator=gen, device=device)
                made.append(drawn[:, lo:hi])
        return [torch.cat(made, dim=1).to(dtype).contiguous() for made in parts]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of ``x`` (dim 1) in sequence order, differentiable in this rank's."""
        if self.world == 1:
            return x
        return _Gather.apply(x, self)

    def sum(self, values: list[float], device: torch.device | str) -> list[float]:
        """Each value summed over the ranks."""
        return self._reduce(values, device, "sum")

    def max(self, values: list[float], device: torch.device | str) -> list[float]:
        """Each value's largest over the ranks."""
        return self._reduce(values, device, "max")

    def _reduce(self, values: list[float], device: torch.device | str, how: str) -> list[float]:
        if self.world == 1:
            return list(values)
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if how == "sum" else dist.ReduceOp.MAX)
        return [float(v) for v in t.tolist()]


class _Gather(torch.autograd.Function):
    """all_gather along the sequence (padded to the longest shard: collectives need equal sizes);
    the backward is its adjoint: the gradients of the gathered rows summed over the ranks (every
    rank's queries read every key), this rank's rows kept."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: SequenceGroup) -> torch.Tensor:  # type: ignore[override]
        import torch.distributed as dist

        ctx.group = group
        longest = max(group.lengths)
        padded = x.new_zeros((x.shape[0], longest, *x.shape[2:]))
        padded[:, : x.shape[1]] = x
        parts = [torch.empty_like(padded) for _ in range(group.world)]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([p[:, :n] for p, n in zip(parts, group.lengths, strict=True)], dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        import torch.distributed as dist

        group: SequenceGroup = ctx.group
        total = grad.contiguous().clone()
        dist.all_reduce(total)
        return total[:, group.start : group.end], None
