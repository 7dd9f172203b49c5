"""The parts of a check report that explain: what decides it, why items are unstable, what the
re-measurement did.

* :func:`deciding`: the gated items that fail the check, by implementation and then by parameter
  set (one line names every failing benchmark of one case), the worst first, with what changed
  underneath attached to its case.
* :func:`noise_story`: for ``unstable`` items, this check's measured noise (within-round
  IQR/median, the width of the ratio's interval) and the rounds a side that would decide each,
  if the interval narrows as 1/√rounds (rounds are fresh processes, the units the interval is
  computed over); and whether a GPU or graph replay would help.
* :func:`retry_story`: every re-measured suspect, confirmed or not, so none leaves the report
  silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.report import formatting
from perfguard.report.items import ACCEPTED, FAILING, VERDICT_ORDER, ItemView, Underneath, column_order
from perfguard.store import StoredCheck
from perfguard.store.check_summary import CheckSummary

#: How many implementations / parameter sets the top of a report names.
DECIDING_IMPLS = 3
DECIDING_CASES = 3
#: Past this many rounds a side an estimate is not advice any more.
MAX_USEFUL_ROUNDS = 60
#: Process-to-process noise (CV) of graph-replayed timings measured on an H100: 0.0-0.41% for every
#: timing measured so far (docs/perf/calibration.md sections 1-2, docs/perf/check.md section 3; up to
#: 7 implementations), against 2.5-24% for process CPU time on the 2-core VM: what a GPU runner changes.
GPU_PROCESS_CV = "0.0–0.4%"


@dataclass(frozen=True)
class FailingCase:
    """One implementation x parameter set that fails: its failing items and what changed underneath."""

    params_text: str
    items: list[ItemView]  # timings first, then memory and work metrics
    underneath: list[Underneath]

    @property
    def retried(self) -> bool:
        return any(i.item.retried for i in self.items)


@dataclass(frozen=True)
class ImplGroup:
    """The failing cases of one implementation, the worst first."""

    impl: str
    cases: list[FailingCase]

    @property
    def n_items(self) -> int:
        return sum(len(c.items) for c in self.cases)

    @property
    def shown(self) -> list[FailingCase]:
        return self.cases[:DECIDING_CASES]

    @property
    def more(self) -> int:
        return max(0, len(self.cases) - DECIDING_CASES)


def deciding(failing: Sequence[ItemView], underneath: Sequence[Underneath]) -> list[ImplGroup]:
    """``failing`` (worst first) grouped by implementation, then parameter set."""
    under: dict[tuple[str, str], list[Underneath]] = {}
    for u in underneath:
        under.setdefault((u.impl, u.params_key), []).append(u)
    groups: dict[str, dict[str, list[ItemView]]] = {}
    keys: dict[tuple[str, str], str] = {}
    for i in failing:
        groups.setdefault(i.item.impl, {}).setdefault(i.params_text, []).append(i)
        keys[(i.item.impl, i.params_text)] = i.item.params_key
    out = []
    for impl, cases in groups.items():
        out.append(
            ImplGroup(
                impl,
                [
                    FailingCase(
                        params_text,
                        sorted(items, key=lambda i: (column_order(i.item.benchmark), i.item.benchmark)),
                        under.get((impl, keys[(impl, params_text)]), []),
                    )
                    for params_text, items in cases.items()
                ],
            )
        )
    return out


@dataclass(frozen=True)
class Undecided:
    """An ``unstable`` item and what would decide it."""

    view: ItemView
    rounds: int  # rounds a side of the measurement that gave the verdict
    needed: int | None  # rounds a side that would decide it, None: no useful estimate
    outcome: str  # what it would most likely become: unchanged | regression | ""

    @property
    def half_width(self) -> float | None:
        i = self.view.item
        if i.ci_low is None or i.ci_high is None:
            return None
        return (i.ci_high - i.ci_low) / 2


@dataclass(frozen=True)
class NoiseStory:
    """Why items are ``unstable``, in this check's numbers, and what would make them decidable."""

    items: list[Undecided]
    aa: bool  # the check compared a commit with itself
    rounds: int  # rounds a side of the first measurement
    cpu: bool  # timed with process CPU time (no GPU)
    eager: bool  # some were timed eagerly on a GPU (graph capture failed)
    gpu_cv: str = GPU_PROCESS_CV
    max_rounds: int = MAX_USEFUL_ROUNDS

    @property
    def noise_range(self) -> str:
        """``6.1–14.0%``: the within-round IQR/median of these items."""
        values = sorted(u.view.item.noise for u in self.items if u.view.item.noise is not None)
        if not values:
            return ""
        lo, hi = formatting.format_percent(values[0]), formatting.format_percent(values[-1])
        return lo if lo == hi else f"{lo[:-1]}–{hi}"

    @property
    def width_range(self) -> str:
        """``±9–18%``: the half-widths of their 95% intervals of the ratio."""
        values = sorted(w for u in self.items if (w := u.half_width) is not None)
        if not values:
            return ""
        lo, hi = f"{values[0] * 100:.0f}", f"{values[-1] * 100:.0f}"
        return f"±{lo}%" if lo == hi else f"±{lo}–{hi}%"

    @property
    def suggested_rounds(self) -> int | None:
        """Rounds a side that would decide at least half of those that rounds can decide."""
        needs = sorted(u.needed for u in self.items if u.needed is not None)
        return needs[(len(needs) - 1) // 2] if needs else None

    def decided_by(self, rounds: int) -> int:
        return sum(1 for u in self.items if u.needed is not None and u.needed <= rounds)


@dataclass(frozen=True)
class RetryStory:
    """What the re-measurement of the stage-1 suspects did."""

    items: list[ItemView]
    rounds: int

    @property
    def confirmed(self) -> list[ItemView]:
        """Confirmed regressions, those an acceptance then accepted included."""
        return [i for i in self.items if i.verdict in FAILING or i.verdict == ACCEPTED]

    @property
    def cleared(self) -> list[ItemView]:
        return [i for i in self.items if i.verdict not in FAILING and i.verdict != ACCEPTED]


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def rounds_of(check: StoredCheck, summary: CheckSummary) -> tuple[int, int]:
    """Rounds a side of the first measurement and of the re-measurement, as the check recorded them
    (``summary``: the check's, read by :meth:`CheckSummary.from_json`)."""
    config = check.config or {}
    counts = [n for n in summary.rounds.values() if n > 0]
    first = min(counts) if counts else 0
    first = first or _int(config.get("rounds")) or 3
    retry = config.get("retry")
    again = _int(retry.get("rounds")) if isinstance(retry, Mapping) else 0
    return first, again or 5


def undecided(view: ItemView, rounds: int) -> Undecided:
    """Rounds a side that would narrow the interval enough, if it shrinks as 1/√rounds."""
    i = view.item
    if i.ratio is None or i.ci_low is None or i.ci_high is None:
        return Undecided(view, rounds, None, "")
    limit = 1 + i.threshold
    r, lo, hi = i.ratio, i.ci_low, i.ci_high
    if r < limit < hi:  # most likely within the threshold: the upper end must come under it
        factor, outcome = (hi - r) / (limit - r), "unchanged"
    elif lo < limit < r:  # most likely beyond it: the lower end must clear it
        factor, outcome = (r - lo) / (r - limit), "regression"
    else:
        return Undecided(view, rounds, None, "")
    needed = math.ceil(rounds * factor * factor)
    if needed > MAX_USEFUL_ROUNDS:
        return Undecided(view, rounds, None, outcome)
    return Undecided(view, rounds, max(needed, rounds + 1), outcome)


def noise_story(
    check: StoredCheck, summary: CheckSummary, views: Sequence[ItemView], aa: bool
) -> NoiseStory | None:
    """The story of the check's primary ``unstable`` items (None when there is none)."""
    unstable = [v for v in views if v.role != "derived" and v.verdict == "unstable"]
    if not unstable:
        return None
    first, again = rounds_of(check, summary)
    items = [undecided(v, again if v.item.retried else first) for v in unstable]
    order = {v: k for k, v in enumerate(VERDICT_ORDER)}
    items.sort(key=lambda u: (u.needed is None, u.needed or 0, order.get(u.view.verdict, 99), u.view.name))
    methods = {v.item.method for v in unstable}
    return NoiseStory(
        items=items,
        aa=aa,
        rounds=first,
        cpu=bool(methods & {"cpu-time", "cpu-wall"}),
        eager="cuda-events" in methods,
    )


def retry_story(check: StoredCheck, summary: CheckSummary, views: Sequence[ItemView]) -> RetryStory | None:
    retried = [i for i in views if i.item.retried and i.role != "derived"]
    return RetryStory(retried, rounds_of(check, summary)[1]) if retried else None
