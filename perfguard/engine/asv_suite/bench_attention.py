"""asv suite: every registered attention implementation x sequence length x dtype of the profile.

| benchmark | unit | what |
| --- | --- | --- |
| ``Forward.track_time`` | seconds | median per-call time of one inference forward pass |
| ``ForwardBackward.track_time`` | seconds | forward + gradients of inputs and parameters |
| ``PeakMemory.track_forward`` | bytes | peak allocated GPU memory of a forward beyond the inputs (CUDA) |
| ``PeakMemory.track_forward_backward`` | bytes | the same for forward + backward (CUDA) |
| ``Work.track_forward_flops`` | FLOP | FLOPs of one forward (``torch.utils.flop_counter``'s formulas) |
| ``Work.track_forward_ops`` | aten ops | aten ops one forward dispatches |
| ``Work.track_forward_kernels`` | kernels | CUDA kernels one forward launches (CUDA) |
| ``Work.track_forward_allocated`` | bytes | bytes of new tensors one forward allocates |
| ``Work.track_forward_backward_*`` | | the same four for forward + backward |
| ``Accuracy.track_output_error`` | relative error | the output against perfguard's float64 reference |
| ``Accuracy.track_q_error`` (k, v) | relative error | the gradient of q (k, v) against the reference's |
| ``Accuracy.track_*_error_causal`` | relative error | the same four of a causal call (causal reference) |
| ``Backends.track_time`` | seconds | a declared implementation's forward on each of its kernels (reported) |

Times come from :func:`perfguard.engine.timing.time_call` (CUDA-graph replay where the module can be
captured, flushed L2, warm-up as long as the GPU needs, sampling until the median is known
precisely; process CPU time on the CPU), memory from :func:`perfguard.engine.timing.peak_memory` in its
own eager calls before capture (asv's own ``peakmem_`` is host RSS), the work counts from
:mod:`perfguard.engine.work`.  Every benchmark of one case shares the case's passes
(:mod:`perfguard.engine.passes`): when perfguard runs a whole round in one process, a case is built and
first-called once for all its benchmarks.  asv stores one number; the per-call samples, the timing
method, NVML readings, the configuration and the per-op / per-kernel breakdown of the counts go to
:mod:`perfguard.engine.outcomes`, where perfguard's round worker takes them.  Tokens/s and TFLOP/s are
derived by perfguard from the forward samples and the case's attended-pair work.

**Plain asv** runs this suite unchanged (``python -m asv run -E existing:same``): each benchmark in
its own process measures its own number.  Parameters come from ``$PERFGUARD_PROFILE``
(:mod:`perfguard.profiles`) and the registry, at import, without touching CUDA (the device is found
through NVML).  Cases that cannot run here raise ``NotImplementedError`` (asv: skipped).
``version`` is explicit (:data:`perfguard.engine.cases.SUITE_VERSION`): results stay comparable across
cosmetic edits of this file, and bumping it makes perfguard re-measure stored baselines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

from perfguard import profiles
from perfguard.declaration import SOURCE_ENV
from perfguard.engine import benchmark_methods, cases, guarded, outcomes, passes, timing
from perfguard.engine.outcomes import Outcome

# the guarded package of the repository this suite belongs to (plain asv), or of the commit a
# perfguard round measures ($PERFGUARD_SOURCE, set by the round): docs/guarding-your-package.md
os.environ.setdefault(SOURCE_ENV, str(Path(__file__).absolute().parent.parent))
names = guarded.current().names

DEVICE = cases.device_from_environment()
PROFILE = profiles.from_environment(cuda=DEVICE == "cuda")
MODULE = __name__.rsplit(".", 1)[-1]
_SETTINGS: dict[str, Any] = {}


def _params(case: cases.Case) -> dict[str, Any]:
    """The case's asv parameters by name, in the suite's order (the round worker matches on them)."""
    kernel = {} if case.backend is None else {"backend": case.backend}
    return {"impl": case.impl, **kernel, "seq_len": case.seq_len, "dtype": case.dtype}


class _Suite:
    params = (list(names()), list(PROFILE.seq_lens), list(PROFILE.dtypes(DEVICE)))
    param_names = ("impl", "seq_len", "dtype")
    timeout = 600
    version = cases.SUITE_VERSION
    needs_cuda = False

    measured: passes.Measured | None = None

    def setup(self, impl: str, seq_len: int, dtype: str) -> None:
        if self.needs_cuda and DEVICE != "cuda":
            raise cases.Unsupported("peak GPU memory needs CUDA")
        self._build(impl, seq_len, dtype)

    def _build(self, impl: str, seq_len: int, dtype: str, backend: str | None = None) -> None:
        if not _SETTINGS:
            _SETTINGS.update(timing.pin_settings(DEVICE))
        self.measured = passes.current(impl, seq_len, dtype, DEVICE, PROFILE, backend=backend)
        if self.measured.case is None:
            raise cases.Unsupported(self.measured.unsupported or "cannot run here")

    def teardown(self, *params: Any) -> None:
        # The benchmark object lives as long as the process: holding the case here would keep its
        # GPU memory (module, inputs, graphs) alive after the next case replaced it.
        self.measured = None

    def _pass(self, name: str) -> passes.Pass:
        """The case's pass; a case that does not fit the GPU is skipped, not failed (asv and perfguard)."""
        assert self.measured is not None
        return self.measured.pass_(name)

    def _record(self, benchmark: str, p: passes.Pass, outcome: Outcome) -> float:
        case = p.case
        info = {**case.info, **outcome.info, "settings": dict(_SETTINGS), "profile": PROFILE.name}
        info["steps_s"] = dict(p.log)
        outcome.info = info
        return outcomes.record(f"{MODULE}.{benchmark}", _params(case), outcome)

    def _time(self, benchmark: str, pass_name: str) -> float:
        p = self._pass(pass_name)
        with benchmark_methods.skip_unsupported():
            result = p.timing()
        info = dict(result.info)
        with benchmark_methods.skip_unsupported():
            info["path"] = p.path()  # after the timing: counting the path never runs before it
        outcome = Outcome("seconds", result.median, list(result.samples), result.method, info)
        return self._record(benchmark, p, outcome)

    def _memory(self, benchmark: str, pass_name: str) -> float:
        p = self._pass(pass_name)
        with benchmark_methods.skip_unsupported():
            memory = p.memory()
        value = float(memory.peak_bytes)
        return self._record(
            benchmark, p, Outcome("bytes", value, [value], "cuda-allocator", dict(memory.info))
        )

    def _work(self, benchmark: str, pass_name: str, what: str) -> float:
        p = self._pass(pass_name)
        info: dict[str, Any] = {}
        if what == "kernels":
            if DEVICE != "cuda":
                raise SkipNotImplemented("CUDA kernels are counted on a GPU only")
            with benchmark_methods.skip_unsupported():
                kernels = p.kernels()
            value = float(sum(kernels.values()))
            info["breakdown"] = {"kind": "CUDA kernels", "counts": kernels}
            unit, method = (
                "kernels",
                "cuda-graph nodes" if p.captured().graph is not None else "torch.profiler",
            )
        else:
            with benchmark_methods.skip_unsupported():
                counts = p.counts()
            value = float(
                {"flops": counts.flops, "ops": counts.ops, "allocated": counts.allocated_bytes}[what]
            )
            unit = {"flops": "FLOP", "ops": "aten ops", "allocated": "bytes"}[what]
            method = "dispatch counts"
            if what == "ops":
                info["breakdown"] = {"kind": "aten ops", "counts": dict(counts.op_counts)}
        return self._record(benchmark, p, Outcome(unit, value, [value], method, info))


class Forward(benchmark_methods.Forward, _Suite):
    """Inference forward pass."""


class ForwardBackward(benchmark_methods.ForwardBackward, _Suite):
    """Forward pass and the gradients of every input and parameter."""


class PeakMemory(benchmark_methods.PeakMemory, _Suite):
    """Peak allocated GPU memory beyond the inputs (deterministic: one pass is the number)."""


class Work(benchmark_methods.Work, _Suite):
    """What one call does, counted: the same on every run of the same code (gated like memory)."""


class Accuracy(benchmark_methods.Accuracy, _Suite):
    """How exact one call is, against perfguard's float64 reference (:mod:`perfguard.engine.accuracy`),
    causal and not; the largest absolute difference and the pattern's density go to the result's info."""


def _backend_lengths() -> list[int]:
    """The lengths of the backends comparison: the profile's on a GPU, its shortest on the CPU.

    On the CPU the comparison is a smoke test of the benchmark itself (cpu_flash, math and eager
    flex at 512 tokens in ``quick``): three numbers instead of six keep the CPU rounds of every
    check short.
    """
    return list(PROFILE.seq_lens) if DEVICE == "cuda" else list(PROFILE.seq_lens[:1])


#: implementation -> its kernels, for the entries that declare a ``kernels`` module (attention: improved)
_KERNELS = cases.kernel_comparison()


class Backends(_Suite):
    """An implementation's forward pass on each attention kernel: which is fastest here, at which length.

    The implementations and kernels are those the registry declares (an entry's ``kernels`` module;
    ``attention``: ``improved`` on SDPA's cuDNN, flash, memory-efficient and math, CPU flash,
    FlexAttention, flash-attn and xformers when installed); a package that declares none has no
    comparison.  A kernel that cannot run this device, dtype and head size is skipped with the
    package's reason; one that fails at its first call and leaves the work to another kernel is
    skipped too (:func:`perfguard.engine.cases.first_call_of`).  Timed
    like ``Forward.track_time`` (graph replay on CUDA, process CPU time on the CPU).  Reported,
    never gated (:data:`perfguard.engine.suite.BACKENDS`); the site's ``backends.html`` draws it.
    """

    params = (
        list(_KERNELS),
        list(dict.fromkeys(kernel for kernels in _KERNELS.values() for kernel in kernels)),
        _backend_lengths(),
        list(PROFILE.dtypes(DEVICE)),
    )
    param_names = ("impl", "backend", "seq_len", "dtype")

    def setup(self, impl: str, backend: str, seq_len: int, dtype: str) -> None:  # type: ignore[override]
        self._build(impl, seq_len, dtype, backend)

    def track_time(self, impl: str, backend: str, seq_len: int, dtype: str) -> float:
        return self._time("Backends.track_time", "forward")

    track_time.unit = "seconds"  # type: ignore[attr-defined]
