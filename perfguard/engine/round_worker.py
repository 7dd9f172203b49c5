"""One round of one side, in one fresh process: every selected benchmark of the asv suite.

``python -m perfguard.engine.round_worker SPEC.json`` (started by :mod:`perfguard.engine.rounds`,
never by hand).
The spec names the suite directory, the ``--bench`` regexes, the combinations to run (a restart
after a crash gets the rest), the benchmarks to profile for the report, and the output file.

The suite is discovered and run the way asv's own runner does it (``asv_runner``: discovery,
``setup`` / ``run`` / ``teardown`` per parameter combination; a ``NotImplementedError`` in setup
or ``SkipNotImplemented`` in the benchmark is *skipped*), but all in this process, in an order that
lets the benchmarks of one case share it (:mod:`perfguard.engine.passes`): process start-up, CUDA
initialisation and every case's first call are paid once per round instead of once per number.

Output: one JSON object per line, flushed as soon as it is known, so that the parent can show
progress and, if this process dies, knows which combination it died in::

    {"event": "plan", "total": 108, "labels": [...], "items": [{"label", "benchmark", "params"}, ...]}
    {"event": "start", "label": "bench_attention.Forward.track_time('dilated', 512, 'float32')"}
    {"event": "result", "label": ..., "benchmark": ..., "params": {...}, "status": "ok",
     "value": ..., "unit": ..., "samples": [...], "method": ..., "info": {...}}
    {"event": "done", "seconds": 12.3}

A benchmark that fails on CUDA ends the process after its result line (exit 3): a CUDA error can
leave the context unusable, so the parent starts a fresh process for the rest of the round.

The spec's ``suite`` names the one asv module a distributed profile's round runs
(``bench_distributed``); ``exclude_suites`` the modules any other round leaves out (that one).

**Under torchrun** (a distributed profile, :mod:`perfguard.engine.rank_group`) every rank runs this: it joins
the group, discovers the same plan (checked), runs every benchmark, and the ranks agree on each
outcome (a benchmark skipped or failed on one rank is skipped or failed for the group); only rank
0 writes the output.  A rank whose benchmark raises cannot know whether the others wait for it
inside an exchange, so it prints its traceback and exits at once (exit 3; rank 0 writes the
failure first): torchrun ends the group, and the parent measures the rest in a fresh one.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_STARTED = time.perf_counter()  # before torch and the suite are imported: the worker's start-up

#: Exit code: stopped after a failure on CUDA; the parent restarts a fresh process for the rest.
EXIT_RESTART = 3

# Within one case, the order that keeps the numbers clean (memory before capture, see passes.py).
_ORDER = (
    "PeakMemory.track_forward",
    "Work.track_forward_flops",
    "Work.track_forward_ops",
    "Work.track_forward_allocated",
    "Forward.track_time",
    "Work.track_forward_kernels",
    "PeakMemory.track_forward_backward",
    "Work.track_forward_backward_flops",
    "Work.track_forward_backward_ops",
    "Work.track_forward_backward_allocated",
    "ForwardBackward.track_time",
    "Work.track_forward_backward_kernels",
    "Communication.track_forward",
    "Communication.track_forward_backward",
)


def label_of(name: str, param_reprs: tuple[str, ...]) -> str:
    """How asv names one combination for ``--bench`` matching: ``name(repr, repr, ...)``."""
    return f"{name}({', '.join(param_reprs)})" if param_reprs else name


def case_of(label: str) -> str:
    """The parameters part of a label: every benchmark of one case shares it."""
    return label[label.find("(") :] if "(" in label else label


def _combinations(benchmarks: list[Any]) -> Iterator[tuple[Any, int, str, dict[str, Any]]]:
    for bench in benchmarks:
        values = list(itertools.product(*bench._params)) if bench._params else [()]
        reprs = list(itertools.product(*bench.params)) if bench.params else [()]
        for index, (vals, rep) in enumerate(zip(values, reprs, strict=True)):
            params = dict(zip(bench.param_names, vals, strict=True))
            yield bench, index, label_of(bench.name, tuple(rep)), params


def _sort_key(item: tuple[Any, int, str, dict[str, Any]]) -> tuple:
    bench, _, label, params = item
    short = bench.name.split(".", 1)[-1]
    rank = _ORDER.index(short) if short in _ORDER else len(_ORDER)
    return (
        str(params.get("dtype", "")),
        str(params.get("impl", "")),
        int(params["seq_len"]) if isinstance(params.get("seq_len"), int) else 0,
        rank,
        label,
    )


def _emit(out: Any, **fields: Any) -> None:
    out.write(json.dumps(fields, default=_jsonable, allow_nan=True) + "\n")
    out.flush()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _setup(bench: Any, params: tuple[Any, ...]) -> str | None:
    """Run the benchmark's setups; the skip reason when one raises ``NotImplementedError``."""
    try:
        for setup in bench._setups:
            setup(*params)
    except NotImplementedError as exc:
        return str(exc) or type(exc).__name__
    return None


def run(spec: dict[str, Any]) -> int:
    """Run the round described by ``spec``; returns the process exit code."""
    from asv_runner.benchmarks.mark import SkipNotImplemented
    from asv_runner.discovery import disc_benchmarks

    from perfguard.engine import fallbacks, outcomes, rank_group

    started = time.perf_counter()
    bench_dir = Path(spec["benchmark_dir"])
    sys.path.insert(0, str(bench_dir.parent))
    regexes = [re.compile(r) for r in spec.get("bench") or []]
    only = set(spec["only"]) if spec.get("only") is not None else None
    profile_regexes = [re.compile(r) for r in spec.get("profile") or []]
    device = spec.get("device", "cpu")
    suite = spec.get("suite")
    excluded = set(spec.get("exclude_suites") or ())
    left_out = set(spec.get("exclude_benchmarks") or ())  # ``Class.method`` names (suite.HISTORY_ONLY)
    group = rank_group.join(device) if rank_group.launched() else None
    if group is not None:  # the parent makes sure no rank outlives the group (perfguard.engine.rounds)
        Path(spec["output"]).with_name(f"rank{group.rank}.pid").write_text(str(os.getpid()))
    output = spec["output"] if group is None or group.writer else os.devnull
    with open(output, "a", encoding="utf-8") as out:
        benchmarks = [
            b
            for b in disc_benchmarks(str(bench_dir))
            if getattr(b, "type", "") == "track"
            and (not suite or b.name.split(".", 1)[0] == suite)
            and b.name.split(".", 1)[0] not in excluded
            and b.name.split(".", 1)[-1] not in left_out
        ]
        discovery_s = time.perf_counter() - _STARTED
        selected = [
            item
            for item in _combinations(benchmarks)
            if (not regexes or any(r.search(item[2]) for r in regexes)) and (only is None or item[2] in only)
        ]
        selected.sort(key=_sort_key)
        if group is not None:
            rank_group.check_same("the round's plan", "\n".join(item[2] for item in selected))
        _emit(
            out,
            event="plan",
            total=len(selected),
            labels=[item[2] for item in selected],
            items=[{"label": item[2], "benchmark": item[0].name, "params": item[3]} for item in selected],
            discovery_s=discovery_s,
            ranks=1 if group is None else group.world,
        )
        watch = fallbacks.FallbackWatch()
        for bench, index, label, params in selected:
            _emit(out, event="start", label=label)
            t0 = time.perf_counter()
            result: dict[str, Any] = {"label": label, "benchmark": bench.name, "params": params}
            bench.set_param_idx(index)
            values = tuple(params.values())
            failed_on_cuda = False
            case = case_of(label)
            earlier = watch.tainted(case)
            try:
                if earlier is not None:
                    raise _Tainted(fallbacks.tainted_text(earlier))
                with watch.watch(case) as caught:
                    reason = _setup(bench, values)
                    if reason is not None:
                        result.update(status="skipped", error=reason)
                    else:
                        try:
                            value = bench.run(*values)
                            outcome = outcomes.take(bench.name, params)
                            result.update(_result_fields(value, outcome, bench))
                            if any(r.search(label) for r in profile_regexes):
                                name = "forward_backward" if "ForwardBackward" in bench.name else "forward"
                                measured = _current_measured(group is not None)
                                if measured is not None and measured.case is not None:
                                    breakdown = measured.pass_(name).breakdown()
                                    result.setdefault("info", {})["underneath"] = breakdown
                        except SkipNotImplemented as exc:
                            result.update(status="skipped", error=str(exc) or "skipped")
                        finally:
                            for teardown in bench._teardowns:
                                teardown(*values)
                if caught.messages:
                    result = {"label": label, "benchmark": bench.name, "params": params, "status": "failed",
                              "error": fallbacks.failure_text(caught.messages)}  # fmt: skip
                    failed_on_cuda = device == "cuda"  # the process runs another path from now on
            except _Tainted as exc:
                result.update(status="failed", error=str(exc))
            except Exception:
                result.update(status="failed", error=traceback.format_exc()[-4000:])
                failed_on_cuda = device == "cuda"
            result["seconds"] = time.perf_counter() - t0
            if group is not None and result["status"] == "failed":
                return _abandon(out, result, group)
            if group is not None:
                result = rank_group.agree(result, group)
                failed_on_cuda = failed_on_cuda or (device == "cuda" and result["status"] == "failed")
            _emit(out, event="result", **result)
            if failed_on_cuda:
                _release(group is not None)
                return EXIT_RESTART
        _release(group is not None)
        _emit(out, event="done", seconds=time.perf_counter() - started)
    if group is not None:
        rank_group.leave()
    return 0


class _Tainted(Exception):
    """A benchmark of a case whose path switched in an earlier one (:mod:`perfguard.engine.fallbacks`)."""


def _current_measured(distributed: bool) -> Any:
    """The case this process measures now (the distributed suite keeps its own: ``engine.shards``)."""
    if distributed:
        from perfguard.engine import shards

        return shards.current_measured()
    from perfguard.engine import passes

    return passes.current_measured()


def _release(distributed: bool) -> None:
    from perfguard.engine import passes

    passes.release()
    if distributed:
        from perfguard.engine import shards

        shards.release()


def _abandon(out: Any, result: dict[str, Any], group: Any) -> int:
    """A rank whose benchmark raised: say so and leave the group at once (see the module docstring).

    The other ranks may be waiting for this one inside an exchange; agreeing on the outcome could
    wait for them forever.  Rank 0 writes the failure (the parent keeps it); every rank prints it,
    so the round's log names the rank that failed.
    """
    error = str(result.get("error") or "")
    result["error"] = f"rank {group.rank} of {group.world}: {error}"
    if group.writer:
        _emit(out, event="result", **result)
    print(f"perfguard round worker, rank {group.rank} of {group.world}, failed {result['label']}:\n{error}",
          file=sys.stderr, flush=True)  # fmt: skip
    out.flush()
    os._exit(EXIT_RESTART)


def _result_fields(value: Any, outcome: Any, bench: Any) -> dict[str, Any]:
    if isinstance(value, float) and math.isnan(value):
        return {"status": "skipped", "error": "the benchmark returned NaN (asv: skipped)"}
    fields: dict[str, Any] = {"status": "ok", "value": value, "unit": getattr(bench, "unit", None)}
    if outcome is not None:
        # Passed on as they are: the parent validates every value (the code under test runs in
        # this process and can hand back anything; it must fail its benchmark, not perfguard).
        samples = outcome.samples
        fields.update(
            unit=outcome.unit,
            samples=list(samples) if isinstance(samples, (list, tuple)) else samples,
            method=outcome.method,
            info=outcome.info,
        )
        if outcome.value != value:
            fields["value_mismatch"] = [value, outcome.value]
    return fields


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m perfguard.engine.round_worker SPEC.json (started by perfguard)", file=sys.stderr
        )
        return 2
    spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
