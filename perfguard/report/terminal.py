"""What ``perfguard check`` prints on the terminal, as plain strings (the CLI only lays them out).

The same reading order as the Markdown and HTML reports (issue 14), because the PR author who runs
the check by hand reads this and not them: the table holds only the gated items that decide the
verdict (failing ones first, then accepted regressions and improvements), each timing naming the
derived rows that follow it (tokens/s, TFLOP/s) instead of repeating its reason in lines of their
own; ``unstable`` items are a few lines built from :func:`perfguard.report.stories.noise_story` (the
report's own explanation: how many, this check's measured noise, what would decide them), never one
multi-line reason each, which on an A/A check buried the answer under hundreds of rows.  The
headline and the count of every verdict stay the last two lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfguard.report import formatting
from perfguard.report.check_report import CheckReport
from perfguard.report.items import ACCEPTED, FAILING, ItemView
from perfguard.report.stories import NoiseStory

#: Gated verdicts that get a row: what fails the check, what an acceptance let through, what improved.
SHOWN = FAILING | {ACCEPTED, "improvement"}
#: Unstable items named in the summary's first line (the rest are counted).
NAMED_UNSTABLE = 3
#: What an A/A check's unstable items are (the Markdown report says the same).
AA_NOTE = "An A/A check compares a commit with itself, so each of these is this machine's noise"
COLUMNS = ("verdict", "impl", "benchmark", "params", "ratio", "95% CI", "p", "reason")


@dataclass(frozen=True)
class Row:
    """One table row, cells in :data:`COLUMNS` order; ``verdict`` lets the printer pick a colour."""

    verdict: str
    cells: tuple[str, ...]


@dataclass(frozen=True)
class TerminalSummary:
    """The check as the terminal shows it, top to bottom."""

    title: str
    rows: list[Row]
    unstable: list[str]  # the lines that explain the unstable items (empty: none)
    also: str  # one line with what nothing above names ("" when there is nothing)
    headline: str
    counts: str  # "6 items: gated 2 unchanged, 1 unstable · derived 3 unchanged"
    columns: tuple[str, ...] = field(default=COLUMNS)


def _benchmark_cell(view: ItemView) -> str:
    """``forward time (+ tokens/s, TFLOP/s)``: the timing and the derived rows that follow it."""
    if not view.derived:
        return view.label
    prefix = view.label.split(" ", 1)[0] + " "
    follow = ", ".join(d.label.removeprefix(prefix) for d in view.derived)
    return f"{view.label} (+ {follow})"


def _row(view: ItemView) -> Row:
    i = view.item
    ci = formatting.format_interval(i.ci_low, i.ci_high) if i.ci_low is not None else ""
    return Row(
        view.verdict,
        (
            view.verdict,
            i.impl,
            _benchmark_cell(view),
            view.params_text,
            formatting.format_ratio(i.ratio) if i.ratio is not None else "",
            ci,
            formatting.format_p(i.p_value) if i.p_value is not None else "",
            i.reason,
        ),
    )


def noise_lines(story: NoiseStory, threshold: float, counted: str) -> list[str]:
    """The unstable items in three lines: how many (``counted``, the report's tally of them) and which,
    this machine's noise, what would decide."""
    n = len(story.items)
    named = ", ".join(
        f"{u.view.item.impl} {u.view.label} {formatting.format_ratio(u.view.item.ratio)} "
        f"{formatting.format_interval(u.view.item.ci_low, u.view.item.ci_high)}"
        for u in story.items[:NAMED_UNSTABLE]
    )
    more = f", and {n - NAMED_UNSTABLE} more" if n > NAMED_UNSTABLE else ""
    aa = f". {AA_NOTE}" if story.aa else ""
    first = (
        f"{counted} (too noisy to decide at {formatting.format_threshold(threshold)}; never fails){aa}: "
        f"{named}{more}."
    )
    measured = (
        f"Measured here: within-round IQR/median {story.noise_range or '–'}, 95% CI of the ratio "
        f"{story.width_range or '–'} with {story.rounds} rounds a side."
    )
    advice = []
    if story.suggested_rounds:
        advice.append(
            f"With --rounds {story.suggested_rounds} about {story.decided_by(story.suggested_rounds)} of {n} "
            "would be decided (the CI narrows as 1/√rounds)."
        )
    elif any(u.outcome for u in story.items):
        advice.append(f"More rounds would not decide them within {story.max_rounds} a side.")
    if story.cpu:
        advice.append(f"On a GPU runner, graph-replayed timings vary {story.gpu_cv} between processes.")
    elif story.eager:
        advice.append("Some were timed eagerly (CUDA-graph capture failed): graph replay would steady them.")
    else:
        advice.append("A quieter machine (no other jobs, fixed clocks) or a per-benchmark threshold would.")
    return [first, measured, " ".join(advice)]


def terminal_summary(report: CheckReport) -> TerminalSummary:
    """The terminal's view of ``report``: its counts and words are the report's (``report.tally``)."""
    rows = [_row(v) for v in report.items if v.role == "gated" and v.verdict in SHOWN]
    unstable = (
        noise_lines(report.noise, report.check.threshold, report.tally.primary_phrase("unstable"))
        if report.noise is not None
        else []
    )
    also = f"Also: {' · '.join(report.also)}." if report.also else ""
    return TerminalSummary(
        title=f"perfguard check {report.check.id}: {report.check.verdict}",
        rows=rows,
        unstable=unstable,
        also=also,
        headline=report.headline,
        counts=report.tally.line,
    )
