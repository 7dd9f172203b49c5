"""How much of a distributed call is communication: measured on each rank, reported, never gated.

The ring overlaps its key/value exchange with attention (``attention._distributed``): what costs
time is the communication a rank *waits for*.  :func:`measure` runs a few calls of ``fn`` (after
the timing, never during it) and returns, per call, the communication seconds and the call's
seconds, plus the bytes this rank sent (exact: the sizes of the tensors it hands to ``isend``):

- **CPU (gloo)**: the host time spent blocked in ``Work.wait()`` of the ring's point-to-point
  requests and in its collectives (``all_gather`` of the shard lengths): on the CPU the rank does
  nothing else meanwhile, so this is exactly the exposed communication (``method = "host-wait"``).
- **CUDA (NCCL)**: one ``torch.profiler`` pass per call; the device intervals of NCCL kernels are
  the communication (``comm_s``, busy time, including a receive waiting for a late peer), and the
  part of them during which no other kernel runs is the exposed communication (``exposed_s``)
  (``method = "nccl-kernels"``).  Without CUDA kernel events (no CUPTI) the host waits are timed
  with a device synchronisation around each (``method = "host-wait+sync"``; it serialises the
  overlap, so it over-states).

The wrappers replace ``torch.distributed.batch_isend_irecv`` and ``all_gather`` for the duration of
the measurement only (the implementations call them through the module at call time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

#: Calls measured per pass (after the timing; each is one profiler pass on CUDA).
CALLS = 5


@dataclass
class Exchange:
    """Communication of ``len(call_s)`` calls on this rank."""

    comm_s: list[float]  # per call: communication seconds (CPU: waited for; CUDA: NCCL busy time)
    call_s: list[float]  # per call: wall seconds of the whole call (device synchronised)
    bytes_sent: int  # per call, by this rank
    messages: int  # per call: point-to-point sends and collectives
    method: str
    exposed_s: list[float] = field(default_factory=list)  # CUDA: NCCL time with nothing else running

    @property
    def share(self) -> float:
        """Median communication seconds over median call seconds (exposed where known)."""
        comm = self.exposed_s or self.comm_s
        call = statistics.median(self.call_s)
        return statistics.median(comm) / call if call > 0 else 0.0


@dataclass
class _Tally:
    waited_s: float = 0.0
    bytes_sent: int = 0
    messages: int = 0
    sync: bool = False  # CUDA fallback: synchronise around each wait

    def timed(self, run: Callable[[], Any]) -> Any:
        if self.sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = run()
        if self.sync:
            torch.cuda.synchronize()
        self.waited_s += time.perf_counter() - t0
        return out


class _TimedWork:
    """A request whose ``wait()`` counts as communication time."""

    def __init__(self, work: Any, tally: _Tally) -> None:
        self._work, self._tally = work, tally

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        return self._tally.timed(lambda: self._work.wait(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


@contextmanager
def _counted(tally: _Tally) -> Iterator[None]:
    """``batch_isend_irecv`` and ``all_gather`` counted (and their waits timed) while inside."""
    import torch.distributed as dist

    batch, all_gather = dist.batch_isend_irecv, dist.all_gather

    def counted_batch(ops: list[Any]) -> list[Any]:
        for op in ops:
            if getattr(op, "op", None) in (dist.isend, dist.send):
                tally.bytes_sent += op.tensor.numel() * op.tensor.element_size()
                tally.messages += 1
        return [_TimedWork(w, tally) for w in batch(ops)]

    def counted_all_gather(
        tensor_list: list[torch.Tensor], tensor: torch.Tensor, *args: Any, **kw: Any
    ) -> Any:
        tally.bytes_sent += tensor.numel() * tensor.element_size() * max(len(tensor_list) - 1, 0)
        tally.messages += 1
        if kw.get("async_op"):
            work = all_gather(tensor_list, tensor, *args, **kw)
            return _TimedWork(work, tally) if work is not None else None
        return tally.timed(lambda: all_gather(tensor_list, tensor, *args, **kw))

    dist.batch_isend_irecv, dist.all_gather = counted_batch, counted_all_gather
    try:
        yield
    finally:
        dist.batch_isend_irecv, dist.all_gather = batch, all_gather


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def exposed(comm: list[tuple[float, float]], other: list[tuple[float, float]]) -> tuple[float, float]:
    """(busy, exposed): the length of the union of ``comm``, and of its part that no ``other`` covers."""
    comm_u, other_u = _union(comm), _union(other)
    covered = 0.0
    for c0, c1 in comm_u:
        for o0, o1 in other_u:
            covered += max(0.0, min(c1, o1) - max(c0, o0))
    busy = _length(comm_u)
    return busy, max(0.0, busy - covered)


def _kernel_intervals(prof: Any) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(NCCL kernel intervals, other kernel intervals) of a profiled call, in seconds."""
    from torch.autograd import DeviceType

    comm, other = [], []
    for event in prof.events():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        span = (event.time_range.start / 1e6, event.time_range.end / 1e6)
        (comm if "nccl" in event.name.lower() else other).append(span)
    return comm, other


def measure(fn: Callable[[], Any], device: str, *, calls: int = CALLS) -> Exchange:
    """Communication of ``calls`` calls of ``fn`` on this rank (see the module docstring).

    Every rank must call this with the same ``calls`` (the calls exchange with each other); the
    method is agreed too: the profiler only when every rank sees NCCL kernels in its first call.
    """
    if device != "cuda":
        return _host_waits(fn, calls, sync=False)
    from perfguard.engine.timing import per_rank

    first = _profiled(fn)
    if min(per_rank(1.0 if first[0] else 0.0)) > 0:
        measured = [first, *(_profiled(fn) for _ in range(calls - 1))]
        spans = [exposed(nccl, other) for nccl, other, _, _ in measured]
        return Exchange(
            comm_s=[busy for busy, _ in spans],
            call_s=[call for _, _, call, _ in measured],
            bytes_sent=measured[-1][3].bytes_sent,
            messages=measured[-1][3].messages,
            method="nccl-kernels",
            exposed_s=[hidden for _, hidden in spans],
        )
    return _host_waits(fn, calls, sync=True)


def _profiled(
    fn: Callable[[], Any],
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], float, _Tally]:
    """One call under the profiler: (NCCL kernel intervals, other kernel intervals, call s, tally)."""
    from torch.profiler import ProfilerActivity, profile

    tally = _Tally()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof, _counted(tally):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        call = time.perf_counter() - t0
    nccl, other = _kernel_intervals(prof)
    return nccl, other, call, tally


def _host_waits(fn: Callable[[], Any], calls: int, *, sync: bool) -> Exchange:
    """The time spent waiting for requests and collectives, per call (CUDA: synchronised)."""
    comm_s: list[float] = []
    call_s: list[float] = []
    tally = _Tally(sync=sync)
    for _ in range(calls):
        tally.waited_s, tally.bytes_sent, tally.messages = 0.0, 0, 0
        if sync:
            torch.cuda.synchronize()
        with _counted(tally):
            t0 = time.perf_counter()
            fn()
            if sync:
                torch.cuda.synchronize()
            call_s.append(time.perf_counter() - t0)
        comm_s.append(tally.waited_s)
    method = "host-wait+sync" if sync else "host-wait"
    return Exchange(comm_s, call_s, tally.bytes_sent, tally.messages, method)
