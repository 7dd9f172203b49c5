"""The fidelity self-test: a number measured inside a full round equals the case measured alone.

``perfguard fidelity`` (issue 26, DESIGN.md "Fidelity").  A round measures every case of the suite
in one process, one after the other, and several passes (memory, work counts, capture, timing) take
turns on each case.  If any of that changes what is measured — a pass that switches the guarded
module to another path, an allocator whose history moves a peak, a cache one case leaves for the
next — the round's numbers are no longer those of a user's plain call.  The test measures:

1. one full round of the selection (a fresh process, exactly as ``run`` and ``check`` do);
2. each sampled case **alone**: a fresh process that measures only that case's benchmarks;

and compares them benchmark by benchmark: deterministic numbers (peak memory, FLOPs, aten ops,
kernels, bytes allocated) and path fingerprints must be **equal**; a timing must agree within a
tolerance (``--time-tolerance``, default 1.10 on CUDA, where graph replay repeats to well under
1%; on the CPU timings are shown but not judged unless a tolerance is given: process-to-process
noise on a busy CPU is larger than any bound that would mean something).  Nothing is stored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfguard.errors import UsageError
from perfguard.metrics import DETERMINISTIC_METRICS, REPEAT_RTOL
from perfguard.store.result_info import ResultInfo

if TYPE_CHECKING:
    from perfguard.measuring import Bench
    from perfguard.store import ResultRecord

#: The timing bound on CUDA when none is given (issue 26: "within 1.10x").
CUDA_TIME_TOLERANCE = 1.10


@dataclass(frozen=True)
class FidelityRow:
    """One benchmark x params: its number in the full round and alone, and whether they agree."""

    impl: str
    benchmark: str
    params_key: str
    params: Mapping[str, Any]
    metric: str
    unit: str
    in_round: float | None
    alone: float | None
    agree: bool | None  # None: shown, not judged (a CPU timing without a tolerance)
    why: str = ""

    @property
    def ratio(self) -> float | None:
        """alone / in round (None when either is missing or zero)."""
        if self.in_round in (None, 0) or self.alone is None:
            return None
        return self.alone / self.in_round

    def as_dict(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "benchmark": self.benchmark,
            "params_key": self.params_key,
            "params": dict(self.params),
            "metric": self.metric,
            "unit": self.unit,
            "in_round": self.in_round,
            "alone": self.alone,
            "ratio": self.ratio,
            "agree": self.agree,
            "why": self.why,
        }


@dataclass
class FidelityReport:
    """What :func:`fidelity_test` found; ``exit_code`` 1 when any judged row disagrees."""

    rows: list[FidelityRow]
    cases: int
    cases_in_round: int
    device: str
    profile: str
    time_tolerance: float | None
    seconds: dict[str, float] = field(default_factory=dict)
    #: where each round's time went (the full round first, then each case alone): a case alone costs
    #: a worker's start-up and discovery on top of its benchmarks, and a run must fit a time limit
    costs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def disagreeing(self) -> list[FidelityRow]:
        return [r for r in self.rows if r.agree is False]

    @property
    def exit_code(self) -> int:
        return 1 if self.disagreeing else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "profile": self.profile,
            "cases": self.cases,
            "cases_in_round": self.cases_in_round,
            "time_tolerance": self.time_tolerance,
            "seconds": self.seconds,
            "disagreeing": len(self.disagreeing),
            "costs": self.costs,
            "rows": [r.as_dict() for r in self.rows],
        }


def sample_cases(cases: Sequence[tuple[str, str]], sample: int) -> list[tuple[str, str]]:
    """``sample`` cases spread evenly over ``cases`` (all when ``sample`` is 0 or too large).

    Deterministic (no seed to record): every k-th case of the sorted list, so a rerun measures the
    same cases, and every implementation and length gets its turn as the sample grows.
    """
    ordered = sorted(cases)
    if sample <= 0 or sample >= len(ordered):
        return ordered
    step = len(ordered) / sample
    return [ordered[int(i * step)] for i in range(sample)]


def alone_cases(
    cases: Sequence[tuple[str, str]], labels: Mapping[tuple[str, str], Sequence[str]], pattern: str
) -> list[tuple[str, str]]:
    """The cases any of whose benchmark labels (asv's ``name(param reprs)``) ``pattern`` searches.

    The same syntax as ``--bench``, applied to whole cases: a case is measured alone with all its
    benchmarks or not at all.  A long selection is split over several runs this way (each with its
    own full round), e.g. ``--alone "'ring'"`` then ``--alone "'multihead_"``.
    """
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise UsageError(f"--alone {pattern!r} is not a regular expression: {e}") from None
    chosen = [c for c in cases if any(regex.search(x) for x in labels.get(c, ()))]
    if not chosen:
        raise UsageError(
            f"--alone {pattern!r} matches no case of the round",
            hint="it is searched in asv's labels, e.g. \"'ring', 4096\" or \"'multihead_\"",
        )
    return chosen


def fidelity_test(
    bench: Bench,
    *,
    sample: int = 0,
    alone: str | None = None,
    time_tolerance: float | None = None,
    on_case: Callable[[FidelityReport], None] | None = None,
) -> FidelityReport:
    """Measure the selection in one full round, then each sampled case alone; compare (module docstring).

    ``alone``: a regex that picks the cases measured alone (:func:`alone_cases`), then ``sample``
    spreads over those.  ``on_case``: called with the report so far after every case measured alone
    (a run cut short by a time limit keeps what it compared: the CLI rewrites its JSON each time).
    """
    from perfguard.compare.model import derived_source
    from perfguard.engine.suite import label, selection_regex
    from perfguard.gitrepo import work_tree
    from perfguard.report.formatting import params_label

    if sample < 0:
        raise UsageError(f"--sample must be 0 (every case) or more, got {sample}")
    if time_tolerance is not None and not 1.0 < time_tolerance <= 10.0:
        raise UsageError(f"--time-tolerance must be in (1, 10], got {time_tolerance:g}")
    tolerance = (
        time_tolerance if time_tolerance is not None or bench.device != "cuda" else CUDA_TIME_TOLERANCE
    )
    tree = work_tree(bench.root, ignore=bench.store_files)
    side = bench.head_side(tree)
    started = time.perf_counter()
    full = bench.runner.run(side.target, bench=bench.bench, label="full round: ", exclude=bench.exclude)
    round_s = time.perf_counter() - started
    by_case: dict[tuple[str, str], list[ResultRecord]] = {}
    for r in full.results:
        if derived_source(r.benchmark) is None:  # tokens/s and TFLOP/s follow their timing
            by_case.setdefault((r.impl, r.params_key), []).append(r)
    cases = list(by_case)
    if alone is not None:
        labels = {
            c: [label(r.benchmark, r.params, ResultInfo.from_json(r.info).param_names) for r in rs]
            for c, rs in by_case.items()
        }
        cases = alone_cases(cases, labels, alone)
    chosen = sample_cases(cases, sample)
    costs = [{"case": "full round", **full.seconds}]
    bench.say(
        f"full round: {len(full.results)} numbers of {len(by_case)} cases in {round_s:.0f} s; "
        f"now {len(chosen)} case(s) alone, each in a fresh process"
    )
    rows: list[FidelityRow] = []
    alone_s = time.perf_counter()
    for n, case in enumerate(chosen, 1):
        in_round = by_case[case]
        selection = [
            selection_regex(r.benchmark, r.params, ResultInfo.from_json(r.info).param_names) for r in in_round
        ]
        one = bench.runner.run(side.target, bench=selection, label=f"alone {n}/{len(chosen)}: ")
        name = f"{case[0]} {params_label(in_round[0].params)}"
        costs.append({"case": name, **one.seconds})
        bench.say(f"alone {n}/{len(chosen)}: {name}: {_cost_text(one.seconds)}")
        measured = {r.key: r for r in one.results}
        rows += [compare_alone(r, measured.get(r.key), tolerance) for r in in_round]
        seconds = {"round_s": round(round_s, 1), "alone_s": round(time.perf_counter() - alone_s, 1)}
        so_far = FidelityReport(
            list(rows), n, len(by_case), bench.device, bench.profile.name, tolerance, seconds, list(costs)
        )
        if on_case is not None:
            on_case(so_far)
    seconds = {"round_s": round(round_s, 1), "alone_s": round(time.perf_counter() - alone_s, 1)}
    return FidelityReport(
        rows, len(chosen), len(by_case), bench.device, bench.profile.name, tolerance, seconds, costs
    )


def _cost_text(seconds: Mapping[str, Any]) -> str:
    """``31 s: start-up and discovery 6 s, benchmarks 22 s (work 9 s, timing 8 s, ...)``."""
    steps = seconds.get("steps_s") or {}
    top = sorted(steps.items(), key=lambda kv: -kv[1])[:4]
    detail = ", ".join(f"{k} {v:.1f} s" for k, v in top)
    return (
        f"{seconds.get('round_s', 0):.1f} s: start-up and discovery {seconds.get('discovery_s', 0):.1f} s, "
        f"benchmarks {seconds.get('benchmarks_s', 0):.1f} s" + (f" ({detail})" if detail else "")
    )


def compare_alone(in_round: ResultRecord, alone: ResultRecord | None, tolerance: float | None) -> FidelityRow:
    """One benchmark: equal (exact metrics and paths), within ``tolerance`` (timings), or why not."""
    row = dict(
        impl=in_round.impl,
        benchmark=in_round.benchmark,
        params_key=in_round.params_key,
        params=dict(in_round.params),
        metric=in_round.metric,
        unit=in_round.unit,
        in_round=in_round.value if in_round.status == "ok" else None,
        alone=alone.value if alone is not None and alone.status == "ok" else None,
    )
    if alone is None:
        return FidelityRow(**row, agree=False, why="not measured alone")
    if in_round.status != alone.status:
        said = (in_round.error or alone.error or "").strip().splitlines()
        why = f"{in_round.status} in the round, {alone.status} alone" + (
            f": {said[-1][:160]}" if said else ""
        )
        return FidelityRow(**row, agree=False, why=why)
    if in_round.status != "ok":
        return FidelityRow(**row, agree=True, why=f"{in_round.status} both times")
    path_a, path_b = _digest(in_round), _digest(alone)
    if path_a != path_b:
        return FidelityRow(
            **row, agree=False, why=f"another code path alone ({path_a} in the round, {path_b})"
        )
    a, b = in_round.value, alone.value
    if in_round.metric in DETERMINISTIC_METRICS:
        if a == b:
            return FidelityRow(**row, agree=True, why="")
        rtol = REPEAT_RTOL[in_round.metric]
        if a is not None and b is not None and abs(b - a) <= rtol * max(abs(a), abs(b)):
            return FidelityRow(**row, agree=True, why=f"within the metric's repeat tolerance ({rtol:g})")
        return FidelityRow(**row, agree=False, why="an exact number that differs")
    if in_round.metric != "time" or a is None or b is None or a <= 0 or b <= 0:
        return FidelityRow(**row, agree=None, why="derived or reported: not judged")
    if tolerance is None:
        return FidelityRow(**row, agree=None, why="CPU timing: shown, not judged (no --time-tolerance)")
    ratio = b / a
    ok = 1 / tolerance <= ratio <= tolerance
    return FidelityRow(**row, agree=ok, why="" if ok else f"×{ratio:.3f} is beyond ×{tolerance:g}")


def _digest(result: ResultRecord) -> str | None:
    path = ResultInfo.from_json(result.info).path
    return path.digest if path is not None and path.digest else None
