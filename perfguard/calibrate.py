"""Calibration of this machine: how noisy it is, and what perfguard's verdict rule makes of that.

Why: the false-alarm and detection rates in ``docs/verdicts.md`` come from a simulation with
assumed noise models; what the rule does on a given runner depends on that runner's real noise
(process-to-process spread, a bimodal launch-bound benchmark, a busy neighbour on a shared host).
``perfguard calibrate`` measures it there, on the commit HEAD, with the real pipeline (asv rounds
in fresh processes, :func:`perfguard.compare.compare_suite`, the interleaved re-measurement of
suspects and :func:`perfguard.compare.apply_retry`), so a maintainer can see before trusting a new
runner whether the gate is quiet on unchanged code and catches a slowdown that is really there.
User documentation: ``docs/calibration.md`` (also the JSON schema, ``perfguard-calibration/1``).

What is measured (:class:`Calibrator`):

1. **A/A + process noise**: HEAD is measured as two sides, A and B, interleaved (A B B A ...),
   ``rounds`` fresh-process rounds each, ``aa`` times.  Each repetition is compared with the full
   rule (stage 1, then the suspects re-measured A and B interleaved, ``config.retry.rounds`` a side,
   exactly as ``perfguard check`` does): every gated ``regression`` is a false alarm.  The same
   rounds (2 x rounds x aa of the same code) give each benchmark's process-to-process CV.
2. **Planted slowdowns**: for each fraction f a temporary clone of HEAD gets a commit that makes
   every built module's forward do extra work of f times its own (:func:`planted_source`; the
   harness plants it, never product code).  HEAD and every planted commit are measured interleaved
   on the ``Forward.track_time`` benchmarks and each planted commit is compared with HEAD by the
   full rule: the share of gated comparisons flagged ``regression`` is the detection rate.
3. **asv side by side**: asv's own rule (:func:`asv_rule`) is applied to the same stage-1 data of
   every A/A and planted pair.
4. **Time** per phase (:class:`PhaseClock`): wall clock, and the measured rounds' own wall time
   (on CUDA: the time the GPU was held by benchmark processes).

Data flow: the CLI (``perfguard/cli/calibrate.py``) owns the measuring (a :class:`Measurer` over
``perfguard.measuring.Bench``, storing every round with purpose ``calibrate``) and hands this
module the rounds; this module decides what to measure and turns rounds into verdicts and a
report.  It reads ``rounds`` (selection regexes), ``compare``/``stats``/``config`` (the rule) and
``gitrepo`` (the planted clones), never the CLI (docs/design.md, module map).

API
---
``parse_fractions(text)``                   "0.1,0.2" -> (0.1, 0.2); ValueError on bad input
``planted_source(fraction)``                the Python appended to attention/registry.py of a clone
``planted_clone(root, head, f, parent)``    context manager: a clone with the planted commit
``forward_selection(bench)``                asv ``--bench`` regexes: Forward.track_time within bench
``asv_rule(base, head, factor, samples)``   asv 0.6.6's compare decision (``AsvDecision``)
``process_noise(rounds, config)``           one :class:`NoiseRow` per benchmark x params
``Calibrator(measure, plan, config, clock, say).run()``  -> ``Findings``
``Calibration(...)``                        the report: ``to_json()``, ``to_markdown()``, ``tables()``
"""

from __future__ import annotations

import math
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from perfguard import stats
from perfguard.compare import SuiteComparison, Verdict, apply_retry, compare_suite, measurements_from_rounds
from perfguard.config import Config
from perfguard.errors import GitError
from perfguard.gitrepo import git
from perfguard.store.records import ResultRecord, RunRecord
from perfguard.suite import suspect_selection

#: The ``schema`` of ``perfguard calibrate --json`` (documented in docs/calibration.md).
SCHEMA = "perfguard-calibration/1"
#: The store purpose of every calibration round: never a baseline, never history.
PURPOSE = "calibrate"
#: The side key of HEAD for a :class:`Measurer`; planted commits are ``planted_key(f)``.
HEAD = "head"
#: The benchmark the planted work is in (and the only one the planted phase measures).
PLANTED_BENCHMARK = "Forward.track_time"
#: Process-noise flag: a gated timing of at least this many seconds ...
CV_FLAG_MIN_SECONDS = 1e-4
#: ... whose CV of round medians exceeds this.  A graph-replayed GPU timing reaches ~0.4%
#: (research/gpu_timing.md §11); above 1% the processes of the same code disagree noticeably,
#: and from 5% (``max_round_cv``) the rule calls the benchmark noisy.
CV_FLAG_MAX = 0.01
#: A plant larger than ten times the module's own work tells nothing a smaller one does not.
MAX_FRACTION = 10.0
#: asv's significance level (asv/_stats.py ``is_different``; research/asv.md §4.1).
ASV_P_THRESHOLD = 0.002
#: Verdicts of items that were compared (both sides measured): the denominators of every rate.
COMPARED = frozenset({Verdict.REGRESSION, Verdict.IMPROVEMENT, Verdict.UNCHANGED, Verdict.UNSTABLE})
DILUTION_NOTE = (
    "The planted work is in forward only: in a forward+backward pass it is diluted to about "
    "f x forward / (forward + backward), so ForwardBackward.track_time is not measured in this phase "
    "and detection rates are for Forward.track_time only."
)
ASV_NOTE = (
    "asv: asv 0.6.6's compare rule with --factor 1 + threshold, applied to the same stage-1 rounds "
    "(asv sees one number per round: the round's median, which the suite's track_ benchmark "
    "returns). 'track_' is what asv does with this suite: track_ results carry no statistics, so the "
    "factor alone decides, on the median of each side's round values. '+ stats' hands asv the round "
    "values as if they were samples (Mann-Whitney U at p < 0.002 when the sample counts can reach "
    "it, else non-overlapping 99% CIs; asv's own asv._stats and asv_runner.statistics). asv has "
    "no re-measurement: its decision is final on stage 1."
)


def planted_key(fraction: float) -> str:
    """The :class:`Measurer` side key of the commit planted with ``fraction``."""
    return f"planted:{fraction:g}"


def percent(fraction: float) -> str:
    """0.25 -> "+25%", 1.0 -> "+100%" (a plant's label)."""
    return f"+{fraction * 100:g}%"


# --------------------------------------------------------------------------------------------
# input
# --------------------------------------------------------------------------------------------


def parse_fractions(text: str) -> tuple[float, ...]:
    """``--planted``: comma-separated fractions in (0, 10], no duplicates; "" plants nothing.

    Raises ValueError naming the offending value (the CLI turns it into exit 2).
    """
    fractions: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            if text.strip():
                raise ValueError("an empty value between commas")
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{part} is not a fraction above 0 (0.1 plants +10%)")
        if value > MAX_FRACTION:
            raise ValueError(
                f"{part} is more than {MAX_FRACTION:g} (a fraction: 0.1 plants +10%, not 10 for 10%)"
            )
        if value in fractions:
            raise ValueError(f"{part} is given twice")
        fractions.append(value)
    return tuple(fractions)


# --------------------------------------------------------------------------------------------
# planted slowdowns
# --------------------------------------------------------------------------------------------

_PLANTED_TEMPLATE = """

# --- planted by `perfguard calibrate` in a temporary clone of HEAD: a known slowdown of __PERCENT__ ---
# Every module built through the registry does extra work of __FRACTION__ x its own forward time
# before each forward call.  CPU: a busy loop of process CPU time (the CPU timer measures
# time.process_time, which sleeping does not use).  CUDA: torch.cuda._sleep, a kernel that spins
# for a number of GPU clock cycles, so a CUDA-graph capture replays it.  The module's own time is
# measured once, on its first forward call, which perfguard's timer never times: two warm calls,
# then the median of five timed calls (process CPU time), or on CUDA the median of three timings of
# ten calls queued behind a spin kernel (GPU time without launch gaps, as a graph replay runs).
import statistics as _planted_statistics
import time as _planted_time

import torch as _planted_torch

_PLANTED_FRACTION = __FRACTION__
_planted_original_build = ImplSpec.build
_planted_sleep_rate = []  # cycles per second of torch.cuda._sleep, measured once per process


def _planted_gpu_seconds(fn):
    start = _planted_torch.cuda.Event(enable_timing=True)
    end = _planted_torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def _planted_gpu_work_seconds(fn, calls=10):
    # The module's GPU time without its launch gaps (what a CUDA-graph replay of it takes): the GPU
    # is held by a spin kernel while the host queues `calls` calls, then events time them back to
    # back.  Timing one eager call would count a launch-bound module's host gaps, and the plant
    # would then be several times `fraction` of the replayed time that perfguard measures.
    host = _planted_time.perf_counter()
    fn()
    _planted_torch.cuda.synchronize()
    host = _planted_time.perf_counter() - host
    _planted_torch.cuda._sleep(int(_planted_cycles_per_second() * (1.5 * calls * host + 0.01)))
    start = _planted_torch.cuda.Event(enable_timing=True)
    end = _planted_torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / calls


def _planted_cpu_seconds(fn):
    started = _planted_time.process_time()
    fn()
    return _planted_time.process_time() - started


def _planted_cycles_per_second():
    if not _planted_sleep_rate:
        cycles = 1_000_000
        _planted_torch.cuda._sleep(cycles)
        seconds = [_planted_gpu_seconds(lambda: _planted_torch.cuda._sleep(cycles)) for _ in range(3)]
        _planted_sleep_rate.append(cycles / _planted_statistics.median(seconds))
    return _planted_sleep_rate[0]


def _planted_build(self, *args, **kwargs):
    module = _planted_original_build(self, *args, **kwargs)
    forward = module.forward
    state = {}

    def planted_forward(*a, **k):
        if "extra" not in state:
            tensors = [t for t in (*a, *k.values()) if isinstance(t, _planted_torch.Tensor)]
            cuda = any(t.is_cuda for t in tensors)
            if cuda and _planted_torch.cuda.is_current_stream_capturing():
                return forward(*a, **k)  # never measured inside a capture (not reached: warm first)
            timer = _planted_gpu_work_seconds if cuda else _planted_cpu_seconds
            for _ in range(2):
                forward(*a, **k)
            timings = [timer(lambda: forward(*a, **k)) for _ in range(3 if cuda else 5)]
            own = _planted_statistics.median(timings)
            state["cuda"] = cuda
            state["own_s"] = own
            if cuda:
                state["extra"] = int(_PLANTED_FRACTION * own * _planted_cycles_per_second())
            else:
                state["extra"] = _PLANTED_FRACTION * own
        if state["cuda"]:
            if state["extra"] > 0:
                _planted_torch.cuda._sleep(state["extra"])
        else:
            until = _planted_time.process_time() + state["extra"]
            while _planted_time.process_time() < until:
                pass
        return forward(*a, **k)

    module.forward = planted_forward
    return module


ImplSpec.build = _planted_build
"""


def planted_source(fraction: float) -> str:
    """The code appended to ``attention/registry.py`` to plant a slowdown of ``fraction``.

    A wrapper around ``ImplSpec.build`` (the pattern of ``tests/test_workflows_pr_run.py``), so
    every implementation the suite builds is slowed, and nothing in the product changes.
    """
    return _PLANTED_TEMPLATE.replace("__FRACTION__", repr(float(fraction))).replace(
        "__PERCENT__", percent(fraction)
    )


@dataclass(frozen=True)
class PlantedCommit:
    """A commit on top of HEAD, in a temporary clone, whose forward passes are ``fraction`` slower."""

    fraction: float
    sha: str
    parent: str
    path: Path  # the clone: its attention/ package is what the planted rounds import
    subject: str


_REGISTRY = Path("attention") / "registry.py"
_IDENTITY = (
    "-c", "user.name=perfguard calibrate", "-c", "user.email=calibrate@perfguard.invalid",
    "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
)  # fmt: skip


@contextmanager
def planted_clone(root: Path, head: str, fraction: float, parent: Path) -> Iterator[PlantedCommit]:
    """A ``git clone --shared`` of ``root`` at ``head`` plus a commit planting ``fraction``.

    The commit lives in the clone only (the user's repository gets no objects, refs or worktree
    entries) and the clone is removed on exit.  asv labels the planted rounds with ``head``, a
    commit it can resolve in ``root``; the store keeps them under the planted commit's own sha.
    """
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"planted-{fraction:g}"
    if path.exists():
        shutil.rmtree(path)
    try:
        git(parent, "clone", "--shared", "--no-checkout", "-q", str(root), str(path))
        git(path, "checkout", "-q", "--detach", head)
        registry = path / _REGISTRY
        if not registry.is_file():
            raise GitError(
                f"HEAD {head[:12]} has no {_REGISTRY}: there is no registry to plant a slowdown in",
                hint="run perfguard calibrate in the project whose attention/ package it guards",
            )
        with registry.open("a", encoding="utf-8") as fh:
            fh.write(planted_source(fraction))
        subject = f"perfguard calibrate: planted slowdown {percent(fraction)} of every forward pass"
        git(path, *_IDENTITY, "commit", "-q", "--no-verify", "-am", subject)
        sha = str(git(path, "rev-parse", "HEAD"))
        yield PlantedCommit(fraction=fraction, sha=sha, parent=head, path=path, subject=subject)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def forward_selection(bench: Sequence[str]) -> list[str]:
    """asv ``--bench`` regexes selecting the ``Forward.track_time`` benchmarks within ``bench``.

    asv keeps a combination when any regex matches its ``name(params)``; a user's regex is
    combined with the forward restriction by lookaheads, so both must match.
    """
    forward = r"\.Forward\.track_time\("
    if not bench:
        return [forward]
    return [f"^(?=.*?(?:{regex}))(?=.*?{forward})" for regex in bench]


# --------------------------------------------------------------------------------------------
# asv's rule
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AsvDecision:
    """What ``asv compare --factor F`` marks one benchmark with (research/asv.md §4.1).

    ``ratio``: head / base of asv's numbers.  ``significant``: asv's ``is_different`` (None when
    asv uses no statistics).  ``test``: ``factor only``, ``mann-whitney``, ``99% CI overlap`` or
    ``n/a`` (a side without numbers).
    """

    ratio: float | None
    worse: bool
    better: bool
    significant: bool | None
    test: str
    factor: float

    @property
    def mark(self) -> str:
        """asv's mark: ``+`` worse, ``-`` better, ``~`` beyond the factor but not significant."""
        if self.ratio is None:
            return "n/a"
        if self.worse:
            return "+"
        if self.better:
            return "-"
        beyond = self.ratio > self.factor or self.ratio * self.factor < 1
        return "~" if beyond and self.significant is False else " "

    def to_json(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "mark": self.mark,
            "worse": self.worse,
            "better": self.better,
            "significant": self.significant,
            "test": self.test,
        }


def asv_rule(
    base: Sequence[float], head: Sequence[float], *, factor: float = 1.2, samples: bool = False
) -> AsvDecision:
    """asv 0.6.6's decision for one benchmark: is head worse than base by more than ``factor``?

    Reproduces ``asv.commands.compare._is_result_better`` (research/asv.md §4.1) on numbers that
    live in perfguard's rounds, not in asv result files (each round is its own asv invocation in a
    scratch directory, so ``asv compare`` has no pair of files to read):

    - ``samples=False`` (asv's ``track_`` results, this suite): no statistics, so the **factor
      alone** decides: worse iff median(head) > factor x median(base).  A track_ benchmark stores
      one number per asv run; each side's several round values are given to asv as their median.
    - ``samples=True``: the values are asv samples; the result is their median (asv_runner's
      ``compute_stats``) and, unless a side has one sample, asv's ``is_different`` must agree:
      two-sided Mann-Whitney U at p < 0.002 when ``p_min = 1/C(n_a + n_b, min(n_a, n_b))`` is below
      0.002, otherwise non-overlapping 99% CIs of the median.  Worse iff significant and the ratio
      exceeds the factor.

    Lower is better (asv knows no direction).  Non-finite values are dropped.
    """
    b = [float(x) for x in base if x is not None and math.isfinite(x)]
    h = [float(x) for x in head if x is not None and math.isfinite(x)]
    if not b or not h:
        return AsvDecision(None, False, False, None, "n/a", factor)
    significant: bool | None = None
    test = "factor only"
    if samples:
        from asv import _stats
        from asv_runner.statistics import compute_stats

        value_b, stats_b = compute_stats(b, 1)
        value_h, stats_h = compute_stats(h, 1)
        if stats_b["repeat"] != 1 and stats_h["repeat"] != 1:  # asv: one sample -> factor alone
            significant = bool(_stats.is_different(b, h, stats_b, stats_h))
            p_min = 1 / math.comb(len(b) + len(h), min(len(b), len(h)))
            test = "mann-whitney" if p_min < ASV_P_THRESHOLD else "99% CI overlap"
    else:
        value_b, value_h = statistics.median(b), statistics.median(h)
    ratio = value_h / value_b if value_b else math.inf
    differs = significant is not False
    return AsvDecision(
        ratio=ratio,
        worse=differs and value_b < value_h / factor,
        better=differs and value_h < value_b / factor,
        significant=significant,
        test=test,
        factor=factor,
    )


def check_asv() -> str | None:
    """None when asv's compare statistics can be imported, else why not (for ``--asv``)."""
    try:
        from asv import _stats  # noqa: F401
        from asv_runner.statistics import compute_stats  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------------------------
# process-to-process noise
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseRow:
    """One benchmark x params over every round of HEAD: typical value and how much processes agree.

    ``median``: the median of the round medians.  ``process_cv``: CV of the round medians (the
    process-to-process noise; ``None`` with one round).  ``spread``: largest / smallest round median.
    ``iqr_median`` / ``iqr_max``: within-round IQR / median, median and largest over the rounds.
    ``flagged``: a gated timing of at least 0.1 ms whose process CV exceeds 1%.
    """

    benchmark: str
    impl: str
    params: dict[str, Any]
    params_key: str
    metric: str
    unit: str
    gated: bool
    status: str
    method: str | None
    rounds: int
    samples_per_round: int | None = None
    median: float | None = None
    process_cv: float | None = None
    spread: float | None = None
    iqr_median: float | None = None
    iqr_max: float | None = None
    flagged: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1][:200] if lines else "no message"


def _iqr_ratio(samples: np.ndarray) -> float:
    """Within-round IQR / median of one round's samples (numpy's default quantiles, as stats uses)."""
    q25, median, q75 = (float(x) for x in np.quantile(samples, [0.25, 0.5, 0.75]))
    return (q75 - q25) / abs(median) if median else 0.0


def _gated(result: ResultRecord, config: Config) -> bool:
    rule = config.rule_for(result.impl, result.benchmark, result.metric, result.params)
    return rule.gate if rule.gate is not None else bool(result.gated)


def _flag_note(method: str | None, cv: float) -> str:
    why = f"process CV {cv:.1%} > {CV_FLAG_MAX:.0%}"
    if method == "cuda-events":
        return f"{why}: timed eagerly (no CUDA graph); launch-bound code varies between processes"
    if method == "cpu-time":
        return f"{why}: CPU processes disagree (a shared or frequency-scaling CPU)"
    return f"{why}: fresh processes of the same code disagree"


def process_noise(rounds: Sequence[Sequence[ResultRecord]], config: Config) -> list[NoiseRow]:
    """One row per measured benchmark x params (derived throughput rows left out: same numbers).

    ``rounds``: every round of the same code (one list of results per fresh-process round).
    """
    groups: dict[tuple[str, str], list[ResultRecord]] = {}
    for results in rounds:
        for r in results:
            if r.metric in ("throughput", "efficiency") or r.info.get("derived_from"):
                continue
            groups.setdefault(r.key, []).append(r)
    rows = []
    for group in groups.values():
        first = group[0]
        ok = [r for r in group if r.status == "ok"]
        failed = [r for r in group if r.status == "failed"]
        status = "failed" if failed else ("ok" if ok else "skipped")
        method = next((r.method for r in ok if r.method), first.method)
        blank = NoiseRow(
            benchmark=first.benchmark,
            impl=first.impl,
            params=dict(first.params),
            params_key=first.params_key,
            metric=first.metric,
            unit=first.unit,
            gated=_gated(first, config),
            status=status,
            method=method,
            rounds=len(group),
        )
        if status != "ok":
            rows.append(replace(blank, note=f"{status}: {_last_line((failed or group)[0].error or status)}"))
            continue
        side = stats.Side.of([list(r.samples) if r.samples else [r.value] for r in ok])
        iqrs = [_iqr_ratio(r) for r in side.rounds if r.size >= 2]
        median = statistics.median(side.round_medians) if side.round_medians else None
        cv = side.noise.round_cv
        flagged = bool(
            blank.gated
            and first.metric == "time"
            and median is not None
            and median >= CV_FLAG_MIN_SECONDS
            and cv is not None
            and cv > CV_FLAG_MAX
        )
        rows.append(
            replace(
                blank,
                rounds=side.k,
                samples_per_round=int(statistics.median([r.size for r in side.rounds])) if side.k else None,
                median=median,
                process_cv=cv,
                spread=side.noise.round_spread if side.k >= 2 else None,
                iqr_median=statistics.median(iqrs) if iqrs else None,
                iqr_max=max(iqrs) if iqrs else None,
                flagged=flagged,
                note=_flag_note(method, cv) if flagged and cv is not None else "",
            )
        )
    return sorted(rows, key=lambda r: (r.benchmark, r.impl, r.params_key))


# --------------------------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------------------------


def _round_values(rounds: Sequence[Sequence[ResultRecord]]) -> dict[tuple[str, str], list[float]]:
    """asv's view of a side: per benchmark x params, the number each round's asv run stored."""
    out: dict[tuple[str, str], list[float]] = {}
    for results in rounds:
        for r in results:
            if r.status == "ok" and r.value is not None:
                out.setdefault(r.key, []).append(float(r.value))
    return out


@dataclass(frozen=True)
class Outcome:
    """One gated benchmark x params of one comparison: perfguard's verdicts and asv's."""

    benchmark: str
    impl: str
    params_key: str
    metric: str
    method: str | None
    ratio: float | None  # stage 1
    first: str  # stage-1 verdict
    suspect: bool
    verdict: str  # final (after the re-measurement of a suspect)
    final_ratio: float | None
    ci_low: float | None
    ci_high: float | None
    retried: bool
    reason: str
    asv: AsvDecision | None
    asv_stats: AsvDecision | None

    @property
    def flagged(self) -> bool:
        return self.verdict == Verdict.REGRESSION

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["asv"] = self.asv.to_json() if self.asv else None
        out["asv_stats"] = self.asv_stats.to_json() if self.asv_stats else None
        return out


@dataclass(frozen=True)
class Comparison:
    """One A/A repetition, or one planted commit against HEAD in one repetition."""

    kind: str  # "aa" | "planted"
    repeat: int  # 1-based
    fraction: float | None
    outcomes: tuple[Outcome, ...]
    not_compared: tuple[str, ...]  # gated items without a verdict to count (failed, skipped, ...)
    retried: int  # suspects re-measured

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "repeat": self.repeat,
            "fraction": self.fraction,
            "comparisons": len(self.outcomes),
            "flagged": sum(o.flagged for o in self.outcomes),
            "retried": self.retried,
            "not_compared": list(self.not_compared),
            "items": [o.to_json() for o in self.outcomes],
        }


def _outcomes(
    first: SuiteComparison,
    final: SuiteComparison,
    base_rounds: Sequence[Sequence[ResultRecord]],
    head_rounds: Sequence[Sequence[ResultRecord]],
    *,
    factor: float,
    asv: bool,
    only: Callable[[str], bool],
) -> tuple[list[Outcome], list[str]]:
    suspects = set(first.suspect_keys)
    finals = {i.key: i for i in final.items}
    base_values = _round_values(base_rounds) if asv else {}
    head_values = _round_values(head_rounds) if asv else {}
    outcomes, skipped = [], []
    for item in first.items:
        if not item.gated or not only(item.benchmark):
            continue
        if item.verdict not in COMPARED:
            skipped.append(f"{item.impl} {item.benchmark.split('.', 1)[-1]} {item.params_key}: "
                           f"{item.verdict} ({item.reason[:200]})")  # fmt: skip
            continue
        end = finals[item.key]
        b, h = base_values.get(item.key, []), head_values.get(item.key, [])
        outcomes.append(
            Outcome(
                benchmark=item.benchmark,
                impl=item.impl,
                params_key=item.params_key,
                metric=item.metric,
                method=item.method,
                ratio=item.ratio,
                first=str(item.verdict),
                suspect=item.key in suspects,
                verdict=str(end.verdict),
                final_ratio=end.ratio,
                ci_low=end.ci_low,
                ci_high=end.ci_high,
                retried=end.retried,
                reason=end.reason,
                asv=asv_rule(b, h, factor=factor) if asv else None,
                asv_stats=asv_rule(b, h, factor=factor, samples=True) if asv else None,
            )
        )
    return outcomes, skipped


# --------------------------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------------------------


@dataclass
class Phase:
    """Time spent in one phase: wall clock, and the measured rounds with their own wall time."""

    name: str
    wall_s: float = 0.0
    rounds: int = 0
    rounds_s: float = 0.0

    def add_runs(self, runs: Sequence[Sequence[RunRecord]]) -> None:
        for side in runs:
            for run in side:
                self.rounds += 1
                self.rounds_s += max(0.0, (run.finished_at - run.started_at).total_seconds())


class PhaseClock:
    """Wall time per named phase (phases keep their first-use order; re-entering one adds to it)."""

    def __init__(self, started: float | None = None) -> None:
        """``started``: a ``time.perf_counter()`` reading to count from (the command's start)."""
        self.started = time.perf_counter() if started is None else started
        self.phases: dict[str, Phase] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        entry = self.phases.setdefault(name, Phase(name))
        t0 = time.perf_counter()
        try:
            yield entry
        finally:
            entry.wall_s += time.perf_counter() - t0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# --------------------------------------------------------------------------------------------
# the calibration
# --------------------------------------------------------------------------------------------


class Measurer(Protocol):
    """Measures sides, interleaved (A B B A ...), each round a fresh process; nothing is compared.

    ``sides``: :data:`HEAD` or :func:`planted_key` keys (a key may repeat: HEAD as A and B).
    ``bench``: asv ``--bench`` regexes for these rounds (None: the invocation's selection).
    Returns one list of run records per side, in round order.
    """

    def __call__(
        self, sides: Sequence[str], rounds: int, *, bench: Sequence[str] | None, phase: str
    ) -> list[list[RunRecord]]: ...


@dataclass(frozen=True)
class Plan:
    """What to measure (the command line)."""

    rounds: int
    aa: int
    planted: tuple[float, ...]
    repeats: int
    asv: bool
    bench: tuple[str, ...] = ()


@dataclass
class Findings:
    """The measured part of a calibration."""

    noise: list[NoiseRow]
    noise_rounds: int
    aa: list[Comparison]
    planted: list[Comparison]
    planted_skipped: str | None = None
    warnings: list[str] = field(default_factory=list)

    def note_uncompared(self, comparison: Comparison, label: str) -> None:
        """A gated item that could not be compared (failed, skipped) is news: a warning."""
        for text in comparison.not_compared:
            self.warnings.append(f"{label}: not compared: {text}")


_MEASURE_AA = "A/A + process noise: measure HEAD as A and B"
_RETRY_AA = "A/A: re-measure suspects"
_MEASURE_PLANTED = "planted: measure HEAD and planted commits"
_RETRY_PLANTED = "planted: re-measure suspects"
_VERDICTS = "verdicts (compare_suite, apply_retry, asv rule)"


class Calibrator:
    """Runs the calibration protocol (module docstring) over a :class:`Measurer`."""

    def __init__(
        self,
        measure: Measurer,
        plan: Plan,
        config: Config,
        clock: PhaseClock,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.measure = measure
        self.plan = plan
        self.config = config
        self.clock = clock
        self.say = say
        self.factor = 1.0 + config.threshold

    def _rounds(
        self, sides: Sequence[str], rounds: int, phase: str, bench: Sequence[str] | None = None
    ) -> list[list[list[ResultRecord]]]:
        with self.clock.phase(phase) as entry:
            runs = self.measure(sides, rounds, bench=bench, phase=phase)
            entry.add_runs(runs)
        return [[list(run.results) for run in side] for side in runs]

    def _pair(
        self,
        base_key: str,
        head_key: str,
        base: list[list[ResultRecord]],
        head: list[list[ResultRecord]],
        *,
        kind: str,
        repeat: int,
        fraction: float | None,
        retry_phase: str,
        only: Callable[[str], bool],
    ) -> Comparison:
        """Stage 1, then the suspects re-measured base and head interleaved, as ``perfguard check``."""
        with self.clock.phase(_VERDICTS):
            first = compare_suite(measurements_from_rounds(base), measurements_from_rounds(head), self.config)
        final = first
        if first.suspects and self.config.retry.enabled:
            regexes = suspect_selection(first.suspects, head)
            n = self.config.retry.rounds
            names = ", ".join(
                f"{i.impl} {i.benchmark.split('.', 1)[-1]} ({i.ratio:.2f}x)" for i in first.suspects[:4]
            )
            self.say(f"{len(first.suspects)} suspect(s): {names}; re-measuring, interleaved, {n} rounds each")
            retry_base, retry_head = self._rounds([base_key, head_key], n, retry_phase, bench=regexes)
            with self.clock.phase(_VERDICTS):
                final = apply_retry(
                    first,
                    measurements_from_rounds(retry_base),
                    measurements_from_rounds(retry_head),
                    self.config,
                )
        with self.clock.phase(_VERDICTS):
            outcomes, skipped = _outcomes(
                first, final, base, head, factor=self.factor, asv=self.plan.asv, only=only
            )
        return Comparison(
            kind=kind,
            repeat=repeat,
            fraction=fraction,
            outcomes=tuple(outcomes),
            not_compared=tuple(skipped),
            retried=len(first.suspects) if final is not first else 0,
        )

    def run(self) -> Findings:
        plan = self.plan
        head_rounds: list[list[ResultRecord]] = []
        aa: list[Comparison] = []
        aa_findings: list[tuple[Comparison, str]] = []
        for i in range(plan.aa):
            self.say(f"A/A {i + 1}/{plan.aa}: HEAD as two sides, interleaved, {plan.rounds} rounds each")
            a, b = self._rounds([HEAD, HEAD], plan.rounds, _MEASURE_AA)
            head_rounds += a + b
            aa.append(
                self._pair(
                    HEAD,
                    HEAD,
                    a,
                    b,
                    kind="aa",
                    repeat=i + 1,
                    fraction=None,
                    retry_phase=_RETRY_AA,
                    only=lambda _: True,
                )
            )
            aa_findings.append((aa[-1], f"A/A {i + 1}"))
            flagged = sum(o.flagged for o in aa[-1].outcomes)
            self.say(f"A/A {i + 1}/{plan.aa}: {flagged} false alarm(s) in {len(aa[-1].outcomes)} comparisons")
        with self.clock.phase(_VERDICTS):
            noise = process_noise(head_rounds, self.config)
        findings = Findings(noise=noise, noise_rounds=len(head_rounds), aa=aa, planted=[])
        for comparison, label in aa_findings:
            findings.note_uncompared(comparison, label)
        if not plan.planted:
            return findings
        forward = [
            r for r in noise
            if r.status == "ok" and r.gated and r.benchmark.endswith("." + PLANTED_BENCHMARK)
        ]  # fmt: skip
        if not forward:
            findings.planted_skipped = (
                f"no gated {PLANTED_BENCHMARK} benchmark ran in the A/A rounds (selection, skips or "
                "failures): nothing to plant a slowdown in"
            )
            self.say(f"planted slowdowns skipped: {findings.planted_skipped}")
            return findings
        selection = forward_selection(plan.bench)
        keys = [planted_key(f) for f in plan.planted]
        for rep in range(plan.repeats):
            self.say(
                f"planted {rep + 1}/{plan.repeats}: HEAD and {', '.join(percent(f) for f in plan.planted)}, "
                f"interleaved, {plan.rounds} rounds each ({PLANTED_BENCHMARK} only)"
            )
            sides = self._rounds([HEAD, *keys], plan.rounds, _MEASURE_PLANTED, bench=selection)
            for fraction, key, rounds in zip(plan.planted, keys, sides[1:], strict=True):
                comparison = self._pair(
                    HEAD, key, sides[0], rounds, kind="planted", repeat=rep + 1, fraction=fraction,
                    retry_phase=_RETRY_PLANTED, only=lambda name: name.endswith("." + PLANTED_BENCHMARK),
                )  # fmt: skip
                findings.planted.append(comparison)
                findings.note_uncompared(comparison, f"planted {percent(fraction)} ({rep + 1})")
                flagged = sum(o.flagged for o in comparison.outcomes)
                self.say(
                    f"planted {percent(fraction)} ({rep + 1}/{plan.repeats}): {flagged} of "
                    f"{len(comparison.outcomes)} flagged"
                )
        return findings


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """One row of the verdict table: an A/A or a planted fraction over all its repetitions."""

    label: str
    fraction: float | None
    comparisons: int
    flagged: int  # perfguard: final regressions (false alarms in A/A, detections when planted)
    stage1: int  # regressions stage 1 alone would have reported
    suspects: int
    unstable: int
    improvements: int
    median_ratio: float | None  # of the stage-1 ratios
    median_final_ratio: float | None  # of the final ratios (a suspect's re-measurement): the plant's size
    asv_flagged: int | None
    asv_stats_flagged: int | None

    @staticmethod
    def of(label: str, fraction: float | None, comparisons: Sequence[Comparison], asv: bool) -> Tally:
        outcomes = [o for c in comparisons for o in c.outcomes]
        ratios = [o.ratio for o in outcomes if o.ratio is not None]
        finals = [o.final_ratio for o in outcomes if o.final_ratio is not None]
        return Tally(
            label=label,
            fraction=fraction,
            comparisons=len(outcomes),
            flagged=sum(o.flagged for o in outcomes),
            stage1=sum(o.first == Verdict.REGRESSION for o in outcomes),
            suspects=sum(o.suspect for o in outcomes),
            unstable=sum(o.verdict == Verdict.UNSTABLE for o in outcomes),
            improvements=sum(o.verdict == Verdict.IMPROVEMENT for o in outcomes),
            median_ratio=statistics.median(ratios) if ratios else None,
            median_final_ratio=statistics.median(finals) if finals else None,
            asv_flagged=sum(bool(o.asv and o.asv.worse) for o in outcomes) if asv else None,
            asv_stats_flagged=sum(bool(o.asv_stats and o.asv_stats.worse) for o in outcomes) if asv else None,
        )

    @staticmethod
    def rate(k: int | None, n: int) -> float | None:
        return k / n if k is not None and n else None

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["rate"] = self.rate(self.flagged, self.comparisons)
        out["asv_rate"] = self.rate(self.asv_flagged, self.comparisons)
        out["asv_stats_rate"] = self.rate(self.asv_stats_flagged, self.comparisons)
        return out


@dataclass(frozen=True)
class TableData:
    """A table for both renderers (rich on the terminal, Markdown for docs/perf/calibration.md)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "seconds":
        if value < 1e-3:
            return f"{value * 1e6:.1f} µs"
        return f"{value * 1e3:.3f} ms" if value < 1 else f"{value:.3f} s"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:.4g} {unit}"


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}%}"


def _ratio(r: float | None) -> str:
    return "" if r is None else f"{r:.3f}"


def _count(k: int | None, n: int) -> str:
    if k is None:
        return "n/a"
    return f"{k}/{n} ({k / n:.0%})" if n else f"{k}/0"


def _seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


@dataclass
class Calibration:
    """A finished calibration: what was asked, what was found, and what it cost."""

    meta: dict[str, Any]  # machine, commit, profile, device, command, created_at, store, planted commits
    plan: Plan
    config: Config
    findings: Findings
    clock: PhaseClock
    wall_s: float
    warnings: list[str] = field(default_factory=list)

    @property
    def device_time(self) -> bool:
        return self.meta.get("device") == "cuda"

    def tallies(self) -> list[Tally]:
        out = [Tally.of("A/A (false alarms)", None, self.findings.aa, self.plan.asv)]
        for f in self.plan.planted:
            these = [c for c in self.findings.planted if c.fraction == f]
            if these:
                out.append(Tally.of(f"planted {percent(f)}", f, these, self.plan.asv))
        return out

    # --- tables ---------------------------------------------------------------------------

    def noise_table(self) -> TableData:
        noise = self.findings.noise
        skipped = [r for r in noise if r.status == "skipped"]
        rows = []
        for r in noise:
            if r.status == "skipped":
                continue
            params = " ".join(f"{k}={v}" for k, v in r.params.items() if k != "impl")
            flag = f"CV > {CV_FLAG_MAX:.0%}" if r.flagged else (r.note if r.status != "ok" else "")
            rows.append(
                (
                    r.benchmark.split(".", 1)[-1], r.impl, params, r.method or r.status, str(r.rounds),
                    format_value(r.median, r.unit), _pct(r.process_cv),
                    f"{r.spread:.3f}" if r.spread is not None else "", _pct(r.iqr_median), _pct(r.iqr_max),
                    "yes" if r.gated else "no", flag,
                )
            )  # fmt: skip
        flagged = [r for r in noise if r.flagged]
        notes = [
            f"{len(flagged)} of {sum(r.gated and r.metric == 'time' and r.status == 'ok' for r in noise)} "
            f"gated timings are flagged: at least {CV_FLAG_MIN_SECONDS * 1e3:g} ms with a process CV above "
            f"{CV_FLAG_MAX:.0%}. Process CV: CV of the round medians; spread: largest / smallest round "
            "median; IQR/median: within one round (median and largest over the rounds)."
        ]
        for method in sorted({r.method or "" for r in flagged}):
            example = next(r for r in flagged if (r.method or "") == method)
            notes.append(f"Flagged, {method or 'no method'}: {example.note.split(': ', 1)[-1]}.")
        if skipped:
            notes.append(
                f"{len(skipped)} benchmark x params skipped on this machine are left out (e.g. "
                f"{skipped[0].benchmark.split('.', 1)[-1]}: {skipped[0].note}); the JSON has them."
            )
        return TableData(
            title=f"Process-to-process noise: {self.findings.noise_rounds} rounds of HEAD (fresh processes)",
            columns=(
                "benchmark",
                "impl",
                "params",
                "method",
                "rounds",
                "median",
                "process CV",
                "spread",
                "IQR/median",
                "max IQR/median",
                "gated",
                "flag",
            ),
            rows=tuple(rows),
            notes=tuple(notes),
        )

    def verdict_table(self) -> TableData:
        asv = self.plan.asv
        columns = ["test", "comparisons", "perfguard: regression", "stage 1 alone", "re-measured",
                   "unstable", "ratio (stage 1)", "ratio (final)"]  # fmt: skip
        if asv:
            columns += [f"asv -f {1 + self.config.threshold:g} (track_)", "asv + stats"]
        rows = []
        for t in self.tallies():
            row = [
                t.label, str(t.comparisons), _count(t.flagged, t.comparisons), str(t.stage1), str(t.suspects),
                str(t.unstable), _ratio(t.median_ratio), _ratio(t.median_final_ratio),
            ]  # fmt: skip
            if asv:
                row += [_count(t.asv_flagged, t.comparisons), _count(t.asv_stats_flagged, t.comparisons)]
            rows.append(tuple(row))
        notes = [
            f"Threshold {self.config.threshold:.0%}: a regression needs a ratio above "
            f"{1 + self.config.threshold:.2f}. A/A: HEAD against itself, {self.plan.aa} repetition(s) "
            f"of {self.plan.rounds} + {self.plan.rounds} interleaved rounds; every regression is a false "
            f"alarm. Planted: {self.plan.repeats} repetition(s) of HEAD against each planted commit, "
            f"{self.plan.rounds} + {self.plan.rounds} rounds; the rate is detections / comparisons. "
            f"Suspects were re-measured {self.config.retry.rounds} + {self.config.retry.rounds} rounds, "
            f"interleaved{'' if self.config.retry.enabled else ' (disabled: stage 1 is final)'}. "
            "Ratios: medians over the comparisons of the ratio of medians, of stage 1 and final (a "
            "suspect's re-measurement, else stage 1); for a plant, the final ratio is the slowdown "
            "actually planted.",
        ]
        if self.plan.planted:
            notes.append(self.findings.planted_skipped or DILUTION_NOTE)
        if asv:
            notes.append(ASV_NOTE)
        return TableData(
            title="False alarms and detection: perfguard against asv",
            columns=tuple(columns),
            rows=tuple(rows),
            notes=tuple(notes),
        )

    def time_table(self) -> TableData:
        label = "device time (rounds)" if self.device_time else "rounds' wall time"
        rows = [
            (p.name, _seconds(p.wall_s), str(p.rounds), _seconds(p.rounds_s) if p.rounds else "")
            for p in self.clock.phases.values()
        ]
        total_rounds = sum(p.rounds for p in self.clock.phases.values())
        total_rounds_s = sum(p.rounds_s for p in self.clock.phases.values())
        rows.append(("total", _seconds(self.wall_s), str(total_rounds), _seconds(total_rounds_s)))
        return TableData(
            title="Time",
            columns=("phase", "wall clock", "rounds", label),
            rows=tuple(rows),
            notes=(
                f"{label}: the sum of the measured rounds' own wall time (asv start to end, fresh "
                "processes included)" + ("; the GPU was held for that long." if self.device_time else "."),
            ),
        )

    def tables(self) -> list[TableData]:
        return [self.verdict_table(), self.noise_table(), self.time_table()]

    def summary(self) -> list[str]:
        """The findings in a few sentences (stdout and the Markdown's opening)."""
        lines = []
        for t in self.tallies():
            asv = ""
            if t.asv_flagged is not None:
                asv = f"; asv: {_count(t.asv_flagged, t.comparisons)}"
            if t.fraction is None:
                lines.append(f"A/A: {t.flagged} false alarm(s) in {t.comparisons} comparisons "
                             f"(stage 1 alone: {t.stage1}){asv}")  # fmt: skip
            else:
                ratio = f", measured ratio {_ratio(t.median_final_ratio)}" if t.median_final_ratio else ""
                lines.append(f"{t.label}: detected {_count(t.flagged, t.comparisons)}{ratio}{asv}")
        flagged = sum(r.flagged for r in self.findings.noise)
        timings = sum(r.gated and r.metric == "time" for r in self.findings.noise)
        lines.append(
            f"process noise: {flagged} of {timings} gated timings with a process CV above {CV_FLAG_MAX:.0%}"
        )
        lines.append(f"calibration took {_seconds(self.wall_s)}")
        return lines

    # --- outputs --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        tallies = self.tallies()
        aa = tallies[0]
        asv_rule_text = {"factor": 1 + self.config.threshold, "rule": "factor only (track_)"}
        asv_stats_text = {"factor": 1 + self.config.threshold, "rule": "round values as samples"}
        planted = []
        commits = {c["fraction"]: c for c in self.meta.get("planted_commits", [])}
        for t in tallies[1:]:
            assert t.fraction is not None
            runs = [c for c in self.findings.planted if c.fraction == t.fraction]
            planted.append(
                {
                    "fraction": t.fraction,
                    "label": t.label,
                    "expected_ratio": 1 + t.fraction,
                    "commit": commits.get(t.fraction, {}).get("sha"),
                    "comparisons": t.comparisons,
                    "detected": t.flagged,
                    "rate": Tally.rate(t.flagged, t.comparisons),
                    "stage1_regressions": t.stage1,
                    "suspects": t.suspects,
                    "unstable": t.unstable,
                    "median_ratio": t.median_ratio,
                    "median_final_ratio": t.median_final_ratio,
                    "asv": {**asv_rule_text, "flagged": t.asv_flagged,
                            "rate": Tally.rate(t.asv_flagged, t.comparisons)} if self.plan.asv else None,
                    "asv_stats": {**asv_stats_text, "flagged": t.asv_stats_flagged,
                                  "rate": Tally.rate(t.asv_stats_flagged, t.comparisons)}
                    if self.plan.asv else None,
                    "runs": [c.to_json() for c in runs],
                }
            )  # fmt: skip
        phases = [
            {"phase": p.name, "wall_s": p.wall_s, "rounds": p.rounds, "rounds_s": p.rounds_s}
            for p in self.clock.phases.values()
        ]
        return _finite_json(
            {
                "schema": SCHEMA,
                **self.meta,
                "plan": {
                    "rounds": self.plan.rounds,
                    "aa": self.plan.aa,
                    "planted": list(self.plan.planted),
                    "repeats": self.plan.repeats,
                    "asv": self.plan.asv,
                    "bench": list(self.plan.bench) or None,
                },
                "config": self.config.to_dict(),
                "process_noise": {
                    "rounds": self.findings.noise_rounds,
                    "cv_flag": {"min_seconds": CV_FLAG_MIN_SECONDS, "max_cv": CV_FLAG_MAX},
                    "flagged": sum(r.flagged for r in self.findings.noise),
                    "benchmarks": [r.to_json() for r in self.findings.noise],
                },
                "aa": {
                    "repetitions": self.plan.aa,
                    "rounds": self.plan.rounds,
                    "comparisons": aa.comparisons,
                    "false_alarms": aa.flagged,
                    "rate": Tally.rate(aa.flagged, aa.comparisons),
                    "stage1_regressions": aa.stage1,
                    "suspects": aa.suspects,
                    "unstable": aa.unstable,
                    "improvements": aa.improvements,
                    "median_ratio": aa.median_ratio,
                    "median_final_ratio": aa.median_final_ratio,
                    "asv": {**asv_rule_text, "flagged": aa.asv_flagged} if self.plan.asv else None,
                    "asv_stats": {**asv_stats_text, "flagged": aa.asv_stats_flagged}
                    if self.plan.asv
                    else None,
                    "runs": [c.to_json() for c in self.findings.aa],
                },
                "planted": {
                    "benchmark": PLANTED_BENCHMARK,
                    "note": DILUTION_NOTE,
                    "skipped": self.findings.planted_skipped,
                    "fractions": planted,
                },
                "summary": [t.to_json() for t in tallies],
                "time": {
                    "wall_s": self.wall_s,
                    "rounds": sum(p.rounds for p in self.clock.phases.values()),
                    "rounds_s": sum(p.rounds_s for p in self.clock.phases.values()),
                    "device_time": self.device_time,
                    "phases": phases,
                },
                "warnings": list(self.warnings),
            }
        )

    def to_markdown(self) -> str:
        m = self.meta
        machine = m.get("machine", {})
        commit = m.get("commit", {})
        selection = f", `--bench {' '.join(self.plan.bench)}`" if self.plan.bench else ""
        software = ", ".join(f"{k} {v}" for k, v in sorted((machine.get("software") or {}).items()) if v)
        lines = [
            f"# perfguard calibration: {machine.get('label', '')}",
            "",
            f"- machine key `{machine.get('key', '')}`, device {m.get('device', '')}, "
            f"profile `{m.get('profile', '')}`{selection}",
            f"- commit `{str(commit.get('sha', ''))[:12]}` ({commit.get('subject', '')}), "
            f"{m.get('created_at', '')}",
            f"- command: `{m.get('command', '')}`",
            f"- software: {software}",
            "",
        ]
        lines += [f"- {line}" for line in self.summary()]
        lines += [f"- warning: {w}" for w in self.warnings]
        lines.append("")
        for table in self.tables():
            lines += [
                f"## {table.title}",
                "",
                _md_row(table.columns),
                _md_row(tuple("---" for _ in table.columns)),
            ]
            lines += [_md_row(row) for row in table.rows]
            lines.append("")
            for note in table.notes:
                lines += [note, ""]
        return "\n".join(lines).rstrip() + "\n"


def _finite_json(value: Any) -> Any:
    """``value`` with every non-finite float as None: strict JSON (an infinite ratio is "no number")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def meta_commits(planted: Mapping[float, PlantedCommit]) -> list[dict[str, Any]]:
    """The planted commits for the report's ``planted_commits``."""
    return [
        {"fraction": f, "sha": p.sha, "parent": p.parent, "subject": p.subject}
        for f, p in sorted(planted.items())
    ]
