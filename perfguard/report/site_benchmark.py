"""Site: the page of one benchmark x params (``bench/<slug>.html``), one chart per machine.

Each chart is the series over the machine's commits with its ≈95% intervals, the marks of
changes (asv's step detection, check verdicts) and the flags of steps and acceptances
(:mod:`perfguard.report.site_steps`); its hover read-out (commit, date, value, interval) is
embedded in the page as JSON.  Where nothing is marked, :func:`change_note` says why in numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfguard import units
from perfguard.report import formatting
from perfguard.report.charts import Flag, LineChart, Marker, line_chart
from perfguard.report.series import MachineInfo, Series
from perfguard.report.site_steps import StepFlag


@dataclass
class ChartView:
    series: Series
    chart: LineChart
    data: dict[str, Any]
    data_id: str
    note: str  # what the page says about changes when nothing is marked
    flags: list[StepFlag] = field(default_factory=list)  # steps and acceptances at its commits, newest first


#: asv's step detection needs this many points before it can place a step.
MIN_STEP_POINTS = 3


def change_note(s: Series) -> str:
    """What a series without marks says: never "no change" where the reader sees one.

    Issue 14: two commits 21% apart under "No change detected".  With fewer points than step
    detection needs, the page says so and gives the change in numbers, with whether the two
    points' intervals overlap (a difference the noise of those two measurements can explain).
    """
    pts = s.points
    if len(pts) >= MIN_STEP_POINTS:
        return "No step found by asv's step detection (≥ 5% and beyond the noise of both segments)."
    if len(pts) < 2:
        return (
            f"{len(pts)} commit measured: a change can be marked from {MIN_STEP_POINTS} commits on "
            "(asv's step detection)."
        )
    prev, last = pts[-2], pts[-1]
    change = formatting.format_change(last.value / prev.value if prev.value else None)
    text = (
        f"2 commits: too few for step detection (it needs {MIN_STEP_POINTS}). The latest is "
        f"{change} from the previous commit"
    )
    if None not in (prev.low, prev.high, last.low, last.high):
        apart = last.low > prev.high or last.high < prev.low  # type: ignore[operator]
        if apart:
            text += (
                "; their ≈95% intervals do not overlap, but they measure the noise within one session, "
                "not between sessions (perfguard check re-measures both sides interleaved before it "
                "calls a regression)"
            )
        else:
            text += "; their ≈95% intervals overlap: within the noise of these two measurements"
    return text + "."


def commit_labels(machine: MachineInfo) -> list[tuple[str, str]]:
    """The x axis labels of a machine's charts: short sha, and the commit time under it (with the
    year only when the history spans more than one)."""
    years = {c.date.year for c in machine.commits}
    fmt = "%m-%d %H:%M" if len(years) <= 1 else "%Y-%m-%d"
    return [(c.short, c.date.strftime(fmt)) for c in machine.commits]


def chart_view(
    s: Series, k: int, labels: list[tuple[str, str]], flags: list[StepFlag] | None = None
) -> ChartView:
    """Chart ``k`` of a page: the series drawn, its marks and flags placed, its hover data."""
    pts = s.points
    chart = line_chart(
        [p.position for p in pts],
        [p.value for p in pts],  # type: ignore[misc]
        [p.low for p in pts],
        [p.high for p in pts],
        n_commits=len(s.machine.commits),
        commit_labels=labels,
        unit=s.unit,
        failed_positions=[p.position for p in s.failures],
    )
    offsets = {"step": 11, "check": 22}
    for m in s.marks:
        x, y = chart.xs[m.index], chart.ys[m.index]
        dy = -offsets[m.source] if m.kind == "regression" else offsets[m.source]
        y = min(max(y + dy, 7.0), chart.box.y0 + chart.box.bottom - 7.0)
        chart.markers.append(Marker(m.index, x, y, m.kind, m.source, m.summary))
    marks: dict[str, str] = {}
    for m in s.marks:
        marks[str(m.index)] = (marks[str(m.index)] + "; " if str(m.index) in marks else "") + m.summary
    flags = flags or []
    for index in sorted({f.index for f in flags}):
        here = [f for f in flags if f.index == index]  # weakest first: the last kind is drawn
        label = "\n".join(f.summary for f in here)
        chart.flags.append(Flag(index, chart.xs[index], here[-1].kind, label))
        text = "; ".join(f.summary for f in here)
        marks[str(index)] = (marks[str(index)] + "; " if str(index) in marks else "") + text
    values = [p.value for p in pts]
    fmt = units.ValueFormatter(s.unit, sorted(values)[len(values) // 2] if values else 0.0)
    data = {
        "x": [round(x, 1) for x in chart.xs],
        "y": [round(y, 1) for y in chart.ys],
        "sha": [p.commit.short for p in pts],
        "subject": [p.commit.subject[:72] for p in pts],
        "date": [p.commit.when + " UTC" for p in pts],
        "value": [fmt(v) for v in values],
        "ci": [
            f"{fmt.number(p.low)} – {fmt(p.high)} ({p.interval}, n={p.n})"
            if p.low is not None
            else f"– (n={p.n})"
            for p in pts
        ],
        "marks": marks,
    }
    return ChartView(
        series=s,
        chart=chart,
        data=data,
        data_id=f"points-{k}",
        note=change_note(s),
        flags=sorted(flags, key=lambda f: f.index, reverse=True),
    )
