"""The PR check's pipeline: :func:`run_check` wires the steps of :mod:`perfguard.gate` together.

What the check compares is fixed once the sides are known
(:class:`perfguard.gate.sides.CheckSides`); the bench it measures with is immutable, and what the
check learns about it on the way gives a new one: an untrusted HEAD is judged by its baseline's
rules and suite (:meth:`Bench.with_rules`), and a HEAD that is not on the baseline branch stores
its rounds untrusted (:meth:`Bench.distrusted`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.errors import UsageError
from perfguard.gate.sides import CheckSides

if TYPE_CHECKING:
    from perfguard.compare import SuiteComparison
    from perfguard.measuring import Bench
    from perfguard.report.terminal import TerminalSummary
    from perfguard.store import StoredCheck


@dataclass
class CheckOutcome:
    """What one check found: the verdicts, the stored check, the exit code and its cost.

    :func:`perfguard.api.check` adds the report's gated headline, what the terminal shows of the
    report (``terminal``), the reports it wrote and the URL of the store the check is in.
    """

    check_id: int
    stored: StoredCheck
    result: SuiteComparison
    exit_code: int
    seconds: float
    retried: int
    headline: str = ""
    terminal: TerminalSummary | None = None
    written: list[Path] = field(default_factory=list)
    store: str = ""


def run_check(
    bench: Bench,
    baseline_ref: str,
    *,
    rounds: int | None = None,
    fresh: bool = False,
    verify: bool = True,
    verify_report: Path | None = None,
    accept_approved_by: str | None = None,
    measure_all: bool = False,
) -> CheckOutcome:
    """Compare HEAD with the merge-base of ``baseline_ref`` on this machine (:mod:`perfguard.gate`).

    ``accept_approved_by``: the maintainer who approved the acceptances written in HEAD's commit
    trailers (the workflow passes it only when a maintainer applied the label); without it only the
    acceptances stored in the trusted history store count (docs/living-with-regressions.md).
    """
    from perfguard.accept import Approval, apply_acceptances, find_acceptances
    from perfguard.compare import SuiteComparison
    from perfguard.gate import selection as reaching
    from perfguard.gate.recording import Decided, record_check
    from perfguard.gate.sides import CheckRounds, compare, heal_baseline, measure_sides, retry
    from perfguard.gate.underneath import underneath_tables
    from perfguard.gate.verification import broken_impls
    from perfguard.gitrepo import merge_base, rev_parse, work_tree
    from perfguard.tree_state import describe

    if verify_report is not None and not verify:
        raise UsageError("--verify-report and --no-verify contradict each other", hint="pass one of them")
    started = time.perf_counter()
    tree = work_tree(bench.root, ignore=bench.store_files)
    ref_sha = rev_parse(bench.root, baseline_ref, what="baseline ref")
    base_sha = merge_base(bench.root, ref_sha, tree.head)
    if not bench.trusted:
        bench = _rules_from_baseline(bench, base_sha)
    sides = CheckSides(bench.head_side(tree), base_sha, baseline_ref)
    head = sides.head
    if tree.dirty:
        bench.say(
            f"the work tree has uncommitted changes ({describe(tree.changed)}): HEAD is measured "
            f"with them, as {head.commit.sha}"
        )
    same_commit = base_sha == tree.head and not tree.dirty
    if same_commit:
        bench.say(
            f"HEAD is the merge-base of {baseline_ref} and HEAD: checking the commit against itself "
            "(an A/A check; HEAD is measured again)"
        )
    elif bench.trusted:
        bench = bench.distrusted(
            f"HEAD {head.commit.sha[:10]} is not on {baseline_ref} (code not merged there runs in this "
            "check): every round it measures, the baseline's too, is stored untrusted, never a baseline "
            "(docs/ci.md, 'Trust model')"
        )
    # 0. what the change can reach: only those implementations are measured (an A/A measures all)
    user_bench = bench.bench
    selection, not_affected = None, []
    if not same_commit:
        head_sha = None if tree.dirty else tree.head
        reach, names = reaching.reach_of_change(bench, base_sha, head_sha, measure_all=measure_all)
        selection = reaching.selection_record(reach, names)
        bench.say(reaching.selection_line(selection))
        if not reach.everything:
            not_affected = reaching.not_affected_items(reach, names, bench.config.threshold)
            chosen = reaching.within_bench(bench, user_bench, sorted(reach.implementations))
            if len(chosen) < len(reach.implementations):  # --bench leaves some out: they are not measured
                left_out = f"{selection.reason}; --bench measures {', '.join(chosen) or 'none of them'}"
                kept = {impl: mods for impl, mods in selection.measured.items() if impl in chosen}
                selection = replace(selection, measured=kept, reason=left_out)
                bench.say(left_out)
            if chosen:
                bench = replace(bench, bench=reaching.narrowed(user_bench, chosen), narrowed_from=user_bench)
    sides = replace(sides, selection=selection, bench=user_bench)
    nothing = selection is not None and not selection.everything and not selection.measured
    # 1. baselines first, before any code under review runs; only trusted runs are baselines
    base_stored = bench.stored_rounds(base_sha, trusted_only=True)
    head_stored = [] if (fresh or same_commit) else bench.stored_rounds(head.commit.sha, store=bench.store)
    approval = Approval.of_pull_request(bench.root, accept_approved_by, base_sha, head.commit.sha)
    acceptances = find_acceptances(
        bench.root, bench.baseline_store, base_sha, head.commit.sha, approval=approval
    )
    rounds_n = rounds or bench.config.rounds
    if nothing:  # a change no implementation imports: nothing to verify or measure
        broken: dict[str, list[str]] = {}
        measured = CheckRounds([], [], {"base": "not measured", "head": "not measured"})
    else:
        # 2. verification of HEAD
        broken = broken_impls(bench, verify_report, skip=not verify)
        # 3. what is missing is measured
        measured = measure_sides(bench, sides, rounds_n, base_stored, head_stored)
        # 4. a failed baseline benchmark is measured again, then fails closed
        measured = heal_baseline(bench, base_sha, measured, rounds_n)
    # 5. stage 1 and 2
    retried = retry(bench, compare(bench, measured, broken), sides, measured.head, broken)
    # 6. underneath, then the acceptances (an accepted regression still shows what changed)
    underneath = underneath_tables(retried.result.items, measured, retried.runs)
    applied = apply_acceptances(retried.result, acceptances)
    for line in applied.lines():
        bench.say(line)
    result = SuiteComparison((*applied.result.items, *not_affected), applied.result.suspects)
    decided = Decided(result, retried.count, tuple(underneath), applied.summary())
    seconds = time.perf_counter() - started
    # 7. the stored check
    check_id = record_check(bench, sides, measured, decided, seconds)
    stored = bench.store.get_check(check_id)
    assert stored is not None
    result = decided.result
    return CheckOutcome(check_id, stored, result, result.exit_code, seconds, retried.count)


def _rules_from_baseline(bench: Bench, base_sha: str) -> Bench:
    """An untrusted check takes its rules and its suite from the merge-base, never from HEAD.

    HEAD is code under review: its ``[tool.perfguard]`` could raise the threshold to anything, and
    its ``asv_benchmarks/`` could measure something else.  The rules and the suite that judge it
    are the baseline's, as reviewed and merged (perfguard itself comes from the trusted install).
    """
    from perfguard.config import load_config
    from perfguard.engine.suite import load_benchmark_dir

    source = bench.commit_side(base_sha, "baseline").target.source
    cli = bench.config.threshold if bench.config.threshold_source == "--threshold" else None
    pyproject = source / "pyproject.toml"
    judged = bench.with_rules(
        load_config(pyproject if pyproject.is_file() else None, threshold=cli), load_benchmark_dir(source)
    )
    judged.say(
        f"untrusted HEAD: the rules ([tool.perfguard]) and the asv suite come from the merge-base "
        f"{base_sha[:10]}, not from HEAD"
    )
    return judged
