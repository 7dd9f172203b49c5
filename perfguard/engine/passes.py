"""One pass of a benchmark case, measured once per process however many benchmarks ask for it.

A round runs every selected benchmark of one side in one fresh process (docs/design.md,
"Rounds"), and several asv benchmarks measure the same call: its time, its peak memory, its FLOPs,
aten ops, kernels and allocated bytes.  :func:`current` keeps the one case being measured (the
next case replaces it, freeing its memory), and its :class:`Pass` objects do each expensive step at
most once, in the order that keeps the numbers clean:

1. the **first call** (compilation, autotuning, lazy loading: never measured; a GPU out-of-memory
   makes the case *skipped*, not failed);
2. **peak memory**, two eager calls, before anything is captured;
3. the **work counts**, one eager call under a dispatch mode (:mod:`perfguard.engine.work`);
4. **capture** as a CUDA graph (one timed eager call on the side stream first), and the kernel
   count of that graph;
5. the **timing** of the graph replay (:mod:`perfguard.engine.timing`);
6. the **accuracy**, last: one eager forward and backward against perfguard's float64 reference
   (:mod:`perfguard.engine.accuracy`), shared by the case's accuracy benchmarks (and one causal
   forward and backward, shared by the causal ones).

Under plain ``asv run`` (one benchmark per process) the same objects do only the steps that one
benchmark needs.  The re-measurement stage may also ask for :meth:`Pass.breakdown`, a profiler pass
for the report's "what changed underneath" table.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfguard import profiles
from perfguard.engine import accuracy, cases, timing, work
from perfguard.engine.sequence_group import SequenceGroup

PASSES = ("forward", "forward_backward")


@dataclass
class Pass:
    """One pass ("forward" or "forward_backward") of a built case; every step cached."""

    case: cases.Case
    name: str
    fn: Callable[[], Any]
    _first: bool = False
    _memory: timing.Memory | None = None
    _counts: work.Counts | None = None
    _captured: timing.Captured | None = None
    _timing: timing.Timing | None = None
    _kernels: dict[str, int] | None = None
    _breakdown: dict[str, Any] | None = None
    log: dict[str, float] = field(default_factory=dict)  # seconds per step, for docs/perf/check.md

    @property
    def device(self) -> str:
        return self.case.device

    def first(self) -> None:
        """The first call (raises :class:`cases.Unsupported` when it does not fit the GPU)."""
        if not self._first:
            with _clock(self.log, "first_call_s"):
                cases.first_call_of(self.case, self.fn)
            self._first = True

    def memory(self) -> timing.Memory:
        if self._memory is None:
            self.first()
            with _clock(self.log, "memory_s"):
                self._memory = timing.peak_memory(self.fn, self.device)
        return self._memory

    def counts(self) -> work.Counts:
        if self._counts is None:
            self.first()
            with _clock(self.log, "work_s"):
                self._counts = work.dispatch_counts(self.fn)
        return self._counts

    def captured(self) -> timing.Captured:
        """The call captured as a CUDA graph (or why it could not be); CUDA only."""
        if self._captured is None:
            self.first()
            with _clock(self.log, "capture_s"):
                self._captured = timing.capture(self.fn)
        return self._captured

    def timing(self) -> timing.Timing:
        if self._timing is None:
            self.first()
            captured = self.captured() if self.device == "cuda" else None
            with _clock(self.log, "timing_s"):
                self._timing = timing.time_call(self.fn, self.device, captured=captured)
        return self._timing

    def kernels(self) -> dict[str, int]:
        """CUDA kernels one call launches, by name: the graph's kernel nodes, else a profiler pass."""
        if self._kernels is None:
            graph = self.captured().graph
            counted = work.graph_kernels(graph) if graph is not None else None
            if counted is None:
                rows = self.breakdown()["rows"]
                counted = {name: int(c) for name, (c, _) in rows.items() if not _is_copy(name)}
            self._kernels = counted
        return self._kernels

    def path(self) -> dict[str, Any]:
        """The path fingerprint of one call (DESIGN.md, "Fidelity"): what a timed number stands for.

        On CUDA the names of the kernels one call launches (the timed graph's kernel nodes, else a
        profiler pass); on the CPU the multiset of aten ops one call dispatches.  ``digest`` is
        what is compared (between base and HEAD, between a round and a case measured alone);
        ``names`` is what a report shows when it changed.
        """
        if self.device == "cuda":
            names = sorted(n for n in self.kernels() if n != "(other)")
            return {"kind": "CUDA kernels", "digest": work.digest(names), "names": names}
        multiset = dict(sorted(self.counts().op_counts.items()))
        return {
            "kind": "aten ops",
            "digest": work.digest(f"{name} x{count}" for name, count in multiset.items()),
            "names": sorted(multiset),
        }

    def breakdown(self) -> dict[str, Any]:
        """Per kernel (CUDA) or per aten op (CPU) count and time of one eager call (profiler)."""
        if self._breakdown is None:
            self.first()
            with _clock(self.log, "profile_s"):
                self._breakdown = work.profile_breakdown(self.fn, self.device)
        return self._breakdown


def _is_copy(name: str) -> bool:
    """The profiler lists memsets and copies with the kernels; a graph's kernel nodes do not."""
    return name.startswith(("Memset", "Memcpy", "[memory]"))


class _clock:
    """Adds the wall time of a block to ``log[key]``."""

    def __init__(self, log: dict[str, float], key: str) -> None:
        self.log, self.key = log, key

    def __enter__(self) -> None:
        import time

        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        import time

        self.log[self.key] = self.log.get(self.key, 0.0) + time.perf_counter() - self.t0


# --------------------------------------------------------------------------------------------
# the case being measured in this process
# --------------------------------------------------------------------------------------------


@dataclass
class Measured:
    """A built case and its passes (or why it cannot be built here)."""

    case: cases.Case | None
    unsupported: str | None
    passes: dict[str, Pass] = field(default_factory=dict)
    _errors: dict[bool, accuracy.Errors] = field(default_factory=dict)

    def errors(self, *, causal: bool = False, group: SequenceGroup | None = None) -> accuracy.Errors:
        """The case's errors against the float64 reference, causal or not, measured once each (after
        its first call).  ``group``: the case is one rank's shard of a distributed sequence."""
        if causal not in self._errors:
            first = self.pass_("forward_backward")
            first.first()
            with _clock(first.log, "accuracy_causal_s" if causal else "accuracy_s"):
                self._errors[causal] = accuracy.measure(first.case, causal=causal, group=group)
        return self._errors[causal]

    def pass_(self, name: str) -> Pass:
        if self.case is None:
            raise cases.Unsupported(self.unsupported or "cannot run here")
        if name not in self.passes:
            fn = self.case.forward() if name == "forward" else self.case.forward_backward()
            self.passes[name] = Pass(self.case, name, fn)
        return self.passes[name]


class CaseSlot:
    """The one case a process measures at a time: built once, freed when another is asked for.

    A case that cannot run here is remembered as such (the other benchmarks of the same case
    are skipped with the same reason, without building it again).  One slot per way of building
    a case: :func:`cases.build` here, a rank's shard in :mod:`perfguard.engine.shards`.
    """

    def __init__(self, build: Callable[..., cases.Case]) -> None:
        self._build = build
        self._current: tuple[tuple[str, int, str, str, str, str | None], Measured] | None = None

    def current(
        self,
        impl: str,
        seq_len: int,
        dtype: str,
        device: str,
        profile: profiles.Profile,
        *,
        backend: str | None = None,
    ) -> Measured:
        """``backend``: the attention kernel the case's module runs (``cases.build``), None: its default."""
        key = (impl, seq_len, dtype, device, profile.name, backend)
        if self._current is not None and self._current[0] == key:
            return self._current[1]
        self.release()
        extra = {} if backend is None else {"backend": backend}
        try:
            measured = Measured(self._build(impl, seq_len, dtype, device, profile, **extra), None)
        except cases.Unsupported as exc:
            measured = Measured(None, str(exc))
        self._current = (key, measured)
        return measured

    def measured(self) -> Measured | None:
        """The case measured now, if any (the round worker profiles its passes)."""
        return None if self._current is None else self._current[1]

    def release(self) -> None:
        """Forget the current case and give its GPU memory back (graphs, inputs, the module)."""
        if self._current is None:
            return
        device = self._current[0][3]
        self._current = None
        gc.collect()
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()


_SLOT = CaseSlot(cases.build)


def current(
    impl: str, seq_len: int, dtype: str, device: str, profile: profiles.Profile, *, backend: str | None = None
) -> Measured:
    """The case for these parameters, built once; building another one frees this one first."""
    return _SLOT.current(impl, seq_len, dtype, device, profile, backend=backend)


def current_measured() -> Measured | None:
    """The case this process measures now, if any (the round worker profiles its passes)."""
    return _SLOT.measured()


def release() -> None:
    """Forget the current case and give its GPU memory back (graphs, inputs, the module)."""
    _SLOT.release()
