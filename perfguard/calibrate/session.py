"""One calibration of this machine, end to end: the protocol over the measuring pipeline of ``run`` and
``check`` (:func:`perfguard.measuring.open_bench`, :meth:`Bench.measure`).

HEAD is measured in the work tree, each planted commit from a temporary clone; every round is a
fresh process.  Every round is stored with purpose ``calibrate`` (never a baseline, never history)
in a temporary SQLite store that is deleted afterwards, or in ``db_url`` when given, so the rounds
can be looked at later.  ``perfguard calibrate --db`` deliberately does not read ``PERFGUARD_DB``: a
runner whose environment points at its history store should not collect calibration runs there
without being asked to.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.calibrate.planting import (
    PlantedCommit,
    meta_commits,
    parse_fractions,
    percent,
    planted_clone,
    planted_key,
)
from perfguard.calibrate.protocol import HEAD, PURPOSE, Calibrator, Findings, PhaseClock, Plan
from perfguard.calibrate.report import Calibration
from perfguard.errors import UsageError

if TYPE_CHECKING:
    from perfguard.measuring import Bench, Reporter, Side
    from perfguard.store import RunRecord


def calibrate(
    *,
    profile: str = "auto",
    bench_regex: str | None = None,
    rounds: int | None = None,
    aa: int = 2,
    planted: str | Sequence[float],
    repeats: int = 1,
    use_asv: bool = True,
    db_url: str | None = None,
    reporter: Reporter | None = None,
    cwd: Path | None = None,
    started: float | None = None,
    wait: bool = True,
) -> Calibration:
    """Calibrate this machine on the commit HEAD of the repository at ``cwd`` (docs/calibration.md).

    ``planted``: fractions of each module's own forward time (0.1 = +10%), as text (``"0.1,0.5"``,
    ``""`` for none) or numbers.  ``started``: a ``time.perf_counter()`` reading to count the wall
    time from (the command's start).  ``wait``: wait for a device another measurement holds (False:
    exit 2 at once, :mod:`perfguard.device_lock`).  Raises :class:`UsageError` (exit 2) for bad fractions, asv
    missing with ``use_asv``, or a dirty work tree, before anything is measured.
    """
    from perfguard.calibrate.asv_rule import check_asv
    from perfguard.gitrepo import repo_root, work_tree
    from perfguard.measuring import QuietReporter, command_line, open_bench
    from perfguard.store import resolve

    started = time.perf_counter() if started is None else started
    reporter = reporter if reporter is not None else QuietReporter()
    text = planted if isinstance(planted, str) else ",".join(repr(float(f)) for f in planted)
    try:
        fractions = parse_fractions(text)
    except ValueError as exc:
        raise UsageError(
            f"--planted {text!r}: {exc}",
            hint="give fractions of the module's own time, comma-separated: --planted 0.1,0.3,0.5",
        ) from None
    if aa < 0:
        raise UsageError(f"--aa {aa}: a number of A/A repetitions cannot be negative", hint="--aa 2")
    if aa == 0 and not fractions:
        raise UsageError(
            "--aa 0 with no --planted fractions: there is nothing to measure",
            hint="give A/A repetitions (--aa 2) or planted slowdowns (--planted 0.1,0.3)",
        )
    if use_asv and (why := check_asv()):
        raise UsageError(
            f"--asv needs asv's statistics, which cannot be imported here ({why})",
            hint="pip install asv==0.6.6 asv-runner==0.3.2, or pass --no-asv",
        )
    root = repo_root(cwd)
    # A SQLite --db inside the work tree is not a change to the code (as for run and check); without
    # --db the rounds go to a temporary store outside it.
    store_files = resolve(db_url, cwd=root).files if db_url else ()
    tree = work_tree(root, ignore=store_files)
    if tree.dirty:
        shown = ", ".join(tree.changed[:5]) + (", ..." if len(tree.changed) > 5 else "")
        raise UsageError(
            f"the work tree has uncommitted changes ({len(tree.changed)} files: {shown}); "
            "perfguard calibrate measures the commit HEAD and plants slowdowns on top of it",
            hint="commit or stash them (git stash -u), then run perfguard calibrate again",
        )
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-") as scratch:
        url = db_url or f"sqlite:///{Path(scratch) / 'calibration.db'}"
        with open_bench(
            profile_name=profile,
            bench_regex=bench_regex,
            db_url=url,
            reporter=reporter,
            cwd=root,
            for_history=False,
            wait=wait,
        ) as bench:
            clock = PhaseClock(started)
            head = bench.head_side(tree)
            sides: dict[str, Side] = {HEAD: head}
            commits: dict[float, PlantedCommit] = {}
            if fractions:
                with clock.phase("setup: planted commits (clones of HEAD)"):
                    for fraction in fractions:
                        commit = bench.session.stack.enter_context(
                            planted_clone(root, tree.head, fraction, bench.work_dir / "planted")
                        )
                        commits[fraction] = commit
                        sides[planted_key(fraction)] = planted_side(commit)
                        bench.say(f"planted {percent(fraction)}: commit {commit.sha[:10]} in {commit.path}")
            plan = Plan(
                rounds=rounds or bench.config.rounds,
                aa=aa,
                planted=fractions,
                repeats=repeats,
                asv=use_asv,
                bench=bench.bench,
            )
            findings: Findings = Calibrator(
                BenchMeasurer(bench, sides), plan, bench.config, clock, bench.say
            ).run()
            # a work tree that changed while HEAD was measured stopped the measurement (Bench.measure)
            warnings = list(findings.warnings)
            return Calibration(
                meta=_meta(bench, head, command_line(), db_url, meta_commits(commits)),
                plan=plan,
                config=bench.config,
                findings=findings,
                clock=clock,
                wall_s=clock.elapsed(),
                warnings=warnings,
            )


class BenchMeasurer:
    """A :class:`perfguard.calibrate.protocol.Measurer` over a :class:`Bench`: measure, tag, store."""

    def __init__(self, bench: Bench, sides: dict[str, Side]) -> None:
        self.bench = bench
        self.sides = sides

    def __call__(
        self, sides: Sequence[str], rounds: int, *, bench: Sequence[str] | None, phase: str
    ) -> list[list[RunRecord]]:
        keys = list(sides)
        chosen = []
        for i, key in enumerate(keys):
            side = self.sides[key]
            if keys.count(key) > 1:  # HEAD as A and B
                side = replace(side, label=f"{side.label} (side {chr(ord('A') + keys[:i].count(key))})")
            chosen.append(side)
        tags = [{"calibrate": {"phase": phase, "side": key}} for key in sides]
        return self.bench.measure(chosen, PURPOSE, rounds, bench=bench, settings=tags)


def planted_side(commit: PlantedCommit) -> Side:
    """The side of a planted commit: stored under its own sha, measured from its clone.

    The rounds are labelled with the parent (HEAD), a commit the repository has; the planted commit
    exists only in the clone.
    """
    from perfguard.engine.rounds import Target
    from perfguard.measuring import Side
    from perfguard.store import CommitRecord

    record = CommitRecord(
        sha=commit.sha,
        base_sha=commit.sha,
        parents=(commit.parent,),
        subject=commit.subject,
        author="perfguard calibrate <calibrate@perfguard.invalid>",
        committed_at=datetime.now(timezone.utc),
    )
    return Side(
        record, Target(commit.parent, commit.path), f"planted {percent(commit.fraction)} {commit.sha[:10]}"
    )


def _meta(
    bench: Bench, head: Side, command: str, db_url: str | None, commits: list[dict[str, Any]]
) -> dict[str, Any]:
    from perfguard import __version__

    machine = bench.machine
    return {
        "perfguard_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": {
            "key": machine.key,
            "label": machine.label,
            "kind": machine.kind,
            "hardware": dict(machine.hardware),
            "software": dict(machine.software),
        },
        "device": bench.device,
        "profile": bench.profile.name,
        "commit": {
            "sha": head.commit.sha,
            "subject": head.commit.subject,
            "branch": head.commit.branch,
        },
        "store": bench.store.url if db_url else "temporary (deleted afterwards)",
        "planted_commits": commits,
    }
