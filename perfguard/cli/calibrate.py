"""``perfguard calibrate``: this machine's noise, false alarms and detection rates (issue 7).

The protocol and the report are :mod:`perfguard.calibrate`; this command wires them to the
measuring pipeline that ``perfguard run`` and ``check`` use (:func:`perfguard.cli.measure.open_bench`,
:meth:`Bench.measure`): HEAD in the work tree, each planted commit in a temporary clone, every round
an asv invocation with fresh processes.  User documentation: ``docs/calibration.md``.

Every round is stored with purpose ``calibrate`` (never a baseline, never history) in a temporary
SQLite store that is deleted afterwards, or in ``--db URL`` when given, so the rounds can be looked
at later.  ``--db`` deliberately does not read ``PERFGUARD_DB``: a runner whose environment points at
its history store should not collect calibration runs there without being asked to.

Exit 0 when the calibration ran (it reports; findings do not fail it), 2 on usage or environment
errors (a dirty work tree, bad ``--planted``, asv missing for ``--asv``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perfguard.cli.options import bench_option, profile_option, rounds_option
from perfguard.errors import UsageError
from perfguard.files import write_atomic

if TYPE_CHECKING:
    from perfguard.calibrate import Calibration, PlantedCommit, TableData
    from perfguard.measuring import Bench, Side
    from perfguard.store import RunRecord

_path = click.Path(dir_okay=False, path_type=Path)
DEFAULT_PLANTED = "0.1,0.2,0.25,0.3,0.5"


@click.command()
@profile_option
@bench_option
@rounds_option
@click.option(
    "--aa",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="A/A repetitions: HEAD measured as two sides (interleaved) and compared with itself.",
)
@click.option(
    "--planted",
    default=DEFAULT_PLANTED,
    show_default=True,
    metavar="F,F,...",
    help="Planted slowdowns as fractions of each module's own forward time (0.1 = +10%); '' for none.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Repetitions of the planted comparisons (each measures HEAD and every planted commit again).",
)
@click.option(
    "--asv/--no-asv",
    "use_asv",
    default=True,
    show_default=True,
    help="Also apply asv's own regression rule (asv compare --factor 1+threshold) to the same data.",
)
@click.option("--json", "json_path", type=_path, default=None, help="Write the report as JSON here.")
@click.option(
    "--markdown", "markdown_path", type=_path, default=None, help="Write the report as Markdown here."
)
@click.option(
    "--db",
    "db_url",
    default=None,
    metavar="URL",
    help="Keep the calibration rounds (purpose 'calibrate') in this store. "
    "Default: a temporary store, deleted afterwards (PERFGUARD_DB is not read).",
)
def calibrate(
    profile: str,
    bench_regex: str | None,
    rounds: int | None,
    aa: int,
    planted: str,
    repeats: int,
    use_asv: bool,
    json_path: Path | None,
    markdown_path: Path | None,
    db_url: str | None,
) -> None:
    """Measure this machine's noise, false alarms and detection rates on the commit HEAD.

    \b
    1. process noise: every benchmark of the profile in fresh processes; CV of the round medians
    2. A/A: HEAD against itself with the full verdict rule (stage 1 + re-measured suspects)
    3. planted slowdowns: clones of HEAD whose forward passes do f x their own work more,
       compared with HEAD: the share flagged 'regression' is the detection rate
    4. the time each phase took; 5. asv's own rule on the same data (--asv)

    The work tree must be clean (commit or stash first).  Exit 0 when the calibration ran
    (findings do not fail it), 2 on usage or environment errors.
    """
    import time

    from perfguard import calibrate as cal
    from perfguard.cli.measure import console_reporter, say
    from perfguard.gitrepo import repo_root, work_tree
    from perfguard.measuring import command_line, open_bench

    started = time.perf_counter()
    try:
        fractions = cal.parse_fractions(planted)
    except ValueError as exc:
        raise UsageError(
            f"--planted {planted!r}: {exc}",
            hint="give fractions of the module's own time, comma-separated: --planted 0.1,0.3,0.5",
        ) from None
    if use_asv and (why := cal.check_asv()):
        raise UsageError(
            f"--asv needs asv's statistics, which cannot be imported here ({why})",
            hint="pip install asv==0.6.6 asv-runner==0.3.2, or pass --no-asv",
        )
    root = repo_root()
    tree = work_tree(root)
    if tree.dirty:
        changed = _changed_paths(root)
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise UsageError(
            f"the work tree has uncommitted changes ({len(changed)} files: {shown}); "
            "perfguard calibrate measures the commit HEAD and plants slowdowns on top of it",
            hint="commit or stash them (git stash -u), then run perfguard calibrate again",
        )
    with tempfile.TemporaryDirectory(prefix="perfguard-calibrate-") as scratch:
        url = db_url or f"sqlite:///{Path(scratch) / 'calibration.db'}"
        with (
            console_reporter() as reporter,
            open_bench(profile_name=profile, bench_regex=bench_regex, db_url=url, reporter=reporter) as bench,
        ):
            clock = cal.PhaseClock(started)
            head = bench.head_side(tree)
            sides: dict[str, Side] = {cal.HEAD: head}
            commits: dict[float, cal.PlantedCommit] = {}
            if fractions:
                with clock.phase("setup: planted commits (clones of HEAD)"):
                    for fraction in fractions:
                        commit = bench.stack.enter_context(
                            cal.planted_clone(root, tree.head, fraction, bench.work_dir / "planted")
                        )
                        commits[fraction] = commit
                        sides[cal.planted_key(fraction)] = _planted_side(commit)
                        say(f"planted {cal.percent(fraction)}: commit {commit.sha[:10]} in {commit.path}")
            plan = cal.Plan(
                rounds=rounds or bench.config.rounds,
                aa=aa,
                planted=fractions,
                repeats=repeats,
                asv=use_asv,
                bench=bench.bench,
            )
            findings = cal.Calibrator(_Measurer(bench, sides), plan, bench.config, clock, say).run()
            warnings = list(findings.warnings)
            if work_tree(root).key != tree.key:
                warnings.append(
                    "the work tree changed while HEAD was being measured: run the calibration again "
                    "on a clean tree that nobody edits meanwhile"
                )
            calibration = cal.Calibration(
                meta=_meta(bench, head, command_line(), db_url, cal.meta_commits(commits)),
                plan=plan,
                config=bench.config,
                findings=findings,
                clock=clock,
                wall_s=clock.elapsed(),
                warnings=warnings,
            )
            _print(calibration)
            _write(calibration, json_path, markdown_path)


def _changed_paths(root: Path) -> list[str]:
    """Paths with uncommitted changes, for the message (``git status``, not stripped).

    ``WorkTree.changed`` cuts the first character of the first path (gitrepo strips the porcelain
    output, whose first line starts with a space for an unstaged change).
    """
    from perfguard.gitrepo import git

    out = git(root, "status", "--porcelain=v1", "--untracked-files=all", "-z", binary=True)
    assert isinstance(out, bytes)
    entries = iter(out.decode(errors="replace").split("\0"))
    paths = set()
    for entry in entries:
        if len(entry) > 3:
            paths.add(entry[3:])
            if entry[0] in "RC":  # a rename or copy: its source path follows, without a status
                next(entries, None)
    return sorted(paths)


class _Measurer:
    """A :class:`perfguard.calibrate.Measurer` over a :class:`Bench`: measure, tag, store."""

    def __init__(self, bench: Bench, sides: dict[str, Side]) -> None:
        self.bench = bench
        self.sides = sides

    def __call__(
        self, sides: Sequence[str], rounds: int, *, bench: Sequence[str] | None, phase: str
    ) -> list[list[RunRecord]]:
        from perfguard.calibrate import PURPOSE

        keys = list(sides)
        chosen = []
        for i, key in enumerate(keys):
            side = self.sides[key]
            if keys.count(key) > 1:  # HEAD as A and B
                side = replace(side, label=f"{side.label} (side {chr(ord('A') + keys[:i].count(key))})")
            chosen.append(side)
        runs = self.bench.measure(chosen, PURPOSE, rounds, bench=bench)
        tagged: list[list[RunRecord]] = []
        for key, side, side_runs in zip(sides, chosen, runs, strict=True):
            these = [
                replace(run, settings={**run.settings, "calibrate": {"phase": phase, "side": key}})
                for run in side_runs
            ]
            self.bench.store_runs(side, these)
            tagged.append(these)
        return tagged


def _planted_side(commit: PlantedCommit) -> Side:
    """The side of a planted commit: stored under its own sha, measured from its clone.

    The rounds are labelled with the parent (HEAD), a commit the repository has; the planted commit
    exists only in the clone.
    """
    from perfguard.calibrate import percent
    from perfguard.measuring import Side
    from perfguard.rounds import Target
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


def _print(calibration: Calibration) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 180)
    for data in calibration.tables():
        console.print(_rich_table(data))
        for note in data.notes:
            console.print(note, style="dim", highlight=False)
        console.print()
    for line in calibration.summary():
        console.print(line, highlight=False)
    for warning in calibration.warnings:
        console.print(f"warning: {warning}", style="yellow", highlight=False)


def _rich_table(data: TableData) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=data.title, title_justify="left")
    for column in data.columns:
        table.add_column(column, overflow="fold")
    for row in data.rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _write(calibration: Calibration, json_path: Path | None, markdown_path: Path | None) -> None:
    import json

    from perfguard.cli.measure import say

    for path, render in (
        (json_path, lambda: json.dumps(calibration.to_json(), indent=2, allow_nan=False) + "\n"),
        (markdown_path, calibration.to_markdown),
    ):
        if path is None:
            continue
        write_atomic(path, render())
        say(f"wrote {path}")
