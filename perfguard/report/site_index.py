"""Site: the index's rows (implementations x machines: latest value, change, sparkline) and the
recent marks, newest first (the index's list, and every one on the changes page).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from perfguard import units
from perfguard.metrics import REPORTED_METRICS, in_family
from perfguard.report import formatting
from perfguard.report.charts import sparkline
from perfguard.report.items import column_order
from perfguard.report.series import MachineInfo, Series

#: What the index shows by default: the gated timings and memory (the rest behind a switch: derived
#: and reported numbers such as the per-kernel times of ``backends.html``, and the work metrics).
INDEX_METRICS = tuple(m for m in (*in_family("time"), *in_family("memory")) if m not in REPORTED_METRICS)
#: The change column of a series the newest recording added (the check report's marker for new).
NEW_MARK = "🆕 new"


@dataclass
class IndexCell:
    series: Series
    latest: str
    change: str
    change_class: str
    spark: Any
    regressed: bool
    title: str


@dataclass
class IndexRow:
    impl: str
    benchmark: str
    params: str
    slug: str
    cells: dict[str, IndexCell]
    primary: bool  # a gated timing or memory: shown by default; derived and work metrics on demand
    order: Any = None


def index_rows(
    series: list[Series], slugs: dict[tuple[str, str], str], machines: list[MachineInfo]
) -> list[IndexRow]:
    """One row per benchmark page, one cell per machine; a change is coloured only beyond the noise.

    A series that starts at the machine's newest recorded commit while the machine has older ones is
    marked new (an implementation or parameter set the last recording added), never left blank.
    """
    rows: dict[tuple[str, str], IndexRow] = {}
    first: dict[str, int] = {}  # machine key -> its oldest and newest positions with a value
    newest: dict[str, int] = {}
    for s in series:
        if s.points:
            key = s.machine.key
            first[key] = min(first.get(key, s.points[0].position), s.points[0].position)
            newest[key] = max(newest.get(key, s.points[-1].position), s.points[-1].position)
    for s in series:
        if not s.points:
            continue
        row = rows.setdefault(
            s.page_key,
            IndexRow(
                s.impl,
                s.benchmark,
                formatting.params_label(s.params),
                slugs[s.page_key],
                {},
                primary=s.gated and s.metric in INDEX_METRICS,
                order=(s.impl, column_order(s.benchmark), formatting.natural_key(s.other_params)),
            ),
        )
        latest = s.points[-1]
        change, cls = "", ""
        if len(s.points) >= 2 and s.points[-2].value:
            prev = s.points[-2]
            ratio = latest.value / prev.value  # type: ignore[operator]
            change = formatting.format_change(ratio)
            worse = ratio > 1 if s.direction != "higher" else ratio < 1
            # Coloured only when it is beyond both points' noise: their intervals do not overlap.
            apart = None not in (prev.low, prev.high, latest.low, latest.high) and (
                latest.low > prev.high or latest.high < prev.low  # type: ignore[operator]
            )
            exact = prev.low is None and latest.low is None and prev.n <= 1  # a count: no noise
            big = abs(ratio - 1) >= 0.05 and (apart or exact)
            cls = ("delta-bad" if worse else "delta-good") if big else "muted small"
        start = s.points[0].position
        if len(s.points) == 1 and start == newest[s.machine.key] and start > first[s.machine.key]:
            change, cls = NEW_MARK, "delta-new"
        last = s.last_mark
        row.cells[s.machine.key] = IndexCell(
            series=s,
            latest=units.format_value(latest.value, s.unit),
            change=change,
            change_class=cls,
            spark=sparkline(s.values),
            regressed=last is not None and last.kind == "regression",
            title=(
                f"{len(s.points)} points; latest {latest.commit.short} "
                f"{formatting.format_date(latest.commit.date)}"
                + (f"; last change: {last.summary}" if last else "")
            ),
        )
    return sorted(rows.values(), key=lambda r: r.order)


@dataclass
class ChangeView:
    series: Series
    slug: str
    kind: str
    source: str
    text: str
    sha: str
    date: datetime
    word: str


def recent_marks(series: list[Series], slugs: dict[tuple[str, str], str]) -> list[ChangeView]:
    """Every mark of every series, newest commit first."""
    out = [
        ChangeView(
            s,
            slugs[s.page_key],
            m.kind,
            m.source,
            m.text,
            s.points[m.index].commit.short,
            s.points[m.index].commit.date,
            m.word,
        )
        for s in series
        for m in s.marks
    ]
    out.sort(key=lambda c: (c.date.replace(tzinfo=None), c.source), reverse=True)
    return out
