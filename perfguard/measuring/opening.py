"""Opening a bench: every input checked before anything is measured, and everything cleaned up after.

:func:`open_bench` resolves the repository, configuration, ``--bench`` regex, machine, profile and
ranks; opens the stores (an untrusted bench: the history store read-only, its own results store);
takes the device lock; and removes the scratch directory (its bytecode too) and worktrees when the
invocation ends, also when it is interrupted (:func:`interrupts_as_errors`).
"""

from __future__ import annotations

import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import UsageError
from perfguard.measuring.bench import Bench, Reporter, command_line

if TYPE_CHECKING:
    from perfguard.engine.machine import Fingerprint
    from perfguard.profiles import Profile
    from perfguard.store import Store


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
    from perfguard.engine.compile_cache import forget_bytecode, prune_bytecode
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
        prune_bytecode()  # of directories that are gone (killed invocations, removed clones)
        work_dir = scratch_dir()
        opened.callback(forget_bytecode, work_dir)  # after the directory: its bytecode is dead
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
                reporter, trusted, exclude, rounds_trusted=trusted,
            )  # fmt: skip
            with bench_ctx.session.stack:
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
