"""The PR gate as a library: compare HEAD with its baseline on this machine (``perfguard check``).

1. Every stored round that can serve as the baseline (the merge-base of REF and HEAD, on this
   machine key, from trusted runs) is read **before any code under review runs**: an untrusted
   check's later steps execute HEAD's code, which must not be able to change what HEAD is compared
   against (docs/ci.md, "Trust model").
2. HEAD (plus uncommitted changes, said so) is verified against the float64 reference
   (``perfguard verify`` in a fresh process, only the implementations and dtypes this check will
   measure), or the report ``verify_report`` names: an implementation that fails is ``broken``.
3. Whatever is not stored yet for either side is measured now (a commit in a temporary git
   worktree, HEAD in the work tree), both sides interleaved A B B A …, and stored (one transaction
   per side; an untrusted check stores in its own results store).  Each side's files are compared
   with their recorded state after every round (a change: exit 2, nothing stored); a check whose
   HEAD is not on the baseline branch stores every round untrusted (docs/ci.md, "Trust model").
4. A gated baseline benchmark that failed in a stored round (a killed or crashed round) is
   re-measured; if it still fails the check fails closed (exit 2 naming it): a broken baseline
   never ungates a benchmark.  A reported one (the per-kernel times) gates nothing: it stays
   failed in the baseline and the report says so.
5. Stage 1 compares every benchmark x params (:func:`perfguard.compare.compare_suite`); stage 2
   re-measures the timing suspects, baseline and HEAD interleaved in fresh processes, with a
   profiler breakdown of their cases, and decides them on that alone.
6. What changed underneath every regression (per aten op / per CUDA kernel, counts and, where the
   re-measurement profiled it, times) goes into the check's summary for the reports.
7. The check and its items are stored.

``run_check(bench, ...)`` returns a :class:`CheckOutcome`; the CLI (``perfguard.cli.check``) only
parses options, prints and exits with ``outcome.exit_code`` (0 no regression, 1 regression, broken
or failed benchmark, 2 usage or environment error raised as :class:`perfguard.errors.PerfguardError`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardError, UsageError

if TYPE_CHECKING:
    from perfguard.compare import Item, SuiteComparison
    from perfguard.measuring import Bench, Side
    from perfguard.report.terminal import TerminalSummary
    from perfguard.store import RunRecord, StoredCheck

#: How many "what changed underneath" tables a check keeps (the rest are left out, and said so).
MAX_UNDERNEATH = 12
#: Rows per table.
MAX_UNDERNEATH_ROWS = 25


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
) -> CheckOutcome:
    """Compare HEAD with the merge-base of ``baseline_ref`` on this machine (see the module docstring).

    ``accept_approved_by``: the maintainer who approved the acceptances written in HEAD's commit
    trailers (the workflow passes it only when a maintainer applied the label); without it only the
    acceptances stored in the trusted history store count (docs/living-with-regressions.md).
    """
    from perfguard.accept import Approval, apply_acceptances, find_acceptances
    from perfguard.gitrepo import merge_base, rev_parse, work_tree
    from perfguard.tree_state import describe

    if verify_report is not None and not verify:
        raise UsageError("--verify-report and --no-verify contradict each other", hint="pass one of them")
    started = time.perf_counter()
    tree = work_tree(bench.root, ignore=bench.store_files)
    ref_sha = rev_parse(bench.root, baseline_ref, what="baseline ref")
    base_sha = merge_base(bench.root, ref_sha, tree.head)
    if not bench.trusted:
        _rules_from_baseline(bench, base_sha)
    head = bench.head_side(tree)
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
        bench.distrust_rounds(
            f"HEAD {head.commit.sha[:10]} is not on {baseline_ref} (code not merged there runs in this "
            "check): every round it measures, the baseline's too, is stored untrusted, never a baseline "
            "(docs/ci.md, 'Trust model')"
        )
    # 1. baselines first, before any code under review runs; only trusted runs are baselines
    base_stored = bench.stored_rounds(base_sha, trusted_only=True)
    head_stored = [] if (fresh or same_commit) else bench.stored_rounds(head.commit.sha, store=bench.store)
    approval = Approval.of_pull_request(bench.root, accept_approved_by, base_sha, head.commit.sha)
    acceptances = find_acceptances(
        bench.root, bench.baseline_store, base_sha, head.commit.sha, approval=approval
    )
    # 2. verification of HEAD
    broken = _broken_impls(bench, verify_report, skip=not verify)
    # 3. what is missing is measured
    rounds_n = rounds or bench.config.rounds
    base_rounds, head_rounds, measured = _measure_sides(
        bench, head, base_sha, rounds_n, base_stored, head_stored, baseline_ref
    )
    # 4. a failed baseline benchmark is measured again, then fails closed
    base_rounds = _heal_baseline(bench, base_sha, base_rounds, head_rounds, rounds_n)
    # 5. stage 1 and 2
    first = _compare(bench, base_rounds, head_rounds, broken)
    result, retried, retry_runs = _retry(bench, first, head, base_sha, head_rounds, broken)
    # 6. underneath, then the acceptances (an accepted regression still shows what changed)
    underneath = underneath_tables(result.items, base_rounds, head_rounds, retry_runs)
    applied = apply_acceptances(result, acceptances)
    for line in applied.lines():
        bench.say(line)
    result = applied.result
    seconds = time.perf_counter() - started
    check_id = _record(
        bench, head, base_sha, baseline_ref, result, base_rounds, head_rounds, measured, retried, seconds,
        underneath, applied.summary(),
    )  # fmt: skip
    stored = bench.store.get_check(check_id)
    assert stored is not None
    return CheckOutcome(check_id, stored, result, result.exit_code, seconds, retried)


def _rules_from_baseline(bench: Bench, base_sha: str) -> None:
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
    bench.config = load_config(pyproject if pyproject.is_file() else None, threshold=cli)
    bench.runner.benchmark_dir = load_benchmark_dir(source)
    bench.say(
        f"untrusted HEAD: the rules ([tool.perfguard]) and the asv suite come from the merge-base "
        f"{base_sha[:10]}, not from HEAD"
    )


# --------------------------------------------------------------------------------------------
# verification of HEAD
# --------------------------------------------------------------------------------------------


def _broken_impls(bench: Bench, report: Path | None, *, skip: bool) -> dict[str, list[str]]:
    """Implementations that fail ``perfguard verify`` in HEAD, with their failures."""
    if skip:
        bench.say("HEAD is not verified (--no-verify)")
        return {}
    if report is None:
        report = _run_verify(bench)
    elif not report.is_file():
        raise UsageError(
            f"--verify-report {report} does not exist",
            hint="run `perfguard verify --json PATH` first, or leave the option out to verify now",
        )
    try:
        document = json.loads(report.read_text(encoding="utf-8"))
        rows = document["results"]
        broken: dict[str, list[str]] = {}
        for row in rows:
            if not row.get("passed") and not row.get("skipped"):
                broken.setdefault(str(row["impl"]), []).extend(str(f) for f in row.get("failures") or [])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{report} is not a perfguard verify report ({exc})",
            hint="pass the file `perfguard verify --json PATH` wrote",
        ) from None
    if broken:
        bench.say(f"HEAD fails perfguard verify for: {', '.join(sorted(broken))} (these are 'broken')")
    else:
        bench.say(f"HEAD passes perfguard verify ({len(rows)} rows)")
    return broken


def _run_verify(bench: Bench) -> Path:
    """``perfguard verify --json`` of what this check measures, in a fresh process over HEAD's code."""
    from perfguard.engine.rounds import compile_cache_env, import_shim

    out = bench.work_dir / "verify.json"
    shim = import_shim(bench.root, bench.work_dir)
    env = {
        **os.environ,
        **compile_cache_env(bench.runner.trust),
        "PYTHONPATH": os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p),
    }
    command = [sys.executable, "-X", "faulthandler", "-m", "perfguard", "verify", "--device", bench.device]
    command += ["--json", str(out)]
    command += ["--profile", bench.profile.name]
    for regex in bench.bench:
        command += ["--bench", regex]
    scope = f" (what --bench {bench.bench[0]!r} measures)" if bench.bench else ""
    bench.say(f"verifying HEAD ({bench.device}, {', '.join(bench.profile.dtypes(bench.device))}){scope} ...")
    # the device lock goes with it: verification computes on the device the check measures on
    lock = bench.runner.pass_fds
    proc = subprocess.run(command, cwd=shim, env=env, capture_output=True, text=True, check=False,
                          pass_fds=lock)  # fmt: skip
    if proc.returncode not in (0, 1) or not out.exists():
        lines = [x for x in (proc.stdout + proc.stderr).strip().splitlines() if not x.startswith("Extension")]
        tail = "\n  ".join(lines[-25:])
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise PerfguardError(
            f"perfguard verify could not run on HEAD ({how}):\n  {tail}",
            hint="run `perfguard verify` to see the problem, or pass --no-verify",
        )
    return out


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------


def _measure_sides(
    bench: Bench,
    head: Side,
    base_sha: str,
    rounds: int,
    base_stored: list[list[Any]],
    head_stored: list[list[Any]],
    baseline_ref: str,
) -> tuple[list[list[Any]], list[list[Any]], dict[str, str]]:
    """The rounds of both sides: stored ones where usable, the rest up to ``rounds`` measured now.

    Every round is stored when it ends (:meth:`Bench.measure`), so a check that was interrupted
    left its finished rounds behind, and this one resumes with them: a side with fewer stored
    rounds than ``rounds`` gets only the missing ones measured.
    """
    stored = {"baseline": base_stored, "head": head_stored}
    sides = {"baseline": f"baseline {base_sha[:10]}", "head": f"HEAD {head.commit.sha[:10]}"}
    reuse = {"baseline": "from this machine key", "head": "(--fresh measures again)"}
    measured: dict[str, str] = {}
    missing: list[tuple[Side, str]] = []
    for purpose, kept in stored.items():
        more = max(0, rounds - len(kept))
        key = "base" if purpose == "baseline" else "head"
        if not kept:
            measured[key] = f"measured ({rounds} rounds)"
            if purpose == "baseline":
                bench.say(f"{sides[purpose]} ({baseline_ref}) has no usable results for this machine key: "
                          "measuring it")  # fmt: skip
        elif more:
            measured[key] = f"{len(kept)} stored round(s), {more} measured"
            bench.say(f"{sides[purpose]}: resuming with {len(kept)} stored round(s), measuring {more} more")
        else:
            measured[key] = f"{len(kept)} stored round(s)"
            bench.say(f"{sides[purpose]}: using {len(kept)} stored round(s) {reuse[purpose]}")
        if more:
            side = bench.commit_side(base_sha, "baseline") if purpose == "baseline" else head
            missing.append((side, purpose))
    if missing:
        done = [len(stored[purpose]) for _, purpose in missing]
        runs = bench.measure([s for s, _ in missing], [p for _, p in missing], rounds, done=done)
        for (_, purpose), side_runs in zip(missing, runs, strict=True):
            stored[purpose] = stored[purpose] + [list(r.results) for r in side_runs]
    return stored["baseline"], stored["head"], measured


def _failed_keys(rounds: Sequence[Sequence[Any]]) -> dict[tuple[str, str], Any]:
    failed: dict[tuple[str, str], Any] = {}
    for results in rounds:
        for r in results:
            if r.status == "failed" and r.key not in failed:
                failed[r.key] = r
    return failed


def _heal_baseline(
    bench: Bench, base_sha: str, base_rounds: list[list[Any]], head_rounds: list[list[Any]], rounds: int
) -> list[list[Any]]:
    """Re-measure every gated baseline benchmark that failed in a stored round; fail closed if it still
    fails (a reported one decides nothing, so its failure is only reported).

    A round can fail for reasons that are not the baseline's code (the OOM killer, a runner shut
    down mid-round); taking such a result as "nothing to compare" would let any slowdown of that
    benchmark through.  So the failed benchmarks are measured again; their fresh rounds replace the
    stored ones.  If they fail again, the baseline really cannot be measured here: exit 2.
    """
    from perfguard.compare import gates
    from perfguard.engine.suite import suspect_selection

    failed = {k: r for k, r in _failed_keys(base_rounds).items() if gates(bench.config, r)}
    if not failed:
        return base_rounds
    names = ", ".join(f"{r.benchmark.split('.', 1)[-1]}({r.params_key})" for r in list(failed.values())[:5])
    bench.say(
        f"{len(failed)} baseline benchmark(s) failed in a stored round ({names}): measuring them again "
        f"({rounds} rounds)"
    )
    regexes = suspect_selection(list(failed.values()), base_rounds)
    side = bench.commit_side(base_sha, "baseline (again)")
    [runs] = bench.measure([side], "baseline", rounds, bench=regexes)
    fresh = [list(r.results) for r in runs]
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
    healed = [[r for r in results if r.key not in keep] for results in base_rounds]
    return [h for h in healed if h] + fresh


def _compare(
    bench: Bench, base: list[list[Any]], head: list[list[Any]], broken: dict[str, list[str]]
) -> SuiteComparison:
    from perfguard.compare import compare_suite, measurements_from_rounds

    return compare_suite(
        measurements_from_rounds(base), measurements_from_rounds(head), bench.config, broken_impls=broken
    )


def _retry(
    bench: Bench,
    first: SuiteComparison,
    head: Side,
    base_sha: str,
    head_rounds: list[list[Any]],
    broken: dict[str, list[str]],
) -> tuple[SuiteComparison, int, list[list[RunRecord]]]:
    """Stage 2: re-measure the suspects interleaved in fresh processes; (final, count, retry runs).

    Fails closed like stage 1 (:func:`_heal_baseline`): a suspect is gated, and one whose baseline
    gave no usable number in the re-measurement (its process killed: the OOM killer, a runner
    hiccup, or HEAD's code running between the baseline's rounds) would otherwise be decided on
    nothing, as ``new``.  Such suspects are re-measured once more, both sides interleaved; if the
    baseline fails again the check stops with exit 2 and stores no check.
    """
    from perfguard.compare import apply_retry, measurements_from_rounds
    from perfguard.engine.suite import suspect_selection

    if not first.suspects:
        return first, 0, []
    if not bench.config.retry.enabled:
        bench.say(f"{len(first.suspects)} suspect(s); re-measurement is disabled ([tool.perfguard.retry])")
        return first, 0, []
    regexes = suspect_selection(first.suspects, head_rounds)
    n = bench.config.retry.rounds
    impls = sorted({i.impl for i in first.suspects})
    bench.say(
        f"{len(first.suspects)} suspect(s) in {', '.join(impls)}: re-measuring them, baseline and HEAD "
        f"interleaved, {n} rounds each (the first round of each side also profiles them)"
    )
    base = bench.commit_side(base_sha, "baseline (retry)")
    runs = bench.measure([base, head], "retry", n, bench=regexes, profile=regexes)
    lost = _unmeasured(first.suspects, runs[0])
    if lost:
        bench.say(
            f"the baseline's re-measurement of {len(lost)} suspect(s) gave no usable number "
            f"({_name_failures(lost)}): measuring them again, baseline and HEAD interleaved, {n} rounds each"
        )
        again_regexes = suspect_selection([i for i, _ in lost], head_rounds)
        again = bench.measure([base, head], "retry", n, bench=again_regexes, profile=again_regexes)
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
    retry_base = measurements_from_rounds(r.results for r in runs[0])
    retry_head = measurements_from_rounds(r.results for r in runs[1])
    return apply_retry(first, retry_base, retry_head, bench.config), len(first.suspects), runs


def _source(result: Any) -> tuple[str, str]:
    """The key of the measurement a result is: a derived one (tokens/s, TFLOP/s) is its timing's."""
    derived = result.info.get("derived_from") if isinstance(result.info, Mapping) else None
    return (str(derived or result.benchmark), result.params_key)


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


# --------------------------------------------------------------------------------------------
# what changed underneath
# --------------------------------------------------------------------------------------------


def _pass_of(benchmark: str) -> str:
    return "forward_backward" if "backward" in benchmark.lower() else "forward"


def _breakdowns(rounds: Sequence[Sequence[Any]], key: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(impl, params_key, pass) -> the first breakdown of that kind found in the rounds' results."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for results in rounds:
        for r in results:
            value = r.info.get(key) if isinstance(r.info, Mapping) else None
            if not isinstance(value, Mapping):
                continue
            k = (r.impl, r.params_key, _pass_of(r.benchmark))
            found.setdefault(k, dict(value))
    return found


def underneath_tables(
    items: Sequence[Item],
    base_rounds: Sequence[Sequence[Any]],
    head_rounds: Sequence[Sequence[Any]],
    retry_runs: Sequence[Sequence[RunRecord]],
) -> list[dict[str, Any]]:
    """Per regressed implementation x params x pass: what the call does differently in HEAD.

    Times come from the re-measurement's profiler pass (``info.underneath``) where there is one;
    otherwise counts from the rounds' work metrics (``info.breakdown``: aten ops on the CPU,
    CUDA kernels on a GPU).  Rows are sorted by the size of the difference, biggest first.
    """
    retry_base = [list(r.results) for r in retry_runs[0]] if retry_runs else []
    retry_head = [list(r.results) for r in retry_runs[1]] if len(retry_runs) > 1 else []
    profiled = (_breakdowns(retry_base, "underneath"), _breakdowns(retry_head, "underneath"))
    counted = (_breakdowns(base_rounds, "breakdown"), _breakdowns(head_rounds, "breakdown"))
    tables: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for item in items:
        if str(item.verdict) != "regression":
            continue
        key = (item.impl, item.params_key, _pass_of(item.benchmark))
        if key in seen:
            continue
        seen.add(key)
        table = _table(key, item, profiled) or _table(key, item, counted)
        if table is not None:
            tables.append(table)
        if len(tables) >= MAX_UNDERNEATH:
            break
    return tables


def _table(
    key: tuple[str, str, str], item: Item, sources: tuple[Mapping[Any, Any], Mapping[Any, Any]]
) -> dict[str, Any] | None:
    base, head = sources[0].get(key), sources[1].get(key)
    if base is None or head is None:
        return None
    if "rows" in base:  # a profiler breakdown: {name: [count, ms]}
        b = {n: (int(v[0]), float(v[1])) for n, v in base["rows"].items()}
        h = {n: (int(v[0]), float(v[1])) for n, v in head["rows"].items()}
        timed = True
    else:  # counts only: {"kind", "counts": {name: count}}
        b = {n: (int(c), None) for n, c in base.get("counts", {}).items()}
        h = {n: (int(c), None) for n, c in head.get("counts", {}).items()}
        timed = False
    rows = []
    for name in set(b) | set(h):
        bc, bt = b.get(name, (0, 0.0 if timed else None))
        hc, ht = h.get(name, (0, 0.0 if timed else None))
        if bc == hc and (not timed or abs((ht or 0) - (bt or 0)) <= 1e-9):
            continue
        rows.append({"name": name, "base_count": bc, "head_count": hc, "base_ms": bt, "head_ms": ht})
    if timed:
        rows.sort(key=lambda r: (-abs((r["head_ms"] or 0) - (r["base_ms"] or 0)), r["name"]))
    else:
        rows.sort(key=lambda r: (-abs(r["head_count"] - r["base_count"]), r["name"]))
    if not rows:
        return None
    return {
        "impl": key[0],
        "benchmark": item.benchmark,
        "params_key": key[1],
        "pass": key[2],
        "kind": str(head.get("kind") or base.get("kind") or ""),
        "source": str(head.get("source") or "work-metric counts, every round"),
        "rows": rows[:MAX_UNDERNEATH_ROWS],
        "rows_left_out": max(0, len(rows) - MAX_UNDERNEATH_ROWS),
    }


# --------------------------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------------------------


def _environment(bench: Bench, rounds: list[list[Any]], sha: str) -> dict[str, Any]:
    """One side's software, settings and fingerprint, from the runs its rounds came from.

    Rounds read from a store carry their run's id; rounds measured by this check do not (they are
    the records that were just stored), so for those the side's newest stored run stands in.
    """
    run_ids = {getattr(r, "run_id", None) for results in rounds for r in results} - {None}
    stored = []
    for store in dict.fromkeys(s for s in (bench.store, bench.baseline_store) if s is not None):
        runs = store.runs_for(bench.machine.key, sha, bench.profile.name)
        stored += [r for r in runs if r.id in run_ids] if run_ids else runs[-1:]
    if stored:
        run = stored[0]
        return {**dict(run.software), "settings": dict(run.settings), "fingerprint": dict(run.fingerprint)}
    return {**dict(bench.machine.software), "fingerprint": bench.machine.as_dict()}


def _record(
    bench: Bench,
    head: Side,
    base_sha: str,
    baseline_ref: str,
    result: SuiteComparison,
    base_rounds: list[list[Any]],
    head_rounds: list[list[Any]],
    measured: dict[str, str],
    retried: int,
    seconds: float,
    underneath: list[dict[str, Any]],
    acceptances: dict[str, Any],
) -> int:
    from perfguard.compare.paths import path_changes
    from perfguard.measuring import command_line, commit_record
    from perfguard.store import CheckItemRecord

    base_commit = commit_record(bench.root, base_sha)
    counts = {k: v for k, v in result.counts().items() if v}
    verdict = "broken" if counts.get("broken") else ("regression" if result.exit_code else "pass")
    return bench.store.record_check(
        bench.machine_record,
        head.commit,
        base_commit,
        baseline_ref=baseline_ref,
        profile=bench.profile.name,
        threshold=bench.config.threshold,
        verdict=verdict,
        exit_code=result.exit_code,
        summary={
            "counts": counts,
            "retried": retried,
            "measured": measured,
            "rounds": {"base": len(base_rounds), "head": len(head_rounds)},
            "dirty": head.commit.dirty,
            "bench": list(bench.bench),
            "seconds": round(seconds, 1),
            "trust": "trusted" if bench.rounds_trusted else "untrusted",
            "underneath": underneath,
            "acceptances": acceptances,
            "paths": path_changes(base_rounds, head_rounds),
        },
        environment={
            "base": _environment(bench, base_rounds, base_sha),
            "head": _environment(bench, head_rounds, head.commit.sha),
        },
        config=bench.config.to_dict(),
        command=command_line(),
        items=[CheckItemRecord(**item.as_row()) for item in result.items],
    )


def write_reports(
    bench: Bench, stored: Any, *, markdown: Path | None, html: Path | None, json_path: Path | None
) -> list[Path]:
    """The check's reports, rendered from the stored check; returns the paths written (a path inside
    the work tree goes under ``.perfguard/reports/``: :func:`perfguard.output_paths.output_path`)."""
    from perfguard.files import write_atomic
    from perfguard.output_paths import output_path
    from perfguard.report import check_to_json, render_html, render_markdown

    written = []
    for path, render in (
        (markdown, lambda: render_markdown(stored, store=bench.store)),
        (html, lambda: render_html(stored, store=bench.store)),
        (json_path, lambda: json.dumps(check_to_json(stored, store=bench.store), indent=2) + "\n"),
    ):
        if path is None:
            continue
        written.append(write_atomic(output_path(path), render()))
    return written
