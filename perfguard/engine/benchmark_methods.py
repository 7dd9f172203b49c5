"""The benchmark methods both asv suites share: what ``Forward``, ``ForwardBackward``, ``PeakMemory``
and ``Work`` measure, written once.

The single-process suite (``bench_attention``) and the distributed one (``bench_distributed``)
measure the same numbers of one case, each through its own ``_Suite`` (how a case is built and
what "the number" of a group of ranks is: ``_time``, ``_memory``, ``_work``).  Each suite declares
its classes as ``class Work(benchmark_methods.Work, _Suite)`` (these first: ``PeakMemory``'s
``needs_cuda`` overrides the suite's default): asv names a benchmark after the
suite's own module and class (``bench_distributed.Work.track_forward_flops``), and finds the
methods through inheritance.  This module lives outside the suite directory, so asv never
discovers these classes themselves.
"""

from __future__ import annotations

from typing import Any


class Forward:
    """Inference forward pass."""

    _time: Any

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._time("Forward.track_time", "forward")

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class ForwardBackward:
    """Forward pass and the gradients of every input and parameter."""

    _time: Any

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._time("ForwardBackward.track_time", "forward_backward")

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class PeakMemory:
    """Peak allocated GPU memory beyond the inputs (deterministic: one pass is the number)."""

    needs_cuda = True
    _memory: Any

    def track_forward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._memory("PeakMemory.track_forward", "forward")

    def track_forward_backward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._memory("PeakMemory.track_forward_backward", "forward_backward")

    track_forward.unit = "bytes"  # type: ignore[attr-defined]
    track_forward_backward.unit = "bytes"  # type: ignore[attr-defined]


class Work:
    """What one call does, counted: the same on every run of the same code (gated like memory)."""

    _work: Any

    def track_forward_flops(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_flops", "forward", "flops")

    def track_forward_ops(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_ops", "forward", "ops")

    def track_forward_kernels(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_kernels", "forward", "kernels")

    def track_forward_allocated(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_allocated", "forward", "allocated")

    def track_forward_backward_flops(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_backward_flops", "forward_backward", "flops")

    def track_forward_backward_ops(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_backward_ops", "forward_backward", "ops")

    def track_forward_backward_kernels(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_backward_kernels", "forward_backward", "kernels")

    def track_forward_backward_allocated(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._work("Work.track_forward_backward_allocated", "forward_backward", "allocated")

    track_forward_flops.unit = track_forward_backward_flops.unit = "FLOP"  # type: ignore[attr-defined]
    track_forward_ops.unit = track_forward_backward_ops.unit = "aten ops"  # type: ignore[attr-defined]
    track_forward_kernels.unit = track_forward_backward_kernels.unit = "kernels"  # type: ignore[attr-defined]
    track_forward_allocated.unit = track_forward_backward_allocated.unit = "bytes"  # type: ignore[attr-defined]
