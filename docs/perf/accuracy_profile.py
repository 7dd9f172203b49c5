"""Where one accuracy pass's time goes (issue 31): the phases of ``perfguard.engine.accuracy.measure``.

Builds each case as a round does (``perfguard.engine.passes.current``), runs its first
forward+backward (a round's timed passes run before the accuracy pass, so their compilation is
not the pass's), then times ``measure`` twice (cold: the first causal call of a module compiles
what it needs; warm) with the phases wrapped in synchronised timers: the module's eager forward
and backward, the declared pattern, the float64 reference's forward and backward, the rest
(norms, density).  Measurement only: the wrappers time the functions, they do not change them.

    python docs/perf/accuracy_profile.py [--profile production] [--impls a,b] [--lengths 1024,16384]
        [--trace DIR]

``--trace DIR``: each cold call also runs under ``cProfile`` (what a first call compiles or builds:
Triton, Inductor, cuDNN graphs, by Python function) and each warm call under ``torch.profiler``
(the ops of a steady pass, by self device and host time); one text file per call in ``DIR``.
Traced calls are slower than plain ones: the table's seconds are for comparison within a run.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perfguard import profiles
from perfguard.engine import accuracy, cases, passes

PHASES: dict[str, float] = defaultdict(float)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _sync()
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _sync()
            PHASES[name] += time.perf_counter() - started

    return wrapper


def _traced(folder: Path | None, name: str, call: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, under cProfile (a cold call) or torch.profiler (a warm one) when ``folder`` is set."""
    if folder is None:
        return fn()
    if call == "cold":
        profiler = cProfile.Profile()
        result = profiler.runcall(fn)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        (folder / f"{name}.txt").write_text(text.getvalue())
        return result
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        result = fn()
    averages = prof.key_averages()
    device_key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    (folder / f"{name}.txt").write_text(
        averages.table(sort_by=device_key, row_limit=25)
        + "\n"
        + averages.table(sort_by="self_cpu_time_total", row_limit=25)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--impls", default="")
    parser.add_argument("--lengths", default="")
    parser.add_argument("--trace", type=Path, default=None, help="write per-call traces to this folder")
    args = parser.parse_args()
    if args.trace is not None:
        args.trace.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    profile = profiles.resolve(args.profile, cuda=device == "cuda")
    dtype = profile.dtypes(device)[0]
    lengths = [int(n) for n in args.lengths.split(",")] if args.lengths else list(profile.seq_lens)
    from perfguard.engine import guarded

    impls = args.impls.split(",") if args.impls else sorted(guarded.current().names())
    accuracy._pattern = timed("pattern", accuracy._pattern)
    accuracy._HeadwiseAttention.forward = staticmethod(
        timed("reference fwd", accuracy._HeadwiseAttention.forward)
    )
    accuracy._HeadwiseAttention.backward = staticmethod(
        timed("reference bwd", accuracy._HeadwiseAttention.backward)
    )
    print(
        f"{device} {torch.cuda.get_device_name() if device == 'cuda' else ''} profile {profile.name} {dtype}"
    )
    print("| impl | tokens | causal | call | total s | module fwd+bwd | pattern | ref fwd | ref bwd | rest |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    sums: dict[str, float] = defaultdict(float)
    for n in lengths:
        for impl in impls:
            try:
                measured = passes.current(impl, n, dtype, device, profile)
                first = measured.pass_("forward_backward")
                first.first()
            except cases.Unsupported as exc:
                print(f"| {impl} | {n} | | skipped: {exc} | | | | | | |")
                continue
            module = measured.case.module
            plain = module.forward
            for causal in (False, True):
                for call in ("cold", "warm"):
                    PHASES.clear()
                    module.forward = timed("module", plain)
                    _sync()
                    started = time.perf_counter()
                    try:
                        name = f"{impl}-{n}-{'causal' if causal else 'plain'}-{call}"
                        run = functools.partial(accuracy.measure, measured.case, causal=causal)
                        errors = _traced(args.trace, name, call, run)
                    except Exception as exc:  # a row that says why, not a stopped profile
                        why = f"failed: {type(exc).__name__}: {exc}"
                        print(f"| {impl} | {n} | {causal} | {call} | {why} | | | | | |")
                        break
                    finally:
                        module.forward = plain
                    total = time.perf_counter() - started
                    # the module's backward runs inside autograd.grad, outside its forward: total less
                    # the timed phases is the module's backward plus the norms
                    rest = total - sum(PHASES.values())
                    row = [
                        PHASES["module"],
                        PHASES["pattern"],
                        PHASES["reference fwd"],
                        PHASES["reference bwd"],
                        rest,
                    ]
                    if call == "warm":
                        for key, value in zip(("total", "module", "pattern", "ref fwd", "ref bwd", "rest"),
                                              [total, *row], strict=True):  # fmt: skip
                            sums[key] += value
                    cells = " | ".join(f"{v:.3f}" for v in row)
                    print(f"| {impl} | {n} | {causal} | {call} | {total:.3f} | {cells} | "
                          f"(stored {errors.seconds:.3f})")  # fmt: skip
            passes.release()
    print("warm sums: " + ", ".join(f"{k} {v:.2f} s" for k, v in sums.items()))


if __name__ == "__main__":
    main()
