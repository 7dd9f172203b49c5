"""Verdicts: baseline against head, per benchmark x params, and the two-stage retry protocol.

This is the rule that decides whether a pull request fails.  ``docs/verdicts.md`` explains every
number to users; ``research/gpu_timing.md`` §6.3 is where the rule comes from.

Stage 1 compares what is stored for the baseline (the merge-base) with what was measured for the
head.  Those were usually measured at different times, so a shift of the whole machine between
the two sessions (another job, a bimodal process state) is invisible to statistics computed
inside each session.  Therefore nothing fails on stage 1 alone while retries are enabled: every
gated timing whose ratio exceeds ``1 + suspect_fraction * threshold`` (regressions included) is a
*suspect*; the pipeline re-measures the suspects, baseline and head interleaved (A B B A ...) in
fresh processes, ``config.retry.rounds`` rounds a side, and :func:`apply_retry` decides each
suspect on that re-measurement alone.  The false-alarm rate of the whole rule is then about
P(suspect) x P(regression on an interleaved re-measurement).

Typical use by ``perfguard check``::

    config = load_config(find_pyproject(repo), threshold=cli_threshold)
    base = [Measurement.from_results(rounds) for rounds in store.results_for(key, base_sha, profile).values()]
    head = [Measurement.from_results(rounds) for rounds in store.results_for(key, head_sha, profile).values()]
    first = compare_suite(base, head, config, broken_impls=failed_verify)
    if first.suspects and config.retry.enabled:
        # the pipeline's job: re-measure first.suspect_keys, baseline and head interleaved
        # (A B B A ...) in fresh processes, config.retry.rounds rounds a side
        result = apply_retry(first, retry_base, retry_head, config)
    else:
        result = first
    store.record_check(..., items=[CheckItemRecord(**item.as_row()) for item in result.items])
    sys.exit(result.exit_code)

API
---
``Verdict``                  regression improvement unchanged unstable new missing broken failed skipped
                             accepted, not affected
``Measurement``              one side of one benchmark x params (rounds of samples, status, unit, metric...)
``Measurement.from_results(rounds)``           -> Measurement from the store's results, one per round
``measurements_from_rounds(rounds)``            -> [Measurement] from rounds of results (grouped by key)
``Item``                     one verdict: a ``CheckItemRecord`` (``check_items`` columns, ``as_row()``)
                             plus what the comparison knows besides
``compare_sides(base, head, config)``          -> Item (a family of one for the p-value adjustment)
``compare_suite(base, head, config, broken_impls)`` -> SuiteComparison (items, suspects, exit_code)
``decide_after_retry(first, retry)``           -> the final Item of one suspect
``apply_retry(first, base, head, config)``     -> SuiteComparison with every suspect decided
``undecided(result)``                          -> retried suspects still unstable (measure more rounds)
``params_key(params)``       canonical "k=v,k=v" (sorted): ``perfguard.store.params_key``

Modules: :mod:`~perfguard.compare.model` (the values in and out, names of verdicts and metrics),
:mod:`~perfguard.compare.rule` (one benchmark x params: statistics, deterministic rules, reasons),
:mod:`~perfguard.compare.stages` (stage 1 over a suite, stage 2 on re-measured suspects).
"""

from __future__ import annotations

from perfguard.compare.model import (
    DERIVED_FROM,
    FAILING_VERDICTS,
    REACH_BENCHMARK,
    STATUSES,
    VERIFY_BENCHMARK,
    Item,
    Measurement,
    SuiteComparison,
    Verdict,
    derived_source,
    describe,
    geometric_mean_ratio,
    measurements_from_rounds,
)
from perfguard.compare.rule import gates
from perfguard.compare.stages import apply_retry, compare_sides, compare_suite, decide_after_retry, undecided
from perfguard.store.records import params_key

__all__ = [
    "DERIVED_FROM",
    "FAILING_VERDICTS",
    "REACH_BENCHMARK",
    "STATUSES",
    "VERIFY_BENCHMARK",
    "Item",
    "Measurement",
    "SuiteComparison",
    "Verdict",
    "apply_retry",
    "compare_sides",
    "compare_suite",
    "decide_after_retry",
    "derived_source",
    "describe",
    "gates",
    "geometric_mean_ratio",
    "measurements_from_rounds",
    "params_key",
    "undecided",
]
