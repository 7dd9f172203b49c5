"""One round of one side, in one fresh process: every selected benchmark of the asv suite.

``python -m perfguard.engine.round_worker SPEC.json`` (started by :mod:`perfguard.engine.rounds`,
never by hand).
The spec (:class:`~perfguard.engine.round_protocol.WorkerSpec`) names the suite directory, the
``--bench`` regexes, the combinations to run (a restart after a crash gets the rest), the benchmarks
to profile for the report, and the output file; a spec that is not one exits 2 with what is wrong.

The suite is discovered and run the way asv's own runner does it (``asv_runner``: discovery,
``setup`` / ``run`` / ``teardown`` per parameter combination; a ``NotImplementedError`` in setup
or ``SkipNotImplemented`` in the benchmark is *skipped*), but all in this process, in an order that
lets the benchmarks of one case share it (:mod:`perfguard.engine.passes`): process start-up, CUDA
initialisation and every case's first call are paid once per round instead of once per number.

Output: one JSON line per event (``plan``, then ``start`` and ``result`` per combination, ``done``;
:mod:`perfguard.engine.round_protocol`), flushed as soon as it is known, so that the parent can show
progress and, if this process dies, knows which combination it died in.

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

import atexit
import contextlib
import itertools
import math
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, NoReturn

from perfguard.engine.compile_cache import use_checked_bytecode
from perfguard.engine.round_protocol import (
    DoneEvent,
    Event,
    PlanEvent,
    PlannedItem,
    ProtocolError,
    ResultEvent,
    StartEvent,
    WorkerSpec,
    event_line,
)

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
    # last: an eager forward and backward against the float64 reference (perfguard.engine.accuracy)
    "Accuracy.track_output_error",
    "Accuracy.track_q_error",
    "Accuracy.track_k_error",
    "Accuracy.track_v_error",
    "Accuracy.track_output_error_causal",
    "Accuracy.track_q_error_causal",
    "Accuracy.track_k_error_causal",
    "Accuracy.track_v_error_causal",
)


def label_of(name: str, param_reprs: tuple[str, ...]) -> str:
    """How asv names one combination for ``--bench`` matching: ``name(repr, repr, ...)``."""
    return f"{name}({', '.join(param_reprs)})" if param_reprs else name


def case_of(label: str) -> str:
    """The parameters part of a label: every benchmark of one case shares it."""
    return label[label.find("(") :] if "(" in label else label


def _combinations(benchmarks: list[Any]) -> Iterator[tuple[Any, int, PlannedItem]]:
    for bench in benchmarks:
        values = list(itertools.product(*bench._params)) if bench._params else [()]
        reprs = list(itertools.product(*bench.params)) if bench.params else [()]
        for index, (vals, rep) in enumerate(zip(values, reprs, strict=True)):
            params = dict(zip(bench.param_names, vals, strict=True))
            yield bench, index, PlannedItem(label_of(bench.name, tuple(rep)), bench.name, params)


def _sort_key(combination: tuple[Any, int, PlannedItem]) -> tuple:
    bench, _, item = combination
    short = bench.name.split(".", 1)[-1]
    rank = _ORDER.index(short) if short in _ORDER else len(_ORDER)
    return (
        str(item.params.get("dtype", "")),
        str(item.params.get("impl", "")),
        int(item.params["seq_len"]) if isinstance(item.params.get("seq_len"), int) else 0,
        rank,
        item.label,
    )


def _emit(out: IO[str], event: Event) -> None:
    out.write(event_line(event))
    out.flush()


def _setup(bench: Any, params: tuple[Any, ...]) -> str | None:
    """Run the benchmark's setups; the skip reason when one raises ``NotImplementedError``."""
    try:
        for setup in bench._setups:
            setup(*params)
    except NotImplementedError as exc:
        return str(exc) or type(exc).__name__
    return None


def run(spec: WorkerSpec) -> int:
    """Run the round described by ``spec``; returns the process exit code."""
    from perfguard.engine import rank_group

    started = time.perf_counter()
    sys.path.insert(0, str(spec.benchmark_dir.parent))
    use_checked_bytecode(spec.benchmark_dir)  # the suite's bytecode is reused by every round of the side
    group = rank_group.join(spec.device) if rank_group.launched() else None
    if group is not None:  # the parent makes sure no rank outlives the group (perfguard.engine.rounds)
        spec.output.with_name(f"rank{group.rank}.pid").write_text(str(os.getpid()))
    output = spec.output if group is None or group.writer else Path(os.devnull)
    with open(output, "a", encoding="utf-8") as out:
        selected, discovery_s = _plan(spec)
        if group is not None:
            rank_group.check_same("the round's plan", "\n".join(item.label for _, _, item in selected))
        plan = PlanEvent(
            tuple(item for _, _, item in selected), discovery_s, 1 if group is None else group.world
        )
        _emit(out, plan)
        code = _measure(spec, selected, out, group)
        if code is not None:
            return code
        _emit(out, DoneEvent(time.perf_counter() - started))
    if group is not None:
        rank_group.leave()
    return 0


def _plan(spec: WorkerSpec) -> tuple[list[tuple[Any, int, PlannedItem]], float]:
    """The suite's combinations this round measures, in the order that lets a case's benchmarks
    share it; and the seconds from the process's start to the end of the suite's discovery."""
    from asv_runner.discovery import disc_benchmarks

    regexes = [re.compile(r) for r in spec.bench]
    excluded = set(spec.exclude_suites)
    left_out = set(spec.exclude_benchmarks)  # ``Class.method`` names (suite.HISTORY_ONLY)
    benchmarks = [
        b
        for b in disc_benchmarks(str(spec.benchmark_dir))
        if getattr(b, "type", "") == "track"
        and (not spec.suite or b.name.split(".", 1)[0] == spec.suite)
        and b.name.split(".", 1)[0] not in excluded
        and b.name.split(".", 1)[-1] not in left_out
    ]
    discovery_s = time.perf_counter() - _STARTED
    only = None if spec.only is None else set(spec.only)
    selected = [
        combination
        for combination in _combinations(benchmarks)
        if (not regexes or any(r.search(combination[2].label) for r in regexes))
        and (only is None or combination[2].label in only)
    ]
    selected.sort(key=_sort_key)
    return selected, discovery_s


def _measure(
    spec: WorkerSpec, selected: list[tuple[Any, int, PlannedItem]], out: IO[str], group: Any
) -> int | None:
    """Measure every combination, one ``start`` and one ``result`` line each; an exit code when the
    process must end early (a failure on CUDA, a rank's failure), None when all were measured."""
    from asv_runner.benchmarks.mark import SkipNotImplemented

    from perfguard.engine import fallbacks, outcomes, rank_group

    profile_regexes = [re.compile(r) for r in spec.profile]
    on_cuda = spec.device == "cuda"
    watch = fallbacks.FallbackWatch()
    for bench, index, item in selected:
        _emit(out, StartEvent(item.label))
        t0 = time.perf_counter()
        bench.set_param_idx(index)
        values = tuple(item.params.values())
        failed_on_cuda = False
        case = case_of(item.label)
        earlier = watch.tainted(case)
        try:
            if earlier is not None:
                raise _Tainted(fallbacks.tainted_text(earlier))
            with watch.watch(case) as caught:
                reason = _setup(bench, values)
                if reason is not None:
                    result = item.skipped(reason)
                else:
                    try:
                        value = bench.run(*values)
                        result = _result(item, value, outcomes.take(bench.name, item.params), bench)
                        if any(r.search(item.label) for r in profile_regexes):
                            result = replace(result, underneath=_breakdown(bench.name, group is not None))
                    except SkipNotImplemented as exc:
                        result = item.skipped(str(exc) or "skipped")
                    finally:
                        for teardown in bench._teardowns:
                            teardown(*values)
            if caught.messages:
                result = item.failed(fallbacks.failure_text(caught.messages))
                failed_on_cuda = on_cuda  # the process runs another path from now on
        except _Tainted as exc:
            result = item.failed(str(exc))
        except Exception:
            result = item.failed(traceback.format_exc()[-4000:])
            failed_on_cuda = on_cuda
        result = replace(result, seconds=time.perf_counter() - t0)
        if group is not None and result.status == "failed":
            return _abandon(out, result, group)
        if group is not None:
            result = rank_group.agree(result, group)
            failed_on_cuda = failed_on_cuda or (on_cuda and result.status == "failed")
        _emit(out, result)
        if failed_on_cuda:
            _release(group is not None)
            return EXIT_RESTART
    _release(group is not None)
    return None


class _Tainted(Exception):
    """A benchmark of a case whose path switched in an earlier one (:mod:`perfguard.engine.fallbacks`)."""


def _breakdown(benchmark: str, distributed: bool) -> dict[str, Any] | None:
    """The profiler breakdown of the pass ``benchmark`` measures (the report's "what changed underneath")."""
    measured = _current_measured(distributed)
    if measured is None or measured.case is None:
        return None
    return measured.pass_("forward_backward" if "ForwardBackward" in benchmark else "forward").breakdown()


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


def _abandon(out: IO[str], result: ResultEvent, group: Any) -> int:
    """A rank whose benchmark raised: say so and leave the group at once (see the module docstring).

    The other ranks may be waiting for this one inside an exchange; agreeing on the outcome could
    wait for them forever.  Rank 0 writes the failure (the parent keeps it); every rank prints it,
    so the round's log names the rank that failed.
    """
    error = result.error or ""
    if group.writer:
        _emit(out, replace(result, error=f"rank {group.rank} of {group.world}: {error}"))
    print(f"perfguard round worker, rank {group.rank} of {group.world}, failed {result.label}:\n{error}",
          file=sys.stderr, flush=True)  # fmt: skip
    out.flush()
    os._exit(EXIT_RESTART)


def _result(item: PlannedItem, value: Any, outcome: Any, bench: Any) -> ResultEvent:
    """What the benchmark handed back, as it is: the parent checks every value (the code under test
    runs in this process and can hand back anything; it must fail its benchmark, not perfguard)."""
    if isinstance(value, float) and math.isnan(value):
        return item.skipped("the benchmark returned NaN (asv: skipped)")
    result = ResultEvent(item.label, item.benchmark, item.params, "ok", value=value,
                         unit=getattr(bench, "unit", None))  # fmt: skip
    if outcome is None:
        return result
    samples = outcome.samples
    return replace(
        result,
        unit=outcome.unit,
        samples=tuple(samples) if isinstance(samples, (list, tuple)) else samples,
        method=outcome.method,
        info=outcome.info,
        value_mismatch=None if outcome.value == value else (value, outcome.value),
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m perfguard.engine.round_worker SPEC.json (started by perfguard)", file=sys.stderr
        )
        return 2
    try:
        spec = WorkerSpec.read(Path(args[0]))
    except ProtocolError as exc:
        print(f"perfguard round worker: not a round spec: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(spec)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` after its exit handlers, without the interpreter's teardown.

    A round is a fresh process every time, and freeing every module and object of an interpreter
    that imported torch costs ~0.5 CPU s (``os.times()``: 2.1 s after the last exit handler, 2.6 s
    at the end; docs/perf/test_suite.md).  The exit handlers still run (Inductor's compile workers,
    logging), the round's output file is closed by then, and stdout and stderr are flushed.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or gone: nothing left to lose
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
