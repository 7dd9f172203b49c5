"""asv suite: the sequence-parallel implementations across the ranks of a torch.distributed group.

One long sequence is spread over the round's ranks (each holds its contiguous shard of q, k and v,
:mod:`perfguard.engine.shards`) and an implementation whose registry entry declares a
sequence-parallel path (``sequence_parallel``; ``attention``: its rings) computes its attention;
every benchmark is measured on every rank with the same number of calls, and the number stored is
the group's:

| benchmark | unit | what (the group's number) |
| --- | --- | --- |
| ``Forward.track_time`` | seconds | per call, the slowest rank's time (``info.rank_medians``) |
| ``ForwardBackward.track_time`` | seconds | the same for forward + every input's and parameter's gradient |
| ``PeakMemory.track_forward``, ``…backward`` | bytes | the largest peak of any rank (CUDA only) |
| ``Work.track_{forward,forward_backward}_*`` | | the largest count of any rank (``info.per_rank``) |
| ``Communication.track_forward``, ``…_backward`` | seconds | communication per call, largest of any rank |
| ``Accuracy.track_*_error[_causal]`` | relative error | the whole sequence's error (float64 reference) |

The communication's share of the call is ``info.share`` (reported, never gated).  The inputs are
the same at every number of ranks (:meth:`perfguard.engine.sequence_group.SequenceGroup.randn`), so
the errors of the runs at N = 1, 2, 4 are one computation distributed N ways; up to
:data:`perfguard.engine.accuracy.MAX_SHARDED_LEN` tokens (the ``distributed-quick`` profile).

Parameters: ``impl`` (the entries that declare ``sequence_parallel``; ``attention``: ``ring``,
``hilbert_ring``, ``multihead_ring``; a package that declares none has an empty suite) x
``seq_len`` (the whole sequence, all ranks together) x ``dtype``, from the distributed profile in
``$PERFGUARD_PROFILE`` (``distributed`` / ``distributed-quick``; any other profile: the default
distributed profile of the device).  The number of ranks is not a parameter: it is the group's
size, part of the machine key of every stored run (``<machine> ranks=N``), so a 2-rank baseline is
never compared with a 4-rank run.  Multihead parameters' gradients are each rank's own
(no all-reduce: this measures the attention, not a data-parallel step).

**Plain asv** (``python -m asv run``) has no process group: every benchmark here is *skipped* in
``setup`` with that reason.  perfguard runs the suite under ``torchrun`` with ``--profile
distributed`` or ``distributed-quick`` (``perfguard.engine.rounds``; gloo on the CPU, NCCL on GPUs).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

from perfguard import profiles
from perfguard.declaration import SOURCE_ENV
from perfguard.engine import benchmark_methods, cases, guarded, outcomes, passes, shards, timing
from perfguard.engine.outcomes import Outcome
from perfguard.engine.sequence_group import SequenceGroup

# the guarded package of the repository this suite belongs to (plain asv), or of the commit a
# perfguard round measures ($PERFGUARD_SOURCE, set by the round): docs/guarding-your-package.md
os.environ.setdefault(SOURCE_ENV, str(Path(__file__).absolute().parent.parent))

DEVICE = cases.device_from_environment()
_ACTIVE = profiles.from_environment(cuda=DEVICE == "cuda")
PROFILE = (
    _ACTIVE
    if _ACTIVE.distributed
    else profiles.PROFILES["distributed" if DEVICE == "cuda" else "distributed-quick"]
)
MODULE = __name__.rsplit(".", 1)[-1]
IMPLS = guarded.current().sequence_parallel()
NO_GROUP = (
    "no torch.distributed process group: the distributed suite runs under perfguard "
    "(`perfguard run --profile distributed` or `distributed-quick`, which start it under torchrun); "
    "plain asv skips it"
)
_SETTINGS: dict[str, Any] = {}


def _params(impl: str, seq_len: int, dtype: str) -> dict[str, Any]:
    return {"impl": impl, "seq_len": seq_len, "dtype": dtype}


def _group_ready() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _per_rank(value: float) -> dict[str, Any]:
    """The group's number (the largest of any rank) and every rank's, for ``info``."""
    values = timing.per_rank(value)
    return {"value": max(values), "per_rank": values, "max_rank": values.index(max(values))}


class _Suite:
    params = (IMPLS, list(PROFILE.seq_lens), list(PROFILE.dtypes(DEVICE)))
    param_names = ("impl", "seq_len", "dtype")
    timeout = 600
    version = cases.SUITE_VERSION
    needs_cuda = False

    measured: passes.Measured | None = None

    def setup(self, impl: str, seq_len: int, dtype: str) -> None:
        if not _group_ready():
            raise NotImplementedError(NO_GROUP)
        if self.needs_cuda and DEVICE != "cuda":
            raise cases.Unsupported("peak GPU memory needs CUDA")
        if not _SETTINGS:
            _SETTINGS.update(timing.pin_settings(DEVICE))
        self.measured = shards.current(impl, seq_len, dtype, DEVICE, PROFILE)
        if self.measured.case is None:
            raise cases.Unsupported(self.measured.unsupported or "cannot run here")

    def teardown(self, impl: str, seq_len: int, dtype: str) -> None:
        self.measured = None

    def _pass(self, name: str) -> passes.Pass:
        assert self.measured is not None
        return self.measured.pass_(name)

    def _record(self, benchmark: str, p: passes.Pass, outcome: Outcome) -> float:
        case = p.case
        info = {**case.info, **outcome.info, "settings": dict(_SETTINGS), "profile": PROFILE.name}
        info["world_size"] = shards.world()[1]
        info["steps_s"] = dict(p.log)
        outcome.info = info
        return outcomes.record(f"{MODULE}.{benchmark}", _params(case.impl, case.seq_len, case.dtype), outcome)

    def _time(self, benchmark: str, pass_name: str) -> float:
        p = self._pass(pass_name)
        with benchmark_methods.skip_unsupported():
            result = timing.slowest_rank(p.timing())
        outcome = Outcome("seconds", result.median, list(result.samples), result.method, dict(result.info))
        return self._record(benchmark, p, outcome)

    def _memory(self, benchmark: str, pass_name: str) -> float:
        p = self._pass(pass_name)
        with benchmark_methods.skip_unsupported():
            memory = p.memory()
        group = _per_rank(float(memory.peak_bytes))
        value = group.pop("value")
        info = {**memory.info, **group}
        return self._record(benchmark, p, Outcome("bytes", value, [value], "cuda-allocator", info))

    def _work(self, benchmark: str, pass_name: str, what: str) -> float:
        p = self._pass(pass_name)
        info: dict[str, Any] = {}
        if what == "kernels":
            if DEVICE != "cuda":
                raise SkipNotImplemented("CUDA kernels are counted on a GPU only")
            with benchmark_methods.skip_unsupported():
                kernels = p.kernels()
            mine = float(sum(kernels.values()))
            info["breakdown"] = {"kind": "CUDA kernels", "counts": kernels}
            unit, method = "kernels", "torch.profiler"
        else:
            with benchmark_methods.skip_unsupported():
                counts = p.counts()
            mine = float(
                {"flops": counts.flops, "ops": counts.ops, "allocated": counts.allocated_bytes}[what]
            )
            unit = {"flops": "FLOP", "ops": "aten ops", "allocated": "bytes"}[what]
            method = "dispatch counts"
            if what == "ops":
                info["breakdown"] = {"kind": "aten ops", "counts": dict(counts.op_counts)}
        group = _per_rank(mine)
        value = group.pop("value")
        info.update(group)
        return self._record(benchmark, p, Outcome(unit, value, [value], method, info))

    def _communication(self, benchmark: str, pass_name: str) -> float:
        from perfguard.engine import communication

        p = self._pass(pass_name)
        if shards.world()[1] == 1:
            raise SkipNotImplemented("one rank: nothing is communicated")
        with benchmark_methods.skip_unsupported():
            p.first()
        exchange = communication.measure(p.fn, DEVICE)
        calls = timing.gather_values(exchange.comm_s)
        samples = [max(call) for call in zip(*calls, strict=True)]
        shares = timing.per_rank(exchange.share)
        info = {
            "share": max(shares),
            "share_per_rank": shares,
            "comm_s_per_rank": [statistics.median(c) for c in calls],
            "call_s_per_rank": timing.per_rank(statistics.median(exchange.call_s)),
            "bytes_sent_per_rank": timing.per_rank(float(exchange.bytes_sent)),
            "messages_per_rank": timing.per_rank(float(exchange.messages)),
            "exposed": "waited for"
            if not exchange.exposed_s
            else "NCCL kernels with no other kernel running",
        }
        if exchange.exposed_s:
            info["exposed_s_per_rank"] = timing.per_rank(statistics.median(exchange.exposed_s))
        outcome = Outcome("seconds", statistics.median(samples), samples, exchange.method, info)
        return self._record(benchmark, p, outcome)


class Forward(benchmark_methods.Forward, _Suite):
    """Inference forward pass of the whole sequence, across the ranks."""


class ForwardBackward(benchmark_methods.ForwardBackward, _Suite):
    """Forward pass and the gradients of every input and parameter, across the ranks."""


class PeakMemory(benchmark_methods.PeakMemory, _Suite):
    """Peak allocated GPU memory beyond the inputs, on the rank that needs most."""


class Work(benchmark_methods.Work, _Suite):
    """What one call does on the busiest rank, counted exactly (gated like memory)."""


class Accuracy(benchmark_methods.Accuracy, _Suite):
    """The whole sequence's error against the float64 reference, measured across the ranks
    (:mod:`perfguard.engine.accuracy`, ``group``): the same number on every rank, and the same
    inputs at every number of ranks, so the runs at N = 1, 2, 4 show the error against N."""

    def _group(self, case: cases.Case) -> SequenceGroup:
        return SequenceGroup.current(case.seq_len)


class Communication(_Suite):
    """Seconds per call spent communicating (CPU: waited for; CUDA: NCCL kernels); reported only."""

    def track_forward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._communication("Communication.track_forward", "forward")

    def track_forward_backward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._communication("Communication.track_forward_backward", "forward_backward")

    track_forward.unit = "seconds"  # type: ignore[attr-defined]
    track_forward_backward.unit = "seconds"  # type: ignore[attr-defined]
