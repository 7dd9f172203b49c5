"""The CUDA timer: events around each call after an L2 flush, graph replays where the call can be
captured, warm-up as long as the GPU needs, batches of samples until the median is known.

See :mod:`perfguard.engine.timing` for why each step is there and the numbers behind it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfguard.engine.timing.nvml import Nvml
from perfguard.engine.timing.ranks import agree, distributed
from perfguard.engine.timing.samples import Timing, gc_paused, median_interval
from perfguard.engine.timing.settings import TimerSettings


@dataclass
class Captured:
    """A call captured as a CUDA graph (or why not), and one eager call's time for the record."""

    graph: Any  # torch.cuda.CUDAGraph | None
    error: str | None
    eager_s: float | None
    host_s: float | None  # host time of that eager call (launch-bound code shows here)


_FLUSH: torch.Tensor | None = None
#: When this process last finished timing GPU work (the GPU is then still at its steady state).
_LAST_TIMED: float | None = None


def _flush_buffer() -> torch.Tensor:
    """int32 buffer of max(256 MiB, 2 x L2) on the current device, allocated once per process."""
    global _FLUSH
    if _FLUSH is None or _FLUSH.device.index != torch.cuda.current_device():
        l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 0
        n_bytes = max(256 * 1024 * 1024, 2 * int(l2))
        _FLUSH = torch.empty(n_bytes // 4, dtype=torch.int32, device="cuda")
    return _FLUSH


def _event_samples(run: Callable[[], Any], n: int, nvml: Nvml | None) -> list[float]:
    """``n`` samples of ``run`` (seconds), each after an L2 flush outside the timed events."""
    flush = _flush_buffer()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in pairs:
        flush.zero_()
        start.record()
        run()
        end.record()
    if nvml is not None:
        nvml.read()  # reads while the queued work runs (no sync)
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000.0 for start, end in pairs]


def capture(fn: Callable[[], Any]) -> Captured:
    """One eager call of ``fn`` on a side stream (timed), then ``fn`` captured as a CUDA graph.

    The side-stream call is what ``torch.cuda.graphs`` recommends before capturing (lazy
    initialisation happens outside the capture); its time is kept for the record.  Any capture
    failure means "time it eagerly": the error is returned, never raised.  Under
    ``torch.distributed`` every rank captures (NCCL's sends, receives and collectives are captured
    into the graph and run when it replays) and the ranks agree: if one rank could not capture, no
    rank times a graph, since replays must pair up across ranks.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host0 = time.perf_counter()
    with torch.cuda.stream(side):
        start.record()
        fn()
        end.record()
    host_s = time.perf_counter() - host0
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager_s = start.elapsed_time(end) / 1000.0
    graph, error = _capture_graph(fn)
    if distributed() and agree(0.0 if graph is None else 1.0, "min") == 0.0 and graph is not None:
        graph, error = None, "another rank could not capture the call"
    if graph is not None:
        graph.replay()  # every rank replays: the graph's sends meet their receives
        torch.cuda.synchronize()
    return Captured(graph, error, eager_s, host_s)


def _capture_graph(fn: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph | None, str | None]:
    """``fn`` captured as a CUDA graph, or why not (nothing runs: a capture only records)."""
    try:
        try:
            graph = torch.cuda.CUDAGraph(keep_graph=True)
        except TypeError:  # a torch without keep_graph: kernels are then counted by the profiler
            graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph, None
    except Exception as exc:  # any capture failure means "time it eagerly"
        torch.cuda.synchronize()  # a failed capture can leave the stream in an error state
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        return None, f"{type(exc).__name__}: {text}"


def time_cuda(run: Callable[[], Any], s: TimerSettings, method: str, info: dict[str, Any]) -> Timing:
    """Warm-up as long as the GPU needs, then batches of flushed samples until the median is known."""
    global _LAST_TIMED
    since = None if _LAST_TIMED is None else time.perf_counter() - _LAST_TIMED
    idle = since is None or since > s.idle_gap_s
    target = s.warmup_s if idle else s.rewarm_s
    started = time.perf_counter()
    probe = _event_samples(run, 1, None)[0]  # one timed call sizes the warm-up and the batches
    per_call = agree(max(probe, 1e-6))
    warm_calls = int(agree(max(s.min_warmup_calls, math.ceil(target / per_call)), "max"))
    for _ in range(warm_calls):
        run()
    torch.cuda.synchronize()
    warm_wall = time.perf_counter() - started
    nvml = Nvml()
    nvml.read()
    batch = int(agree(min(100, max(5, int(0.01 / per_call))), "min"))
    samples: list[float] = []
    sampling = time.perf_counter()
    stop = ""
    with gc_paused():
        while not stop:
            samples += _event_samples(run, batch, nvml)
            wall = time.perf_counter() - sampling
            stop = _stop_reason(samples, s, wall)
            if agree(0.0 if stop else 1.0, "max") > 0:  # every rank stops together
                stop = ""
    _, lo, hi = median_interval(samples)
    info.update(
        warmup_s=warm_wall,
        warmup_target_s=target,
        warmup_calls=warm_calls,
        gpu_was_idle=idle,
        stop=stop,
        median_interval=[lo, hi],
        sampling_s=time.perf_counter() - sampling,
        nvml=nvml.summary(),
    )
    _LAST_TIMED = time.perf_counter()
    return Timing(samples, method, info)


def _stop_reason(samples: list[float], s: TimerSettings, wall: float) -> str:
    """Why sampling may stop now ("" to go on): precise enough, or a budget is spent."""
    n = len(samples)
    if n >= s.min_samples:
        med, lo, hi = median_interval(samples)
        if med > 0 and (hi - lo) / 2 <= s.precision * med:
            return "precise"
        if sum(samples) >= s.max_sample_s:
            return "sample budget"
        if wall >= s.max_wall_s:
            return "wall budget"
    if n >= s.max_samples:
        return "sample count"
    return ""
