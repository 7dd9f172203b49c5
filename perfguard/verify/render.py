"""The ``perfguard verify`` table (rich): one row per impl × device × dtype, one column per check.

Cells: ✓ pass, ✗ fail, – not applicable or not run (blocked by an earlier failure).  The table
cells are too narrow for reasons, so every ✗ is spelled out under the table as
``impl [device dtype] check: why (case)``, and nondeterminism within tolerance is reported there
as a number.
"""

from __future__ import annotations

import math

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfguard.verify.results import CHECKS, RowResult, VerifyReport

_HEADERS = {
    "build": "build",
    "forward": "fwd",
    "backward": "bwd",
    "shape": "shape",
    "return": "return",
    "written": "written",
    "finite": "finite",
    "pattern": "pattern",
    "same_fn": "same fn",
    "reference": "ref",
    "grad": "grad",
    "deterministic": "determ",
}
_CELL = {"pass": Text("✓", style="green"), "fail": Text("✗", style="bold red")}


def _cell(status: str) -> Text:
    return _CELL.get(status, Text("–", style="dim"))


def _err(value: float | None) -> str:
    if value is None:
        return "–"
    return "inf" if math.isinf(value) else f"{value:.1e}"


def build_table(report: VerifyReport) -> Table:
    table = Table(
        title="perfguard verify",
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("impl", no_wrap=True)
    table.add_column("device", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    for name in CHECKS:
        table.add_column(_HEADERS[name], justify="center", no_wrap=True)
    table.add_column("worst err", justify="right", no_wrap=True)
    table.add_column("tol", justify="right", no_wrap=True)
    for row in report.rows:
        name = Text(row.impl, style="bold red" if not row.passed else "")
        cells = [_cell(row.checks[c].status) for c in CHECKS]
        table.add_row(name, row.device, row.dtype, *cells, _err(row.worst_rel_err), f"{row.tolerance:g}")
    return table


def failure_lines(row: RowResult) -> list[str]:
    return [f"{row.impl} [{row.device} {row.dtype}] {name}: {detail}" for name, detail in row.failures()]


def render(report: VerifyReport, console: Console) -> None:
    """The table, then every failure with its reason, then notes and a one-line verdict."""
    console.print(build_table(report))
    failures = [line for row in report.rows for line in failure_lines(row)]
    if failures:
        console.print(Text("Failures:", style="bold red"))
        for line in failures:
            console.print(Text(f"  ✗ {line}"), soft_wrap=True)
    notes = []
    for row in report.rows:
        prefix = f"{row.impl} [{row.device} {row.dtype}]"
        if row.skipped:
            notes.append(f"{prefix} skipped: {row.skipped}")
        det = row.checks["deterministic"]
        if det.status == "pass" and det.value:
            notes.append(f"{prefix} nondeterministic within tolerance: runs differ by rel {det.value:.2g}")
        notes.extend(f"{prefix} {note}" for note in row.notes)
    if notes:
        console.print(Text("Notes:", style="bold"))
        for line in notes:
            console.print(Text(f"  {line}"), soft_wrap=True)
    failed = sum(not r.passed for r in report.rows)
    settings = ", ".join(f"{k}={v}" for k, v in report.settings.items())
    console.print(Text(f"settings: {settings}; seed {report.seed}", style="dim"), soft_wrap=True)
    timing = timing_line(report)
    if failed:
        console.print(Text(f"{failed} of {len(report.rows)} rows FAILED ({timing})", style="bold red"))
    else:
        console.print(Text(f"all {len(report.rows)} rows passed ({timing})", style="bold green"))


_PHASES = {"imports": "imports", "cuda_init": "CUDA init"}


def timing_line(report: VerifyReport) -> str:
    """``verification 31.2 s, setup 34.1 s: imports 18.0 s, CUDA init 16.1 s``: what the run cost."""
    line = f"verification {report.seconds:.1f} s"
    if report.setup_seconds:
        phases = ", ".join(f"{_PHASES.get(k, k)} {v:.1f} s" for k, v in report.setup_seconds.items())
        line += f", setup {sum(report.setup_seconds.values()):.1f} s: {phases}"
    return line


def row_line(row: RowResult, index: int, total: int) -> str:
    """One line per finished row, for progress output: ``[3/18] ring cuda bfloat16: passed in 1.2 s``."""
    verdict = (
        "skipped"
        if row.skipped
        else ("passed" if row.passed else "FAILED " + ", ".join(name for name, _ in row.failures()))
    )
    memory = f", peak GPU memory {row.peak_memory_bytes / 2**30:.1f} GiB" if row.peak_memory_bytes else ""
    return (
        f"[{index + 1}/{total}] {row.impl} {row.device} {row.dtype}: {verdict} in {row.seconds:.1f} s{memory}"
    )
