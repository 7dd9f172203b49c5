"""The checks a record passes before it is written: text, numbers, JSON and datetimes the store keeps.

Every record of :mod:`perfguard.store.records` (and the acceptances, change points and checks of the
store's other modules) calls these in its ``validate()``: a value that SQLite would take and
PostgreSQL refuse (or the other way round) is refused here, on both, before anything is written; a
:class:`RecordError` becomes a :class:`~perfguard.errors.StoreError` naming what could not be
stored (:func:`check_record`).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from perfguard.errors import StoreError

NOTHING_WRITTEN = "nothing was written to the store"

#: The smallest and largest measured amount the store keeps (a sample, a median, a quartile, in the
#: metric's unit: seconds, bytes, FLOP, tokens/s, TFLOP/s, counts).  Nothing measured falls outside
#: (a picosecond; 10^18 FLOP or bytes), and inside it every ratio, product and logarithm of two
#: amounts stays a finite float: 5e-324 s or 1e308 s would overflow them (``OverflowError``).
#: Checked when written (``ResultRecord.validate``) and when read (:mod:`perfguard.store.columns`).
MEASURED_RANGE = (1e-12, 1e18)


class RecordError(ValueError):
    """A record that cannot be stored as it is (the store turns it into a StoreError)."""


def check_record(what: str, validate: Callable[[], None]) -> None:
    """Run one record's ``validate``; a :class:`RecordError` becomes a StoreError naming ``what``."""
    try:
        validate()
    except RecordError as exc:
        raise StoreError(
            f"{what} cannot be stored: {exc}; {NOTHING_WRITTEN}",
            hint="the value came from perfguard itself or a benchmark suite; fix it there (or report a bug)",
        ) from None


def as_float(value: Any) -> float | None:
    """``value`` as a float when it is a real number that fits one (not a bool), else None."""
    if type(value) is float:
        return value
    if not is_number(value):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):  # an int of hundreds of digits: validate() refuses it
        return None


def clean_samples(samples: Sequence[Any]) -> tuple[list[Any], int]:
    """(samples as floats without the NaN / infinite ones, how many were dropped).

    Anything that is not a number is kept as it is, for ``validate()`` to name.
    """
    # What the store reads back (~100 floats a result, thousands of results a check): one C-level
    # sum tells that none is NaN or infinite (an overflow to inf only sends it the slow way).
    if type(samples) is list and all(type(s) is float for s in samples) and math.isfinite(sum(samples)):
        return samples.copy(), 0
    kept: list[Any] = []
    ignored = 0
    for sample in samples:
        number = as_float(sample)
        if number is None:
            kept.append(sample)
        elif math.isfinite(number):
            kept.append(number)
        else:
            ignored += 1
    return kept, ignored


def show(value: Any) -> str:
    """A value for a message, cut short (a bogus sample can be a 400-digit integer)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}... ({type(value).__name__} of {len(text)} characters)"


def is_number(value: Any) -> bool:
    """A real number (numpy scalars included), but not a bool."""
    if type(value) is float or type(value) is int:  # the common cases, without the ABC check
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def require_text(name: str, value: Any, max_length: int, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise RecordError(f"{name} must be text, not {type(value).__name__}")
    if not value and not allow_empty:
        raise RecordError(f"{name} is empty")
    if len(value) > max_length:
        raise RecordError(f"{name} is {len(value)} characters long; the store keeps at most {max_length}")
    if "\x00" in value:  # PostgreSQL refuses NUL in text, SQLite would keep it: refuse on both
        raise RecordError(f"{name} {value[:40]!r} contains a NUL character")


def require_measured(name: str, value: float, unit: str) -> None:
    """``value`` is within :data:`MEASURED_RANGE` (what a measurement can be), or zero (a count:
    :data:`perfguard.metrics.ZERO_VALID_METRICS`; whether zero fits the metric is the caller's check)."""
    low, high = MEASURED_RANGE
    if value != 0.0 and not low <= value <= high:
        raise RecordError(
            f"{name} is {value!r} {unit}, outside the range of a measured amount ({low:g} to {high:g}): "
            "not a measurement"
        )


def choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise RecordError(f"{name} is {value!r}; expected one of {', '.join(choices)}")


def require_json(name: str, value: Any, *, mapping: bool = False) -> None:
    if mapping and not isinstance(value, Mapping):
        raise RecordError(f"{name} must be a mapping, not {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"{name} cannot be stored as JSON: {exc}") from None


def require_aware(name: str, value: Any) -> None:
    if not isinstance(value, datetime):
        raise RecordError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise RecordError(f"{name} {value.isoformat()} has no time zone; use e.g. datetime.now(timezone.utc)")
