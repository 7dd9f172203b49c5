"""perfguard as a library: every command of the CLI is a function here.

DESIGN.md: "Everything a command does can be called from Python, so other CI systems and pytest can
use it."  Each function takes what its command's options give (same names, same defaults), checks
its input as the command does, does the work and returns what the command prints from; the command
(``perfguard/cli/``) only declares the options, calls the function and prints.  Nothing here
prints: messages of long operations go to ``reporter`` (:class:`perfguard.measuring.Reporter`;
default :class:`~perfguard.measuring.QuietReporter`, which keeps them in ``.messages``).  Bad input
and environment problems raise :class:`perfguard.errors.PerfguardError` (``exit_code`` 2, with a
hint), before anything is measured or written.  ``cwd``: the repository to work in (default: the
current directory's).

::

    import perfguard

    outcome = perfguard.check("main", bench=r"Work\\.track_forward_ops", cwd="path/to/repo")
    outcome.exit_code                       # 0, or 1 on a regression, broken or failed benchmark
    [(i.impl, i.benchmark, i.verdict) for i in outcome.result.items]

``perfguard.check``, ``perfguard.run``, ``perfguard.history`` and ``perfguard.changes`` are these
functions; ``verify``, ``report``, ``calibrate``, ``accept`` and ``bisect`` share their names with
perfguard's own modules, so they are called as ``perfguard.api.verify(...)`` and so on.

Heavy modules (torch, SQLAlchemy, asv) are imported inside the functions: importing this module is
instant, and so is ``perfguard --help``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.bisect import BisectResult
    from perfguard.calibrate import Calibration
    from perfguard.changepoints import Detection
    from perfguard.fidelity import FidelityReport
    from perfguard.gate import CheckOutcome
    from perfguard.measuring import Bench, Reporter
    from perfguard.report import SiteSummary
    from perfguard.store import RunRecord, SchemaState, StoredAcceptance, StoredChangePoint, StoredSeries
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
    from perfguard.errors import UsageError
    from perfguard.verify import merged_registry, preload, run_verify, scope

    if seq_len is not None and seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len}")
    registry = merged_registry()
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
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    wait: bool = True,
) -> CheckOutcome:
    """``perfguard check``: HEAD against the merge-base of ``baseline`` on this machine.

    The pipeline is :func:`perfguard.gate.run_check`; the check is stored, and its reports are
    written to ``markdown`` / ``html`` / ``json_path`` from the stored check.  ``outcome.exit_code``:
    0 no regression, 1 a regression, broken implementation or failed benchmark.  ``untrusted``: HEAD
    is code under review: the history store is read-only and this check writes to ``results_db``.
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
        )
        view = build_report(outcome.stored, store=b.store)
        outcome.headline = view.headline
        outcome.terminal = terminal_summary(view, outcome.result.counts())
        outcome.written = write_reports(b, outcome.stored, markdown=markdown, html=html, json_path=json_path)
        outcome.store = b.store.url
        return outcome


# --------------------------------------------------------------------------------------------
# report and history: reading the store
# --------------------------------------------------------------------------------------------


@dataclass
class Rendered:
    """What ``report`` rendered: the site's summary, and one stored check's reports."""

    site: SiteSummary | None = None
    markdown: str | None = None
    html: str | None = None
    json: dict[str, Any] | None = None


def report(
    *,
    out_dir: Path | None = None,
    check_id: int | None = None,
    markdown: bool = False,
    html: bool = False,
    json: bool = False,
    db: str | None = None,
) -> Rendered:
    """``perfguard report``: the static history site into ``out_dir``, and/or the reports of stored check
    ``check_id`` (the formats asked for).  Only reads the store: nothing is created or migrated."""
    from perfguard.errors import UsageError, os_error

    formats = {"html": html, "markdown": markdown, "json": json}
    if check_id is None and any(formats.values()):
        raise UsageError("--html, --markdown and --json render a stored check", hint="add --check ID")
    if out_dir is None and check_id is None:
        raise UsageError(
            "nothing to render",
            hint="pass --out DIR for the history site, or --check ID with --html/--markdown/--json PATH",
        )
    if check_id is not None and not any(formats.values()):
        raise UsageError(
            f"--check {check_id} needs somewhere to write",
            hint="add --html PATH, --markdown PATH or --json PATH",
        )
    from perfguard.report import (
        build_site,
        check_to_json,
        load_check,
        open_store,
        render_html,
        render_markdown,
    )

    rendered = Rendered()
    with open_store(db) as store:
        if check_id is not None:
            stored = load_check(store, check_id)
            rendered.markdown = render_markdown(stored, store=store) if markdown else None
            rendered.html = render_html(stored, store=store) if html else None
            rendered.json = check_to_json(stored, store=store) if json else None
        if out_dir is not None:
            from perfguard.output_paths import output_path

            site_dir = output_path(out_dir, directory=True)
            try:
                rendered.site = build_site(store, site_dir)
            except OSError as exc:  # a full disk halfway through the pages
                raise os_error(exc, f"writing the site to {site_dir} (left incomplete)") from None
    return rendered


@dataclass
class History:
    """What ``history`` found: the store it read and the matching series; ``message`` says why
    there is nothing to show (no store yet, or no series matching the filters)."""

    store: str
    series: list[StoredSeries] = field(default_factory=list)
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``perfguard history --json``."""
        return {"store": self.store, "series": [s.to_json() for s in self.series]}


def history(
    *,
    impl: str | None = None,
    benchmark: str | None = None,
    machine: str | None = None,
    profile: str | None = None,
    branch: str | None = None,
    include_dirty: bool = False,
    limit: int = 20,
    db: str | None = None,
) -> History:
    """``perfguard history``: the stored series (newest ``limit`` commits each), filtered; read-only.

    ``impl`` matches exactly, ``benchmark`` and ``machine`` by substring.  A ``db`` that names a
    SQLite file that does not exist is a :class:`StoreError`; the default store not existing yet is
    an empty history with a message.
    """
    from perfguard.console import visible
    from perfguard.errors import StoreError
    from perfguard.store import Store, resolve

    store_url = resolve(db)
    path = store_url.sqlite_path
    if path is not None and not path.exists():
        if not store_url.is_default:
            raise StoreError(
                f"there is no history store at {path}",
                hint="check --db (or PERFGUARD_DB); perfguard run creates the store when it records results",
            )
        where = store_url.masked
        return History(where, message=f"{where}: no history store here yet: perfguard run records results")
    with Store.open(db, read_only=True) as store:
        found = store.series(
            machine=machine,
            benchmark=benchmark,
            impl=impl,
            profile=profile,
            branch=branch,
            include_dirty=include_dirty,
            last=limit,
            match="contains",
        )
        if found:
            return History(store.url, found)
        filters = {"impl": impl, "benchmark": benchmark, "machine": machine}
        given = ", ".join(f"{name}={visible(repr(v))}" for name, v in filters.items() if v is not None)
        if not given:
            return History(
                store.url, message=f"{store.url}: no results stored yet (perfguard run records some)"
            )
        lines = [f"{store.url}: no stored series match {given}"]
        for name, value in filters.items():
            if value is not None:
                known = store.distinct(name)
                shown = ", ".join(visible(k) for k in known[:12]) + (", ..." if len(known) > 12 else "")
                lines.append(f"  stored {name} values: {shown or '(none)'}")
        return History(store.url, message="\n".join(lines))


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


# --------------------------------------------------------------------------------------------
# acceptances and change points
# --------------------------------------------------------------------------------------------


@dataclass
class Accepted:
    """An acceptance ``accept`` recorded, and the flagged steps of its commit it accepts."""

    acceptance: StoredAcceptance
    text: str  # how checks will show it
    store: str
    flagged_steps: int


def accept(
    spec: Sequence[str],
    *,
    ceiling: float | None = None,
    reason: str | None = None,
    commit: str = "HEAD",
    by: str | None = None,
    db: str | None = None,
    cwd: Path | None = None,
) -> Accepted:
    """``perfguard accept``: record an intended regression of ``commit`` (trusted: a maintainer's own).

    ``spec``, ``ceiling``, ``reason``: :func:`perfguard.accept.command_spec` (refused where
    ``PERFGUARD_UNTRUSTED`` is set).  ``by``: who accepts (default: git's ``user.name <user.email>``).
    """
    from perfguard.accept import Acceptance, command_spec
    from perfguard.errors import UsageError
    from perfguard.gitrepo import repo_root, rev_parse, user
    from perfguard.measuring import commit_record
    from perfguard.store import Store

    root = repo_root(cwd)
    parsed = command_spec(spec, ceiling=ceiling, reason=reason)
    sha = rev_parse(root, commit)
    who = by or user(root)
    if not who:
        raise UsageError(
            "who accepts? git has no user.name here", hint="pass --by NAME, or set git config user.name"
        )
    with Store.open(db, cwd=root) as store:
        [stored] = store.record_acceptances(
            commit_record(root, sha), [parsed.record(source="command", author=who, trusted=True)]
        )
        steps = [p for p in store.change_points(sha=sha) if p.acceptance and p.acceptance.id == stored.id]
        where = store.url
    return Accepted(stored, Acceptance.of(stored, stored.sha, stored.id).describe(), where, len(steps))


def acceptances(
    commit: str | None = None, *, db: str | None = None, cwd: Path | None = None
) -> list[StoredAcceptance]:
    """``perfguard accept --list``: the stored acceptances (of ``commit`` when given), oldest first."""
    from perfguard.gitrepo import repo_root, rev_parse
    from perfguard.store import Store

    root = repo_root(cwd)
    sha = rev_parse(root, commit) if commit is not None else None
    with Store.open(db, cwd=root) as store:
        return store.acceptances([sha] if sha else None)


def changes(
    commit: str = "HEAD",
    *,
    machine: str | None = None,
    profile: str = "auto",
    threshold: float | None = None,
    window: int = 5,
    approved_by: str | None = None,
    db: str | None = None,
    cwd: Path | None = None,
) -> Detection:
    """``perfguard changes``: the steps of a recorded commit of the baseline branch against the history
    of its machine key (``machine``: default this machine's), stored; ``detection.exit_code`` is 1
    when one is flagged (no trusted acceptance covers it)."""
    from perfguard.changepoints import detect, history_of
    from perfguard.config import find_pyproject, load_config
    from perfguard.gitrepo import repo_root, rev_parse
    from perfguard.store import Store

    root = repo_root(cwd)
    config = load_config(find_pyproject(root), threshold=threshold)
    sha = rev_parse(root, commit)
    key, profile_name = history_of(machine, profile)
    with Store.open(db, cwd=root) as store:
        return detect(
            store, root, machine_key=key, sha=sha, profile=profile_name, config=config, window=window,
            approved_by=approved_by,
        )  # fmt: skip


def change_points(
    *, machine: str | None = None, flagged: bool = False, db: str | None = None, cwd: Path | None = None
) -> list[StoredChangePoint]:
    """``perfguard changes --list``: the stored steps (``flagged``: only those nobody accepted)."""
    from perfguard.gitrepo import repo_root
    from perfguard.store import Store

    with Store.open(db, cwd=repo_root(cwd)) as store:
        return store.change_points(machine_key=machine, flagged_only=flagged)


# --------------------------------------------------------------------------------------------
# the store's schema
# --------------------------------------------------------------------------------------------


@dataclass
class Schema:
    """Where a store's schema stands (``state``: None when there is no store there yet)."""

    store: str
    state: SchemaState | None
    migrated_from: str | None = None


def db_upgrade(db: str | None = None) -> Schema:
    """``perfguard db upgrade``: create the schema or migrate it to this perfguard's newest revision."""
    from perfguard.store import Store

    with Store.open(db) as store:
        return Schema(store.url, store.schema_state, store.migrated_from)


def db_current(db: str | None = None) -> Schema:
    """``perfguard db current``: the schema revision of the store, changing nothing."""
    from perfguard.store import Store, resolve

    store_url = resolve(db)
    path = store_url.sqlite_path
    if path is not None and not path.exists():
        return Schema(store_url.masked, None)
    with Store.open(db, migrate=False, read_only=True) as store:
        return Schema(store.url, store.schema_state)


def db_snapshot(target: Path, db: str | None = None) -> str:
    """``perfguard db snapshot``: a consistent read-only copy of a SQLite store; the store's URL."""
    from perfguard.store import Store

    with Store.open(db, read_only=True) as store:
        store.snapshot(target)
        return store.url


def db_revision(message: str) -> Path:
    """``perfguard db revision``: a new migration from the models (for developers); its path."""
    import tempfile

    from perfguard.store import Store
    from perfguard.store.schema import write_revision

    with tempfile.TemporaryDirectory() as scratch, Store.open(f"sqlite:///{Path(scratch) / 'x.db'}") as store:
        return write_revision(store.engine, message)
