"""Column types that check every value they read back, so a damaged store is an error, not a crash.

A store is a file (or a database) that anyone with access can change, and one written by an older
perfguard may hold values this one refuses to write (samples of 5e-324 seconds).  Arithmetic on such
a value fails far from where it was read (an ``OverflowError`` in a chart, a ``TypeError`` on text in
a number column), so every column of the models is declared with one of these types: the database
sees the plain type (the schema and its migrations do not change), and each value read passes its
column's check on the way out: JSON that decodes to the declared shape, dates that parse, numbers
that are numbers (finite where they must be; measured amounts within
:data:`~perfguard.store.record_checks.MEASURED_RANGE`), text that is text and, for the columns with a
fixed vocabulary, one of its words.  A value that fails raises :class:`StoredValueError` naming
its ``table.column``; the store turns it into a :class:`~perfguard.errors.StoreError` (exit 2).
Booleans keep SQLAlchemy's own type (``IS false`` needs it on PostgreSQL); anything reads back as
True or False.

Writes are checked before they start by the records (:mod:`perfguard.store.records`), with the same
bounds; these types only read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, Float, Integer, MetaData, String, Text
from sqlalchemy.types import TypeDecorator

from perfguard.store.record_checks import MEASURED_RANGE


class StoredValueError(ValueError):
    """A value read from the store that perfguard cannot use (it was changed, or is damaged)."""


class Checked(TypeDecorator[Any]):
    """A column type whose values are checked when read (see the module docstring).

    ``where`` (``table.column``) and ``nullable`` are set per column by :func:`name_columns`.
    Subclasses implement :meth:`check`: the value (converted if need be), or ``ValueError`` saying
    what is wrong with it; and :meth:`accepts`: a cheap test that lets the common value through
    without calling :meth:`check` (the history reads ~20 columns of every point: docs/perf/store.md).
    """

    cache_ok = True
    where = "a column"
    nullable = True

    def check(self, value: Any) -> Any:
        return value

    def accepts(self) -> Callable[[Any], bool]:
        """A test of a converted value that, when true, means :meth:`check` would return it as it is."""
        return lambda value: False

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], Any]:
        """The dialect's own conversion (JSON decoding, date parsing), then :meth:`check`; any
        failure of either is a :class:`StoredValueError` naming the column and the value."""
        convert = super().result_processor(dialect, coltype)
        accepts, check, nullable, read = self.accepts(), self.check, self.nullable, self.read

        def process(raw: Any) -> Any:
            if raw is None and nullable:
                return None
            try:
                value = raw if convert is None else convert(raw)
                return value if accepts(value) else check(value)
            except (ValueError, TypeError, ArithmeticError):
                return read(raw, convert)  # raises StoredValueError with the reason

        return process

    def read(self, raw: Any, convert: Callable[[Any], Any] | None = None) -> Any:
        """``raw`` (as the database driver returned it) converted by ``convert`` and checked."""
        try:
            value = convert(raw) if convert is not None else raw
            if value is None:
                if self.nullable:
                    return None
                raise ValueError("NULL in a column that is never empty")
            return self.check(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise StoredValueError(f"{self.where} holds {_show(raw)}: {exc}") from None


class StoredText(Checked):
    """``VARCHAR(length)``; ``choices``: the only words it may hold (metric, direction, status)."""

    cache_ok = True

    impl = String

    def __init__(self, length: int | None = None, *, choices: Sequence[str] = ()) -> None:
        super().__init__(length)
        self.choices = tuple(choices)

    def accepts(self) -> Callable[[Any], bool]:
        return frozenset(self.choices).__contains__ if self.choices else str.__instancecheck__

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"not text but {type(value).__name__}")
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}")
        return value


class StoredLongText(StoredText):
    """``TEXT``: subjects, reasons, error messages, command lines."""

    cache_ok = True

    impl = Text


class StoredInt(Checked):
    """``INTEGER`` that reads back as an ``int``; ``minimum``: the smallest it may be."""

    cache_ok = True

    impl = Integer

    def __init__(self, *, minimum: int | None = None) -> None:
        super().__init__()
        self.minimum = minimum

    def accepts(self) -> Callable[[Any], bool]:
        minimum = self.minimum if self.minimum is not None else -math.inf
        return lambda value: type(value) is int and value >= minimum

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"not an integer but {type(value).__name__}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"less than {self.minimum}")
        return value


class StoredFloat(Checked):
    """``FLOAT`` that reads back as a number (never NaN).

    ``finite``: never infinite either.  ``measured``: a measured amount (a median, a quartile, a
    step's before and after): finite and within :data:`MEASURED_RANGE`, as the writer requires.
    """

    cache_ok = True

    impl = Float

    def __init__(self, *, finite: bool = False, measured: bool = False) -> None:
        super().__init__()
        self.finite = finite or measured
        self.measured = measured

    def accepts(self) -> Callable[[Any], bool]:
        if self.measured:
            low, high = MEASURED_RANGE
            return lambda value: type(value) is float and (low <= value <= high or value == 0.0)
        if self.finite:
            return lambda value: type(value) is float and -math.inf < value < math.inf
        return lambda value: type(value) is float and value == value  # not NaN

    def check(self, value: Any) -> float:
        return _number(value, finite=self.finite, measured=self.measured)


class StoredJSON(Checked):
    """``JSON`` that decodes to ``shape`` (a mapping or a list); ``samples``: a list of measured
    amounts (a result's raw samples)."""

    cache_ok = True

    impl = JSON

    def __init__(self, shape: type = dict, *, samples: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.samples = samples

    def accepts(self) -> Callable[[Any], bool]:
        if self.samples:
            return super().accepts()
        return self.shape.__instancecheck__

    def decode(self, text: Any) -> Any:
        """A value selected as text (``CAST(column AS TEXT)``), decoded and checked."""
        return self.read(text, lambda raw: json.loads(raw) if isinstance(raw, str) else raw)

    def check(self, value: Any) -> Any:
        if not isinstance(value, self.shape):
            raise TypeError(f"not a JSON {'object' if self.shape is dict else 'array'}")
        if self.samples:
            # Thousands of results of ~100 samples each are read per check: C-level checks first.
            if not all(type(s) is float for s in value):
                value = [_number(s, finite=True, measured=True) for s in value]
            elif value and not (MEASURED_RANGE[0] <= min(value) and max(value) <= MEASURED_RANGE[1]):
                low, high = MEASURED_RANGE
                bad = next((x for x in value if x != 0.0 and not low <= x <= high), None)
                # zero is a count or an exact result (metrics.ZERO_VALID_METRICS), never out of range
                if bad is not None:
                    raise ValueError(_outside(bad))
        return value


class UTCDateTime(Checked):
    """A timestamp stored in UTC and always read back timezone-aware.

    SQLite has no time zones: SQLAlchemy writes the wall-clock fields and drops the offset, so
    ``10:00+02:00`` would sort after ``09:00+00:00``.  Converting to UTC on the way in makes
    ordering by date correct on every backend, and tagging UTC on the way out makes SQLite and
    PostgreSQL return the same values.  Naive datetimes are refused by the store before writing.
    """

    cache_ok = True

    impl = DateTime(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware datetime")
        return value.astimezone(timezone.utc)

    def check(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise TypeError(f"not a date but {type(value).__name__}")
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def name_columns(metadata: MetaData) -> None:
    """Give each checked column its own type instance that knows its ``table.column`` and whether
    it may be NULL (the models share one instance per annotation, e.g. every ``dict`` column)."""
    for table in metadata.tables.values():
        for column in table.columns:
            if isinstance(column.type, Checked):
                typed = column.type.copy()
                typed.where = f"{table.name}.{column.name}"
                typed.nullable = bool(column.nullable)
                column.type = typed


def _number(value: Any, *, finite: bool, measured: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number but {type(value).__name__}")
    number = float(value)
    if math.isnan(number) or (finite and math.isinf(number)):
        raise ValueError("not a finite number")
    if measured and number != 0.0 and not MEASURED_RANGE[0] <= number <= MEASURED_RANGE[1]:
        raise ValueError(_outside(number))
    return number


def _outside(number: float) -> str:
    low, high = MEASURED_RANGE
    return f"{number!r} is outside the range of a measured amount ({low:g} to {high:g})"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
