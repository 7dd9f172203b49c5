"""The attention-kernel comparison: an implementation's forward time on each kernel over sequence length.

The suite's ``Backends.track_time`` (reported, never gated) times every implementation whose
registry entry declares a ``kernels`` module (``attention``: ``improved``) on every kernel that
module lists; a kernel that cannot run a machine is stored as *skipped* with the package's reason.
This view reads the stored series as they are, skipped points included
(the other site views only keep values, so the reasons would be lost), and makes one group per
machine x the parameters other than ``backend`` and ``seq_len`` (the implementation, the dtype):
a table of kernel x sequence length at the group's **latest commit** (a comparison of kernels, so
every cell comes from the same code), the fastest kernel at each length marked, every kernel that
did not run there with why; and a log-log chart with one line per kernel.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from perfguard.engine.suite import BACKENDS
from perfguard.errors import error_summary
from perfguard.report import formatting
from perfguard.store import StoredSeries

BACKEND = "backend"
SEQ = "seq_len"


@dataclass
class Cell:
    """One kernel at one length at the group's commit: its time, or why there is none."""

    status: str  # ok | skipped | failed | absent (not measured at this commit)
    value: float | None = None
    reason: str = ""  # skipped / failed: the stored reason, one line
    slug: str | None = None  # the page of its series, when the site has one
    fastest: bool = False


@dataclass
class KernelRow:
    backend: str
    color: int  # palette index, the same kernel the same colour in every group
    cells: dict[int, Cell] = field(default_factory=dict)  # seq_len -> cell

    @property
    def measured(self) -> bool:
        return any(c.status == "ok" for c in self.cells.values())

    @property
    def points(self) -> list[tuple[int, float]]:
        return [(n, c.value) for n, c in sorted(self.cells.items()) if c.status == "ok" and c.value]

    @property
    def skipped_reason(self) -> str | None:
        """The reason when the kernel ran at no length of the group for one and the same reason."""
        reasons = {c.reason for c in self.cells.values() if c.status == "skipped"}
        if len(reasons) == 1 and all(c.status == "skipped" for c in self.cells.values()):
            return reasons.pop()
        return None


@dataclass
class KernelGroup:
    machine_key: str
    machine_label: str
    benchmark: str
    params: dict[str, Any]  # without backend and seq_len (impl, dtype)
    unit: str
    sha: str  # short sha of the group's latest commit
    date: datetime
    subject: str
    seq_lens: list[int]
    rows: list[KernelRow]
    fastest: dict[int, str] = field(default_factory=dict)  # seq_len -> kernel

    @property
    def title(self) -> str:
        """``improved · per-kernel forward time · dtype=bfloat16``."""
        rest = formatting.params_label(self.params)
        impl = self.params.get("impl")
        parts = [str(impl)] if impl else []
        return " · ".join([*parts, formatting.metric_label(self.benchmark), *([rest] if rest else [])])

    @property
    def measured(self) -> list[KernelRow]:
        return [r for r in self.rows if r.measured]


def is_backends(benchmark: str) -> bool:
    """Whether a stored benchmark is the kernel comparison (any asv module)."""
    return benchmark == BACKENDS or benchmark.endswith("." + BACKENDS)


def groups(stored: Iterable[StoredSeries], *, slugs: Mapping[tuple[str, str], str]) -> list[KernelGroup]:
    """One group per machine x parameters other than backend and seq_len, at its latest commit."""
    buckets: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[StoredSeries]] = defaultdict(list)
    for st in stored:
        if not is_backends(st.benchmark) or BACKEND not in st.params or not st.points:
            continue
        try:
            int(st.params.get(SEQ))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        rest = tuple(sorted((k, str(v)) for k, v in st.params.items() if k not in (BACKEND, SEQ)))
        buckets[(st.machine_key, st.benchmark, rest)].append(st)
    kernels = sorted({str(st.params[BACKEND]) for members in buckets.values() for st in members})
    colors = {name: i % 10 for i, name in enumerate(kernels)}
    out = [_group(members, dict(rest), colors, slugs) for (_, _, rest), members in buckets.items()]
    out.sort(key=lambda g: (g.machine_key, formatting.natural_key(g.params)))
    return out


def _group(
    members: list[StoredSeries],
    params: dict[str, Any],
    colors: Mapping[str, int],
    slugs: Mapping[tuple[str, str], str],
) -> KernelGroup:
    latest = max((p for st in members for p in st.points), key=lambda p: (p.committed_at, p.sha))
    rows: dict[str, KernelRow] = {}
    for st in members:
        name = str(st.params[BACKEND])
        row = rows.setdefault(name, KernelRow(name, colors[name]))
        point = next((p for p in st.points if p.sha == latest.sha), None)
        n = int(st.params[SEQ])
        if point is None:
            row.cells[n] = Cell("absent", reason=f"not measured at {formatting.short_sha(latest.sha)}")
        elif point.status == "ok" and point.value is not None and point.value > 0:
            row.cells[n] = Cell("ok", point.value, slug=slugs.get((st.benchmark, st.params_key)))
        else:
            status = "skipped" if point.status == "skipped" else "failed"
            row.cells[n] = Cell(status, reason=error_summary(point.error) if point.error else status)
    seq_lens = sorted({n for row in rows.values() for n in row.cells})
    fastest: dict[int, str] = {}
    for n in seq_lens:
        timed = [
            (cell.value, row.backend)
            for row in rows.values()
            if (cell := row.cells.get(n)) is not None and cell.status == "ok" and cell.value is not None
        ]
        if timed:
            fastest[n] = min(timed)[1]
            rows[fastest[n]].cells[n].fastest = True
    # The kernels that ran first, then the ones that did not; by name within each.
    ordered = sorted(rows.values(), key=lambda r: (not r.measured, r.backend))
    first = members[0]
    return KernelGroup(
        machine_key=first.machine_key,
        machine_label=first.machine_label,
        benchmark=first.benchmark,
        params=params,
        unit=first.unit,
        sha=formatting.short_sha(latest.sha),
        date=latest.committed_at,
        subject=latest.subject,
        seq_lens=seq_lens,
        rows=ordered,
        fastest=fastest,
    )


def chart(group: KernelGroup) -> Any:
    """The group's log-log chart of time against sequence length, one line per kernel that ran."""
    from perfguard.report.charts import PALETTE, loglog_chart

    lines = [(row.backend, PALETTE[row.color], row.points) for row in group.measured]
    return loglog_chart(lines, unit=group.unit) if lines else None
