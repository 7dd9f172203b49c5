"""Find the commit where a series moved: a binary search over ``good..bad`` (``perfguard bisect``).

asv's ``asv find`` and Pinpoint do this for their tools; here it is the gate's own comparison run
as ``git bisect`` would: the candidates are ``git rev-list --first-parent good..bad`` (the commits
the baseline branch recorded one by one; a merged pull request is one candidate, its merge commit),
``bad`` must have moved beyond the threshold from ``good`` (else there is nothing to find), and
each probe compares one commit with ``good`` by the rule of ``perfguard check``: stage 1, then for
timing suspects the interleaved re-measurement in fresh processes.  A commit has *moved* when any
selected gated benchmark is a ``regression`` against ``good`` (``direction="better"``: an
improvement).
Because every commit is compared with ``good`` (not with its neighbour), "moved" is monotone along
a single step and the search needs ``ceil(log2(n))`` probes for ``n`` candidates, plus ``good``
and ``bad`` themselves: 6 commits for a range of 16.

Stored rounds are reused (:meth:`perfguard.measuring.Bench.stored_rounds`: same machine key,
profile, suite version and a selection that covers ``--bench``); what is measured is stored as
ordinary ``run`` rounds of those commits, so a later bisect or check reuses it too.  The work
metrics (FLOPs, aten ops, bytes allocated) make a bisection exact on a busy CPU: select them with
``--bench``; when every selected series is exact (:data:`perfguard.metrics.DETERMINISTIC_METRICS`),
each commit is measured once, not ``--rounds`` times (issue 30): a count repeats exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardError, UsageError

if TYPE_CHECKING:
    from perfguard.compare import Item, SuiteComparison
    from perfguard.measuring import Bench
    from perfguard.store import StoredResult

DIRECTIONS = ("worse", "better")
JSON_SCHEMA = "perfguard-bisect/1"


@dataclass(frozen=True)
class Probe:
    """One commit compared with ``good``: whether it moved, and the items that did."""

    sha: str
    position: int  # 1-based position in good..bad (bad = n)
    subject: str
    measured: bool  # False: its stored rounds were reused
    moved: bool
    items: tuple[Item, ...]  # the items that moved (regressions, or improvements for "better")

    def as_json(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "position": self.position,
            "subject": self.subject,
            "measured": self.measured,
            "moved": self.moved,
            "items": [_item_json(i) for i in self.items],
        }


@dataclass
class BisectResult:
    """The culprit and how it was found (every probe, in the order they were made)."""

    good: str
    bad: str
    candidates: int  # commits in good..bad (first parent)
    culprit: str
    culprit_subject: str
    stat: str  # `git show --stat` of the culprit
    direction: str
    probes: list[Probe] = field(default_factory=list)

    @property
    def measured(self) -> list[str]:
        """Commits measured by this bisection (``good`` and ``bad`` included when they had no rounds)."""
        return [p.sha for p in self.probes if p.measured]

    @property
    def reused(self) -> list[str]:
        return [p.sha for p in self.probes if not p.measured]

    @property
    def culprit_items(self) -> tuple[Item, ...]:
        return next(p.items for p in self.probes if p.sha == self.culprit)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JSON_SCHEMA,
            "good": self.good,
            "bad": self.bad,
            "direction": self.direction,
            "candidates": self.candidates,
            "culprit": {"sha": self.culprit, "subject": self.culprit_subject, "stat": self.stat},
            "measured": self.measured,
            "reused": self.reused,
            "probes": [p.as_json() for p in self.probes],
        }


def _item_json(item: Item) -> dict[str, Any]:
    return {
        "benchmark": item.benchmark,
        "impl": item.impl,
        "params": dict(item.params),
        "metric": item.metric,
        "verdict": str(item.verdict),
        "ratio": item.ratio,
        "ci_low": item.ci_low,
        "ci_high": item.ci_high,
        "reason": item.reason,
    }


#: Items a probe's "moved" line names (the JSON has them all).
MOVED_NAMED = 3


def moved_line(items: Sequence[Item]) -> str:
    """``moved: dilated forward FLOPs (seq_len=512, dtype=float32) 1.1 G → 2.2 G (2.000×), …``.

    Each item by implementation, benchmark and parameters, then what its reason says past the
    benchmark's name, so two parameter sets never read as the same line twice (issue 30).
    """
    from perfguard.compare import describe

    if not items:
        return "not moved"
    parts = []
    for item in items[:MOVED_NAMED]:
        label = describe(item.benchmark, item.metric)
        params = ", ".join(f"{k}={v}" for k, v in sorted(item.params.items()) if k != "impl")
        change = item.reason.removeprefix(label).strip()
        parts.append(
            f"{item.impl} {label} ({params}) {change}" if params else f"{item.impl} {label} {change}"
        )
    more = f" (+{len(items) - MOVED_NAMED} more)" if len(items) > MOVED_NAMED else ""
    return "moved: " + "; ".join(parts) + more


def candidates(root: Any, good: str, bad: str) -> list[str]:
    """``git rev-list --first-parent good..bad``, oldest first (``bad`` last)."""
    from perfguard.gitrepo import git

    out = git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}")
    assert isinstance(out, str)
    return out.split()


def culprit_stat(root: Any, sha: str) -> str:
    """``git show --stat`` of a commit (a merge against its first parent: what it brought in)."""
    from perfguard.gitrepo import git

    out = git(root, "show", "--stat", "--diff-merges=first-parent", "--format=fuller", sha)
    assert isinstance(out, str)
    return out


def bisect(
    bench: Bench,
    good_ref: str,
    bad_ref: str,
    *,
    rounds: int | None = None,
    direction: str = "worse",
) -> BisectResult:
    """The first commit of ``good..bad`` (first parent) whose selected series moved beyond the threshold.

    Raises :class:`UsageError` (exit 2) for refs that are not a range (``good`` not an ancestor of
    ``bad``, the same commit), and :class:`PerfguardError` (exit 2) when ``bad`` has not moved from
    ``good`` (nothing to find) or a commit's benchmarks cannot be compared.
    """
    from perfguard.gitrepo import commit_info, rev_parse

    if direction not in DIRECTIONS:
        raise UsageError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
    if not bench.bench:
        raise UsageError(
            "bisect needs --bench: the series to follow",
            hint=r"e.g. --bench 'Work\.track_forward_ops\(.dilated., 512' (work metrics are exact on a CPU)",
        )
    root = bench.root
    good = rev_parse(root, good_ref, what="--good")
    bad = rev_parse(root, bad_ref, what="--bad")
    if good == bad:
        raise UsageError(f"--good and --bad are the same commit ({good[:10]})", hint="give a range to search")
    if not _is_ancestor(root, good, bad):
        raise UsageError(
            f"--good {good_ref} ({good[:10]}) is not an ancestor of --bad {bad_ref} ({bad[:10]})",
            hint="bisect searches the history between them: give an older --good on the same branch",
        )
    commits = candidates(root, good, bad)
    if not commits or commits[-1] != bad:
        raise UsageError(
            f"{bad_ref} is not reached from {good_ref} along first parents",
            hint="give --good on the first-parent history of --bad (git log --first-parent)",
        )
    n = rounds or bench.config.rounds
    bench.say(
        f"bisecting {len(commits)} commit(s) of {good[:10]}..{bad[:10]} (first parent) for the first one "
        f"{'worse' if direction == 'worse' else 'better'} than {good[:10]} beyond the threshold"
    )
    search = _Search(bench, good, commits, n, direction)
    bad_probe = search.probe(len(commits) - 1)
    if not bad_probe.moved:
        raise PerfguardError(
            f"{bad_ref} ({bad[:10]}) has not moved from {good_ref} ({good[:10]}) beyond the threshold in "
            f"the selected benchmarks: there is nothing to find",
            hint="check --bench (it selects the series), --direction, or lower --threshold",
        )
    lo, hi = -1, len(commits) - 1  # lo: last known not moved (-1 = good), hi: first known moved
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if search.probe(mid).moved:
            hi = mid
        else:
            lo = mid
    culprit = commits[hi]
    return BisectResult(
        good=good,
        bad=bad,
        candidates=len(commits),
        culprit=culprit,
        culprit_subject=commit_info(root, culprit).subject,
        stat=culprit_stat(root, culprit),
        direction=direction,
        probes=search.probes,
    )


def _is_ancestor(root: Any, a: str, b: str) -> bool:
    """``git merge-base --is-ancestor a b`` (its answer is the exit status)."""
    import subprocess

    proc = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", a, b], capture_output=True)
    return proc.returncode == 0


class _Search:
    """The probes of one bisection: ``good``'s rounds, and each commit compared with them."""

    def __init__(self, bench: Bench, good: str, commits: Sequence[str], rounds: int, direction: str) -> None:
        self.bench = bench
        self.good = good
        self.commits = commits
        self.rounds = rounds
        self.direction = direction
        self.probes: list[Probe] = []
        self._good_rounds: list[list[Any]] | None = None
        # Whether every selected series is exact (work counts, memory: perfguard.metrics): then one
        # round a commit is the whole answer (None until a measurement or stored round says).
        self.exact: bool | None = None

    def _rounds(self, sha: str, label: str) -> tuple[list[list[Any]], bool]:
        """Stored rounds of ``sha``, or new ones (stored); whether they were measured now.

        The first call also provides ``good``'s rounds: stored ones, or measured now, interleaved
        with ``sha`` (A B B A …) when neither is stored.
        """
        stored = self.bench.stored_rounds(sha)
        if self._good_rounds is None:
            good_stored = self.bench.stored_rounds(self.good)
            self._learn(good_stored or stored)
            if good_stored:
                self.bench.say(f"good {self.good[:10]}: using {len(good_stored)} stored round(s)")
                self._good_rounds = good_stored
                self.probes.append(self._good_probe(measured=False))
            elif stored:
                self._good_rounds = self._measure([self.good], ["good"])[0]
                self.probes.append(self._good_probe(measured=True))
            else:
                good_rounds, rounds = self._measure([self.good, sha], ["good", label])
                self._good_rounds = good_rounds
                self.probes.append(self._good_probe(measured=True))
                return rounds, True
        if stored:
            self.bench.say(f"{label} {sha[:10]}: using {len(stored)} stored round(s)")
            return stored, False
        return self._measure([sha], [label])[0], True

    def _learn(self, rounds: Sequence[Sequence[Any]]) -> None:
        """Whether the selected series are exact, from rounds of any commit (nothing: still unknown)."""
        from perfguard.metrics import DETERMINISTIC_METRICS

        metrics = {r.metric for results in rounds for r in results}
        if metrics and self.exact is None:
            self.exact = metrics <= DETERMINISTIC_METRICS
            if self.exact and self.rounds > 1:
                self.bench.say(
                    f"the selected series are exact ({', '.join(sorted(metrics))}): one round a commit"
                )

    def _measure(self, shas: Sequence[str], labels: Sequence[str]) -> list[list[list[Any]]]:
        """``self.rounds`` rounds of each commit (interleaved), or one when the series are exact.

        While that is not known yet, one round is measured first and says; timings then get the
        rest of their rounds.
        """
        sides = [self.bench.commit_side(sha, label) for sha, label in zip(shas, labels, strict=True)]
        first = 1 if self.exact is not False else self.rounds
        runs = self.bench.measure(sides, "run", first)
        out = [[list(r.results) for r in side_runs] for side_runs in runs]
        self._learn([results for side in out for results in side])
        if not self.exact and first < self.rounds:
            more = self.bench.measure(sides, "run", self.rounds - first)
            for side, side_runs in zip(out, more, strict=True):
                side.extend(list(r.results) for r in side_runs)
        return out

    def _good_probe(self, *, measured: bool) -> Probe:
        from perfguard.gitrepo import commit_info

        return Probe(self.good, 0, commit_info(self.bench.root, self.good).subject, measured, False, ())

    def probe(self, index: int) -> Probe:
        from perfguard.gitrepo import commit_info

        sha = self.commits[index]
        position = index + 1
        label = "bad" if index == len(self.commits) - 1 else f"probe {position}/{len(self.commits)}"
        rounds, measured = self._rounds(sha, label)
        assert self._good_rounds is not None
        result = self._compare(sha, label, rounds)
        wanted = "regression" if self.direction == "worse" else "improvement"
        # Gated items decide (a derived tokens/s or TFLOP/s keeps its stage-1 verdict when its
        # timing is re-measured); a selection of report-only benchmarks decides on those.
        deciding = [i for i in result.items if i.gated] or list(result.items)
        moved = tuple(i for i in deciding if str(i.verdict) == wanted)
        comparable = [
            i for i in result.items if str(i.verdict) not in ("new", "missing", "skipped", "failed")
        ]
        if not comparable:
            raise PerfguardError(
                f"commit {sha[:10]} ({label}) has no benchmark to compare with good {self.good[:10]}",
                hint="its selected benchmarks failed or were skipped (perfguard history shows why); "
                "narrow the range or the --bench selection",
            )
        probe = Probe(sha, position, commit_info(self.bench.root, sha).subject, measured, bool(moved), moved)
        self.probes.append(probe)
        self.bench.say(f"{label} {sha[:10]} ({probe.subject[:60]}): {moved_line(moved)}")
        return probe

    def _compare(self, sha: str, label: str, rounds: list[list[StoredResult]]) -> SuiteComparison:
        """Stage 1 against good, and the interleaved re-measurement of timing suspects (as a check)."""
        from perfguard.compare import apply_retry, compare_suite, measurements_from_rounds
        from perfguard.engine.suite import suspect_selection

        assert self._good_rounds is not None
        config = self.bench.config
        first = compare_suite(
            measurements_from_rounds(self._good_rounds), measurements_from_rounds(rounds), config
        )
        if not first.suspects or not config.retry.enabled:
            return first
        regexes = suspect_selection(first.suspects, rounds)
        self.bench.say(
            f"{label} {sha[:10]}: {len(first.suspects)} timing suspect(s); re-measuring them with good, "
            f"interleaved, {config.retry.rounds} rounds each"
        )
        good_side = self.bench.commit_side(self.good, "good (retry)")
        side = self.bench.commit_side(sha, f"{label} (retry)")
        runs = self.bench.measure([good_side, side], "retry", config.retry.rounds, bench=regexes)
        return apply_retry(
            first,
            measurements_from_rounds(r.results for r in runs[0]),
            measurements_from_rounds(r.results for r in runs[1]),
            config,
        )
