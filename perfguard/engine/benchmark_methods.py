"""The benchmark methods both asv suites share: what ``Forward``, ``ForwardBackward``, ``PeakMemory``,
``Work`` and ``Accuracy`` measure, written once.

The single-process suite (``bench_attention``) and the distributed one (``bench_distributed``)
measure the same numbers of one case, each through its own ``_Suite`` (how a case is built and
what "the number" of a group of ranks is: ``_time``, ``_memory``, ``_work``, ``_error``).  Each suite declares
its classes as ``class Work(benchmark_methods.Work, _Suite)`` (these first: ``PeakMemory``'s
``needs_cuda`` overrides the suite's default): asv names a benchmark after the
suite's own module and class (``bench_distributed.Work.track_forward_flops``), and finds the
methods through inheritance.  This module lives outside the suite directory, so asv never
discovers these classes themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from asv_runner.benchmarks.mark import SkipNotImplemented

from perfguard.engine import accuracy, cases
from perfguard.engine.outcomes import Outcome
from perfguard.engine.sequence_group import SequenceGroup


@contextmanager
def skip_unsupported() -> Iterator[None]:
    """A case that turns out not to fit here (GPU out of memory on its first call) is skipped."""
    try:
        yield
    except cases.Unsupported as exc:
        raise SkipNotImplemented(str(exc)) from None


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


class Accuracy:
    """How exact one call is, against perfguard's float64 reference (:mod:`perfguard.engine.accuracy`).

    One eager forward and backward per case, shared by its four benchmarks (the output and the
    q, k, v gradients), and one causal forward and backward shared by the four ``_causal`` ones,
    for implementations that declare causal support (the others' are skipped: no causal series).
    The causal errors are benchmarks of their own, not a ``causal`` parameter: a parameter would
    change the key of every stored accuracy series (docs/perf/accuracy.md).  Gated on growth by a
    factor above a floor (``accuracy_threshold``, ``accuracy_floor``): deterministic for the same
    inputs.
    """

    measured: Any
    _pass: Any
    _record: Any

    def _group(self, case: cases.Case) -> SequenceGroup | None:
        """The sequence the case is a shard of (the distributed suite), None for a whole one."""
        return None

    def _error(self, benchmark: str, tensor: str, causal: bool) -> float:
        assert self.measured is not None
        p = self._pass("forward_backward")
        why = no_causal_mode(p.case.impl) if causal else None
        if why:
            raise SkipNotImplemented(why)
        with skip_unsupported():
            errors = self.measured.errors(causal=causal, group=self._group(p.case))
        return self._record(benchmark, p, error_outcome(errors, tensor, causal))

    def track_output_error(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_output_error", "output", False)

    def track_q_error(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_q_error", "q", False)

    def track_k_error(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_k_error", "k", False)

    def track_v_error(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_v_error", "v", False)

    def track_output_error_causal(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_output_error_causal", "output", True)

    def track_q_error_causal(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_q_error_causal", "q", True)

    def track_k_error_causal(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_k_error_causal", "k", True)

    def track_v_error_causal(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._error("Accuracy.track_v_error_causal", "v", True)

    track_output_error.unit = track_q_error.unit = "relative error"  # type: ignore[attr-defined]
    track_k_error.unit = track_v_error.unit = "relative error"  # type: ignore[attr-defined]
    track_output_error_causal.unit = track_q_error_causal.unit = "relative error"  # type: ignore[attr-defined]
    track_k_error_causal.unit = track_v_error_causal.unit = "relative error"  # type: ignore[attr-defined]


def error_outcome(errors: accuracy.Errors, tensor: str, causal: bool) -> Outcome:
    """The stored result of one tensor's error (both suites): the relative error, and in ``info``
    the tensor, whether the call was causal, the largest absolute difference, the pattern's density
    and what measuring cost."""
    info = {
        "tensor": tensor,
        "causal": causal,
        "max_abs": errors.max_abs[tensor],
        "pattern_density": errors.pattern_density,
        "accuracy_s": errors.seconds,
    }
    value = errors.relative[tensor]
    return Outcome("relative error", value, [value], "float64 reference", info)


def no_causal_mode(impl: str) -> str | None:
    """Why ``impl`` has no causal error (None: it declares causal support)."""
    from perfguard.engine import guarded

    if getattr(guarded.current().get(impl), "supports_causal", True):
        return None
    return f"{impl} declares no causal mode (supports_causal=False): it has no causal error"
