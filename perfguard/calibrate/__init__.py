"""Calibration of this machine: how noisy it is, and what perfguard's verdict rule makes of that.

Why: the false-alarm and detection rates in ``docs/verdicts.md`` come from a simulation with
assumed noise models; what the rule does on a given runner depends on that runner's real noise
(process-to-process spread, a bimodal launch-bound benchmark, a busy neighbour on a shared host).
``perfguard calibrate`` measures it there, on the commit HEAD, with the real pipeline (asv rounds
in fresh processes, :func:`perfguard.compare.compare_suite`, the interleaved re-measurement of
suspects and :func:`perfguard.compare.apply_retry`), so a maintainer can see before trusting a new
runner whether the gate is quiet on unchanged code and catches a slowdown that is really there.
User documentation: ``docs/calibration.md`` (also the JSON schema, ``perfguard-calibration/1``).

What is measured (:class:`Calibrator`):

1. **A/A + process noise**: HEAD is measured as two sides, A and B, interleaved (A B B A ...),
   ``rounds`` fresh-process rounds each, ``aa`` times.  Each repetition is compared with the full
   rule (stage 1, then the suspects re-measured A and B interleaved, ``config.retry.rounds`` a side,
   exactly as ``perfguard check`` does): every gated ``regression`` is a false alarm.  The same
   rounds (2 x rounds x aa of the same code) give each benchmark's process-to-process CV.
2. **Planted slowdowns**: for each fraction f a temporary clone of HEAD gets a commit that makes
   every built module's forward do extra work of f times its own (:func:`planted_source`; the
   harness plants it, never product code).  HEAD and every planted commit are measured interleaved
   on the ``Forward.track_time`` benchmarks and each planted commit is compared with HEAD by the
   full rule: the share of gated comparisons flagged ``regression`` is the detection rate.
3. **asv side by side**: asv's own rule (:func:`asv_rule`) is applied to the same stage-1 data of
   every A/A and planted pair.
4. **Time** per phase (:class:`PhaseClock`): wall clock, and the measured rounds' own wall time
   (on CUDA: the time the GPU was held by benchmark processes).

Modules (data flows down the list; none imports the CLI):

- :mod:`~perfguard.calibrate.planting`: the planted slowdowns (generated source, temporary clones,
  the forward-only selection);
- :mod:`~perfguard.calibrate.asv_rule`: asv's own decision rule on the same rounds;
- :mod:`~perfguard.calibrate.noise`: process-to-process noise per benchmark;
- :mod:`~perfguard.calibrate.protocol`: the :class:`Calibrator` over a :class:`Measurer` (what to
  measure, each pair decided as ``perfguard check`` decides it), the time per phase;
- :mod:`~perfguard.calibrate.report`: :class:`Calibration`, as JSON, tables and Markdown (a Jinja
  template, as every report);
- :mod:`~perfguard.calibrate.session`: :func:`calibrate`, the whole calibration over a bench (what
  ``perfguard calibrate`` and ``perfguard.api.calibrate`` call).

API
---
``calibrate(profile=, bench_regex=, rounds=, aa=, planted=, repeats=, use_asv=, db_url=, reporter=)``
                                            -> ``Calibration``: this machine, on the commit HEAD
``parse_fractions(text)``                   "0.1,0.2" -> (0.1, 0.2); ValueError on bad input
``planted_source(fraction, attribute)``     the Python appended to the declared registry module of a clone
``planted_clone(root, head, f, parent)``    context manager: a clone with the planted commit
``forward_selection(bench)``                asv ``--bench`` regexes: Forward.track_time within bench
``asv_rule(base, head, factor, samples)``   asv 0.6.6's compare decision (``AsvDecision``)
``process_noise(rounds, config)``           one :class:`NoiseRow` per benchmark x params
``Calibrator(measure, plan, config, clock, say).run()``  -> ``Findings``
``Calibration(...)``                        the report: ``to_json()``, ``to_markdown()``, ``tables()``
"""

from __future__ import annotations

from perfguard.calibrate.asv_rule import ASV_NOTE, ASV_P_THRESHOLD, AsvDecision, asv_rule, check_asv
from perfguard.calibrate.noise import CV_FLAG_MAX, CV_FLAG_MIN_SECONDS, NoiseRow, process_noise
from perfguard.calibrate.planting import (
    MAX_FRACTION,
    PLANTED_BENCHMARK,
    PlantedCommit,
    forward_selection,
    meta_commits,
    parse_fractions,
    percent,
    planted_clone,
    planted_key,
    planted_source,
)
from perfguard.calibrate.protocol import (
    _MEASURE_AA,
    _MEASURE_PLANTED,
    _RETRY_AA,
    _RETRY_PLANTED,
    _VERDICTS,
    COMPARED,
    HEAD,
    PURPOSE,
    BenchmarkVerdicts,
    Calibrator,
    Comparison,
    Findings,
    Measurer,
    Phase,
    PhaseClock,
    Plan,
)
from perfguard.calibrate.report import DILUTION_NOTE, SCHEMA, Calibration, TableData, Tally
from perfguard.calibrate.session import BenchMeasurer, calibrate

__all__ = [
    "ASV_NOTE",
    "ASV_P_THRESHOLD",
    "COMPARED",
    "CV_FLAG_MAX",
    "CV_FLAG_MIN_SECONDS",
    "DILUTION_NOTE",
    "HEAD",
    "MAX_FRACTION",
    "PLANTED_BENCHMARK",
    "PURPOSE",
    "SCHEMA",
    "_MEASURE_AA",
    "_MEASURE_PLANTED",
    "_RETRY_AA",
    "_RETRY_PLANTED",
    "_VERDICTS",
    "AsvDecision",
    "BenchMeasurer",
    "BenchmarkVerdicts",
    "Calibration",
    "Calibrator",
    "Comparison",
    "Findings",
    "Measurer",
    "NoiseRow",
    "Phase",
    "PhaseClock",
    "Plan",
    "PlantedCommit",
    "TableData",
    "Tally",
    "asv_rule",
    "calibrate",
    "check_asv",
    "forward_selection",
    "meta_commits",
    "parse_fractions",
    "percent",
    "planted_clone",
    "planted_key",
    "planted_source",
    "process_noise",
]
