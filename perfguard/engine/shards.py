"""The case one rank measures in a distributed round: the module and this rank's shard of q, k, v.

The distributed suite (``asv_benchmarks/bench_distributed.py``) times one long sequence spread over
the round's ranks, for the implementations whose registry entry declares a sequence-parallel path
(``sequence_parallel``, :class:`perfguard.declare.SequenceParallel`): rank ``r`` of ``N`` holds the
contiguous positions ``shard_lengths(n, N)[r]`` of q, k and v (random, seeded per block of
positions, made on the device: no rank ever builds the whole sequence, and rows hold the same
numbers at every N: :mod:`perfguard.engine.sequence_group`), and the module is built as the
registry builds it for the benchmarks, with :func:`perfguard.profiles.distributed_dilation`'s
segments and the entry's keywords for a group of ranks (``ranks``; with one rank ``one_rank``: the
N = 1 point of the scaling view).  How the sequence is split is perfguard's, part of the contract
a sequence-parallel module follows (docs/guarding-your-package.md).  The result is a plain
:class:`perfguard.engine.cases.Case`, so :mod:`perfguard.engine.passes` measures it step by step
exactly as it measures a single-process case.

What the case stands for is the whole sequence: ``tokens`` and the attended-pair ``forward_flops``
are the group's (tokens/s and TFLOP/s of the group), and ``info`` carries the world size and the
shard lengths.
"""

from __future__ import annotations

from typing import Any

import torch

from perfguard import profiles
from perfguard.engine import cases, guarded, passes
from perfguard.engine.sequence_group import SequenceGroup, shard_lengths


def world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) without torch.distributed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def build(impl: str, seq_len: int, dtype: str, device: str, profile: profiles.Profile) -> cases.Case:
    """This rank's case for one benchmark x params, or raise :class:`perfguard.engine.cases.Unsupported`."""
    package = guarded.current()
    if impl not in package.sequence_parallel():
        known = ", ".join(package.sequence_parallel()) or "none"
        raise cases.Unsupported(
            f"{impl} declares no sequence-parallel path (sequence_parallel in {package.name}'s registry; "
            f"declared: {known})"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise cases.Unsupported("CUDA is not available here")
    if device == "cpu" and seq_len > cases.CPU_MAX_SEQ_LEN:
        raise cases.Unsupported(f"seq_len {seq_len} > {cases.CPU_MAX_SEQ_LEN} is not benchmarked on the CPU")
    spec = package.get(impl)
    parallel = guarded.sequence_parallel(spec)
    torch_dtype = cases.DTYPES[dtype]
    if torch_dtype not in (spec.cuda_dtypes if device == "cuda" else spec.cpu_dtypes):
        raise cases.Unsupported(f"{impl} does not support {dtype} on {device}")
    rank, size = world()
    lengths = shard_lengths(seq_len, size)
    shape = profile.shape(device)
    dilation = profiles.distributed_dilation(seq_len)
    overrides: dict[str, Any] = dict(dilation)
    overrides.update(parallel.ranks if size > 1 else parallel.one_rank)
    overrides.update(cases.head_overrides(spec.multihead, shape))
    # the same initial parameters on every rank and at every number of ranks (a multihead module's
    # projections): one model spread over the ranks, whose error compares across N
    torch.manual_seed(0)
    try:
        module = spec.build("bench", device=device, dtype=torch_dtype, **overrides)
        inputs = _shard(spec.multihead, shape, SequenceGroup(rank, tuple(lengths)), device, torch_dtype)
    except torch.cuda.OutOfMemoryError as exc:
        raise cases.Unsupported(f"does not fit the GPU: {str(exc).splitlines()[0]}") from None
    config = {**dict(spec.config("bench").kwargs), **overrides}
    config.update(
        batch=shape.batch,
        seq_len=seq_len,
        num_heads=shape.num_heads,
        head_dim=shape.head_dim,
        world_size=size,
        shard_lengths=list(lengths),
    )
    pairs = cases.attended_pairs(module, seq_len, shape.num_heads, guarded.computes(spec), config)
    return cases.Case(
        impl=impl,
        seq_len=seq_len,
        dtype=dtype,
        device=device,
        module=module,
        inputs=inputs,
        multihead=spec.multihead,
        config={str(k): (list(v) if isinstance(v, tuple) else v) for k, v in config.items()},
        tokens=shape.batch * seq_len,
        forward_flops=4.0 * shape.batch * pairs * shape.head_dim,
    )


def _shard(
    multihead: bool, shape: profiles.Shape, group: SequenceGroup, device: str, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's rows of random q, k, v, made on the device: the same numbers at every number of
    ranks (:meth:`SequenceGroup.randn`), so the distributed errors compare across N; never zeros."""
    tail = (shape.num_heads * shape.head_dim,) if multihead else (shape.num_heads, shape.head_dim)
    q, k, v = group.randn(shape.batch, tail, 3, seed=1000, device=device, dtype=dtype)
    return q, k, v


_SLOT = passes.CaseSlot(build)


def current(impl: str, seq_len: int, dtype: str, device: str, profile: profiles.Profile) -> passes.Measured:
    """This rank's case for these parameters, built once (see :class:`perfguard.engine.passes.CaseSlot`)."""
    return _SLOT.current(impl, seq_len, dtype, device, profile)


def current_measured() -> passes.Measured | None:
    """The case this rank measures now, if any (the round worker profiles its passes)."""
    return _SLOT.measured()


def release() -> None:
    """Forget the current case and give its GPU memory back."""
    _SLOT.release()
