"""Steps 3-5 of the PR check: both sides' rounds, a failed baseline measured again, stage 1 and 2.

Stored rounds are reused where they can be (the baseline's only from trusted runs), the rest are
measured now, both sides interleaved (:class:`CheckRounds`).  A gated baseline benchmark that failed
in a stored round is measured again, and fails the check closed if it fails again; stage 1 compares
every benchmark x params, stage 2 re-measures the timing suspects and decides them (:class:`Retried`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfguard.errors import PerfguardError
from perfguard.store.result_info import ResultInfo

if TYPE_CHECKING:
    from perfguard.compare import Item, SuiteComparison
    from perfguard.measuring import Bench, Rounds, Side
    from perfguard.store import ResultRecord, RunRecord
    from perfguard.store.check_summary import Selection


@dataclass(frozen=True)
class CheckSides:
    """What a check compares: HEAD as measured (its record, where its code is) and the merge-base of
    the baseline ref (``base_sha``), named by the ref the user gave; ``selection``: the
    implementations the change reaches (:mod:`perfguard.gate.selection`; None for an A/A check);
    ``bench``: the user's own ``--bench`` selection (the bench's is narrowed to the selection)."""

    head: Side
    base_sha: str
    baseline_ref: str
    selection: Selection | None = None
    bench: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckRounds:
    """Both sides' rounds, and how each side's came (``how``: ``"base"`` / ``"head"`` -> "3 stored
    round(s)", "measured (3 rounds)", "2 stored round(s), 1 measured")."""

    base: Rounds
    head: Rounds
    how: dict[str, str]


@dataclass(frozen=True)
class Retried:
    """Stage 2: the comparison after the re-measurement, how many suspects it re-measured, and its
    runs per side (``[baseline runs, HEAD runs]``; empty when nothing was re-measured)."""

    result: SuiteComparison
    count: int = 0
    runs: Sequence[Sequence[RunRecord]] = ()


def measure_sides(
    bench: Bench, sides: CheckSides, rounds: int, base_stored: Rounds, head_stored: Rounds
) -> CheckRounds:
    """The rounds of both sides: stored ones where usable, the rest up to ``rounds`` measured now.

    Every round is stored when it ends (:meth:`Bench.measure`), so a check that was interrupted
    left its finished rounds behind, and this one resumes with them: a side with fewer stored
    rounds than ``rounds`` gets only the missing ones measured.
    """
    head, base_sha = sides.head, sides.base_sha
    stored = {"baseline": base_stored, "head": head_stored}
    names = {"baseline": f"baseline {base_sha[:10]}", "head": f"HEAD {head.commit.sha[:10]}"}
    reuse = {"baseline": "from this machine key", "head": "(--fresh measures again)"}
    how: dict[str, str] = {}
    missing: list[tuple[Side, str]] = []
    for purpose, kept in stored.items():
        more = max(0, rounds - len(kept))
        key = "base" if purpose == "baseline" else "head"
        if not kept:
            how[key] = f"measured ({rounds} rounds)"
            if purpose == "baseline":
                bench.say(f"{names[purpose]} ({sides.baseline_ref}) has no usable results for this machine "
                          "key: measuring it")  # fmt: skip
        elif more:
            how[key] = f"{len(kept)} stored round(s), {more} measured"
            bench.say(f"{names[purpose]}: resuming with {len(kept)} stored round(s), measuring {more} more")
        else:
            how[key] = f"{len(kept)} stored round(s)"
            bench.say(f"{names[purpose]}: using {len(kept)} stored round(s) {reuse[purpose]}")
        if more:
            side = bench.commit_side(base_sha, "baseline") if purpose == "baseline" else head
            missing.append((side, purpose))
    if missing:
        done = [len(stored[purpose]) for _, purpose in missing]
        runs = bench.measure([s for s, _ in missing], [p for _, p in missing], rounds, done=done)
        for (_, purpose), side_runs in zip(missing, runs, strict=True):
            stored[purpose] = stored[purpose] + [list(r.results) for r in side_runs]
    return CheckRounds(stored["baseline"], stored["head"], how)


def _failed_keys(rounds: Rounds) -> dict[tuple[str, str], ResultRecord]:
    failed: dict[tuple[str, str], ResultRecord] = {}
    for results in rounds:
        for r in results:
            if r.status == "failed" and r.key not in failed:
                failed[r.key] = r
    return failed


def heal_baseline(bench: Bench, base_sha: str, measured: CheckRounds, rounds: int) -> CheckRounds:
    """Re-measure every gated baseline benchmark that failed in a stored round; fail closed if it still
    fails (a reported one decides nothing, so its failure is only reported).

    A round can fail for reasons that are not the baseline's code (the OOM killer, a runner shut
    down mid-round); taking such a result as "nothing to compare" would let any slowdown of that
    benchmark through.  So the failed benchmarks are measured again; their fresh rounds replace the
    stored ones.  If they fail again, the baseline really cannot be measured here: exit 2.
    """
    from perfguard.compare import gates
    from perfguard.engine.suite import suspect_selection

    failed = {k: r for k, r in _failed_keys(measured.base).items() if gates(bench.config, r)}
    if not failed:
        return measured
    names = ", ".join(f"{r.benchmark.split('.', 1)[-1]}({r.params_key})" for r in list(failed.values())[:5])
    bench.say(
        f"{len(failed)} baseline benchmark(s) failed in a stored round ({names}): measuring them again "
        f"({rounds} rounds)"
    )
    regexes = suspect_selection(list(failed.values()), measured.base)
    side = bench.commit_side(base_sha, "baseline (again)")
    [runs] = bench.measure([side], "baseline", rounds, bench=regexes)
    fresh: Rounds = [list(r.results) for r in runs]
    still = _failed_keys(fresh)
    missing = [k for k in failed if not any(r.key == k for results in fresh for r in results)]
    if still or missing:
        worst = next(iter(still.values()), None)
        what = worst.describe() if worst is not None else f"{missing[0][0]}({missing[0][1]})"
        error = (
            ((worst.error or "").strip().splitlines() or [""])[-1] if worst is not None else "not measured"
        )
        raise PerfguardError(
            f"the baseline {base_sha[:10]} cannot be measured here: {what} failed again ({error}); "
            "the check cannot compare it and fails closed",
            hint="fix the baseline (or the machine: memory, driver), then run the check again; "
            "`perfguard run --commit BASE --bench REGEX` reproduces it",
        )
    keep = set(failed)
    healed = [[r for r in results if r.key not in keep] for results in measured.base]
    return replace(measured, base=[h for h in healed if h] + fresh)


def compare(bench: Bench, measured: CheckRounds, broken: dict[str, list[str]]) -> SuiteComparison:
    """Stage 1: every benchmark x params of both sides' rounds compared."""
    from perfguard.compare import compare_suite, measurements_from_rounds

    return compare_suite(
        measurements_from_rounds(measured.base),
        measurements_from_rounds(measured.head),
        bench.config,
        broken_impls=broken,
    )


def retry(
    bench: Bench, first: SuiteComparison, sides: CheckSides, head_rounds: Rounds, broken: dict[str, list[str]]
) -> Retried:
    """Stage 2: re-measure the suspects interleaved in fresh processes, and decide them on that alone.

    Fails closed like stage 1 (:func:`heal_baseline`): a suspect is gated, and one whose baseline
    gave no usable number in the re-measurement (its process killed: the OOM killer, a runner
    hiccup, or HEAD's code running between the baseline's rounds) would otherwise be decided on
    nothing, as ``new``.  Such suspects are re-measured once more, both sides interleaved; if the
    baseline fails again the check stops with exit 2 and stores no check.
    """
    from perfguard.compare import undecided
    from perfguard.engine.suite import suspect_selection

    if not first.suspects:
        return Retried(first)
    if not bench.config.retry.enabled:
        bench.say(f"{len(first.suspects)} suspect(s); re-measurement is disabled ([tool.perfguard.retry])")
        return Retried(first)
    base_sha = sides.base_sha
    regexes = suspect_selection(first.suspects, head_rounds)
    n = bench.config.retry.rounds
    impls = sorted({i.impl for i in first.suspects})
    bench.say(
        f"{len(first.suspects)} suspect(s) in {', '.join(impls)}: re-measuring them, baseline and HEAD "
        f"interleaved, {n} rounds each (the first round of each side also profiles them)"
    )
    base = bench.commit_side(base_sha, "baseline (retry)")
    runs = bench.measure([base, sides.head], "retry", n, bench=regexes, profile=regexes)
    lost = _unmeasured(first.suspects, runs[0])
    if lost:
        bench.say(
            f"the baseline's re-measurement of {len(lost)} suspect(s) gave no usable number "
            f"({_name_failures(lost)}): measuring them again, baseline and HEAD interleaved, {n} rounds each"
        )
        again_regexes = suspect_selection([i for i, _ in lost], head_rounds)
        again = bench.measure([base, sides.head], "retry", n, bench=again_regexes, profile=again_regexes)
        still = _unmeasured([i for i, _ in lost], again[0])
        if still:
            raise PerfguardError(
                f"the baseline {base_sha[:10]} cannot be measured here: its re-measurement (stage 2) of "
                f"{_name_failures(still)} failed twice; a gated benchmark is never passed without its "
                "baseline, so the check fails closed",
                hint="fix the machine (memory, driver) and run the check again; when only the "
                "interleaved re-measurement kills the baseline, look at what HEAD's code does between "
                "its rounds (`perfguard run --commit BASE --bench REGEX` measures the baseline alone)",
            )
        keys = {i.key for i, _ in lost}
        runs = [
            [replace(r, results=[x for x in r.results if _source(x) not in keys]) for r in runs[s]] + again[s]
            for s in range(2)
        ]
    result = _decide(first, runs, bench)
    measured = n
    while (more := undecided(result)) and measured + n <= bench.config.retry.max_rounds:
        bench.say(
            f"{len(more)} re-measured suspect(s) still unstable: {n} more rounds each, baseline and HEAD "
            f"interleaved (rounds {measured + 1}-{measured + n} of at most {bench.config.retry.max_rounds})"
        )
        selection = suspect_selection(more, head_rounds)  # rounds numbered on: "round 6/10"
        extra = bench.measure([base, sides.head], "retry", measured + n, bench=selection, done=[measured] * 2)
        measured += n
        lost = _unmeasured(more, extra[0])
        if lost:  # never decided on a baseline that gave nothing: these keep the rounds they have
            bench.say(
                f"the baseline's extra rounds of {len(lost)} suspect(s) gave no usable number "
                f"({_name_failures(lost)}): they are decided on their earlier rounds"
            )
            keys = {i.key for i, _ in lost}
            extra = [
                [replace(r, results=[x for x in r.results if _source(x) not in keys]) for r in extra[s]]
                for s in range(2)
            ]
        runs = [runs[s] + extra[s] for s in range(2)]
        result = _decide(first, runs, bench)
    return Retried(result, len(first.suspects), runs)


def _decide(first: SuiteComparison, runs: Sequence[Sequence[RunRecord]], bench: Bench) -> SuiteComparison:
    """Every suspect decided on all its re-measured rounds (baseline ``runs[0]``, HEAD ``runs[1]``)."""
    from perfguard.compare import apply_retry, measurements_from_rounds

    retry_base = measurements_from_rounds(r.results for r in runs[0])
    retry_head = measurements_from_rounds(r.results for r in runs[1])
    return apply_retry(first, retry_base, retry_head, bench.config)


def _source(result: ResultRecord) -> tuple[str, str]:
    """The key of the measurement a result is: a derived one (tokens/s, TFLOP/s) is its timing's."""
    return (ResultInfo.from_json(result.info).derived_from or result.benchmark, result.params_key)


def _unmeasured(suspects: Sequence[Item], base_runs: Sequence[RunRecord]) -> list[tuple[Item, str]]:
    """The suspects whose baseline the re-measurement gave no usable number, with why."""
    from perfguard.compare import measurements_from_rounds

    measured = {(m.benchmark, m.key): m for m in measurements_from_rounds(r.results for r in base_runs)}
    lost: list[tuple[Item, str]] = []
    for item in suspects:
        m = measured.get(item.key)
        if m is None:
            lost.append((item, "not measured"))
        elif m.status != "ok" or m.side.n == 0 or not m.side.median > 0:
            lost.append((item, ((m.error or m.status).strip().splitlines() or [m.status])[0][:200]))
    return lost


def _name_failures(lost: Sequence[tuple[Item, str]]) -> str:
    named = [f"{i.impl} {i.benchmark.split('.', 1)[-1]}({i.params_key}): {why}" for i, why in lost]
    return "; ".join(named[:3]) + (f"; {len(named) - 3} more" if len(named) > 3 else "")
