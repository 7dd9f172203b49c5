"""Measuring commits for ``perfguard run``, ``check`` and ``calibrate``: the shared wiring.

A :class:`Bench` holds what one invocation measures with (repository, machine fingerprint,
profile, store, asv runner, progress display).  :meth:`Bench.measure` runs rounds of the suites on
a commit and returns them as store records (written by the caller, all rounds in one
transaction); :meth:`Bench.stored_rounds` finds earlier measurements that can be reused: the same
machine key, profile and suite version, and a benchmark selection that covers the current one.

What a round is and why rounds are fresh processes: ``docs/verdicts.md``; how asv is driven:
:mod:`perfguard.asvrun`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfguard.errors import PerfguardError, UsageError

if TYPE_CHECKING:
    from perfguard.asvrun import AsvRunner, Progress, Round, Target
    from perfguard.config import Config
    from perfguard.gitrepo import WorkTree
    from perfguard.machine import Fingerprint
    from perfguard.profiles import Profile
    from perfguard.store import CommitRecord, MachineRecord, ResultRecord, RunRecord, Store, StoredResult


def command_line() -> str:
    """The command line as the user typed it (for the record and the report's repro lines)."""
    return shlex.join(["perfguard", *sys.argv[1:]])


@dataclass
class Side:
    """One commit as perfguard measures it: the store's record and where its code is."""

    commit: CommitRecord
    target: Target
    label: str  # "baseline 1a2b3c4d5e" / "HEAD 9f8e7d6c5b+dirty"


@dataclass
class Bench:
    """The context of one run / check / calibrate invocation."""

    root: Path
    machine: Fingerprint
    profile: Profile
    device: str
    store: Store
    runner: AsvRunner
    config: Config
    bench: tuple[str, ...]
    work_dir: Path
    stack: ExitStack = field(default_factory=ExitStack)
    _worktrees: dict[str, Path] = field(default_factory=dict)

    @property
    def machine_record(self) -> MachineRecord:
        from perfguard.store import MachineRecord

        return MachineRecord(
            key=self.machine.key,
            kind=self.machine.kind,
            label=self.machine.label,
            attributes=dict(self.machine.hardware),
        )

    # --- sides ---------------------------------------------------------------------------------

    def head_side(self, tree: WorkTree) -> Side:
        """HEAD (plus uncommitted changes when the tree is dirty), measured in the work tree itself."""
        from perfguard.asvrun import Target
        from perfguard.gitrepo import current_branch

        return Side(
            commit_record(self.root, tree.head, dirty_hash=tree.dirty_hash, branch=current_branch(self.root)),
            Target(tree.head, self.root),
            f"HEAD {tree.key[:10]}{'+dirty' if tree.dirty else ''}",
        )

    def commit_side(self, sha: str, label: str, *, branch: str | None = None) -> Side:
        """A commit measured in a git worktree of its own (created now, removed when done)."""
        from perfguard.asvrun import Target
        from perfguard.gitrepo import checkout

        source = self._worktrees.get(sha)
        if source is None:
            source = self._worktrees[sha] = self.stack.enter_context(checkout(self.root, sha, self.work_dir))
        return Side(commit_record(self.root, sha, branch=branch), Target(sha, source), f"{label} {sha[:10]}")

    # --- measuring -----------------------------------------------------------------------------

    def settings(self, round_: Round) -> dict[str, Any]:
        """What a run was measured under: suite version, selection, pinned timer settings."""
        from perfguard.profiles import SUITE_VERSION

        pinned: dict[str, Any] = {}
        for result in round_.results:
            if isinstance(result.info.get("settings"), dict):
                pinned = dict(result.info["settings"])
                break
        return {
            "suite_version": SUITE_VERSION,
            "bench": list(round_.bench) or None,  # what this round selected (a retry: its suspects)
            "device": self.device,
            "timer": pinned,
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
        )

    def measure(
        self, sides: Sequence[Side], purpose: str, rounds: int, *, bench: Sequence[str] | None = None
    ) -> list[list[RunRecord]]:
        """``rounds`` rounds of each side, interleaved A B B A … (fresh processes every time).

        Returns one list of run records per side, in round order.  Nothing is stored here.
        """
        selection = tuple(bench) if bench is not None else self.bench
        records: list[list[RunRecord]] = [[] for _ in sides]
        order = list(range(len(sides)))
        for index in range(rounds):
            for s in order if index % 2 == 0 else order[::-1]:
                side = sides[s]
                label = f"{side.label} round {index + 1}/{rounds}: "
                round_ = self.runner.run(side.target, bench=selection, label=label)
                say_round(side, index, rounds, round_)
                records[s].append(self.run_record(round_, purpose, index, round_.results))
        return records

    def store_runs(self, side: Side, runs: Sequence[RunRecord]) -> None:
        """All rounds of one side in one transaction (a killed measurement leaves nothing)."""
        self.store.record_runs(self.machine_record, side.commit, runs)

    # --- reusing measurements ------------------------------------------------------------------

    def stored_rounds(self, sha: str, purposes: Sequence[str] | None = None) -> list[list[StoredResult]]:
        """Earlier rounds of ``sha`` on this machine key and profile that cover the current selection.

        A run is reusable when it was made by the current suite version and with no benchmark
        selection or the same one; its results are narrowed to the current selection.  Returns
        one list of results per reusable run, oldest first ([] when there is none).
        """
        from perfguard.profiles import SUITE_VERSION
        from perfguard.store import MEASUREMENT_PURPOSES

        wanted = list(self.bench) or None
        kinds = tuple(purposes or MEASUREMENT_PURPOSES)
        runs = [
            r
            for r in self.store.runs_for(self.machine.key, sha, self.profile.name, purposes=kinds)
            if r.settings.get("suite_version") == SUITE_VERSION and r.settings.get("bench") in (None, wanted)
        ]
        if not runs:
            return []
        by_run: dict[int, list[StoredResult]] = {r.id: [] for r in runs}
        for results in self.store.results_for(
            self.machine.key, sha, self.profile.name, purposes=kinds
        ).values():
            for result in results:
                if result.run_id in by_run and selected(result, self.bench):
                    by_run[result.run_id].append(result)
        return [by_run[r.id] for r in runs if by_run[r.id]]


def selected(result: ResultRecord, bench: Sequence[str]) -> bool:
    """Whether a result belongs to a ``--bench`` selection (asv's ``name(param reprs)`` match).

    A derived result (tokens/s, TFLOP/s) belongs to it when the forward time it comes from does.
    """
    if not bench:
        return True
    name = str(result.info.get("derived_from") or result.benchmark)
    order = list(result.info.get("param_names") or [])
    if result.info.get("derived_from") and not order:
        order = ["impl", "seq_len", "dtype"]
    names = [n for n in order if n in result.params] + [n for n in result.params if n not in order]
    label = f"{name}({', '.join(repr(result.params[n]) for n in names)})" if names else name
    return any(re.search(regex, label) for regex in bench)


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
# progress and messages (stderr)
# --------------------------------------------------------------------------------------------


def say(message: str) -> None:
    click.echo(message, err=True)


def say_round(side: Side, index: int, rounds: int, round_: Round) -> None:
    counts = round_.counts
    seconds = (round_.finished_at - round_.started_at).total_seconds()
    parts = [f"{counts['ok']} ok"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed")
    if counts["skipped"]:
        parts.append(f"{counts['skipped']} skipped")
    say(f"{side.label}: round {index + 1}/{rounds} done in {seconds:.0f} s ({', '.join(parts)})")


@contextmanager
def progress_display() -> Iterator[Any]:
    """A progress callback for asv rounds: a transient bar on a terminal, plain lines in CI logs."""
    from rich.console import Console

    err = Console(stderr=True)
    if not (err.is_terminal and not err.is_dumb_terminal and sys.stderr.isatty()):
        last: dict[str, int] = {"done": -1}

        def plain(p: Progress) -> None:
            if p.done != last["done"] and p.latest:
                total = f"/{p.total}" if p.total else ""
                click.echo(f"  [{p.done}{total}] {p.latest}", err=True)
                last["done"] = p.done

        yield plain
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    bar = Bar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        refresh_per_second=4,
    )
    task = bar.add_task("benchmarking", total=None)

    def rich_update(p: Progress) -> None:
        bar.update(task, description=escape(p.latest[:100]), completed=p.done, total=p.total)

    with bar:
        yield rich_update


# --------------------------------------------------------------------------------------------
# opening a bench
# --------------------------------------------------------------------------------------------


@contextmanager
def open_bench(
    *,
    profile_name: str,
    bench_regex: str | None,
    db_url: str | None,
    threshold: float | None = None,
    device: str = "auto",
    timeout_s: float | None = None,
) -> Iterator[Bench]:
    """Everything a measurement needs, checked before any benchmark runs (bad input fails fast)."""
    from perfguard import profiles
    from perfguard.asvrun import AsvRunner
    from perfguard.config import find_pyproject, load_config
    from perfguard.gitrepo import repo_root
    from perfguard.machine import fingerprint
    from perfguard.store import Store

    root = repo_root()
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
    store = Store.open(db_url, cwd=root)
    work_dir = Path(tempfile.mkdtemp(prefix="perfguard-"))
    with interrupts_as_errors(), display_and_cleanup(work_dir, store) as on_progress:
        runner = AsvRunner(
            root, machine, profile, machine.kind, work_dir, on_progress=on_progress, timeout_s=timeout_s
        )
        bench_ctx = Bench(root, machine, profile, machine.kind, store, runner, config, bench, work_dir)
        with bench_ctx.stack:
            say(
                f"perfguard: {machine.label} (machine key {machine.key!r}), profile {profile.name} "
                f"({profile.description}), store {store.url}"
            )
            yield bench_ctx


@contextmanager
def interrupts_as_errors() -> Iterator[None]:
    """Ctrl-C or SIGTERM (a CI job cancelled, a runner shutting down) stop the measurement cleanly.

    SIGTERM is turned into KeyboardInterrupt so that ``finally`` blocks run (asv is killed, git
    worktrees and scratch directories removed); either becomes exit 2 with a message.  Nothing of
    the interrupted measurement was stored: rounds are written only when all of them are done.
    """
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except KeyboardInterrupt as exc:
        why = str(exc) or "Ctrl-C"
        raise PerfguardError(
            f"interrupted ({why}): nothing of this measurement was stored",
            hint="run the command again; the store holds only complete measurements",
        ) from None
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def display_and_cleanup(work_dir: Path, store: Store) -> Iterator[Any]:
    """Progress display, then the store closed and the scratch directory removed (also on errors)."""
    try:
        with progress_display() as on_progress:
            yield on_progress
    finally:
        store.close()
        shutil.rmtree(work_dir, ignore_errors=True)
