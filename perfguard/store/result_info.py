"""What perfguard reads from a result's ``info``: one typed view, one validating reader.

``ResultRecord.info`` is a JSON object beside the numbers (the ``result_data.info`` column): the
suite, the round worker and the timer put there what a reader of the result needs and the columns
do not hold.  It is JSON written by the suite under measurement and by older or newer perfguards, so
perfguard never reads its keys by hand: :meth:`ResultInfo.from_json` reads the keys perfguard uses,
each checked for its type, and gives a frozen :class:`ResultInfo`.  A key that is missing or of the
wrong type reads as absent (None, or 0 for a count); the keys perfguard does not read (``graph_error``,
``cost``, the case's ``config``, ...) stay in ``info`` for people and are not part of the view.

The keys, and who writes them:

- ``derived_from``: the forward timing a tokens/s or TFLOP/s result is computed from
  (:mod:`perfguard.engine.round_output`);
- ``param_names``: the suite's parameter order (a JSON column on PostgreSQL does not keep key order;
  :mod:`perfguard.engine.rounds`);
- ``settings``: the timer's pinned settings (:mod:`perfguard.engine.timing`);
- ``path``: the code path's fingerprint, ``{kind, digest, names}``
  (:meth:`perfguard.engine.passes.Pass.path`);
- ``breakdown``: the work metrics' per-op (CPU) or per-kernel (CUDA) counts, ``{kind, counts}``
  (the suite);
- ``underneath``: the profiler's breakdown of a re-measured case, ``{kind, source, rows: {name:
  [count, ms]}}`` (:func:`perfguard.engine.work.profile_breakdown`);
- ``steps_s``: the running seconds per measuring step of the result's pass
  (:mod:`perfguard.engine.passes`);
- ``tokens``, ``forward_flops``: the case's tokens and attended-pair FLOPs per forward call, what
  tokens/s and TFLOP/s are derived from (:meth:`perfguard.engine.cases.Case.info`);
- ``ignored_samples``: NaN / infinite samples dropped from ``samples``
  (:class:`~perfguard.store.records.ResultRecord`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Key of ``ResultRecord.info`` that counts the NaN / infinite samples dropped from ``samples``.
IGNORED_SAMPLES = "ignored_samples"


def _number(value: Any) -> float | None:
    """A finite real number (not a bool) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _count(value: Any) -> int:
    """A count (an int or a whole float, not a bool), else 0."""
    number = _number(value)
    return int(number) if number is not None else 0


def _names(value: Any) -> tuple[str, ...] | None:
    """A JSON list of names: its strings, in order; None when it is not a list."""
    if not isinstance(value, (list, tuple)):
        return None
    return tuple(v for v in value if isinstance(v, str))


@dataclass(frozen=True)
class CodePath:
    """The fingerprint of the code path a timing ran: the timed graph's CUDA kernels, or on the CPU the
    multiset of aten ops one call dispatches (issue 26).  Two results ran the same path when their
    ``digest`` is equal."""

    kind: str  # "CUDA kernels" | "aten ops" ("" when not said)
    digest: str
    names: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, value: Any) -> CodePath | None:
        """``info["path"]``; None unless it is an object with a text ``digest``."""
        if not isinstance(value, Mapping) or not isinstance(value.get("digest"), str):
            return None
        names = value.get("names")
        return cls(
            kind=str(value.get("kind") or ""),
            digest=value["digest"],
            names=tuple(str(n) for n in names) if isinstance(names, list) else (),
        )


@dataclass(frozen=True)
class Breakdown:
    """What one call does, per aten op (CPU) or CUDA kernel: counts, and where a profiler measured
    it, milliseconds (the report's "what changed underneath")."""

    kind: str  # "aten ops" | "CUDA kernels" ("" when not said)
    source: str  # how it was measured ("" when not said)
    counts: Mapping[str, int]
    ms: Mapping[str, float] | None = None  # None: counts only (the work metrics' breakdown)

    @property
    def timed(self) -> bool:
        return self.ms is not None

    @classmethod
    def counted(cls, value: Any) -> Breakdown | None:
        """``info["breakdown"]``: ``{kind, counts: {name: count}}``; None unless an object."""
        if not isinstance(value, Mapping):
            return None
        raw = value.get("counts")
        counts = {str(n): _count(c) for n, c in raw.items()} if isinstance(raw, Mapping) else {}
        return cls(kind=_text(value.get("kind")), source=_text(value.get("source")), counts=counts)

    @classmethod
    def profiled(cls, value: Any) -> Breakdown | None:
        """``info["underneath"]``: ``{kind, source, rows: {name: [count, ms]}}``; None unless an object.

        A row that is not a ``[count, ms]`` pair of numbers is left out.
        """
        if not isinstance(value, Mapping):
            return None
        raw = value.get("rows")
        counts: dict[str, int] = {}
        ms: dict[str, float] = {}
        for name, row in raw.items() if isinstance(raw, Mapping) else ():
            if not isinstance(row, (list, tuple)) or len(row) < 2:
                continue
            count, millis = _number(row[0]), _number(row[1])
            if count is None or millis is None:
                continue
            counts[str(name)], ms[str(name)] = int(count), millis
        return cls(kind=_text(value.get("kind")), source=_text(value.get("source")), counts=counts, ms=ms)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class ResultInfo:
    """The keys of a result's ``info`` that perfguard reads, typed (see the module docstring)."""

    derived_from: str | None = None
    param_names: tuple[str, ...] | None = None
    settings: Mapping[str, Any] | None = None
    path: CodePath | None = None
    breakdown: Breakdown | None = None
    underneath: Breakdown | None = None
    steps_s: Mapping[str, float] | None = None
    tokens: float | None = None
    forward_flops: float | None = None
    ignored_samples: int = 0

    @classmethod
    def from_json(cls, info: Any) -> ResultInfo:
        """The view of ``info`` (anything: a result read from a store, or handed over by a worker)."""
        if not isinstance(info, Mapping):
            return cls()
        derived = info.get("derived_from")
        settings = info.get("settings")
        steps = info.get("steps_s")
        return cls(
            derived_from=derived if isinstance(derived, str) and derived else None,
            param_names=_names(info.get("param_names")),
            settings=dict(settings) if isinstance(settings, Mapping) else None,
            path=CodePath.from_json(info.get("path")),
            breakdown=Breakdown.counted(info.get("breakdown")),
            underneath=Breakdown.profiled(info.get("underneath")),
            steps_s=(
                {str(k): n for k, v in steps.items() if (n := _number(v)) is not None}
                if isinstance(steps, Mapping)
                else None
            ),
            tokens=_number(info.get("tokens")),
            forward_flops=_number(info.get("forward_flops")),
            ignored_samples=_count(info.get(IGNORED_SAMPLES)),
        )
