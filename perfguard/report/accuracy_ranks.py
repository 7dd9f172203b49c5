"""The accuracy page's errors against the number of ranks: the distributed suite's errors, side by side.

The distributed suite stores the error of the whole sequence against the float64 reference at each
number of ranks it runs (one machine key per N, :mod:`perfguard.report.ranks`), for the output and
each input gradient, not causal and causal.  :func:`perfguard.report.ranks.groups` gives one group
per hardware x benchmark x (seq_len, dtype); this view puts the eight errors of one hardware x
(seq_len, dtype) into one table (a row per implementation and error, a column per N, with the
growth over the fewest ranks measured) under one chart of the output errors over N (a line per
implementation, its causal output error beside it): eight charts of near-identical lines would
say the same thing eight times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.report import formatting
from perfguard.report.items import column_order
from perfguard.report.ranks import RankGroup, RankLine

#: The errors the chart draws (the table has them all).
CHARTED = ("Accuracy.track_output_error", "Accuracy.track_output_error_causal")


@dataclass
class ErrorRow:
    """One implementation's error of one tensor (causal or not) over N."""

    benchmark: str
    line: RankLine

    @property
    def label(self) -> str:
        return formatting.metric_label(self.benchmark)

    @property
    def causal(self) -> bool:
        return self.benchmark.endswith("_causal")


@dataclass
class ErrorGroup:
    """One hardware x (seq_len, dtype): every implementation's errors at every N measured."""

    hardware: str
    params: dict[str, Any]
    unit: str
    ranks: list[int]
    rows: list[ErrorRow] = field(default_factory=list)

    @property
    def title(self) -> str:
        return formatting.params_label(self.params)

    def charted(self) -> list[tuple[str, int, list[tuple[int, float]]]]:
        """The chart's lines: (name, palette index, [(N, error), ...]) of the output errors, the
        causal one of an implementation five colours on from its own."""
        return [
            (
                f"{row.line.impl}{' causal' if row.causal else ''}",
                (row.line.color + (5 if row.causal else 0)) % 10,
                [(p.ranks, p.value) for p in row.line.points],
            )
            for row in self.rows
            if row.benchmark.split(".", 1)[-1] in CHARTED
        ]


def error_groups(groups: Sequence[RankGroup]) -> list[ErrorGroup]:
    """The rank groups of the errors (one per benchmark) joined per hardware x other parameters."""
    joined: dict[tuple[str, tuple[tuple[str, Any], ...]], ErrorGroup] = {}
    for g in groups:
        key = (g.hardware, tuple(sorted(g.params.items())))
        group = joined.setdefault(key, ErrorGroup(g.hardware, dict(g.params), g.unit, []))
        group.ranks = sorted(set(group.ranks) | set(g.ranks))
        group.rows += [ErrorRow(g.benchmark, line) for line in g.lines]
    for group in joined.values():
        group.rows.sort(key=lambda r: (r.line.impl, column_order(r.benchmark)))
    return sorted(
        joined.values(),
        key=lambda g: (g.hardware, str(g.params.get("dtype", "")), formatting.natural_key(g.params)),
    )


def chart(group: ErrorGroup) -> Any:
    """The output errors over N, log-log (:meth:`ErrorGroup.charted`); None without any."""
    from perfguard.report.charts import PALETTE, loglog_chart

    lines = [(name, PALETTE[color], points) for name, color, points in group.charted()]
    return loglog_chart(lines, unit=group.unit) if lines else None
