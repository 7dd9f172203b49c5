"""Measuring commits on this machine: what ``run``, ``check``, ``calibrate`` and ``bisect`` share.

A :class:`Bench` holds what one invocation measures with (repository, machine fingerprint,
profile, stores, round runner, configuration, progress reporter).  :meth:`Bench.measure` runs
rounds of the suite on commits, interleaved A B B A …, and returns them as store records (written by
the caller, all rounds of a side in one transaction); :meth:`Bench.stored_rounds` finds earlier
measurements that can be reused: the same machine key, profile and suite version, and a benchmark
selection that covers the current one.  :func:`open_bench` checks every input before anything is
measured (bad input fails fast), and cleans up afterwards (worktrees, scratch directories), also
when the measurement is interrupted.

**Trust** (docs/ci.md): a bench is *trusted* (a maintainer's run, the baseline branch's workflow)
or *untrusted* (it executes code under review).  An untrusted bench opens the history store
read-only, reads baselines from it, and writes its own runs and checks to a separate results store;
its compilation caches are its own (:func:`perfguard.engine.rounds.compile_cache_env`).

What a round is and why rounds are fresh processes: ``docs/verdicts.md``; how a round runs:
:mod:`perfguard.engine.rounds`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from perfguard.errors import UsageError

if TYPE_CHECKING:
    from perfguard.config import Config
    from perfguard.engine.machine import Fingerprint
    from perfguard.engine.rounds import Progress, Round, RoundRunner, Target
    from perfguard.gitrepo import WorkTree
    from perfguard.profiles import Profile
    from perfguard.store import CommitRecord, MachineRecord, ResultRecord, RunRecord, Store, StoredResult
    from perfguard.tree_state import TreeState


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
class Bench:
    """The context of one run / check / calibrate / bisect invocation."""

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
    # Whether the rounds this invocation stores are trusted runs (baselines): ``trusted``, unless
    # code that is not on the baseline branch runs in it (:meth:`distrust_rounds`).
    rounds_trusted: bool = True
    kept: list[str] = field(default_factory=list)  # the rounds stored so far, "<side> round i/n"
    stack: ExitStack = field(default_factory=ExitStack)
    _worktrees: dict[str, tuple[Path, TreeState]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rounds_trusted = self.rounds_trusted and self.trusted

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

        made = self._worktrees.get(sha)
        if made is None:
            source = self.stack.enter_context(checkout(self.root, sha, self.work_dir))
            make_read_only(source)
            made = self._worktrees[sha] = (source, TreeState.record(source, ignored=True))
        source, state = made
        return Side(
            commit_record(self.root, sha, branch=branch), Target(sha, source), f"{label} {sha[:10]}", state
        )

    def distrust_rounds(self, why: str) -> None:
        """Store every round of this invocation as untrusted (never a baseline), and compile in the
        untrusted caches: code that is not on the baseline branch runs in it (docs/ci.md, "Trust
        model").  ``why`` is said once."""
        if not self.rounds_trusted:
            return
        self.rounds_trusted = False
        self.runner.trust = "untrusted"
        self.say(why)

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
                    self.kept.append(f"{side.label} round {index + 1}/{rounds}")
                records[s].append(record)
                self.say(_round_line(side, index, rounds, round_))  # "done": stored, kept
        return records

    def kept_summary(self) -> str:
        """The rounds this invocation stored so far, per side: what an interruption leaves behind."""
        per_side: dict[str, list[str]] = {}
        for line in self.kept:
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
        wanted = list(self.bench) or None
        kinds = tuple(purposes or MEASUREMENT_PURPOSES)
        key, profile = self.machine.key, self.profile.name
        runs = [
            r
            for r in source.runs_for(key, sha, profile, purposes=kinds, trusted_only=trusted_only)
            if r.settings.get("suite_version") == SUITE_VERSION and r.settings.get("bench") in (None, wanted)
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


# --------------------------------------------------------------------------------------------
# opening a bench
# --------------------------------------------------------------------------------------------


@contextmanager
def open_bench(
    *,
    profile_name: str,
    bench_regex: str | None,
    db_url: str | None,
    reporter: Reporter,
    threshold: float | None = None,
    device: str = "auto",
    timeout_s: float | None = None,
    trusted: bool = True,
    results_db_url: str | None = None,
    cwd: Path | None = None,
    for_history: bool = True,
    wait: bool = True,
) -> Iterator[Bench]:
    """Everything a measurement needs, checked before any benchmark runs (bad input fails fast).

    ``for_history=False`` (check, calibrate, bisect): without ``bench_regex`` the history-only
    benchmarks (:data:`perfguard.engine.suite.HISTORY_ONLY`, reported and never gated) are left out.

    ``trusted=False``: the history store (``db_url``) is opened read-only and everything this
    invocation writes goes to ``results_db_url`` (default: ``.perfguard/untrusted.db`` in the
    repository).  Interrupts (Ctrl-C, SIGTERM) become :class:`perfguard.errors.Interrupted` (exit
    130 / 143) after the scratch directory and worktrees are removed.

    Before anything runs the bench takes the lock of every device it measures on
    (:mod:`perfguard.device_lock`: one measurement per GPU or CPU machine at a time), waiting for a
    busy one, or with ``wait=False`` raising :class:`perfguard.device_lock.DeviceBusy` (exit 2).
    """
    from perfguard import device_lock, profiles
    from perfguard.config import find_pyproject, load_config
    from perfguard.engine.machine import fingerprint, with_ranks
    from perfguard.engine.rounds import RoundRunner
    from perfguard.engine.suite import HISTORY_ONLY
    from perfguard.gitrepo import cleanup_stale, repo_root, scratch_dir
    from perfguard.store import Store, resolve_results

    root = repo_root(cwd)
    config = load_config(find_pyproject(root), threshold=threshold)
    bench = (bench_regex,) if bench_regex else ()
    for regex in bench:
        try:
            re.compile(regex)
        except re.error as exc:
            raise UsageError(f"--bench {regex!r} is not a regular expression: {exc}") from None
    try:
        machine = fingerprint(device=device)
    except RuntimeError as exc:
        raise UsageError(str(exc), hint="drop --device cuda, or run on a machine with a GPU") from None
    profile = profiles.resolve(profile_name, cuda=machine.has_cuda)
    ranks = _ranks(profile, machine)
    if profile.distributed:
        machine = with_ranks(machine, ranks)  # a 2-rank baseline is never compared with a 4-rank run
    with ExitStack() as opened:
        baseline_store: Store | None
        if trusted:
            store = baseline_store = Store.open(db_url, cwd=root)
            opened.callback(store.close)
        else:
            _refuse_one_store(db_url, results_db_url, root)
            baseline_store = _open_baselines_read_only(db_url, root, reporter)
            if baseline_store is not None:
                opened.callback(baseline_store.close)
            store = Store.open(resolve_results(results_db_url, cwd=root), cwd=root)
            opened.callback(store.close)
        store.check_writable()
        removed = cleanup_stale(root)
        if removed:
            reporter.say(removed.describe())
        work_dir = scratch_dir()
        opened.callback(shutil.rmtree, work_dir, True)
        bench_ctx: Bench | None = None
        with interrupts_as_errors(kept=lambda: bench_ctx.kept_summary() if bench_ctx is not None else ""):
            uuids = [str(u) if u else None for u in machine.metadata.get("uuid") or []]
            lock = opened.enter_context(
                device_lock.hold(
                    device_lock.device_names(machine.kind, uuids, ranks),
                    command=command_line(),
                    wait=wait,
                    say=reporter.say,
                )
            )
            runner = RoundRunner(
                root,
                profile,
                machine.kind,
                work_dir,
                on_progress=reporter.progress,
                timeout_s=timeout_s,
                trust="trusted" if trusted else "untrusted",
                ranks=ranks,
                pass_fds=lock.fds,
            )
            exclude = () if for_history or bench else HISTORY_ONLY
            bench_ctx = Bench(
                root, machine, profile, machine.kind, store, baseline_store, runner, config, bench, work_dir,
                reporter, trusted, exclude,
            )  # fmt: skip
            with bench_ctx.stack:
                if trusted:
                    where = store.url
                elif baseline_store is None:
                    where = f"no baseline store (nothing stored yet), results in {store.url}"
                else:
                    where = f"{baseline_store.url} (read-only), results in {store.url}"
                reporter.say(
                    f"perfguard: {machine.label} (machine key {machine.key!r}), profile {profile.name} "
                    f"({profile.description}), store {where}"
                )
                yield bench_ctx


def _ranks(profile: Profile, machine: Fingerprint) -> int:
    """The ranks a round of ``profile`` runs here; a bad ``$PERFGUARD_RANKS``: exit 2."""
    from perfguard import profiles

    try:
        return profiles.ranks_for(
            profile, device=machine.kind, gpus=int(machine.hardware.get("gpu_count") or 0)
        )
    except ValueError as exc:
        raise UsageError(
            str(exc), hint=f"unset ${profiles.RANKS_ENV} or set it to a number that fits"
        ) from None


def _refuse_one_store(db_url: str | None, results_db_url: str | None, root: Path) -> None:
    """An untrusted bench's results store must not be the history store it reads baselines from.

    The same database for both (``--results-db X --db X``) would put the runs of code under review
    into the history store, from a context that must not be able to write it: exit 2.
    """
    from perfguard.store import resolve, resolve_results
    from perfguard.store.url import same_store

    history, results = resolve(db_url, cwd=root), resolve_results(results_db_url, cwd=root)
    if same_store(history, results):
        raise UsageError(
            f"--results-db and --db name the same store ({results.masked}): an untrusted run or check "
            "writes its results apart from the history store it reads baselines from",
            hint="pass a --results-db (or PERFGUARD_RESULTS_DB) of its own, e.g. sqlite:///results.db "
            "outside the work tree",
        )


def _open_baselines_read_only(db_url: str | None, root: Path, reporter: Reporter) -> Store | None:
    """The history store, read-only, for an untrusted bench; None when there is none to read.

    A runner whose baseline snapshot was never published has no baselines: the check then measures
    the merge-base itself, into its own results store (it never becomes a baseline).  Without
    ``--db`` / ``PERFGUARD_DB`` there is none either: the default store lies inside the work tree
    under review, where the pull request's commit (a force-added ``.perfguard/history.db``) or its
    code (run by ``perfguard verify`` before this check) can have put one (docs/ci.md, "Trust
    model").
    """
    from perfguard.store import Store
    from perfguard.store.url import resolve

    url = resolve(db_url, cwd=root)
    path = url.sqlite_path
    if url.is_default:
        reporter.say(
            f"no history store given (--db or PERFGUARD_DB): an untrusted check never reads {path}, inside "
            "the work tree under review; the baseline is measured here, kept with the results"
        )
        return None
    if path is not None and not path.exists():
        reporter.say(f"no history store at {path} yet: the baseline is measured here, kept with the results")
        return None
    return Store.open(url, cwd=root, read_only=True)


@contextmanager
def interrupts_as_errors(kept: Callable[[], str] | None = None) -> Iterator[None]:
    """Ctrl-C or SIGTERM (a CI job cancelled, a runner shutting down) stop the measurement cleanly.

    SIGTERM is turned into KeyboardInterrupt so that ``finally`` blocks run (the round's process
    is killed, git worktrees and scratch directories removed); either becomes
    :class:`perfguard.errors.Interrupted` (exit 130 for Ctrl-C, 143 for SIGTERM) with a message that
    says what was kept: every round is stored when it ends (:meth:`Bench.measure`), so an
    interruption loses the round in progress, never a finished one.  ``kept``: what was stored so
    far, in words ("" for nothing).
    """
    from perfguard.errors import Interrupted

    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except KeyboardInterrupt as exc:
        why = str(exc) or "Ctrl-C"
        stored = kept() if kept is not None else ""
        if stored:
            what = f"kept the finished rounds ({stored}); the round in progress was dropped"
            hint = "run the same check again: it resumes with the kept rounds and measures only the rest"
        else:
            what = "nothing of this measurement was stored"
            hint = "run the command again"
        raise Interrupted(f"interrupted ({why}): {what}", hint=hint, sigterm=why == "SIGTERM") from None
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
