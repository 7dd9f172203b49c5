"""The timer the asv suites call: the most stable number we can get for each benchmark.

GPU work is asynchronous and the host adds noise, so on CUDA (``research/gpu_timing.md`` §0, §9–§11):

- **warm-up by time**, at least ``warmup_s`` (1 s) and 5 calls of back-to-back work, so clocks,
  power and lazy module loading reach their steady state before anything is kept (the first call
  is JIT / autotune and is never timed).  When the same process finished timing other GPU work
  less than a second earlier (the suite measures an implementation's sequence lengths one after
  another), the GPU is still at that steady state and ``rewarm_s`` (0.3 s) is enough; the warm-up
  actually done is recorded with every result;
- **L2 flush before every sample**, outside the timed region (``zero_()`` of an int32 buffer of
  max(256 MiB, 2 × L2));
- **CUDA events** around each call;
- **CUDA-graph replay** of the call wherever it can be captured: eager timing of launch-bound code
  varies 10–140% between processes, a graph replay ~1%.  The eager median is kept as
  information (``info.eager_median``) and the gated samples are the replays (``method =
  "cuda-graph"``).  A call that cannot be captured (a host sync, a CPU tensor copied in) is timed
  eagerly (``method = "cuda-events"``) and the capture error is recorded;
- **NVML per round**: SM clock, power, temperature and clock-event reasons read while the samples
  run (no sync: NVML answers while the queued work executes);
- the **same number of calls on every rank** when ``torch.distributed`` is initialised (time-based
  counts would differ between ranks and deadlock a collective): counts are agreed by all-reduce.

On the CPU the per-call samples are **process CPU time** (``time.process_time``) with torch pinned
to one intra-op thread (``method = "cpu-time"``): a shared 2-core CI machine steals wall time from
a benchmark, not CPU time, so CPU time is the number that stays put when the machine is busy; the
wall-clock median is kept as information.

Peak memory (:func:`peak_memory`) is measured in its own pass: ``max_memory_allocated()`` minus the
allocation before the call, after one warm call (the first may allocate autotune workspaces), twice
to show it is deterministic.

The settings that change kernels or numbers (TF32, cuDNN benchmark mode, SDPA backends, matmul
precision, threads) are pinned by :func:`pin_settings` and returned for the record.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

#: Clock-event reason bits that mean the GPU was slowed by something other than its normal power
#: cap (HW slowdown, SW thermal, HW thermal, HW power brake): a round with these is suspect.
THROTTLE_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


@dataclass(frozen=True)
class TimerSettings:
    """How long to warm up and how many samples to take (seconds are of measured work)."""

    warmup_s: float
    rewarm_s: float  # warm-up when this process timed GPU work less than a second ago
    min_warmup_calls: int
    min_samples: int
    max_samples: int
    min_time_s: float
    max_time_s: float
    eager_samples: int  # CUDA only: eager samples kept as information next to the graph replays

    @classmethod
    def for_device(cls, device: str) -> TimerSettings:
        if device == "cuda":
            return CUDA_SETTINGS
        return CPU_SETTINGS


CUDA_SETTINGS = TimerSettings(
    warmup_s=1.0, rewarm_s=0.3, min_warmup_calls=5, min_samples=30, max_samples=300, min_time_s=0.4,
    max_time_s=5.0, eager_samples=10,
)  # fmt: skip
# The CPU is the smoke-test device (CI has no GPU): short warm-up, enough samples for the rank test.
CPU_SETTINGS = TimerSettings(
    warmup_s=0.2, rewarm_s=0.2, min_warmup_calls=2, min_samples=12, max_samples=200, min_time_s=0.4,
    max_time_s=3.0, eager_samples=0,
)  # fmt: skip


@dataclass
class Timing:
    """Per-call samples (seconds) of one round, how they were taken, and what was seen meanwhile."""

    samples: list[float]
    method: str  # cuda-graph | cuda-events | cpu-time
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Memory:
    """Peak allocated bytes beyond what was allocated before the call."""

    peak_bytes: int
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------------


def pin_settings(device: str) -> dict[str, Any]:
    """Pin what changes kernels or numbers, and return it for the record.

    TF32 off and float32 matmuls at "highest" (an implementation cannot speed itself up by
    loosening precision), cuDNN autotuning off (its choice can differ between processes and make
    A/A comparisons bimodal), every SDPA backend enabled (the default; each implementation picks its
    kernel, and the record says which were allowed), one CPU intra-op thread on the CPU.
    """
    torch.set_float32_matmul_precision("highest")
    settings: dict[str, Any] = {"float32_matmul_precision": "highest"}
    if device == "cpu":
        torch.set_num_threads(1)
    settings["cpu_intra_op_threads"] = torch.get_num_threads()
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        for name in ("flash", "mem_efficient", "math", "cudnn"):
            enable = getattr(torch.backends.cuda, f"enable_{name}_sdp", None)
            if enable is not None:
                enable(True)
        settings.update(
            cuda_matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            cudnn_deterministic=torch.backends.cudnn.deterministic,
            sdpa_backends={
                name: bool(getattr(torch.backends.cuda, f"{name}_sdp_enabled", lambda: None)())
                for name in ("flash", "mem_efficient", "math", "cudnn")
            },
        )
    return settings


# --------------------------------------------------------------------------------------------
# NVML during a round
# --------------------------------------------------------------------------------------------


class _Nvml:
    """Reads SM clock, power, temperature and clock-event reasons of the current device."""

    def __init__(self) -> None:
        self.readings: list[dict[str, float]] = []
        self._nv: Any = None
        self._handle: Any = None
        try:
            import pynvml as nv

            nv.nvmlInit()
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            uuid = str(getattr(props, "uuid", ""))
            try:
                self._handle = nv.nvmlDeviceGetHandleByUUID(
                    "GPU-" + uuid if not uuid.startswith("GPU-") else uuid
                )
            except Exception:  # fall back to the index (no CUDA_VISIBLE_DEVICES remap)
                self._handle = nv.nvmlDeviceGetHandleByIndex(index)
            self._nv = nv
        except Exception:  # no NVML: timings are still valid, only unexplained
            self._nv = None

    def read(self) -> None:
        if self._nv is None:
            return
        nv, h = self._nv, self._handle
        try:
            reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        except Exception:  # older bindings
            try:
                reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            except Exception:
                reasons = 0
        with contextlib.suppress(Exception):
            self.readings.append(
                {
                    "sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                    "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "temperature_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    "reasons": float(reasons),
                }
            )

    def summary(self) -> dict[str, Any]:
        if not self.readings:
            return {}
        clocks = [r["sm_clock_mhz"] for r in self.readings]
        reasons = 0
        for r in self.readings:
            reasons |= int(r["reasons"])
        return {
            "readings": len(self.readings),
            "sm_clock_mhz_median": statistics.median(clocks),
            "sm_clock_mhz_min": min(clocks),
            "power_w_median": statistics.median(r["power_w"] for r in self.readings),
            "temperature_c_max": max(r["temperature_c"] for r in self.readings),
            "clock_event_reasons": reasons,
            "throttled": [name for bit, name in THROTTLE_BITS.items() if reasons & bit],
        }


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _agree(value: float, op: str = "max") -> float:
    """The same number on every rank (all-reduce) when torch.distributed runs, else ``value``.

    Every loop whose length depends on a clock goes through this, so that all ranks make the same
    number of calls (a collective inside ``fn`` would otherwise wait forever on the rank that
    stopped first).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
    return float(t.item())


def _sample_count(per_call_s: float, s: TimerSettings) -> int:
    """Samples for one round: enough for ``min_time_s`` of work, within the settings' bounds."""
    if per_call_s <= 0 or not math.isfinite(per_call_s):
        return s.max_samples
    wanted = math.ceil(s.min_time_s / per_call_s)
    capped = math.floor(s.max_time_s / per_call_s)
    return int(max(s.min_samples, min(s.max_samples, wanted, max(capped, s.min_samples))))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Garbage collection off while samples are taken (as timeit does)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --------------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------------


def _time_cpu(fn: Callable[[], Any], s: TimerSettings) -> Timing:
    fn()  # first call: lazy initialisation, never timed
    started = time.perf_counter()
    calls = 0
    while _agree(float(calls < s.min_warmup_calls or time.perf_counter() - started < s.warmup_s)) > 0:
        fn()
        calls += 1
    warm_wall = time.perf_counter() - started
    per_call = _agree(warm_wall / max(calls, 1))
    n = _sample_count(per_call, s)
    samples: list[float] = []
    walls: list[float] = []
    with _gc_paused():
        for _ in range(n):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            c1, w1 = time.process_time(), time.perf_counter()
            samples.append(c1 - c0)
            walls.append(w1 - w0)
    return Timing(
        samples,
        "cpu-time",
        {
            "warmup_s": warm_wall,
            "warmup_calls": calls,
            "wall_median": statistics.median(walls),
            "cpu_threads": torch.get_num_threads(),
        },
    )


# --------------------------------------------------------------------------------------------
# CUDA
# --------------------------------------------------------------------------------------------

_FLUSH: torch.Tensor | None = None
#: When this process last finished timing GPU work (the GPU is then still at its steady state).
_LAST_TIMED: float | None = None


def _distributed() -> bool:
    """Whether several ranks run (graph capture of collectives is not attempted then)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _flush_buffer() -> torch.Tensor:
    """int32 buffer of max(256 MiB, 2 x L2) on the current device, allocated once per process."""
    global _FLUSH
    if _FLUSH is None or _FLUSH.device.index != torch.cuda.current_device():
        l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 0
        n_bytes = max(256 * 1024 * 1024, 2 * int(l2))
        _FLUSH = torch.empty(n_bytes // 4, dtype=torch.int32, device="cuda")
    return _FLUSH


def _event_samples(run: Callable[[], Any], n: int, nvml: _Nvml | None) -> list[float]:
    """``n`` samples of ``run`` (seconds), each after an L2 flush outside the timed events."""
    flush = _flush_buffer()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    every = max(1, n // 8)
    with _gc_paused():
        for i, (start, end) in enumerate(pairs):
            flush.zero_()
            start.record()
            run()
            end.record()
            if nvml is not None and i % every == every // 2:
                nvml.read()  # reads while the queued work runs (no sync)
        torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000.0 for start, end in pairs]


def _capture(fn: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph | None, str | None]:
    """A CUDA graph of one call of ``fn``, or (None, why not)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm the side stream as torch.cuda.graphs recommends
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        return graph, None
    except Exception as exc:  # any capture failure means "time it eagerly"
        torch.cuda.synchronize()
        # A failed capture can leave the stream in capture mode's error state; a sync clears it.
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def _time_cuda(fn: Callable[[], Any], s: TimerSettings, *, graph: bool) -> Timing:
    global _LAST_TIMED
    fn()  # first call: module load, JIT, autotune; never timed
    torch.cuda.synchronize()
    # Warm-up by time, in blocks of calls, until the clocks and power settle: the full warm-up
    # unless this process kept the GPU busy with timed work until less than a second ago.
    since = None if _LAST_TIMED is None else time.perf_counter() - _LAST_TIMED
    warmup = s.rewarm_s if since is not None and since < 1.0 else s.warmup_s
    started = time.perf_counter()
    calls = 0
    while _agree(float(calls < s.min_warmup_calls or time.perf_counter() - started < warmup)) > 0:
        for _ in range(max(1, min(10, s.min_warmup_calls))):
            fn()
            calls += 1
        torch.cuda.synchronize()
    warm_wall = time.perf_counter() - started
    per_call_wall = warm_wall / max(calls, 1)

    nvml = _Nvml()
    # Eager samples are information only: at most ~1 s of them (host-bound code is slow to enqueue).
    n_eager = int(_agree(max(3, min(s.eager_samples, int(1.0 / max(per_call_wall, 1e-6)))), "min"))
    eager = _event_samples(fn, n_eager, None)
    eager_median = statistics.median(eager)
    info: dict[str, Any] = {
        "warmup_s": warm_wall,
        "warmup_target_s": warmup,
        "warmup_calls": calls,
        "host_s_per_call": per_call_wall,
        "eager_median": eager_median,
        "eager_samples": len(eager),
    }
    replay: Callable[[], Any] | None = None
    if graph and not _distributed():
        g, why = _capture(fn)
        if g is not None:
            replay = g.replay
        else:
            info["graph_error"] = why
    per_call = _agree(eager_median)
    n = int(_agree(_sample_count(per_call, s)))
    nvml.read()
    if replay is not None:
        samples = _event_samples(replay, n, nvml)
        method = "cuda-graph"
        info["graph_over_eager"] = statistics.median(samples) / eager_median if eager_median > 0 else None
    else:
        samples = _event_samples(fn, n, nvml)
        method = "cuda-events"
    nvml.read()
    info["nvml"] = nvml.summary()
    _LAST_TIMED = time.perf_counter()
    return Timing(samples, method, info)


# --------------------------------------------------------------------------------------------
# public
# --------------------------------------------------------------------------------------------


def time_call(
    fn: Callable[[], Any],
    device: str,
    *,
    settings: TimerSettings | None = None,
    graph: bool = True,
) -> Timing:
    """Per-call samples of ``fn()`` on ``device`` ("cpu" or "cuda"); see the module docstring.

    ``fn`` must do the same work on every call and need nothing from the host between calls
    (inputs are prepared once, outside).  ``graph=False`` forbids CUDA-graph capture.
    """
    s = settings or TimerSettings.for_device(device)
    if device == "cuda":
        return _time_cuda(fn, s, graph=graph)
    return _time_cpu(fn, s)


def peak_memory(fn: Callable[[], Any], device: str) -> Memory:
    """Peak allocated bytes of ``fn()`` beyond the allocation before it (CUDA only).

    One warm call first (workspaces, autotuning), then two measured passes; the value is the
    second, and both are recorded so a non-deterministic peak shows in the data.
    """
    if device != "cuda":
        raise ValueError("peak GPU memory needs CUDA")
    fn()
    torch.cuda.synchronize()
    passes = []
    reserved = []
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        passes.append(int(torch.cuda.max_memory_allocated() - base))
        reserved.append(int(torch.cuda.max_memory_reserved()))
        del out
    return Memory(passes[-1], {"passes": passes, "max_reserved_bytes": reserved[-1]})
