"""Process-to-process noise: how much fresh processes of the same code disagree, per benchmark.

:func:`process_noise` reads every round of HEAD the A/A phase measured (2 x rounds x aa fresh
processes of the same code) and gives one :class:`NoiseRow` per benchmark x params; a gated timing
whose processes disagree by more than :data:`CV_FLAG_MAX` is flagged, with what usually causes it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfguard import stats
from perfguard.compare import gates
from perfguard.config import Config
from perfguard.errors import error_summary
from perfguard.store.records import ResultRecord
from perfguard.store.result_info import ResultInfo

#: Process-noise flag: a gated timing of at least this many seconds ...
CV_FLAG_MIN_SECONDS = 1e-4
#: ... whose CV of round medians exceeds this.  A graph-replayed GPU timing reaches ~0.4%
#: (research/gpu_timing.md §11); above 1% the processes of the same code disagree noticeably,
#: and from 5% (``max_round_cv``) the rule calls the benchmark noisy.
CV_FLAG_MAX = 0.01


@dataclass(frozen=True)
class NoiseRow:
    """One benchmark x params over every round of HEAD: typical value and how much processes agree.

    ``median``: the median of the round medians.  ``process_cv``: CV of the round medians (the
    process-to-process noise; ``None`` with one round).  ``spread``: largest / smallest round median.
    ``iqr_median`` / ``iqr_max``: within-round IQR / median, median and largest over the rounds.
    ``flagged``: a gated timing of at least 0.1 ms whose process CV exceeds 1%.
    """

    benchmark: str
    impl: str
    params: dict[str, Any]
    params_key: str
    metric: str
    unit: str
    gated: bool
    status: str
    method: str | None
    rounds: int
    samples_per_round: int | None = None
    median: float | None = None
    process_cv: float | None = None
    spread: float | None = None
    iqr_median: float | None = None
    iqr_max: float | None = None
    flagged: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _iqr_ratio(samples: np.ndarray) -> float:
    """Within-round IQR / median of one round's samples (numpy's default quantiles, as stats uses)."""
    q25, median, q75 = (float(x) for x in np.quantile(samples, [0.25, 0.5, 0.75]))
    return (q75 - q25) / abs(median) if median else 0.0


def _flag_note(method: str | None, cv: float) -> str:
    why = f"process CV {cv:.1%} > {CV_FLAG_MAX:.0%}"
    if method == "cuda-events":
        return f"{why}: timed eagerly (no CUDA graph); launch-bound code varies between processes"
    if method == "cpu-time":
        return f"{why}: CPU processes disagree (a shared or frequency-scaling CPU)"
    return f"{why}: fresh processes of the same code disagree"


def process_noise(rounds: Sequence[Sequence[ResultRecord]], config: Config) -> list[NoiseRow]:
    """One row per measured benchmark x params (derived throughput rows left out: same numbers).

    ``rounds``: every round of the same code (one list of results per fresh-process round).
    """
    groups: dict[tuple[str, str], list[ResultRecord]] = {}
    for results in rounds:
        for r in results:
            if r.metric in ("throughput", "efficiency") or ResultInfo.from_json(r.info).derived_from:
                continue
            groups.setdefault(r.key, []).append(r)
    rows = []
    for group in groups.values():
        first = group[0]
        ok = [r for r in group if r.status == "ok"]
        failed = [r for r in group if r.status == "failed"]
        status = "failed" if failed else ("ok" if ok else "skipped")
        method = next((r.method for r in ok if r.method), first.method)
        blank = NoiseRow(
            benchmark=first.benchmark,
            impl=first.impl,
            params=dict(first.params),
            params_key=first.params_key,
            metric=first.metric,
            unit=first.unit,
            gated=gates(config, first),
            status=status,
            method=method,
            rounds=len(group),
        )
        if status != "ok":
            said = error_summary((failed or group)[0].error or status)
            rows.append(replace(blank, note=f"{status}: {said}"))
            continue
        side = stats.Samples.of([list(r.samples) if r.samples else [r.value] for r in ok])
        iqrs = [_iqr_ratio(r) for r in side.rounds if r.size >= 2]
        median = statistics.median(side.round_medians) if side.round_medians else None
        cv = side.noise.round_cv
        flagged = bool(
            blank.gated
            and first.metric == "time"
            and median is not None
            and median >= CV_FLAG_MIN_SECONDS
            and cv is not None
            and cv > CV_FLAG_MAX
        )
        rows.append(
            replace(
                blank,
                rounds=side.k,
                samples_per_round=int(statistics.median([r.size for r in side.rounds])) if side.k else None,
                median=median,
                process_cv=cv,
                spread=side.noise.round_spread if side.k >= 2 else None,
                iqr_median=statistics.median(iqrs) if iqrs else None,
                iqr_max=max(iqrs) if iqrs else None,
                flagged=flagged,
                note=_flag_note(method, cv) if flagged and cv is not None else "",
            )
        )
    return sorted(rows, key=lambda r: (r.benchmark, r.impl, r.params_key))
