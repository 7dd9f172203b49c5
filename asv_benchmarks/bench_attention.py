"""asv suite: every registered attention implementation x sequence length x dtype of the profile.

| benchmark | unit | what |
| --- | --- | --- |
| ``Forward.track_time`` | seconds | median per-call time of one inference forward pass |
| ``ForwardBackward.track_time`` | seconds | forward + gradients of inputs and parameters |
| ``PeakMemory.track_forward`` | bytes | peak allocated GPU memory of a forward beyond the inputs (CUDA) |
| ``PeakMemory.track_forward_backward`` | bytes | the same for forward + backward (CUDA) |

Times come from :func:`perfguard.timing.time_call` (CUDA-graph replay where the module can be
captured, flushed L2, time-based warm-up; process CPU time on the CPU), memory from
:func:`perfguard.timing.peak_memory` in its own pass before the timing (asv's own ``peakmem_`` is
host RSS).  asv stores one number; the per-call samples, the timing method, NVML readings and the
configuration go to a timing sidecar (:mod:`perfguard.sidecar`) that perfguard reads back.
Tokens/s and TFLOP/s are derived by perfguard from the forward samples and the case's work.

**Run by plain asv**, each benchmark x params is measured in its own process, as asv does.
**Run by perfguard** (``PERFGUARD_RUN_DIR`` set), the first process of an implementation x dtype
*group* measures the whole group in that round (every selected sequence length, forward and
forward+backward, memory and time) and writes one sidecar per benchmark x params; the group's
other processes read theirs.  A round is still a fresh process for every number, but CUDA
initialisation, lazy kernel loading and compilation (FlexAttention: 40 s on an H100) are paid once
per implementation instead of once per number: on the GPU this is what makes a round take minutes
instead of a quarter of an hour (docs/perf/check.md).  ``PERFGUARD_SELECTION`` (JSON list of asv
``--bench`` regexes) tells the group which combinations were asked for.

Parameters come from ``$PERFGUARD_PROFILE`` (:mod:`perfguard.profiles`) and the registry, at
import, without touching CUDA (asv imports this module in a forkserver; the device is found through
NVML).  Cases that cannot run here raise ``NotImplementedError`` in ``setup`` (asv: skipped).
``version`` is explicit (:data:`perfguard.cases.SUITE_VERSION`): results stay comparable across
cosmetic edits of this file, and bumping it makes perfguard re-measure stored baselines.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attention.registry import names
from perfguard import cases, profiles, sidecar, timing

DEVICE = cases.device_from_environment()
PROFILE = profiles.from_environment(cuda=DEVICE == "cuda")
MODULE = __name__.rsplit(".", 1)[-1]
SELECTION_ENV = "PERFGUARD_SELECTION"

#: benchmark (without the module) -> (which pass, what is measured)
BENCHMARKS = {
    "Forward.track_time": ("forward", "time"),
    "ForwardBackward.track_time": ("forward_backward", "time"),
    "PeakMemory.track_forward": ("forward", "memory"),
    "PeakMemory.track_forward_backward": ("forward_backward", "memory"),
}


def _label(benchmark: str, impl: str, seq_len: int, dtype: str) -> str:
    """How asv names one combination for ``--bench`` matching."""
    return f"{MODULE}.{benchmark}({impl!r}, {seq_len!r}, {dtype!r})"


def _selection() -> list[str]:
    try:
        regexes = json.loads(os.environ.get(SELECTION_ENV) or "[]")
    except ValueError:
        return []
    return [str(r) for r in regexes] if isinstance(regexes, list) else []


def _run_dir() -> Path | None:
    value = os.environ.get(sidecar.RUN_DIR_ENV)
    return Path(value) if value else None


# --------------------------------------------------------------------------------------------
# measuring one benchmark of one case
# --------------------------------------------------------------------------------------------


def _measure(kind: str, fn: Callable[[], Any]) -> tuple[str, float, list[float], str, dict[str, Any]]:
    """(unit, value, samples, method, info) of one pass of a built case."""
    if kind == "memory":
        memory = timing.peak_memory(fn, DEVICE)
        value = float(memory.peak_bytes)
        return "bytes", value, [value], "cuda-allocator", memory.info
    result = timing.time_call(fn, DEVICE)
    return "seconds", result.median, result.samples, result.method, result.info


def _write(benchmark: str, case: cases.Case, settings: dict, started: float, outcome: tuple) -> float:
    unit, value, samples, method, info = outcome
    sidecar.write(
        f"{MODULE}.{benchmark}",
        {"impl": case.impl, "seq_len": case.seq_len, "dtype": case.dtype},
        unit=unit,
        value=value,
        samples=samples,
        method=method,
        info={
            **case.info,
            **info,
            "settings": settings,
            "profile": PROFILE.name,
            "process_seconds": time.perf_counter() - started,  # the cost, for docs/perf/check.md
        },
    )
    return value


# --------------------------------------------------------------------------------------------
# a group: one implementation x dtype, every selected sequence length, measured in one process
# --------------------------------------------------------------------------------------------


def _group_file(run_dir: Path, impl: str, dtype: str) -> Path:
    digest = hashlib.sha1(f"{impl}/{dtype}".encode()).hexdigest()[:16]
    return run_dir / f"group-{digest}.json"


def _measure_group(run_dir: Path, impl: str, dtype: str) -> dict[str, Any]:
    """Measure every selected (benchmark, seq_len) of ``impl`` x ``dtype``; returns the group record.

    The record maps each sequence length to ``"ok"``, ``"skipped: why"`` or, per benchmark,
    ``"failed: traceback"``; sidecars hold the numbers.  Memory is measured before the timing of
    the same pass (no flush buffer or graph pool alive yet).
    """
    started = time.perf_counter()
    path = _group_file(run_dir, impl, dtype)
    # Written first: if this process dies (a segfault, the OOM killer), the group's other processes
    # report that instead of measuring (and crashing) again.
    path.write_text(json.dumps({"status": "running", "pid": os.getpid()}))
    selection = _selection()
    settings = timing.pin_settings(DEVICE)
    record: dict[str, Any] = {"status": "done", "impl": impl, "dtype": dtype, "seq_lens": {}, "failed": {}}
    for seq_len in PROFILE.seq_lens:
        wanted = [
            b
            for b, (_, kind) in BENCHMARKS.items()
            if (kind != "memory" or DEVICE == "cuda")
            and (not selection or any(re.search(r, _label(b, impl, seq_len, dtype)) for r in selection))
        ]
        if not wanted:
            continue
        try:
            case = cases.build(impl, seq_len, dtype, DEVICE, PROFILE)
        except cases.Unsupported as exc:
            record["seq_lens"][str(seq_len)] = f"skipped: {exc}"
            continue
        record["seq_lens"][str(seq_len)] = "ok"
        for pass_name in ("forward", "forward_backward"):
            these = [b for b in wanted if BENCHMARKS[b][0] == pass_name]
            if not these:
                continue
            fn = case.forward() if pass_name == "forward" else case.forward_backward()
            for benchmark in sorted(these, key=lambda b: BENCHMARKS[b][1] != "memory"):  # memory first
                try:
                    cases.first_call(fn, DEVICE)
                    _write(benchmark, case, settings, started, _measure(BENCHMARKS[benchmark][1], fn))
                except cases.Unsupported as exc:
                    record["failed"][f"{benchmark}/{seq_len}"] = f"skipped: {exc}"
                except Exception:
                    record["failed"][f"{benchmark}/{seq_len}"] = traceback.format_exc()[-4000:]
        del case
        gc.collect()
        if DEVICE == "cuda":
            import torch

            torch.cuda.empty_cache()
    record["seconds"] = time.perf_counter() - started
    path.write_text(json.dumps(record))
    return record


# --------------------------------------------------------------------------------------------
# the asv benchmarks
# --------------------------------------------------------------------------------------------


class _Suite:
    params = (list(names()), list(PROFILE.seq_lens), list(PROFILE.dtypes(DEVICE)))
    param_names = ("impl", "seq_len", "dtype")
    timeout = 1800  # a group measures every length of one implementation
    version = cases.SUITE_VERSION
    needs_cuda = False

    def setup(self, impl: str, seq_len: int, dtype: str) -> None:
        self.started = time.perf_counter()
        if self.needs_cuda and DEVICE != "cuda":
            raise cases.Unsupported("peak GPU memory needs CUDA")
        self.run_dir = _run_dir()
        self.group: dict[str, Any] | None = None
        if self.run_dir is not None:  # run by perfguard: measure or read the group
            path = _group_file(self.run_dir, impl, dtype)
            self.group = (
                json.loads(path.read_text()) if path.exists() else _measure_group(self.run_dir, impl, dtype)
            )
            if self.group.get("status") != "done":
                raise RuntimeError(
                    f"the process measuring {impl} {dtype} in this round died before it finished "
                    "(see the first failure of this group in the log)"
                )
            status = self.group["seq_lens"].get(str(seq_len), "skipped: not selected")
            if status.startswith("skipped"):
                raise cases.Unsupported(status.removeprefix("skipped: "))
            return
        self.settings = timing.pin_settings(DEVICE)
        self.case = cases.build(impl, seq_len, dtype, DEVICE, PROFILE)

    def _value(self, benchmark: str, impl: str, seq_len: int, dtype: str) -> float:
        if self.group is None:  # plain asv: measure this one number in this process
            pass_name, kind = BENCHMARKS[benchmark]
            fn = self.case.forward() if pass_name == "forward" else self.case.forward_backward()
            cases.first_call(fn, DEVICE)
            return _write(benchmark, self.case, self.settings, self.started, _measure(kind, fn))
        failed = self.group["failed"].get(f"{benchmark}/{seq_len}")
        if failed:
            if failed.startswith("skipped: "):
                from asv_runner.benchmarks.mark import SkipNotImplemented

                raise SkipNotImplemented(failed.removeprefix("skipped: "))
            raise RuntimeError(f"measuring {benchmark} in this round's group process failed:\n{failed}")
        assert self.run_dir is not None
        document = sidecar.read(
            self.run_dir, f"{MODULE}.{benchmark}", {"impl": impl, "seq_len": seq_len, "dtype": dtype}
        )
        if document is None:
            raise RuntimeError(
                f"the group process of {impl} {dtype} left no result for {benchmark}({seq_len})"
            )
        return float(document["value"])


class Forward(_Suite):
    """Inference forward pass."""

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._value("Forward.track_time", impl, seq_len, dtype)

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class ForwardBackward(_Suite):
    """Forward pass and the gradients of every input and parameter."""

    def track_time(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._value("ForwardBackward.track_time", impl, seq_len, dtype)

    track_time.unit = "seconds"  # type: ignore[attr-defined]


class PeakMemory(_Suite):
    """Peak allocated GPU memory beyond the inputs (deterministic: one pass is the number)."""

    needs_cuda = True

    def track_forward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._value("PeakMemory.track_forward", impl, seq_len, dtype)

    def track_forward_backward(self, impl: str, seq_len: int, dtype: str) -> float:
        return self._value("PeakMemory.track_forward_backward", impl, seq_len, dtype)

    track_forward.unit = "bytes"  # type: ignore[attr-defined]
    track_forward_backward.unit = "bytes"  # type: ignore[attr-defined]
