"""asv suite: every registered attention implementation x sequence length x dtype of the profile.

| benchmark | unit | what |
| --- | --- | --- |
| ``Forward.track_time`` | seconds | median per-call time of one inference forward pass |
| ``ForwardBackward.track_time`` | seconds | forward + gradients of inputs and parameters |
| ``PeakMemory.track_forward`` | bytes | peak allocated GPU memory of a forward beyond the inputs (CUDA) |
| ``PeakMemory.track_forward_backward`` | bytes | the same for forward + backward (CUDA) |

Times come from :func:`perfguard.timing.time_call` (CUDA-graph replay where the module can be
captured, flushed L2, 1 s warm-up; process CPU time on the CPU), memory from
:func:`perfguard.timing.peak_memory` (asv's own ``peakmem_`` is host RSS).  asv stores one number;
the per-call samples, the timing method, NVML readings and the configuration go to a timing
sidecar (:mod:`perfguard.sidecar`) that perfguard reads back.  Tokens/s and TFLOP/s are derived by
perfguard from the forward samples and the case's work (not measured twice).

Parameters come from ``$PERFGUARD_PROFILE`` (:mod:`perfguard.profiles`) and the registry, at
import, without touching CUDA (asv imports this module in a forkserver; the device is found through
NVML).  Cases that cannot run here raise ``NotImplementedError`` in ``setup`` (asv: skipped).

``version`` is explicit (:data:`perfguard.cases.SUITE_VERSION`): results stay comparable across
cosmetic edits of this file, and bumping it (a change in what is measured or how) makes perfguard
re-measure baselines instead of comparing numbers taken by different rules.
"""

from __future__ import annotations

import time
from typing import Any

from attention.registry import names
from perfguard import cases, profiles, sidecar, timing

DEVICE = cases.device_from_environment()
PROFILE = profiles.from_environment(cuda=DEVICE == "cuda")
_MODULE = __name__.rsplit(".", 1)[-1]


class _Suite:
    params = (list(names()), list(PROFILE.seq_lens), list(PROFILE.dtypes(DEVICE)))
    param_names = ("impl", "seq_len", "dtype")
    timeout = 900
    version = cases.SUITE_VERSION
    needs_cuda = False
    case: cases.Case
    settings: dict[str, Any]

    def setup(self, impl: str, seq_len: int, dtype: str) -> None:
        self.started = time.perf_counter()
        if self.needs_cuda and DEVICE != "cuda":
            raise cases.Unsupported("peak GPU memory needs CUDA")
        self.settings = timing.pin_settings(DEVICE)
        self.case = cases.build(impl, seq_len, dtype, DEVICE, PROFILE)

    def _report(
        self, method: str, unit: str, value: float, samples: list[float], how: str, info: dict
    ) -> float:
        case = self.case
        sidecar.write(
            f"{_MODULE}.{type(self).__name__}.{method}",
            {"impl": case.impl, "seq_len": case.seq_len, "dtype": case.dtype},
            unit=unit,
            value=value,
            samples=samples,
            method=how,
            info={
                **case.info,
                **info,
                "settings": self.settings,
                "profile": PROFILE.name,
                "process_seconds": time.perf_counter() - self.started,  # setup to result: the cost
            },
        )
        return value


def _timed(suite: _Suite, method: str, fn: Any) -> float:
    cases.first_call(fn, DEVICE)
    result = timing.time_call(fn, DEVICE)
    return suite._report(method, "seconds", result.median, result.samples, result.method, result.info)


class Forward(_Suite):
    """Inference forward pass."""

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return _timed(self, "track_time", self.case.forward())

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class ForwardBackward(_Suite):
    """Forward pass and the gradients of every input and parameter."""

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return _timed(self, "track_time", self.case.forward_backward())

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class PeakMemory(_Suite):
    """Peak allocated GPU memory beyond the inputs (deterministic: one pass is the number)."""

    needs_cuda = True

    def _peak(self, method: str, fn: Any) -> float:
        cases.first_call(fn, DEVICE)
        memory = timing.peak_memory(fn, DEVICE)
        value = float(memory.peak_bytes)
        return self._report(method, "bytes", value, [value], "cuda-allocator", memory.info)

    def track_forward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._peak("track_forward", self.case.forward())

    def track_forward_backward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._peak("track_forward_backward", self.case.forward_backward())

    track_forward.unit = "bytes"  # type: ignore[attr-defined]
    track_forward_backward.unit = "bytes"  # type: ignore[attr-defined]
