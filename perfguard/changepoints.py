"""Steps on the baseline branch: what entered it without a check saying so (``perfguard changes``).

A regression reaches the baseline branch without failing a check when a pull request merged
without one (a fork never approved for the GPU, a label forgotten) or when nothing in the
repository changed at all: a driver, CUDA or torch update on the runner.  So when the baseline
workflow records a commit, this module compares it with the history of the same machine key:

1. **previous**: the newest commit recorded before it on its first-parent history (``perfguard
   run`` of the baseline workflow; a burst of pushes leaves gaps, so the step is between the two
   recorded commits, and ``perfguard bisect`` finds the commit inside the gap);
2. every benchmark x params of the two commits, by the rule of ``perfguard check``'s first stage
   (:func:`perfguard.compare.compare_suite`: the statistics for timings, exact for memory and the
   work counts): a gated ``regression`` is a candidate;
3. the candidate must also hold against the **recent history**: its new value against the median
   of the last ``window`` recorded commits, beyond the same threshold, so a fast blip of the
   previous commit does not make an ordinary commit look like a step;
4. a step is **accepted** when a trusted acceptance of a commit in ``previous..commit`` covers it
   within its ceiling (:mod:`perfguard.accept`: ``perfguard accept``, or an approved trailer);
   otherwise it is **flagged**;
5. a change of software between the two runs (torch, driver, CUDA, cuDNN, Triton, Python) is
   named as the likely cause of every step at that commit.

The steps are stored (``Store.record_change_points``; the site reads ``Store.change_points``), and
:meth:`Detection.to_json` / :meth:`Detection.to_markdown` feed the job summary and the annotations
(``python -m perfguard.github changes``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import UsageError
from perfguard.units import format_value

if TYPE_CHECKING:
    from perfguard.compare import Item
    from perfguard.config import Config
    from perfguard.store import Store, StoredChangePoint, StoredResult
    from perfguard.store.check_summary import IgnoredAcceptance

JSON_SCHEMA = "perfguard-changes/1"
#: How far back along first parents the previous recorded commit is looked for.
HISTORY = 100
#: Recorded commits whose median a step must also clear (the recent history).
WINDOW = 5
#: Software that can move a benchmark by itself; a change of one of these is named as the cause.
#: (``perfguard`` changes with the code under test; ``numpy`` does not run the attention.)
CAUSES = ("torch", "driver", "cuda_driver", "cuda_runtime", "cudnn", "triton", "python")


@dataclass(frozen=True)
class Detection:
    """What ``perfguard changes`` found at one recorded commit of one machine key."""

    machine_key: str
    profile: str
    sha: str
    subject: str
    previous: str | None
    between: int  # commits in previous..sha (1: consecutive)
    window: tuple[str, ...] = ()
    software_changes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    steps: tuple[StoredChangePoint, ...] = ()
    ignored: tuple[IgnoredAcceptance, ...] = ()
    note: str = ""

    @property
    def cause(self) -> str | None:
        return cause_text(self.software_changes)

    @property
    def flagged(self) -> tuple[StoredChangePoint, ...]:
        return tuple(s for s in self.steps if s.flagged)

    @property
    def accepted(self) -> tuple[StoredChangePoint, ...]:
        return tuple(s for s in self.steps if not s.flagged)

    @property
    def exit_code(self) -> int:
        """1 when a step is flagged (for ``--exit-code``), else 0."""
        return 1 if self.flagged else 0

    def bisect_hint(self) -> str | None:
        """The command that finds the commit inside a gap of unrecorded commits."""
        if self.previous is None or self.between <= 1 or not self.flagged:
            return None
        first = self.flagged[0]
        regex = f"{first.benchmark.split('.', 1)[-1]}\\('{first.impl}'"
        return f'perfguard bisect --good {self.previous[:12]} --bad {self.sha[:12]} --bench "{regex}"'

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JSON_SCHEMA,
            "machine_key": self.machine_key,
            "profile": self.profile,
            "sha": self.sha,
            "subject": self.subject,
            "previous": self.previous,
            "between": self.between,
            "window": list(self.window),
            "software_changes": {k: list(v) for k, v in self.software_changes.items()},
            "cause": self.cause,
            "note": self.note,
            "flagged": len(self.flagged),
            "accepted": len(self.accepted),
            "bisect": self.bisect_hint(),
            "steps": [_step_json(s) for s in self.steps],
            "ignored_acceptances": [i.to_json() for i in self.ignored],
        }

    def to_markdown(self) -> str:
        """The job summary section (GitHub-flavoured Markdown)."""
        at = f"`{self.sha[:10]}`"
        if self.flagged:
            title = f"### perfguard: {len(self.flagged)} unaccepted step(s) at {at} on {self.machine_key}"
        elif self.steps:
            title = f"### perfguard: {len(self.steps)} step(s) at {at} on {self.machine_key}, all accepted"
        else:
            title = f"### perfguard: no step beyond the threshold at {at} on {self.machine_key}"
        lines = [title, ""]
        if self.previous is None:
            lines.append(self.note or "Nothing recorded before this commit on this machine key.")
            return "\n".join(lines) + "\n"
        gap = f" ({self.between} commits apart)" if self.between > 1 else ""
        lines.append(
            f"Compared with `{self.previous[:10]}`{gap}, the commit recorded before it, and with the median "
            f"of the last {len(self.window)} recorded commit(s); profile `{self.profile}`."
        )
        if self.cause:
            lines += ["", f"**Software changed between the two runs: {self.cause}**"]
            if self.steps:
                lines[-1] += " — the likely cause."
        if self.steps:
            lines += ["", "| | implementation | benchmark | parameters | before | after | ratio | why |"]
            lines.append("| --- | --- | --- | --- | ---: | ---: | ---: | --- |")
            for step in self.steps:
                params = ", ".join(f"{k}={v}" for k, v in sorted(step.params.items()) if k != "impl")
                if step.acceptance is not None:
                    a = step.acceptance
                    who = a.author + (f", approved by {a.approved_by}" if a.approved_by else "")
                    why = f"accepted up to {a.ceiling:g}× by {who}: {a.reason}"
                else:
                    why = step.reason
                mark = "🔴 flagged" if step.flagged else "✅ accepted"
                cells = (
                    mark,
                    step.impl,
                    step.benchmark.split(".", 1)[-1],
                    params,
                    format_value(step.before, step.unit),
                    format_value(step.after, step.unit),
                    f"{step.ratio:.3f}×",
                    why,
                )
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        hint = self.bisect_hint()
        if hint:
            lines += ["", f"Find the commit inside the gap: `{hint}`"]
        if self.flagged:
            lines += [
                "",
                "Intended? Accept it where it entered: "
                f'`perfguard accept --commit {self.sha[:12]} IMPL BENCHMARK --max RATIO --reason "why"`.',
            ]
        for ignored in self.ignored:
            lines += [
                "",
                f"Ignored acceptance in `{ignored.sha[:10]}` ({_cell(ignored.text)}): {ignored.why}.",
            ]
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _step_json(step: StoredChangePoint) -> dict[str, Any]:
    acceptance = step.acceptance
    return {
        "id": step.id,
        "benchmark": step.benchmark,
        "impl": step.impl,
        "params": dict(step.params),
        "params_key": step.params_key,
        "metric": step.metric,
        "unit": step.unit,
        "before": step.before,
        "after": step.after,
        "ratio": step.ratio,
        "threshold": step.threshold,
        "reason": step.reason,
        "cause": step.cause,
        "flagged": step.flagged,
        "acceptance": None
        if acceptance is None
        else {
            "id": acceptance.id,
            "sha": acceptance.sha,
            "scope": acceptance.scope(),
            "ceiling": acceptance.ceiling,
            "reason": acceptance.reason,
            "author": acceptance.author,
            "approved_by": acceptance.approved_by,
            "source": acceptance.source,
        },
    }


def cause_text(changes: Mapping[str, tuple[Any, Any]]) -> str | None:
    """``torch 2.12.0 → 2.13.0, cudnn 9.1 → 9.2`` for the software that can cause a step."""
    named = [f"{name} {changes[name][0]} → {changes[name][1]}" for name in CAUSES if name in changes]
    return ", ".join(named) or None


# --------------------------------------------------------------------------------------------
# detection
# --------------------------------------------------------------------------------------------


def history_of(machine_key: str | None, profile: str) -> tuple[str, str]:
    """(machine key, profile name) of the history to look at: ``machine_key`` or this machine's, and
    ``profile`` resolved as ``perfguard run`` resolves ``auto`` on that machine (``cpu:``: no GPU)."""
    from perfguard import profiles

    if machine_key is None:
        from perfguard.engine.machine import fingerprint

        machine = fingerprint()
        return machine.key, profiles.resolve(profile, cuda=machine.has_cuda).name
    return machine_key, profiles.resolve(profile, cuda=not machine_key.startswith("cpu:")).name


def first_parent_history(root: Path, sha: str, depth: int = HISTORY) -> list[str]:
    """``sha`` and its first-parent ancestors, newest first."""
    from perfguard.gitrepo import git

    out = git(root, "rev-list", "--first-parent", f"--max-count={depth + 1}", sha)
    assert isinstance(out, str)
    return out.split()


def rounds_of(store: Store, machine_key: str, sha: str, profile: str) -> list[list[StoredResult]]:
    """Every stored round of a commit (one list of results per run), oldest first."""
    by_run: dict[int, list[StoredResult]] = {}
    for results in store.results_for(machine_key, sha, profile, trusted_only=True).values():
        for result in results:
            by_run.setdefault(result.run_id, []).append(result)
    return [by_run[k] for k in sorted(by_run)]


def commit_medians(rounds: Sequence[Sequence[StoredResult]]) -> dict[tuple[str, str], float]:
    """Per benchmark x params, the median of the ok rounds' values (a point of the series)."""
    values: dict[tuple[str, str], list[float]] = {}
    for results in rounds:
        for r in results:
            if r.status == "ok" and r.value is not None:
                values.setdefault(r.key, []).append(float(r.value))
    return {k: statistics.median(v) for k, v in values.items()}


def oriented(before: float, after: float, direction: str) -> float | None:
    """after / before oriented so that > 1 is worse (None where undefined)."""
    if direction == "higher":
        before, after = after, before
    if before <= 0:
        return None
    return after / before


def software_changes(
    store: Store, machine_key: str, previous: str, sha: str, profile: str
) -> dict[str, tuple[Any, Any]]:
    """The software that differs between the newest run of ``previous`` and the first run of ``sha``."""
    from perfguard.engine.machine import software_differences

    before = store.runs_for(machine_key, previous, profile, trusted_only=True)
    after = store.runs_for(machine_key, sha, profile, trusted_only=True)
    if not before or not after:
        return {}
    changes = software_differences(before[-1].software, after[0].software)
    return {k: v for k, v in changes.items() if k != "perfguard"}


def detect(
    store: Store,
    root: Path,
    *,
    machine_key: str,
    sha: str,
    profile: str,
    config: Config,
    window: int = WINDOW,
    approved_by: str | None = None,
) -> Detection:
    """Compare a recorded commit with the history of its machine key; store and return the steps.

    ``approved_by``: the maintainer who approved the pull request merged as ``sha`` (the workflow
    passes it only after checking the approval label's actor): the trailers of the commits that
    merge brought in (``sha^1..sha``) are trusted and recorded at ``sha``; a trailer of any other
    commit in ``previous..sha`` (one merged earlier, never recorded) is ignored, with why.
    Raises :class:`UsageError` (exit 2) when ``sha`` has no recorded run on this machine key.
    """
    from perfguard.accept import Acceptance, Approval, Found, apply_acceptances, find_acceptances
    from perfguard.compare import SuiteComparison, Verdict, compare_suite, measurements_from_rounds
    from perfguard.gitrepo import commit_info
    from perfguard.measuring import commit_record
    from perfguard.store import ChangePointRecord

    if window < 1:
        raise UsageError(f"--window must be at least 1, not {window}")
    history = first_parent_history(root, sha)
    measured = store.measured_shas(machine_key, profile, history, trusted_only=True)
    subject = commit_info(root, sha).subject
    if sha not in measured:
        raise UsageError(
            f"commit {sha[:10]} has no recorded run on machine key {machine_key!r} with profile {profile}",
            hint="record it first (`perfguard run --commit SHA`, what the baseline workflow does), "
            "or pass the --machine and --profile it was recorded with",
        )
    earlier = [s for s in history[1:] if s in measured]
    if not earlier:
        return Detection(
            machine_key, profile, sha, subject, None, 0,
            note=f"{sha[:10]} is the first commit recorded on {machine_key} (profile {profile}) within "
            f"{HISTORY} first-parent commits: nothing to compare it with.",
        )  # fmt: skip
    previous = earlier[0]
    recent = tuple(earlier[:window])
    between = history.index(previous)
    head_rounds = rounds_of(store, machine_key, sha, profile)
    base_rounds = rounds_of(store, machine_key, previous, profile)
    comparison = compare_suite(
        measurements_from_rounds(base_rounds), measurements_from_rounds(head_rounds), config
    )
    reference = _reference(store, machine_key, recent, profile)
    steps: list[Item] = []
    for item in comparison.items:
        if item.verdict is not Verdict.REGRESSION or not item.gated or item.ratio is None:
            continue
        ref = reference.get(item.key)
        against = (
            oriented(ref, item.head_value, item.direction)
            if ref is not None and item.head_value is not None
            else None
        )
        if against is not None and against > 1.0 + item.threshold:
            steps.append(item)
    changes = software_changes(store, machine_key, previous, sha, profile)
    # acceptances of previous..sha: stored (trusted) ones, and the trailers of the commits that the
    # approved pull request merged (sha^1..sha); an earlier commit's trailer is not approved by it
    approval = Approval.of_merge(root, approved_by, sha)
    found = find_acceptances(root, store, previous, sha, approval=approval)
    trusted = list(found.trusted)
    approved = [a for a in trusted if a.source == "trailer"]
    if approved:
        stored = store.record_acceptances(commit_record(root, sha), [a.as_record() for a in approved])
        trusted = [a for a in trusted if a.source != "trailer"] + [
            Acceptance.of(s, s.sha, s.id) for s in stored
        ]
    trusted = list({(a.id if a.id is not None else -i): a for i, a in enumerate(trusted, 1)}.values())
    applied = apply_acceptances(SuiteComparison(items=tuple(steps)), Found(tuple(trusted), found.ignored))
    accepted_by = {d.key: d.acceptance for d in applied.accepted}
    cause = cause_text(changes)
    records = [
        ChangePointRecord(
            benchmark=item.benchmark,
            impl=item.impl,
            params=dict(item.params),
            metric=item.metric,
            unit=item.unit,
            direction=item.direction,
            before=float(item.base_value or 0.0),
            after=float(item.head_value or 0.0),
            ratio=float(item.ratio or 0.0),
            threshold=item.threshold,
            reason=item.reason,
            cause=cause,
            software_changes={k: list(v) for k, v in changes.items()},
            acceptance_id=accepted_by[item.key].id if item.key in accepted_by else None,
        )
        for item in steps
    ]
    stored_steps: list[StoredChangePoint] = []
    if records:
        machine = next(m for m in store.machines() if m.key == machine_key)
        stored_steps = store.record_change_points(
            machine, commit_record(root, sha), commit_record(root, previous), profile=profile, points=records
        )
    return Detection(
        machine_key=machine_key,
        profile=profile,
        sha=sha,
        subject=subject,
        previous=previous,
        between=between,
        window=recent,
        software_changes=changes,
        steps=tuple(stored_steps),
        ignored=found.ignored,
    )


def _reference(
    store: Store, machine_key: str, shas: Sequence[str], profile: str
) -> dict[tuple[str, str], float]:
    """Per benchmark x params, the median of the recent commits' points (each the median of its runs)."""
    points: dict[tuple[str, str], list[float]] = {}
    for sha in shas:
        for key, value in commit_medians(rounds_of(store, machine_key, sha, profile)).items():
            points.setdefault(key, []).append(value)
    return {k: statistics.median(v) for k, v in points.items()}
