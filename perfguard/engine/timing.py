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

Peak memory (:func:`peak_memory`) is measured in its own eager calls, before capture:
``max_memory_allocated()`` minus the allocation before the call, twice, to show it is
deterministic.

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
    """How long to warm up and when to stop sampling (seconds are of measured work)."""

    warmup_s: float  # warm-up when the GPU was idle (first timing, or > idle_gap_s since the last)
    rewarm_s: float  # warm-up right after other timed work
    idle_gap_s: float
    min_warmup_calls: int
    min_samples: int
    max_samples: int
    precision: float  # stop when the 95% interval of the median is within ± this fraction of it
    min_sample_s: float  # CPU: at least this much sampled work (the CPU's samples are noisier)
    max_sample_s: float  # at most this much sampled work
    max_wall_s: float  # and at most this much wall time of sampling

    @classmethod
    def for_device(cls, device: str) -> TimerSettings:
        if device == "cuda":
            return CUDA_SETTINGS
        return CPU_SETTINGS


# On an H100 this stopped on "precise" for all 12 probed cases, 10-200 samples, 0.14-0.9 s per
# number including the first call, process CV 0.03-0.41% (docs/perf/check.md, "The timer").
CUDA_SETTINGS = TimerSettings(
    warmup_s=0.3, rewarm_s=0.02, idle_gap_s=1.0, min_warmup_calls=2, min_samples=10, max_samples=3000,
    precision=0.002, min_sample_s=0.0, max_sample_s=0.3, max_wall_s=3.0,
)  # fmt: skip
# The CPU is the smoke-test device (CI has no GPU): short warm-up, enough samples for the rank test,
# a fixed amount of work (its process CPU time is far noisier than a GPU's replay).
CPU_SETTINGS = TimerSettings(
    warmup_s=0.2, rewarm_s=0.2, idle_gap_s=1.0, min_warmup_calls=2, min_samples=12, max_samples=200,
    precision=0.0, min_sample_s=0.4, max_sample_s=3.0, max_wall_s=30.0,
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


@dataclass
class Captured:
    """A call captured as a CUDA graph (or why not), and one eager call's time for the record."""

    graph: Any  # torch.cuda.CUDAGraph | None
    error: str | None
    eager_s: float | None
    host_s: float | None  # host time of that eager call (launch-bound code shows here)


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


def _world() -> int:
    """The number of ranks when torch.distributed runs, else 1."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_values(values: list[float]) -> list[list[float]]:
    """``values`` of every rank (all the same length), in rank order; ``[values]`` without ranks."""
    import torch.distributed as dist

    if _world() == 1:
        return [list(values)]
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    lengths = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(_world())]
    dist.all_gather(lengths, torch.tensor([len(values)], dtype=torch.int64, device=device))
    if len({int(t.item()) for t in lengths}) != 1:
        raise RuntimeError(f"ranks hold different numbers of values: {[int(t.item()) for t in lengths]}")
    out = [torch.empty_like(mine) for _ in range(_world())]
    dist.all_gather(out, mine)
    return [[float(x) for x in t.tolist()] for t in out]


def per_rank(value: float) -> list[float]:
    """``value`` of every rank, in rank order (``[value]`` without torch.distributed)."""
    return [v[0] for v in gather_values([float(value)])]


def slowest_rank(result: Timing) -> Timing:
    """The group's samples: each call's time on the rank that took longest (every rank calls this).

    Every rank made the same number of calls (the counts are agreed), and the calls run in lock
    step through the ring's exchanges, so sample ``i`` of every rank is the same call; the group is
    as fast as its slowest rank.  Each rank's median is kept (``info.rank_medians``), with the
    rank the group waited for most (``info.slowest_rank``).  Without ranks: ``result`` unchanged.
    """
    if _world() == 1:
        return result
    everyone = gather_values(result.samples)
    samples = [max(call) for call in zip(*everyone, strict=True)]
    medians = [statistics.median(s) for s in everyone]
    info = {
        **result.info,
        "ranks": len(everyone),
        "rank_medians": medians,
        "slowest_rank": max(range(len(medians)), key=medians.__getitem__),
        "per_call": "slowest rank",
    }
    return Timing(samples, result.method, info)


def _sample_count(per_call_s: float, s: TimerSettings) -> int:
    """CPU samples for one round: enough for ``min_sample_s`` of work, within the settings' bounds."""
    if per_call_s <= 0 or not math.isfinite(per_call_s):
        return s.max_samples
    wanted = math.ceil(s.min_sample_s / per_call_s)
    capped = math.floor(s.max_sample_s / per_call_s)
    return int(max(s.min_samples, min(s.max_samples, wanted, max(capped, s.min_samples))))


def median_interval(samples: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval of the median from order statistics.

    With ``n`` samples the ranks ``n/2 ± z·sqrt(n)/2`` (normal approximation of the binomial)
    bound the median with the given confidence, whatever the distribution.
    """
    ordered = sorted(samples)
    n = len(ordered)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(ordered), ordered[lo], ordered[hi]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Garbage collection off while samples are taken (as timeit does).

    What the warm-up left behind is young: a collection of the young generations clears it.  A
    full one walks every object of torch's compiler stack (0.27 s each, 14 s of a production round
    on an H100: py-spy, docs/perf/check.md); :func:`perfguard.engine.passes.release` does that once per case.
    """
    enabled = gc.isenabled()
    gc.collect(1)
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
    started = time.perf_counter()
    calls = 0
    while _agree(float(calls < s.min_warmup_calls or time.perf_counter() - started < s.warmup_s)) > 0:
        fn()
        calls += 1
    warm_wall = time.perf_counter() - started
    per_call = _agree(warm_wall / max(calls, 1))
    n = int(_agree(_sample_count(per_call, s), "min"))
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
    ``torch.distributed`` nothing is captured (collectives).
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
    if _distributed():
        return Captured(None, "not captured under torch.distributed", eager_s, host_s)
    try:
        try:
            graph = torch.cuda.CUDAGraph(keep_graph=True)
        except TypeError:  # a torch without keep_graph: kernels are then counted by the profiler
            graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        return Captured(graph, None, eager_s, host_s)
    except Exception as exc:  # any capture failure means "time it eagerly"
        torch.cuda.synchronize()  # a failed capture can leave the stream in an error state
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        return Captured(None, f"{type(exc).__name__}: {text}", eager_s, host_s)


def _time_cuda(run: Callable[[], Any], s: TimerSettings, method: str, info: dict[str, Any]) -> Timing:
    """Warm-up as long as the GPU needs, then batches of flushed samples until the median is known."""
    global _LAST_TIMED
    since = None if _LAST_TIMED is None else time.perf_counter() - _LAST_TIMED
    idle = since is None or since > s.idle_gap_s
    target = s.warmup_s if idle else s.rewarm_s
    started = time.perf_counter()
    probe = _event_samples(run, 1, None)[0]  # one timed call sizes the warm-up and the batches
    per_call = _agree(max(probe, 1e-6))
    warm_calls = int(_agree(max(s.min_warmup_calls, math.ceil(target / per_call)), "max"))
    for _ in range(warm_calls):
        run()
    torch.cuda.synchronize()
    warm_wall = time.perf_counter() - started
    nvml = _Nvml()
    nvml.read()
    batch = int(_agree(min(100, max(5, int(0.01 / per_call))), "min"))
    samples: list[float] = []
    sampling = time.perf_counter()
    stop = ""
    with _gc_paused():
        while not stop:
            samples += _event_samples(run, batch, nvml)
            wall = time.perf_counter() - sampling
            stop = _stop_reason(samples, s, wall)
            if _agree(0.0 if stop else 1.0, "max") > 0:  # every rank stops together
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


# --------------------------------------------------------------------------------------------
# public
# --------------------------------------------------------------------------------------------


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
        return _time_cpu(fn, s)
    if captured is None and graph:
        captured = capture(fn)
    info: dict[str, Any] = {}
    if captured is not None:
        info.update(eager_s=captured.eager_s, host_s_per_call=captured.host_s)
        if captured.error:
            info["graph_error"] = captured.error
    if captured is not None and captured.graph is not None:
        result = _time_cuda(captured.graph.replay, s, "cuda-graph", info)
        if captured.eager_s:
            result.info["graph_over_eager"] = result.median / captured.eager_s
        return result
    return _time_cuda(fn, s, "cuda-events", info)


def peak_memory(fn: Callable[[], Any], device: str, *, passes: int = 2) -> Memory:
    """Peak allocated bytes of ``fn()`` beyond the allocation before it (CUDA only).

    ``fn`` must have been called once already (workspaces, autotuning).  ``passes`` measured
    calls; the value is the last, and all are recorded so a non-deterministic peak shows.

    Every measured call starts from an allocator with no free cached blocks (``empty_cache``):
    the caching allocator hands a request a whole cached block when splitting it would leave too
    little, and counts the whole block as allocated, so the same call's peak used to depend on
    which blocks earlier cases of the round had left behind (``ring`` 4K forward+backward: 57.4
    MiB in a round, 56.4 MiB alone, issue 26).  From an empty cache the peak is a property of
    the call alone.
    """
    if device != "cuda":
        raise ValueError("peak GPU memory needs CUDA")
    values = []
    reserved = []
    for _ in range(passes):
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        values.append(int(torch.cuda.max_memory_allocated() - base))
        reserved.append(int(torch.cuda.max_memory_reserved()))
        del out
    return Memory(values[-1], {"passes": values, "max_reserved_bytes": reserved[-1]})
