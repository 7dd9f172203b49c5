"""asv's own regression rule, applied to perfguard's rounds so the two can be compared side by side.

:func:`asv_rule` reproduces asv 0.6.6's ``asv compare --factor F`` decision (research/asv.md §4.1)
on numbers that live in perfguard's rounds; :data:`ASV_NOTE` says in the report what it was given.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: asv's significance level (asv/_stats.py ``is_different``; research/asv.md §4.1).
ASV_P_THRESHOLD = 0.002
ASV_NOTE = (
    "asv: asv 0.6.6's compare rule with --factor 1 + threshold, applied to the same stage-1 rounds "
    "(asv sees one number per round: the round's median, which the suite's track_ benchmark "
    "returns). 'track_' is what asv does with this suite: track_ results carry no statistics, so the "
    "factor alone decides, on the median of each side's round values. '+ stats' hands asv the round "
    "values as if they were samples (Mann-Whitney U at p < 0.002 when the sample counts can reach "
    "it, else non-overlapping 99% CIs; asv's own asv._stats and asv_runner.statistics). asv has "
    "no re-measurement: its decision is final on stage 1."
)


@dataclass(frozen=True)
class AsvDecision:
    """What ``asv compare --factor F`` marks one benchmark with (research/asv.md §4.1).

    ``ratio``: head / base of asv's numbers.  ``significant``: asv's ``is_different`` (None when
    asv uses no statistics).  ``test``: ``factor only``, ``mann-whitney``, ``99% CI overlap`` or
    ``n/a`` (a side without numbers).
    """

    ratio: float | None
    worse: bool
    better: bool
    significant: bool | None
    test: str
    factor: float

    @property
    def mark(self) -> str:
        """asv's mark: ``+`` worse, ``-`` better, ``~`` beyond the factor but not significant."""
        if self.ratio is None:
            return "n/a"
        if self.worse:
            return "+"
        if self.better:
            return "-"
        beyond = self.ratio > self.factor or self.ratio * self.factor < 1
        return "~" if beyond and self.significant is False else " "

    def to_json(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "mark": self.mark,
            "worse": self.worse,
            "better": self.better,
            "significant": self.significant,
            "test": self.test,
        }


def asv_rule(
    base: Sequence[float], head: Sequence[float], *, factor: float = 1.2, samples: bool = False
) -> AsvDecision:
    """asv 0.6.6's decision for one benchmark: is head worse than base by more than ``factor``?

    Reproduces ``asv.commands.compare._is_result_better`` (research/asv.md §4.1) on numbers that
    live in perfguard's rounds, not in asv result files (each round is its own asv invocation in a
    scratch directory, so ``asv compare`` has no pair of files to read):

    - ``samples=False`` (asv's ``track_`` results, this suite): no statistics, so the **factor
      alone** decides: worse iff median(head) > factor x median(base).  A track_ benchmark stores
      one number per asv run; each side's several round values are given to asv as their median.
    - ``samples=True``: the values are asv samples; the result is their median (asv_runner's
      ``compute_stats``) and, unless a side has one sample, asv's ``is_different`` must agree:
      two-sided Mann-Whitney U at p < 0.002 when ``p_min = 1/C(n_a + n_b, min(n_a, n_b))`` is below
      0.002, otherwise non-overlapping 99% CIs of the median.  Worse iff significant and the ratio
      exceeds the factor.

    Lower is better (asv knows no direction).  Non-finite values are dropped.
    """
    b = [float(x) for x in base if x is not None and math.isfinite(x)]
    h = [float(x) for x in head if x is not None and math.isfinite(x)]
    if not b or not h:
        return AsvDecision(None, False, False, None, "n/a", factor)
    significant: bool | None = None
    test = "factor only"
    if samples:
        from asv import _stats
        from asv_runner.statistics import compute_stats

        value_b, stats_b = compute_stats(b, 1)
        value_h, stats_h = compute_stats(h, 1)
        if stats_b["repeat"] != 1 and stats_h["repeat"] != 1:  # asv: one sample -> factor alone
            significant = bool(_stats.is_different(b, h, stats_b, stats_h))
            p_min = 1 / math.comb(len(b) + len(h), min(len(b), len(h)))
            test = "mann-whitney" if p_min < ASV_P_THRESHOLD else "99% CI overlap"
    else:
        value_b, value_h = statistics.median(b), statistics.median(h)
    ratio = value_h / value_b if value_b else math.inf
    differs = significant is not False
    return AsvDecision(
        ratio=ratio,
        worse=differs and value_b < value_h / factor,
        better=differs and value_h < value_b / factor,
        significant=significant,
        test=test,
        factor=factor,
    )


def check_asv() -> str | None:
    """None when asv's compare statistics can be imported, else why not (for ``--asv``)."""
    try:
        from asv import _stats  # noqa: F401
        from asv_runner.statistics import compute_stats  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None
