"""The calibration protocol over a :class:`Measurer`: A/A repetitions, planted slowdowns, and each pair
decided as ``perfguard check`` decides it (stage 1, then the suspects re-measured interleaved).

Its :class:`Calibrator` decides what to measure and turns rounds into comparisons; it never
measures itself (the :class:`Measurer` does: :mod:`perfguard.calibrate.session` over a bench, the
tests over a synthetic machine).  Rounds are compared from memory, never re-read from a store, and
:class:`PhaseClock` keeps the time of each phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfguard.calibrate.asv_rule import AsvDecision, asv_rule
from perfguard.calibrate.noise import NoiseRow, process_noise
from perfguard.calibrate.planting import PLANTED_BENCHMARK, forward_selection, percent, planted_key
from perfguard.compare import SuiteComparison, Verdict, apply_retry, compare_suite, measurements_from_rounds
from perfguard.config import Config
from perfguard.engine.suite import suspect_selection
from perfguard.store.records import ResultRecord, RunRecord

#: The store purpose of every calibration round: never a baseline, never history.
PURPOSE = "calibrate"
#: The side key of HEAD for a :class:`Measurer`; planted commits are ``planted_key(f)``.
HEAD = "head"
#: Verdicts of items that were compared (both sides measured): the denominators of every rate.
COMPARED = frozenset({Verdict.REGRESSION, Verdict.IMPROVEMENT, Verdict.UNCHANGED, Verdict.UNSTABLE})


def _round_values(rounds: Sequence[Sequence[ResultRecord]]) -> dict[tuple[str, str], list[float]]:
    """asv's view of a side: per benchmark x params, the number each round's asv run stored."""
    out: dict[tuple[str, str], list[float]] = {}
    for results in rounds:
        for r in results:
            if r.status == "ok" and r.value is not None:
                out.setdefault(r.key, []).append(float(r.value))
    return out


@dataclass(frozen=True)
class BenchmarkVerdicts:
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
    outcomes: tuple[BenchmarkVerdicts, ...]
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
) -> tuple[list[BenchmarkVerdicts], list[str]]:
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
            BenchmarkVerdicts(
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
        findings = Findings(noise=[], noise_rounds=0, aa=aa, planted=[])
        for comparison, label in aa_findings:
            findings.note_uncompared(comparison, label)
        if plan.aa:
            self._noise(findings, head_rounds)
            if plan.planted and (skipped := self._nothing_to_plant(findings.noise, "the A/A rounds")):
                findings.planted_skipped = skipped
                self.say(f"planted slowdowns skipped: {skipped}")
                return findings
        if plan.planted:
            planted_head = self._planted(findings)
            if not plan.aa:  # the process noise of what was measured: HEAD's planted-phase rounds
                self._noise(findings, planted_head)
                findings.planted_skipped = self._nothing_to_plant(findings.noise, "the planted rounds")
        return findings

    def _noise(self, findings: Findings, head_rounds: list[list[ResultRecord]]) -> None:
        with self.clock.phase(_VERDICTS):
            findings.noise = process_noise(head_rounds, self.config)
        findings.noise_rounds = len(head_rounds)

    @staticmethod
    def _nothing_to_plant(noise: Sequence[NoiseRow], where: str) -> str | None:
        """Why no slowdown can be planted (no gated forward timing was measured in ``where``), or None."""
        suffix = "." + PLANTED_BENCHMARK
        if any(r.status == "ok" and r.gated and r.benchmark.endswith(suffix) for r in noise):
            return None
        return (
            f"no gated {PLANTED_BENCHMARK} benchmark ran in {where} (selection, skips or failures): "
            "nothing to plant a slowdown in"
        )

    def _planted(self, findings: Findings) -> list[list[ResultRecord]]:
        """Every repetition of HEAD against the planted commits; returns HEAD's rounds."""
        plan = self.plan
        selection = forward_selection(plan.bench)
        keys = [planted_key(f) for f in plan.planted]
        head_rounds: list[list[ResultRecord]] = []
        for rep in range(plan.repeats):
            self.say(
                f"planted {rep + 1}/{plan.repeats}: HEAD and {', '.join(percent(f) for f in plan.planted)}, "
                f"interleaved, {plan.rounds} rounds each ({PLANTED_BENCHMARK} only)"
            )
            sides = self._rounds([HEAD, *keys], plan.rounds, _MEASURE_PLANTED, bench=selection)
            head_rounds += sides[0]
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
        return head_rounds
