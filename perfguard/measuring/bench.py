"""A bench: what one ``run`` / ``check`` / ``calibrate`` / ``bisect`` measures with, its sides, its rounds.

:class:`Bench` is immutable: what an invocation measures with is fixed when it is opened
(:func:`perfguard.measuring.open_bench`).  What a check learns on the way (the baseline's rules for
an untrusted HEAD, rounds to be stored untrusted) gives a new bench (:meth:`Bench.with_rules`,
:meth:`Bench.distrusted`); what measuring leaves behind as it goes (worktrees, the rounds stored so
far, the cleanup) is the invocation's :class:`BenchSession`, shared by every bench derived from the
opened one.
"""

from __future__ import annotations

import copy
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from perfguard.config import Config
    from perfguard.engine.machine import Fingerprint
    from perfguard.engine.rounds import Progress, Round, RoundRunner, Target
    from perfguard.gitrepo import WorkTree
    from perfguard.profiles import Profile
    from perfguard.store import CommitRecord, MachineRecord, ResultRecord, RunRecord, Store, StoredResult
    from perfguard.tree_state import TreeState

#: One side's rounds: the results of each round (one fresh process), oldest first.  Rounds read
#: from a store hold :class:`~perfguard.store.StoredResult` (with their run's id).
Rounds = list[list["ResultRecord"]]


class Reporter(Protocol):
    """Where a measurement says what it does: messages, per-benchmark progress, finished rounds."""

    def say(self, message: str) -> None: ...

    def progress(self, progress: Progress) -> None: ...


class QuietReporter:
    """A reporter that keeps the messages (for callers that print nothing, e.g. tests, notebooks)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def say(self, message: str) -> None:
        self.messages.append(message)

    def progress(self, progress: Progress) -> None:
        pass


def command_line() -> str:
    """The command line as the user typed it (for the record and the report's repro lines)."""
    return shlex.join(["perfguard", *sys.argv[1:]])


@dataclass
class Side:
    """One commit as perfguard measures it: the store's record and where its code is."""

    commit: CommitRecord
    target: Target
    label: str  # "baseline 1a2b3c4d5e" / "HEAD 9f8e7d6c5b+dirty"
    # its tree as recorded when the side was made; every round of it is checked against it
    # (:mod:`perfguard.tree_state`).  None: nothing checks it (a tree only perfguard's code runs in)
    tree: TreeState | None = None


@dataclass
class BenchSession:
    """What one invocation's measuring leaves behind as it goes, shared by every bench derived from
    the one it opened: the worktrees it made (one per commit, removed when it ends), the rounds it
    stored so far (what an interruption keeps) and the exit stack that cleans up."""

    stack: ExitStack = field(default_factory=ExitStack)
    kept: list[str] = field(default_factory=list)  # the rounds stored so far, "<side> round i/n"
    worktrees: dict[str, tuple[Path, TreeState]] = field(default_factory=dict)


def _changed(runner: RoundRunner, **changes: Any) -> RoundRunner:
    """A copy of ``runner`` with ``changes``: a derived bench never changes the runner of the one it
    came from (a round runner holds only its settings)."""
    changed = copy.copy(runner)
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


@dataclass(frozen=True)
class Bench:
    """The context of one run / check / calibrate / bisect invocation (immutable: see the module
    docstring)."""

    root: Path
    machine: Fingerprint
    profile: Profile
    device: str
    store: Store  # where this invocation writes (an untrusted bench: its results store)
    baseline_store: Store | None  # where baselines are read (untrusted: read-only; None: no store yet)
    runner: RoundRunner
    config: Config
    bench: tuple[str, ...]
    work_dir: Path
    reporter: Reporter
    trusted: bool = True
    # ``Class.method`` names left out of this invocation's rounds and reused results: the
    # history-only benchmarks for a check, calibrate or bisect without --bench (suite.HISTORY_ONLY)
    exclude: tuple[str, ...] = ()
    # The selection this invocation's ``bench`` narrows (a check that measures only the
    # implementations its change reaches, perfguard.gate.selection): rounds stored under it are
    # reusable too, narrowed to ``bench`` like a full recording.
    narrowed_from: tuple[str, ...] | None = None
    # Whether the rounds this invocation stores are trusted runs (baselines): ``trusted``, unless
    # code that is not on the baseline branch runs in it (:meth:`distrusted`).
    rounds_trusted: bool = True
    session: BenchSession = field(default_factory=BenchSession)

    def __post_init__(self) -> None:
        if self.rounds_trusted and not self.trusted:
            raise ValueError("an untrusted bench stores its rounds untrusted: pass rounds_trusted=False")

    @property
    def machine_record(self) -> MachineRecord:
        from perfguard.store import MachineRecord

        return MachineRecord(
            key=self.machine.key,
            kind=self.machine.kind,
            label=self.machine.label,
            attributes=dict(self.machine.hardware),
        )

    def say(self, message: str) -> None:
        self.reporter.say(message)

    @property
    def store_files(self) -> tuple[Path, ...]:
        """The stores' own files (a SQLite store inside the work tree is not a change to the code)."""
        stores = [s for s in (self.store, self.baseline_store) if s is not None]
        return tuple(f for s in stores for f in s.files)

    # --- sides ---------------------------------------------------------------------------------

    def head_side(self, tree: WorkTree) -> Side:
        """HEAD (plus uncommitted changes when the tree is dirty), measured in the work tree itself.

        Its files are recorded now (not the git-ignored ones: the user's virtualenv, caches, the
        store); a round after which they differ stops the measurement (:meth:`measure`).
        """
        from perfguard.engine.rounds import Target
        from perfguard.gitrepo import current_branch
        from perfguard.tree_state import TreeState

        return Side(
            commit_record(self.root, tree.head, dirty_hash=tree.dirty_hash, branch=current_branch(self.root)),
            Target(tree.head, self.root),
            f"HEAD {tree.key[:10]}{'+dirty' if tree.dirty else ''}",
            TreeState.record(self.root, ignored=False, exclude=self.store_files),
        )

    def commit_side(self, sha: str, label: str, *, branch: str | None = None) -> Side:
        """A commit measured in a git worktree of its own (created now, removed when done).

        The worktree is made read-only and its files (ignored ones too: nothing but perfguard
        writes there) are recorded when it is created; a round after which they differ stops the
        measurement (:meth:`measure`).
        """
        from perfguard.engine.rounds import Target
        from perfguard.gitrepo import checkout
        from perfguard.tree_state import TreeState, make_read_only

        made = self.session.worktrees.get(sha)
        if made is None:
            source = self.session.stack.enter_context(checkout(self.root, sha, self.work_dir))
            make_read_only(source)
            made = self.session.worktrees[sha] = (source, TreeState.record(source, ignored=True))
        source, state = made
        return Side(
            commit_record(self.root, sha, branch=branch), Target(sha, source), f"{label} {sha[:10]}", state
        )

    def distrusted(self, why: str) -> Bench:
        """This bench storing every round as untrusted (never a baseline) and compiling in the
        untrusted caches: code that is not on the baseline branch runs in it (docs/ci.md, "Trust
        model").  ``why`` is said once (not again by a bench that already is)."""
        if not self.rounds_trusted:
            return self
        self.say(why)
        return replace(self, rounds_trusted=False, runner=_changed(self.runner, trust="untrusted"))

    def with_rules(self, config: Config, benchmark_dir: Path) -> Bench:
        """This bench judging with ``config`` and measuring the asv suite in ``benchmark_dir`` (an
        untrusted check takes both from its baseline: :func:`perfguard.gate`)."""
        return replace(self, config=config, runner=_changed(self.runner, benchmark_dir=benchmark_dir))

    # --- measuring -----------------------------------------------------------------------------

    def settings(self, round_: Round) -> dict[str, Any]:
        """What a run was measured under: suite version, selection, pinned timer settings."""
        from perfguard.profiles import SUITE_VERSION
        from perfguard.store.result_info import ResultInfo

        pinned: dict[str, Any] = {}
        for result in round_.results:
            settings = ResultInfo.from_json(result.info).settings
            if settings is not None:
                pinned = dict(settings)
                break
        return {
            "suite_version": SUITE_VERSION,
            "bench": list(round_.bench) or None,  # what this round selected (a retry: its suspects)
            "device": self.device,
            "timer": pinned,
            "processes": round_.processes,
            "world_size": round_.ranks,  # ranks of a distributed round (also in the machine key)
            "cost": dict(round_.seconds),  # where this round's time went (docs/perf/round_cost.py)
            "trust": "trusted" if self.rounds_trusted else "untrusted",
        }

    def run_record(
        self, round_: Round, purpose: str, index: int, results: Sequence[ResultRecord]
    ) -> RunRecord:
        from perfguard.store import RunRecord

        return RunRecord(
            profile=self.profile.name,
            purpose=purpose,
            round=index,
            software=dict(self.machine.software),
            fingerprint=self.machine.as_dict(),
            settings=self.settings(round_),
            command=command_line(),
            started_at=round_.started_at,
            finished_at=round_.finished_at,
            results=list(results),
            trusted=self.rounds_trusted,
        )

    def measure(
        self,
        sides: Sequence[Side],
        purpose: str | Sequence[str],
        rounds: int,
        *,
        bench: Sequence[str] | None = None,
        profile: Sequence[str] = (),
        done: Sequence[int] | None = None,
        settings: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[list[RunRecord]]:
        """Rounds of each side up to ``rounds``, interleaved A B B A … (a fresh process every time).

        Each round is stored the moment it ends, in its own transaction (a complete run of the
        store): an interruption or a crash of perfguard loses the round in progress, never a
        finished one, and the next invocation resumes with them (:meth:`stored_rounds`).  Returns
        one list of run records per side, in round order.  ``purpose``: one for every side, or one
        per side.  ``done``: the rounds each side already has (stored earlier): it is measured from
        the next one on.  ``settings``: per side, what its runs' settings also record (calibrate's
        phase and side).  ``profile``: benchmarks whose cases also get a profiler breakdown (the
        first round each side measures now).  After every round each side's
        tree is compared with its recorded state: one that changed raises
        :class:`perfguard.tree_state.TreeChanged` (exit 2) before that round is stored.
        """
        selection = tuple(bench) if bench is not None else self.bench
        purposes = [purpose] * len(sides) if isinstance(purpose, str) else list(purpose)
        first = list(done) if done is not None else [0] * len(sides)
        extra = list(settings) if settings is not None else [{}] * len(sides)
        if not len(purposes) == len(first) == len(extra) == len(sides):
            raise ValueError("measure() needs one purpose, done count and settings per side")
        records: list[list[RunRecord]] = [[] for _ in sides]
        order = list(range(len(sides)))
        for index in range(rounds):
            for s in order if index % 2 == 0 else order[::-1]:
                if index < first[s]:
                    continue
                side = sides[s]
                label = f"{side.label} round {index + 1}/{rounds}: "
                round_ = self.runner.run(
                    side.target,
                    bench=selection,
                    label=label,
                    profile=profile if index == first[s] else (),
                    exclude=self.exclude if bench is None else (),
                )
                for each in sides:
                    if each.tree is not None:
                        each.tree.verify(each.label)
                record = self.run_record(round_, purposes[s], index, round_.results)
                if extra[s]:
                    record = replace(record, settings={**record.settings, **extra[s]})
                with _signals_held():  # stored and counted as kept, or neither
                    self.store.record_runs(self.machine_record, side.commit, [record])
                    self.session.kept.append(f"{side.label} round {index + 1}/{rounds}")
                records[s].append(record)
                self.say(_round_line(side, index, rounds, round_))  # "done": stored, kept
        return records

    def kept_summary(self) -> str:
        """The rounds this invocation stored so far, per side: what an interruption leaves behind."""
        per_side: dict[str, list[str]] = {}
        for line in self.session.kept:
            label, round_ = line.rsplit(" round ", 1)
            per_side.setdefault(label, []).append(round_.split("/")[0])
        return "; ".join(f"{label} round(s) {', '.join(rounds)}" for label, rounds in per_side.items())

    # --- reusing measurements ------------------------------------------------------------------

    def stored_rounds(
        self,
        sha: str,
        purposes: Sequence[str] | None = None,
        *,
        store: Store | None = None,
        trusted_only: bool = False,
    ) -> list[list[StoredResult]]:
        """Earlier rounds of ``sha`` on this machine key and profile that cover the current selection.

        A run is reusable when it was made by the current suite version and with no benchmark
        selection or the same one; its results are narrowed to the current selection.  Returns
        one list of results per reusable run, oldest first ([] when there is none).  ``store``:
        where to read (default: the baseline store); ``trusted_only``: only runs of trusted code
        (what a baseline is made of, docs/ci.md "Trust model").
        """
        from perfguard.engine.suite import selected, short_name
        from perfguard.profiles import SUITE_VERSION
        from perfguard.store import MEASUREMENT_PURPOSES

        source = store if store is not None else self.baseline_store
        if source is None:
            return []
        wanted = [None, list(self.bench) or None]
        if self.narrowed_from is not None:
            wanted.append(list(self.narrowed_from) or None)
        kinds = tuple(purposes or MEASUREMENT_PURPOSES)
        key, profile = self.machine.key, self.profile.name
        runs = [
            r
            for r in source.runs_for(key, sha, profile, purposes=kinds, trusted_only=trusted_only)
            if r.settings.get("suite_version") == SUITE_VERSION and r.settings.get("bench") in wanted
        ]
        if not runs:
            return []
        by_run: dict[int, list[StoredResult]] = {r.id: [] for r in runs}
        found = source.results_for(key, sha, profile, purposes=kinds, trusted_only=trusted_only)
        for results in found.values():
            for result in results:
                if (
                    result.run_id in by_run
                    and selected(result, self.bench)
                    and short_name(result.benchmark) not in self.exclude
                ):
                    by_run[result.run_id].append(result)
        return [by_run[r.id] for r in runs if by_run[r.id]]


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends (then arrive as usual): a round's write and the
    record that it was kept happen together, so the interruption message says exactly what is stored."""
    held = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _round_line(side: Side, index: int, rounds: int, round_: Round) -> str:
    counts = round_.counts
    seconds = (round_.finished_at - round_.started_at).total_seconds()
    parts = [f"{counts['ok']} ok"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed")
    if counts["skipped"]:
        parts.append(f"{counts['skipped']} skipped")
    restarts = f", {round_.processes - 1} restart(s) after a crash" if round_.processes > 1 else ""
    return f"{side.label}: round {index + 1}/{rounds} done in {seconds:.0f} s ({', '.join(parts)}{restarts})"


def commit_record(
    root: Path, sha: str, *, dirty_hash: str | None = None, branch: str | None = None
) -> CommitRecord:
    """The store's record of a commit (or of HEAD plus uncommitted changes)."""
    from perfguard.gitrepo import commit_info
    from perfguard.store import CommitRecord

    info = commit_info(root, sha)
    if dirty_hash is None:
        return CommitRecord(
            sha=sha,
            base_sha=sha,
            branch=branch,
            parents=info.parents,
            subject=info.subject,
            author=info.author,
            committed_at=info.committed_at,
        )
    return CommitRecord(
        sha=f"{sha}+dirty.{dirty_hash}",
        base_sha=sha,
        dirty=True,
        branch=branch,
        parents=(sha,),
        subject=f"uncommitted changes on {sha[:10]} ({info.subject})",
        author=info.author,
        committed_at=datetime.now(timezone.utc),
    )
