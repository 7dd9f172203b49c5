"""The timer the asv suites call: the most stable number we can get for each benchmark, at the
cost the measuring needs.

GPU work is asynchronous and the host adds noise, so on CUDA (``research/gpu_timing.md`` §0, §9-§11,
``docs/perf/check.md`` for the measurements behind every number here):

- **CUDA-graph replay** of the call wherever it can be captured (:func:`capture`): eager timing
  of launch-bound code varies 10-140% between processes, a replay ~0.1-0.4%.  One eager call on
  the capture's side stream is timed with events and kept as information (``info.eager_s``); a
  call that cannot be captured (a host sync, a CPU tensor copied in) is timed eagerly
  (``method = "cuda-events"``) and the capture error is recorded.  The graph is kept
  (``keep_graph``) so that :mod:`perfguard.engine.work` can count its kernels at no extra cost;
- **warm-up as long as the GPU needs**: ``warmup_s`` (0.3 s) of replays when the GPU was idle
  (the first timing of a process, or more than ``idle_gap_s`` since the last one: clocks and power
  settle within ~0.1 s of heavy work on an H100), else ``rewarm_s`` (20 ms, at least two calls):
  the GPU is still at the steady state the previous benchmark left it in;
- **L2 flush before every sample**, outside the timed region (``zero_()`` of an int32 buffer of
  max(256 MiB, 2 x L2)), and **CUDA events** around each call;
- **sampling until the median is known precisely enough** (what NVBench's stdrel criterion does
  for the mean): batches of ~10 ms of work until the 95% distribution-free interval of the median
  is within ±``precision`` (0.2%) of it, with at least ``min_samples`` (10) samples and at most
  ``max_sample_s`` (0.3 s) of sampled work or ``max_samples``; why it stopped is recorded;
- **NVML per round**: SM clock, power, temperature and clock-event reasons read while the samples
  run (no sync: NVML answers while the queued work executes);
- the **same number of calls on every rank** when ``torch.distributed`` is initialised (time-based
  counts would differ between ranks and deadlock a collective): counts and stop decisions are
  agreed by all-reduce, and nothing is captured.  :func:`slowest_rank` then makes the group's
  samples (each call's time on the rank that took longest) and :func:`per_rank` gathers one number
  from every rank (peak memory, work counts).

On the CPU the per-call samples are **process CPU time** (``time.process_time``) with torch pinned
to one intra-op thread (``method = "cpu-time"``): a shared 2-core CI machine steals wall time from
a benchmark, not CPU time, so CPU time is the number that stays put when the machine is busy; the
wall-clock median is kept as information.

Peak memory (:func:`peak_memory`) is measured in its own eager calls, before capture: the peak
of the bytes the call's tensors request minus those requested before it (the caching allocator's
``requested_bytes``, independent of which cached blocks it hands out), twice, to show it is
deterministic.

The settings that change kernels or numbers (TF32, cuDNN benchmark mode, SDPA backends, matmul
precision, threads) are pinned by :func:`pin_settings` and returned for the record.

Modules: :mod:`~perfguard.engine.timing.settings` (when to stop sampling; the pinned torch
settings), :mod:`~perfguard.engine.timing.samples` (one round's samples and the interval of their
median), :mod:`~perfguard.engine.timing.cpu` and :mod:`~perfguard.engine.timing.cuda` (the two
timers), :mod:`~perfguard.engine.timing.nvml` (the GPU's clocks, power and temperature meanwhile),
:mod:`~perfguard.engine.timing.memory` (peak memory), :mod:`~perfguard.engine.timing.ranks` (the
same calls on every rank, and the group's numbers).  :func:`time_call` picks the timer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfguard.engine.timing.cpu import time_cpu
from perfguard.engine.timing.cuda import Captured, capture, time_cuda
from perfguard.engine.timing.memory import Memory, peak_memory
from perfguard.engine.timing.nvml import THROTTLE_BITS
from perfguard.engine.timing.ranks import gather_values, per_rank, slowest_rank
from perfguard.engine.timing.samples import Timing, median_interval
from perfguard.engine.timing.settings import CPU_SETTINGS, CUDA_SETTINGS, TimerSettings, pin_settings

__all__ = [
    "CPU_SETTINGS",
    "CUDA_SETTINGS",
    "THROTTLE_BITS",
    "Captured",
    "Memory",
    "TimerSettings",
    "Timing",
    "capture",
    "gather_values",
    "median_interval",
    "peak_memory",
    "per_rank",
    "pin_settings",
    "slowest_rank",
    "time_call",
]


def time_call(
    fn: Callable[[], Any],
    device: str,
    *,
    settings: TimerSettings | None = None,
    captured: Captured | None = None,
    graph: bool = True,
) -> Timing:
    """Per-call samples of ``fn()`` on ``device`` ("cpu" or "cuda"); see the module docstring.

    ``fn`` must do the same work on every call and need nothing from the host between calls
    (inputs are prepared once, outside), and must have been called once already (first-call
    costs: compilation, autotuning, lazy loading).  On CUDA, ``captured`` is the result of
    :func:`capture` when the caller already captured ``fn`` (it is captured here otherwise, unless
    ``graph=False``, which times it eagerly).
    """
    s = settings or TimerSettings.for_device(device)
    if device != "cuda":
        return time_cpu(fn, s)
    if captured is None and graph:
        captured = capture(fn)
    info: dict[str, Any] = {}
    if captured is not None:
        info.update(eager_s=captured.eager_s, host_s_per_call=captured.host_s)
        if captured.error:
            info["graph_error"] = captured.error
    if captured is not None and captured.graph is not None:
        result = time_cuda(captured.graph.replay, s, "cuda-graph", info)
        if captured.eager_s:
            result.info["graph_over_eager"] = result.median / captured.eager_s
        return result
    return time_cuda(fn, s, "cuda-events", info)
