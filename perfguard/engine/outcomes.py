"""What a suite benchmark measured beyond asv's one number, handed to perfguard's round worker.

asv keeps one number per ``track_*`` benchmark; perfguard's verdicts need the per-call samples of
every round, how they were taken, and the work counts' breakdown.  Each suite benchmark therefore
calls :func:`record` with an :class:`Outcome` right before it returns its number.  perfguard's
round worker (:mod:`perfguard.engine.round_worker`) runs the suite's benchmarks in its own process and
:func:`take` s the outcome of each one after asv's ``run`` returned.  Under plain ``asv run`` (one
benchmark per process) nothing takes them and they die with the process: the suite behaves exactly
as asv expects.  Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """One benchmark x params of one process: the number asv gets, and what perfguard keeps too."""

    unit: str
    value: float
    samples: Sequence[float] = ()
    method: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)


_RECORDED: dict[tuple[str, str], Outcome] = {}


def _key(benchmark: str, params: Mapping[str, Any]) -> tuple[str, str]:
    return benchmark, json.dumps(dict(params), sort_keys=True, default=str)


def record(benchmark: str, params: Mapping[str, Any], outcome: Outcome) -> float:
    """Keep ``outcome`` for the worker and return its value (what the ``track_`` method returns)."""
    _RECORDED[_key(benchmark, params)] = outcome
    return outcome.value


def take(benchmark: str, params: Mapping[str, Any]) -> Outcome | None:
    """The outcome recorded for ``benchmark`` x ``params`` in this process (removed), if any."""
    return _RECORDED.pop(_key(benchmark, params), None)
