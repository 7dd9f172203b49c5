"""Rounds: one fresh process measures every selected benchmark of one side; its output as records.

A *round* is one fresh process per side (docs/design.md, "Rounds"): process-to-process variance is
the noise a verdict must see, and one process may measure every selected benchmark of its side.
:class:`RoundRunner` starts :mod:`perfguard.engine.round_worker` on the asv suite of the checkout perfguard
runs in (the suite, the timer and perfguard itself always come from there: both sides are measured
by the same rules, as with ``asv continuous``), with the guarded package imported from the commit
being measured: the worker runs in a directory of the invocation's scratch directory holding two
links (:func:`import_shim`), ``<package> -> <source>/<package>`` (the package
``<source>/pyproject.toml`` declares; the work tree itself, or a git worktree of another commit) and
``asv_benchmarks -> <suite>``, and that directory is the first entry of its ``sys.path``;
``$PERFGUARD_SOURCE`` tells the suite which tree's declaration to read.  What one round writes (its
spec, output, logs) goes to a ``round-*`` directory of its own.

Why not ``asv run``: asv starts a discovery process and a fork server (each imports torch) and one
process per benchmark x parameters; on a GPU most of a round then went to first calls and warm-ups
repeated in every process (docs/perf/check.md: 256 s for a production round, 133 s of it first
calls).  The suite stays a plain asv suite that ``python -m asv run`` runs unchanged; the worker
runs its benchmarks with ``asv_runner``'s own discovery and benchmark objects.

Robustness: the worker writes one JSON line per event.  If it dies (a segfault, the OOM killer, a
CUDA error that ends the process), the benchmark it was measuring is ``failed`` with how the process
ended, the case's other benchmarks fail with it (they would kill the next process too), and a fresh
process measures the rest.  Every line is validated before it becomes a :class:`ResultRecord`
(:mod:`perfguard.engine.round_output`): a bad value fails that benchmark with a clear error, never
perfguard.  What a benchmark's numbers are (metric, unit, direction) and how ``--bench`` selects
them is :mod:`perfguard.engine.suite`.  Compilation caches (Inductor, Triton, CUDA's JIT, bytecode)
persist on the machine between rounds, one directory per *trust domain*: code under review
compiles into ``untrusted`` and can never write a kernel that a trusted (baseline) round loads
(:mod:`perfguard.engine.compile_cache`).

A round of a distributed profile is one *group* of ``ranks`` processes under ``torchrun``
(:mod:`perfguard.engine.rank_group`): the group is the round's process.  When a rank dies, torchrun ends the
others and exits non-zero; the round goes on exactly as after a worker that died (the combination
in flight fails, with the rank and how it ended, and a fresh group measures the rest).  Rank 0
writes the output; every rank's pid is written next to it, so that a group whose torchrun had to
be killed (timeout, interrupt) leaves no rank behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfguard.declaration import SOURCE_ENV, read_declaration
from perfguard.engine import round_output
from perfguard.engine.compile_cache import cache_dir, compile_cache_env
from perfguard.engine.round_protocol import DoneEvent, Event, PlanEvent, ResultEvent, StartEvent, WorkerSpec
from perfguard.engine.round_worker import case_of
from perfguard.engine.suite import load_benchmark_dir
from perfguard.errors import BenchmarkError
from perfguard.profiles import DEVICE_ENV, DISTRIBUTED_SUITE, PROFILE_ENV, Profile
from perfguard.store.records import ResultRecord


@dataclass(frozen=True)
class Target:
    """What one round measures: the commit it is labelled with, and the tree whose package it measures."""

    sha: str  # a commit of the repository (for a dirty tree: HEAD)
    source: Path  # the tree whose declared package ([tool.perfguard] package) is measured


@dataclass
class Round:
    """The outcome of one round (one or, after crashes, a few fresh processes)."""

    results: list[ResultRecord]
    started_at: datetime
    finished_at: datetime
    command: list[str]
    log: str
    exit_code: int
    bench: tuple[str, ...] = ()  # the round's --bench selection
    processes: int = 1  # worker processes (or groups of ranks) the round took: more after a crash
    ranks: int = 1  # ranks of each group (1: a single-process round)
    seconds: dict[str, Any] = field(default_factory=dict)  # where the round's time went

    @property
    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "failed": 0, "skipped": 0}
        for r in self.results:
            out[r.status] += 1
        return out


@dataclass
class Progress:
    """Progress of one round: combinations finished out of those selected, and the latest one."""

    done: int
    total: int | None
    latest: str = ""


def import_shim(source: Path, parent: Path, benchmark_dir: Path | None = None) -> Path:
    """A directory of ``parent`` holding ``<package> -> <source>/<package>`` (and the suite), first on
    sys.path.

    The package is the one ``source``'s own ``pyproject.toml`` declares (:mod:`perfguard.declaration`):
    each side of a check is measured by its own commit's declaration, so a pull request cannot change
    what its baseline measures.  A tree without a declaration is a ``ConfigError`` (exit 2).

    The same links give the same directory (its name is their digest), made once: every round of a
    side imports the suite from the same path, so its bytecode (kept by path,
    :mod:`perfguard.engine.compile_cache`) is compiled once, not once a round.  What a round writes
    goes to a directory of its own (:meth:`RoundRunner.run`).
    """
    declaration = read_declaration(source)
    links = {declaration.package: declaration.package_dir}
    if benchmark_dir is not None:
        links[benchmark_dir.name] = benchmark_dir
    digest = hashlib.sha256(json.dumps({k: str(v) for k, v in links.items()}, sort_keys=True).encode())
    shim = parent / f"import-shim-{digest.hexdigest()[:16]}"
    if not shim.is_dir():
        made = Path(tempfile.mkdtemp(prefix="import-shim-new-", dir=parent))
        for name, target in links.items():
            (made / name).symlink_to(target, target_is_directory=True)
        try:
            made.rename(shim)
        except OSError:  # another process made it first: its links are the same
            shutil.rmtree(made, ignore_errors=True)
    return shim


class RoundRunner:
    """Runs rounds of the suite for one profile and device (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        profile: Profile,
        device: str,
        work_dir: Path,
        *,
        on_progress: Callable[[Progress], None] | None = None,
        timeout_s: float | None = None,
        trust: str = "trusted",
        ranks: int = 1,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        if ranks != 1 and not profile.distributed:
            raise ValueError(f"profile {profile.name!r} runs one process, not {ranks} ranks")
        self.root = root
        self.profile = profile
        self.device = device
        self.work_dir = work_dir
        self.on_progress = on_progress
        self.timeout_s = timeout_s
        self.trust = trust
        self.ranks = ranks
        # the device lock (perfguard.device_lock): a worker outliving a killed perfguard still holds it
        self.pass_fds = pass_fds
        self.benchmark_dir = load_benchmark_dir(root)
        cache_dir(trust)  # validates the domain now, not in the middle of a measurement

    def run(
        self,
        target: Target,
        *,
        bench: Sequence[str] = (),
        label: str = "",
        profile: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> Round:
        """One round: every selected benchmark x params once, in one fresh process (more after a crash).

        ``profile``: regexes of benchmarks whose cases also get a profiler breakdown (the report's
        "what changed underneath" table; the re-measurement stage asks for it).  ``exclude``:
        ``Class.method`` names this round leaves out (:data:`perfguard.engine.suite.HISTORY_ONLY`).
        """
        shim = import_shim(target.source, self.work_dir, self.benchmark_dir)
        here = Path(tempfile.mkdtemp(prefix="round-", dir=self.work_dir))  # the spec, output, logs, pids
        output = here / "round.jsonl"
        env = {
            **os.environ,
            **compile_cache_env(self.trust),
            "PYTHONUNBUFFERED": "1",
            SOURCE_ENV: str(target.source),
            PROFILE_ENV: self.profile.name,
            DEVICE_ENV: self.device,
        }
        started = datetime.now(timezone.utc)
        clock = time.monotonic()
        logs: list[str] = []
        # faulthandler: a benchmark that crashes the process leaves its Python stack in the log
        worker = ["perfguard.engine.round_worker", str(here / "spec.json")]
        if self.profile.distributed:
            from perfguard.engine.rank_group import LAUNCH_ENV, launch_command

            env.update(LAUNCH_ENV)
            command = launch_command(worker, self.ranks)
        else:
            command = [sys.executable, "-X", "faulthandler", "-m", *worker]
        plan: PlanEvent | None = None
        finished: dict[str, ResultEvent] = {}
        discovery_s = 0.0
        processes = 0
        code = 0
        remaining: tuple[str, ...] | None = None
        while True:
            processes += 1
            WorkerSpec(
                benchmark_dir=shim / self.benchmark_dir.name,
                output=output,
                device=self.device,
                bench=tuple(bench),
                only=remaining,
                profile=tuple(profile),
                # a distributed profile runs its suite only; any other profile every suite but that one
                suite=self.profile.suite if self.profile.distributed else None,
                exclude_suites=() if self.profile.distributed else (DISTRIBUTED_SUITE,),
                exclude_benchmarks=tuple(exclude),
            ).write(here / "spec.json")
            offset = output.stat().st_size if output.exists() else 0
            code, log = self._execute(command, env, shim, output, offset, len(finished), label, plan)
            logs.append(log)
            new = round_output.read_events(output, offset)
            for event in new:
                if isinstance(event, PlanEvent):
                    discovery_s += event.discovery_s
                    if plan is None:  # the round's; a fresh process after a crash plans only the rest
                        plan = event
                elif isinstance(event, ResultEvent):
                    finished[event.label] = event
            if any(isinstance(e, DoneEvent) for e in new):
                break
            if plan is None:
                raise BenchmarkError(
                    f"the benchmark process could not start the round "
                    f"(exit {_describe_exit(code)}){_tail(log)}",
                    hint="the lines above come from the suite or the code under test; fix what they name",
                )
            in_flight = _in_flight(new, finished) or _failed_last(new)
            if in_flight is None:  # it died between benchmarks: nothing to blame, but it must not loop
                in_flight = next((x for x in plan.labels if x not in finished), None)
                if in_flight is None:
                    break
            how = _describe_exit(code) if not self.profile.distributed else _describe_group_exit(code, log)
            if self.profile.distributed and in_flight in finished:  # rank 0 failed it: how the group ended
                failed = finished[in_flight]
                finished[in_flight] = replace(failed, error=f"{failed.error or ''}\nthe group ended ({how})")
            # The case it died in would kill the next process too: its other benchmarks fail with it.
            for item in plan.items:
                if item.label not in finished and case_of(item.label) == case_of(in_flight):
                    why = (
                        "while measuring this" if item.label == in_flight else f"while measuring {in_flight}"
                    )
                    finished[item.label] = item.failed(
                        f"the benchmark process died {why} ({how}); the rest of the round ran in a "
                        f"fresh process{_tail(log, 12)}"
                    )
            remaining = tuple(x for x in plan.labels if x not in finished)
            if not remaining:
                break
        if plan is not None and not plan.items:
            from perfguard.errors import UsageError

            raise UsageError(
                f"the benchmark selection {list(bench)!r} matches no benchmark of the suite in profile "
                f"{self.profile.name!r}",
                hint="--bench is matched against asv's 'name(params)' labels, e.g. "
                "\"Forward\\.track_time\\('improved', 4096\" (benchmarks: Forward.track_time, "
                "ForwardBackward.track_time, PeakMemory.track_*, Work.track_*; the profile's lengths)",
            )
        results = self._records(plan.labels if plan is not None else [], finished)
        wall = time.monotonic() - clock
        cost = {
            "round_s": round(wall, 3),
            "processes": processes,
            "discovery_s": round(discovery_s, 3),
            "benchmarks_s": round(sum(e.seconds for e in finished.values() if e.seconds is not None), 3),
            "steps_s": round_output.step_totals(results),
        }
        return Round(
            results=results,
            started_at=started,
            finished_at=datetime.now(timezone.utc),
            command=command,
            log="".join(logs),
            exit_code=code,
            bench=tuple(bench),
            processes=processes,
            ranks=self.ranks if self.profile.distributed else 1,
            seconds=cost,
        )

    def _execute(
        self,
        command: list[str],
        env: Mapping[str, str],
        cwd: Path,
        output: Path,
        offset: int,
        done_before: int,
        label: str,
        plan: PlanEvent | None,
    ) -> tuple[int, str]:
        """Run one worker process, reporting progress from its output; (exit code, stderr+stdout)."""
        log_path = output.parent / f"worker-{offset}.log"
        group = self.profile.distributed
        try:
            with open(log_path, "w", encoding="utf-8", errors="replace") as log_file:
                proc = subprocess.Popen(
                    command,
                    cwd=cwd,
                    env=dict(env),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    pass_fds=self.pass_fds,
                )
        except OSError as exc:
            raise BenchmarkError(f"could not start the benchmark process: {exc}") from None
        try:
            return self._watch(proc, output, offset, done_before, label, plan, log_path)
        finally:
            if group:
                _end_group(proc, output.parent)

    def _watch(
        self,
        proc: subprocess.Popen[bytes],
        output: Path,
        offset: int,
        done_before: int,
        label: str,
        plan: PlanEvent | None,
        log_path: Path,
    ) -> tuple[int, str]:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        seen = offset
        done = done_before
        total = len(plan.items) if plan is not None else None
        try:
            while True:
                try:  # returns as soon as the worker exits: a sleep(0.2) here idled ~0.1 s per process
                    proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                seen, done, total = self._report(output, seen, done, total, label)
                if deadline is not None and time.monotonic() > deadline:
                    _stop(proc, group=self.profile.distributed)
                    raise BenchmarkError(
                        f"the round did not finish within {self.timeout_s:.0f} s",
                        hint="select fewer benchmarks (--bench) or raise the timeout",
                    )
        except BaseException:
            if proc.poll() is None:
                _stop(proc, group=self.profile.distributed)
            raise
        self._report(output, seen, done, total, label)
        return proc.returncode, log_path.read_text(encoding="utf-8", errors="replace")

    def _report(
        self, output: Path, seen: int, done: int, total: int | None, label: str
    ) -> tuple[int, int, int | None]:
        if self.on_progress is None or not output.exists():
            return seen, done, total
        events, size = round_output.read_events_at(output, seen)
        for event in events:
            if isinstance(event, PlanEvent) and total is None:
                total = len(event.items)
            elif isinstance(event, ResultEvent):
                done += 1
                self.on_progress(Progress(done, total, f"{label}{round_output.progress_text(event)}"))
        return size, done, total

    def _records(self, plan: Sequence[str], finished: Mapping[str, ResultEvent]) -> list[ResultRecord]:
        records: list[ResultRecord] = []
        for label in plan:
            event = finished.get(label)
            if event is None:
                continue
            records.extend(round_output.to_records(event))
        for record in records:  # asv's parameter order, for --bench regexes of re-measurements
            record.info.setdefault("param_names", list(record.params))
        return records


# --------------------------------------------------------------------------------------------
# when the worker died
# --------------------------------------------------------------------------------------------


def _in_flight(events: Iterable[Event], finished: Mapping[str, ResultEvent]) -> str | None:
    """The combination the worker started last and never finished: the one it died in."""
    started = [e.label for e in events if isinstance(e, StartEvent)]
    return next((label for label in reversed(started) if label not in finished), None)


def _failed_last(events: Iterable[Event]) -> str | None:
    """The combination whose failure ended the process (a worker exits after a failure on CUDA, and a
    rank after any failure): its case's other benchmarks fail with it, the rest run in a fresh one."""
    results = [e for e in events if isinstance(e, ResultEvent)]
    return results[-1].label if results and results[-1].status == "failed" else None


#: How long torchrun gets to end its ranks after SIGTERM before it is killed.
_GROUP_GRACE_S = 20.0


def _stop(proc: subprocess.Popen[bytes], *, group: bool) -> None:
    """End a worker (SIGKILL); a group's torchrun gets SIGTERM first, so that it ends its ranks."""
    if group:
        proc.terminate()
        try:
            proc.wait(timeout=_GROUP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait()


def _end_group(proc: subprocess.Popen[bytes], round_dir: Path) -> None:
    """After a group ended: no rank may outlive it (ranks run in their own sessions; torchrun ends
    them unless it was killed itself).  Each rank wrote its pid (``rank<r>.pid``); one still running
    that still runs this round's worker (its command line names this round's spec) is killed."""
    if proc.poll() is None:
        _stop(proc, group=True)
    spec = str(round_dir / "spec.json")
    for pid_file in round_dir.glob("rank*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            pid_file.unlink(missing_ok=True)
            continue
        if spec in cmdline:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)


def _describe_group_exit(code: int, log: str) -> str:
    """How a group ended: torchrun's exit, and each failed rank from its summary, the likely cause
    first: deaths by a signal, then ranks that exited with an error (a rank that raised after a peer
    died is a consequence), then SIGTERM (torchrun ends the survivors of a failed group with it).
    torchrun's own "Root Cause" is the first failure it *observed*, which under load is often not
    the first that happened."""
    how = _describe_exit(code)
    failures = re.findall(r"^\s*rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", log, flags=re.MULTILINE)
    seen: dict[int, int] = {}
    for rank, exit_code in failures:
        seen.setdefault(int(rank), int(exit_code))
    if not seen:
        return how

    def cause_first(item: tuple[int, int]) -> tuple[int, int]:
        rank, c = item
        return (2 if c == -signal.SIGTERM else 1 if c >= 0 else 0), rank

    ordered = sorted(seen.items(), key=cause_first)
    return f"{how}; " + ", ".join(f"rank {rank}: {_describe_exit(c)}" for rank, c in ordered)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _tail(log: str, lines: int = 25) -> str:
    kept = [line for line in log.strip().splitlines() if line.strip() and "USDT:" not in line][-lines:]
    return (":\n  " + "\n  ".join(kept)) if kept else ""
