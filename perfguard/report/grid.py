"""The check's results as implementation x parameters rows, one column per benchmark.

What the Markdown comment collapses: a 252-item check on the quick profile is 18 short rows.
Derived benchmarks (tokens/s, TFLOP/s) have no column: they carry their timing's verdict.
Columns where every item is unchanged at exactly 1.000 (deterministic work metrics that did not
move) and benchmarks skipped everywhere (peak memory without CUDA) are named once instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.report import formatting
from perfguard.report.items import VERDICT_ORDER, ItemView, column_order

#: Up to this many rows the Markdown lists every row, even the unchanged ones.
FULL_GRID_ROWS = 12


@dataclass(frozen=True)
class GridRow:
    impl: str
    params: str
    cells: dict[str, ItemView]  # benchmark -> its item
    worst: str  # the verdict that ranks first among the cells

    @property
    def notable(self) -> bool:
        return any(c.notable for c in self.cells.values())


@dataclass(frozen=True)
class ResultGrid:
    columns: list[tuple[str, str]]  # (benchmark, label)
    rows: list[GridRow]  # the rows with news first
    constant: list[str]  # labels of benchmarks unchanged at exactly 1.000 everywhere
    skipped: list[tuple[str, int, str]]  # (labels, items, reason) of benchmarks skipped everywhere

    @property
    def notable_rows(self) -> list[GridRow]:
        return [r for r in self.rows if r.notable]

    def listed(self, *, linked: bool) -> list[GridRow]:
        """The rows the Markdown lists: all of them, unless the rows with news are only a part of
        many (more than ``FULL_GRID_ROWS``) or a link leads to the full report; then those, and
        one line for the rest."""
        notable = self.notable_rows
        if notable and (linked or len(self.rows) > FULL_GRID_ROWS):
            return notable
        return self.rows

    @property
    def quiet_rows(self) -> list[GridRow]:
        return [r for r in self.rows if not r.notable]

    @property
    def quiet_range(self) -> str:
        """``×0.95–×1.04``: the ratios of the rows in which nothing changed."""
        ratios = sorted(
            c.item.ratio for r in self.quiet_rows for c in r.cells.values() if c.item.ratio is not None
        )
        if not ratios:
            return ""
        lo, hi = formatting.format_ratio(ratios[0]), formatting.format_ratio(ratios[-1])
        return lo if lo == hi else f"{lo}–{hi}"


def _skip_reason(item: ItemView) -> str:
    """``needs CUDA`` out of ``skipped in head: needs CUDA``: the part that says why."""
    return item.item.reason.split(": ", 1)[-1] if item.item.reason else "cannot run here"


def result_grid(primary: Sequence[ItemView]) -> ResultGrid:
    by_bench: dict[str, list[ItemView]] = {}
    for i in primary:
        by_bench.setdefault(i.item.benchmark, []).append(i)
    skipped_by_reason: dict[str, list[tuple[str, int]]] = {}
    constant, keep = [], []
    for bench, items in sorted(by_bench.items(), key=lambda kv: (column_order(kv[0]), kv[0])):
        label = items[0].label
        if all(i.verdict == "skipped" for i in items):
            skipped_by_reason.setdefault(_skip_reason(items[0]), []).append((label, len(items)))
        elif all(i.verdict == "unchanged" and i.item.ratio == 1.0 for i in items):
            constant.append(label)
        else:
            keep.append((bench, label))
    skipped = [
        (", ".join(label for label, _ in entries), max(n for _, n in entries), reason)
        for reason, entries in skipped_by_reason.items()
    ]
    wanted = {b for b, _ in keep}
    cells: dict[tuple[str, str], dict[str, ItemView]] = {}
    natural: dict[tuple[str, str], Any] = {}
    for i in primary:
        if i.item.benchmark in wanted:
            key = (i.item.impl, i.params_text)
            cells.setdefault(key, {})[i.item.benchmark] = i
            natural[key] = formatting.natural_key(i.params)
    order = {v: k for k, v in enumerate(VERDICT_ORDER)}
    rows = []
    for key, row_cells in cells.items():
        worst = min((c.verdict for c in row_cells.values()), key=lambda v: order.get(v, 99))
        rows.append(GridRow(key[0], key[1], row_cells, worst))
    rows.sort(key=lambda r: (not r.notable, order.get(r.worst, 99), r.impl, natural[(r.impl, r.params)]))
    return ResultGrid(columns=keep, rows=rows, constant=constant, skipped=skipped)
