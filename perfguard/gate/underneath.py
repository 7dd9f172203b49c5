"""Step 6 of the PR check: what changed underneath every regression (issue 12).

Per regressed implementation x params x pass, the aten ops (CPU) or CUDA kernels whose count, or
time, differs between the two sides: times from the re-measurement's profiler pass (a result's
``info.underneath``) where there is one, otherwise counts from the rounds' work metrics
(``info.breakdown``), both read through :class:`~perfguard.store.result_info.ResultInfo`.  The
tables go into the check's summary (:class:`~perfguard.store.check_summary.UnderneathTable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfguard.store.check_summary import UnderneathRow, UnderneathTable
from perfguard.store.result_info import Breakdown, ResultInfo

if TYPE_CHECKING:
    from perfguard.compare import Item
    from perfguard.gate.sides import CheckRounds
    from perfguard.store import ResultRecord, RunRecord

#: How many "what changed underneath" tables a check keeps (the rest are left out, and said so).
MAX_UNDERNEATH = 12
#: Rows per table.
MAX_UNDERNEATH_ROWS = 25

#: (impl, params_key, pass) -> a breakdown of that case.
_Found = dict[tuple[str, str, str], Breakdown]


def _pass_of(benchmark: str) -> str:
    return "forward_backward" if "backward" in benchmark.lower() else "forward"


def _breakdowns(rounds: Sequence[Sequence[ResultRecord]], *, profiled: bool) -> _Found:
    """(impl, params_key, pass) -> the first breakdown of that kind found in the rounds' results:
    the profiler's (``profiled``) or the work metrics' counts."""
    found: _Found = {}
    for results in rounds:
        for r in results:
            info = ResultInfo.from_json(r.info)
            breakdown = info.underneath if profiled else info.breakdown
            if breakdown is not None:
                found.setdefault((r.impl, r.params_key, _pass_of(r.benchmark)), breakdown)
    return found


def underneath_tables(
    items: Sequence[Item], measured: CheckRounds, retry_runs: Sequence[Sequence[RunRecord]]
) -> list[UnderneathTable]:
    """Per regressed implementation x params x pass: what the call does differently in HEAD.

    Rows are sorted by the size of the difference, biggest first.
    """
    retry_base = [list(r.results) for r in retry_runs[0]] if retry_runs else []
    retry_head = [list(r.results) for r in retry_runs[1]] if len(retry_runs) > 1 else []
    profiled = (_breakdowns(retry_base, profiled=True), _breakdowns(retry_head, profiled=True))
    counted = (_breakdowns(measured.base, profiled=False), _breakdowns(measured.head, profiled=False))
    tables: list[UnderneathTable] = []
    seen: set[tuple[str, str, str]] = set()
    for item in items:
        if str(item.verdict) != "regression":
            continue
        key = (item.impl, item.params_key, _pass_of(item.benchmark))
        if key in seen:
            continue
        seen.add(key)
        table = _table(key, item, profiled) or _table(key, item, counted)
        if table is not None:
            tables.append(table)
        if len(tables) >= MAX_UNDERNEATH:
            break
    return tables


def _table(key: tuple[str, str, str], item: Item, sources: tuple[_Found, _Found]) -> UnderneathTable | None:
    base, head = sources[0].get(key), sources[1].get(key)
    if base is None or head is None:
        return None
    timed = base.timed  # a profiler breakdown: counts and milliseconds; else counts only
    b_ms, h_ms = base.ms or {}, head.ms or {}
    rows = []
    for name in set(base.counts) | set(head.counts):
        bc, hc = base.counts.get(name, 0), head.counts.get(name, 0)
        bt = b_ms.get(name, 0.0) if timed else None
        ht = h_ms.get(name, 0.0) if timed else None
        if bc == hc and (not timed or abs((ht or 0) - (bt or 0)) <= 1e-9):
            continue
        rows.append(UnderneathRow(name, bc, hc, bt, ht))
    if timed:
        rows.sort(key=lambda r: (-abs((r.head_ms or 0) - (r.base_ms or 0)), r.name))
    else:
        rows.sort(key=lambda r: (-abs(r.delta), r.name))
    if not rows:
        return None
    return UnderneathTable(
        impl=key[0],
        benchmark=item.benchmark,
        params_key=key[1],
        pass_=key[2],
        kind=head.kind or base.kind,
        source=head.source or "work-metric counts, every round",
        rows=tuple(rows[:MAX_UNDERNEATH_ROWS]),
        rows_left_out=max(0, len(rows) - MAX_UNDERNEATH_ROWS),
    )
