"""Where one accuracy pass's time goes (issue 31): the phases of ``perfguard.engine.accuracy.measure``.

Builds each case as a round does (``perfguard.engine.passes.current``), runs its first
forward+backward (a round's timed passes run before the accuracy pass, so their compilation is
not the pass's), then times ``measure`` twice (cold: the first causal call of a module compiles
what it needs; warm) with the phases wrapped in synchronised timers: the module's eager forward
and backward, the declared pattern, the float64 reference's forward and backward, the rest
(norms, density).  Measurement only: the wrappers time the functions, they do not change them.

    python docs/perf/accuracy_profile.py [--profile production] [--impls a,b] [--lengths 1024,16384]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--impls", default="")
    parser.add_argument("--lengths", default="")
    args = parser.parse_args()
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
                        errors = accuracy.measure(measured.case, causal=causal)
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
