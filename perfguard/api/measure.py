"""The commands that run code on this machine, as functions: ``verify``, ``run``, ``fidelity``,
``check``, ``calibrate`` and ``bisect`` (:mod:`perfguard.api`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.bisect import BisectResult
    from perfguard.calibrate import Calibration
    from perfguard.fidelity import FidelityReport
    from perfguard.gate import CheckOutcome
    from perfguard.measuring import Bench, Reporter
    from perfguard.store import RunRecord
    from perfguard.verify import VerifyReport
    from perfguard.verify.results import RowResult
    from perfguard.verify.runner import PlannedRow


#: The plants of ``calibrate`` without ``planted=`` (``perfguard calibrate --planted``).
DEFAULT_PLANTED = "0.1,0.2,0.25,0.3,0.5"


@contextmanager
def _bench(reporter: Reporter | None, **options: Any) -> Iterator[Bench]:
    from perfguard.measuring import QuietReporter, open_bench

    with open_bench(reporter=reporter if reporter is not None else QuietReporter(), **options) as bench:
        yield bench


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def verify(
    *,
    impls: Sequence[str] = (),
    device: str = "auto",
    dtypes: Sequence[str] = (),
    seq_len: int | None = None,
    bench: Sequence[str] = (),
    profile: str | None = None,
    progress: Callable[[PlannedRow, int, int], None] | None = None,
    row_done: Callable[[RowResult, int, int], None] | None = None,
    started: float | None = None,
) -> VerifyReport:
    """``perfguard verify``: every selected implementation against the float64 reference.

    ``bench`` / ``profile`` narrow the selection to what those benchmarks measure (what ``check``
    verifies).  ``report.passed`` is the verdict (the command exits 1 when it is False).
    ``started``: a ``time.perf_counter()`` reading the setup time counts from (the command's start;
    default: now), reported as ``report.setup_seconds["imports"]``.
    """
    import time

    started = time.perf_counter() if started is None else started
    from perfguard.engine import guarded
    from perfguard.errors import UsageError

    # the declared package, imported from this tree (exit 2 else) before anything else can import it
    registry = guarded.current().implementations
    from perfguard.verify import preload, run_verify, scope

    if seq_len is not None and seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len}")
    chosen, chosen_dtypes = scope(
        registry,
        impls=tuple(impls),
        dtypes=tuple(dtypes),
        device=device,
        bench_regexes=tuple(bench),
        profile_name=profile,
    )
    preload(registry, chosen)
    imports = time.perf_counter() - started
    report = run_verify(
        registry,
        impls=chosen,
        device=device,
        dtypes=chosen_dtypes,
        seq_len=seq_len,
        progress=progress,
        row_done=row_done,
    )
    report.setup_seconds = {"imports": imports, **report.setup_seconds}
    return report


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """What ``run`` measured and stored: every round of one commit."""

    label: str  # "HEAD 1a2b3c4d5e" / "commit 1a2b3c4d5e"
    sha: str  # as stored (HEAD plus changes: '<sha>+dirty.<hash>')
    machine_key: str
    store: str  # the store's URL, password masked
    runs: list[RunRecord]

    @property
    def failed(self) -> int:
        """Benchmark x params that failed in some round (stored with their errors; exit 1)."""
        return len({r.key for run in self.runs for r in run.results if r.status == "failed"})

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def run(
    commit: str = "HEAD",
    *,
    profile: str = "auto",
    bench: str | None = None,
    rounds: int | None = None,
    db: str | None = None,
    untrusted: bool = False,
    results_db: str | None = None,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    wait: bool = True,
) -> RunOutcome:
    """``perfguard run``: benchmark a commit on this machine and store every round (each when it ends).

    HEAD is measured in the work tree itself (with uncommitted changes: stored as
    ``<sha>+dirty.<hash>``, never a baseline); any other commit in a temporary git worktree.
    ``untrusted`` (the command: ``--untrusted`` or ``PERFGUARD_UNTRUSTED=1``), as for ``check``: the
    rounds are untrusted runs, stored in ``results_db``; the history store is not written.
    ``wait``: wait while another measurement holds this device (False: exit 2 at once;
    :mod:`perfguard.device_lock`), as for ``check``, ``calibrate`` and ``bisect``.
    """
    from perfguard.gitrepo import rev_parse, work_tree
    from perfguard.tree_state import describe

    with _bench(
        reporter, profile_name=profile, bench_regex=bench, db_url=db, trusted=not untrusted,
        results_db_url=results_db, cwd=cwd, wait=wait,
    ) as b:  # fmt: skip
        tree = work_tree(b.root, ignore=b.store_files)
        sha = rev_parse(b.root, commit)
        if sha == tree.head:
            side = b.head_side(tree)
            if tree.dirty:
                b.say(
                    f"the work tree has uncommitted changes ({describe(tree.changed)}): measuring HEAD "
                    f"plus changes, stored as {side.commit.sha}"
                )
        else:
            side = b.commit_side(sha, "commit")
        n = rounds or b.config.rounds
        [runs] = b.measure([side], "run", n)
        kind = "" if b.rounds_trusted else " as untrusted runs (never a baseline)"
        b.say(f"stored {n} round(s) of {side.label}{kind} for machine key {b.machine.key!r} in {b.store.url}")
        return RunOutcome(side.label, side.commit.sha, b.machine.key, b.store.url, runs)


def fidelity(
    *,
    profile: str = "auto",
    bench: str | None = None,
    sample: int = 0,
    alone: str | None = None,
    time_tolerance: float | None = None,
    on_case: Callable[[FidelityReport], None] | None = None,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
) -> FidelityReport:
    """``perfguard fidelity``: the selection in one full round, then each sampled case alone.

    Every deterministic number and path fingerprint must be equal, every timing within the
    tolerance (:mod:`perfguard.fidelity`).  The work tree is measured as it is; nothing is stored.
    ``report.exit_code``: 0 when everything agrees, 1 when something does not.
    """
    from perfguard.fidelity import fidelity_test

    with _bench(
        reporter, profile_name=profile, bench_regex=bench, db_url=None, cwd=cwd, for_history=False
    ) as b:
        return fidelity_test(b, sample=sample, alone=alone, time_tolerance=time_tolerance, on_case=on_case)


# --------------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------------


def check(
    baseline: str,
    *,
    threshold: float | None = None,
    profile: str = "auto",
    bench: str | None = None,
    rounds: int | None = None,
    db: str | None = None,
    markdown: Path | None = None,
    json_path: Path | None = None,
    html: Path | None = None,
    fresh: bool = False,
    verify_report: Path | None = None,
    no_verify: bool = False,
    untrusted: bool = False,
    results_db: str | None = None,
    accept_approved_by: str | None = None,
    measure_all: bool = False,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    wait: bool = True,
) -> CheckOutcome:
    """``perfguard check``: HEAD against the merge-base of ``baseline`` on this machine.

    The pipeline is :func:`perfguard.gate.run_check`; the check is stored, and its reports are
    written to ``markdown`` / ``html`` / ``json_path`` from the stored check.  ``outcome.exit_code``:
    0 no regression, 1 a regression, broken implementation or failed benchmark.  ``untrusted``: HEAD
    is code under review: the history store is read-only and this check writes to ``results_db``.
    ``measure_all``: every implementation, not only those the change can reach (:mod:`perfguard.reach`).
    """
    from perfguard.files import check_output_path
    from perfguard.gate import run_check, write_reports
    from perfguard.report import build_report
    from perfguard.report.terminal import terminal_summary

    for path, option in ((markdown, "--markdown"), (html, "--html"), (json_path, "--json")):
        if path is not None:  # a report that cannot be written fails now, not after the measuring
            check_output_path(path, f"{option} file")
    with _bench(
        reporter,
        profile_name=profile,
        bench_regex=bench,
        db_url=db,
        threshold=threshold,
        trusted=not untrusted,
        results_db_url=results_db,
        cwd=cwd,
        for_history=False,
        wait=wait,
    ) as b:
        outcome = run_check(
            b,
            baseline,
            rounds=rounds,
            fresh=fresh,
            verify=not no_verify,
            verify_report=verify_report,
            accept_approved_by=accept_approved_by,
            measure_all=measure_all,
        )
        view = build_report(outcome.stored, store=b.store)
        outcome.headline = view.headline
        outcome.terminal = terminal_summary(view)
        outcome.written = write_reports(b, outcome.stored, markdown=markdown, html=html, json_path=json_path)
        outcome.store = b.store.url
        return outcome


# --------------------------------------------------------------------------------------------
# calibrate and bisect
# --------------------------------------------------------------------------------------------


def calibrate(
    *,
    profile: str = "auto",
    bench: str | None = None,
    rounds: int | None = None,
    aa: int = 2,
    planted: str | Sequence[float] = DEFAULT_PLANTED,
    repeats: int = 1,
    asv: bool = True,
    db: str | None = None,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    started: float | None = None,
    wait: bool = True,
) -> Calibration:
    """``perfguard calibrate``: this machine's noise, A/A false alarms and planted-slowdown detection on
    the commit HEAD (a clean work tree), next to asv's rule (``asv``).  ``db``: keep the rounds there
    (default: a temporary store; ``PERFGUARD_DB`` is not read).  See :mod:`perfguard.calibrate`."""
    from perfguard.calibrate import calibrate as run_calibration

    return run_calibration(
        profile=profile,
        bench_regex=bench,
        rounds=rounds,
        aa=aa,
        planted=planted,
        repeats=repeats,
        use_asv=asv,
        db_url=db,
        reporter=reporter,
        cwd=cwd,
        started=started,
        wait=wait,
    )


def bisect(
    good: str,
    bad: str,
    *,
    bench: str,
    direction: str = "worse",
    threshold: float | None = None,
    profile: str = "auto",
    rounds: int | None = None,
    db: str | None = None,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    wait: bool = True,
) -> BisectResult:
    """``perfguard bisect``: the first commit of ``good..bad`` (first parent) whose series selected by
    ``bench`` moved beyond the threshold (:func:`perfguard.bisect.bisect`)."""
    from perfguard.bisect import bisect as run_bisect

    with _bench(
        reporter,
        profile_name=profile,
        bench_regex=bench,
        db_url=db,
        threshold=threshold,
        cwd=cwd,
        for_history=False,
        wait=wait,
    ) as b:
        return run_bisect(b, good, bad, rounds=rounds, direction=direction)
