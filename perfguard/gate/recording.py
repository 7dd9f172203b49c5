"""Step 7 of the PR check: the check stored (its verdicts, its summary, both sides' software) and its
reports rendered from what was stored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.store.check_summary import AcceptanceSummary, CheckSummary, UnderneathTable

if TYPE_CHECKING:
    from perfguard.compare import SuiteComparison
    from perfguard.gate.sides import CheckRounds, CheckSides
    from perfguard.measuring import Bench, Rounds
    from perfguard.store import StoredCheck


@dataclass(frozen=True)
class Decided:
    """What a check decided: the final comparison (stage 1, 2 and the acceptances), how many suspects
    stage 2 re-measured, what changed underneath each regression and what the acceptances did."""

    result: SuiteComparison
    retried: int
    underneath: tuple[UnderneathTable, ...]
    acceptances: AcceptanceSummary


def check_summary(
    bench: Bench, sides: CheckSides, measured: CheckRounds, decided: Decided, seconds: float
) -> CheckSummary:
    """What the stored check keeps beside its items (docs/reports.md)."""
    from perfguard.compare.paths import path_changes

    return CheckSummary(
        counts={k: v for k, v in decided.result.counts().items() if v},
        retried=decided.retried,
        measured=dict(measured.how),
        rounds={"base": len(measured.base), "head": len(measured.head)},
        dirty=sides.head.commit.dirty,
        bench=tuple(sides.bench) if sides.selection is not None else tuple(bench.bench),
        seconds=round(seconds, 1),
        trust="trusted" if bench.rounds_trusted else "untrusted",
        underneath=decided.underneath,
        acceptances=decided.acceptances,
        paths=tuple(path_changes(measured.base, measured.head)),
        selection=sides.selection,
    )


def record_check(
    bench: Bench, sides: CheckSides, measured: CheckRounds, decided: Decided, seconds: float
) -> int:
    """Store the check (one transaction, with its items); its id."""
    from perfguard.measuring import command_line, commit_record
    from perfguard.store import CheckItemRecord

    result = decided.result
    summary = check_summary(bench, sides, measured, decided, seconds)
    verdict = "broken" if summary.counts.get("broken") else ("regression" if result.exit_code else "pass")
    return bench.store.record_check(
        bench.machine_record,
        sides.head.commit,
        commit_record(bench.root, sides.base_sha),
        baseline_ref=sides.baseline_ref,
        profile=bench.profile.name,
        threshold=bench.config.threshold,
        verdict=verdict,
        exit_code=result.exit_code,
        summary=summary.to_json(),
        environment={
            "base": _environment(bench, measured.base, sides.base_sha),
            "head": _environment(bench, measured.head, sides.head.commit.sha),
        },
        config=bench.config.to_dict(),
        command=command_line(),
        items=[CheckItemRecord(**item.as_row()) for item in result.items],
    )


def _environment(bench: Bench, rounds: Rounds, sha: str) -> dict[str, Any]:
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


def write_reports(
    bench: Bench, stored: StoredCheck, *, markdown: Path | None, html: Path | None, json_path: Path | None
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
