"""``[tool.perfguard]`` in ``pyproject.toml``: thresholds, noise gates, retry, overrides.

Thresholds live in the repository, next to the code they guard, and change through review like
the code does (peers.md §14 item 7: server-side thresholds go stale).  Every key, its default and
the reason for the default are documented in ``docs/verdicts.md`` ("Configuration").

Precedence of overrides: **the last matching ``[[tool.perfguard.override]]`` wins**, key by key
(an override that only sets ``gate`` keeps the threshold an earlier one set).  This is the rule of
CODEOWNERS and .gitignore: put the general rules first and the exceptions after them.  The CLI's
``--threshold`` replaces the global ``threshold`` only (and ``memory_threshold`` when that is not
set); overrides keep their own thresholds.

API
---
``load_config(path=None, *, threshold=None) -> Config``  read a pyproject.toml (None or a file
                                                      without the table: the defaults)
``find_pyproject(start) -> Path | None``             the nearest pyproject.toml at or above start
``parse_config(table, source=...) -> Config``        validate an already parsed table
``Config.rule_for(impl, benchmark, metric, params)``  -> :class:`Rule` for one item
``Config.with_threshold(t)``                         the CLI's ``--threshold``
``Config.to_dict()``                                 JSON-able settings (stored with each check)
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from perfguard.errors import ConfigError
from perfguard.metrics import ERROR, NAMES, WORK_METRICS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MiB = 1024 * 1024

# Bounds of the integer settings, checked when the file is read (before anything is measured): a
# value beyond them would fail later, after minutes of measuring, or never finish (1e17 rounds).
#: Rounds a side (and retry rounds): each is a fresh process of the whole selection.
MAX_ROUNDS = 1_000
#: ``memory_floor_bytes``: 1 EiB, beyond any GPU's memory.
MAX_BYTES = 2**60


#: The default accuracy floor per dtype: its unit roundoff (half the distance from 1 to the next
#: number), the relative error of storing one exact value.  An error that stays below it after
#: doubling is rounding noise, not a change of the algorithm.
ACCURACY_FLOORS = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-9, "float16": 2.0**-11}


_TOP_KEYS = {
    "threshold",
    "memory_threshold",
    "memory_floor_bytes",
    "work_threshold",
    "accuracy_threshold",
    "accuracy_floor",
    "alpha",
    "confidence",
    "max_iqr_ratio",
    "max_round_cv",
    "suspect_fraction",
    "rounds",
    "retry",
    "override",
    # the guarded package's declaration: read and checked by perfguard.declaration
    "package",
    "registry",
    "source",
}
_RETRY_KEYS = {"enabled", "rounds", "max_rounds"}
_SELECTOR_KEYS = ("impl", "benchmark", "metric", "params")
_SETTING_KEYS = ("threshold", "gate")
_OVERRIDE_KEYS = {*_SELECTOR_KEYS, *_SETTING_KEYS, "note"}


@dataclass(frozen=True)
class Override:
    """One ``[[tool.perfguard.override]]``: which items it selects and what it changes.

    Selectors (all given ones must match): ``impl`` and ``benchmark`` are shell globs
    (``multihead_*``, ``Forward*``), ``metric`` one of :data:`perfguard.metrics.NAMES`, ``params`` a
    table whose every key must be in the item's params with a value matching (glob on the value's text:
    ``{seq_len = 256}``, ``{dtype = "*16"}``).  Settings: ``threshold`` (for memory items, the
    memory threshold), ``gate = false`` (report only, never fails) or ``true``.  ``note`` is free
    text shown in reports (why the exception exists).
    """

    impl: str | None = None
    benchmark: str | None = None
    metric: str | None = None
    params: Mapping[str, Any] | None = None
    threshold: float | None = None
    gate: bool | None = None
    note: str | None = None

    def matches(self, impl: str, benchmark: str, metric: str, params: Mapping[str, Any]) -> bool:
        if self.impl is not None and not fnmatchcase(impl, self.impl):
            return False
        if self.benchmark is not None and not fnmatchcase(benchmark, self.benchmark):
            return False
        if self.metric is not None and metric != self.metric:
            return False
        if self.params:
            for key, want in self.params.items():
                if key not in params or not fnmatchcase(str(params[key]), str(want)):
                    return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={getattr(self, k)!r}" for k in ("impl", "benchmark", "metric") if getattr(self, k)]
        if self.params:
            parts.append(f"params={dict(self.params)!r}")
        return " ".join(parts)


@dataclass(frozen=True)
class Rule:
    """The settings in force for one item after the overrides.

    ``gate`` is ``None`` when no override decided it (the metric's own default applies: time and
    memory gate, throughput and TFLOP/s are reported only).  ``source`` says where the threshold
    and gate came from, for the report.
    """

    threshold: float
    gate: bool | None
    source: str
    note: str | None = None


@dataclass(frozen=True)
class RetryConfig:
    """Re-measurement of suspects: on/off, rounds per side (interleaved, fresh processes), and the
    most rounds a side a suspect still undecided (``unstable``) is extended to, ``rounds`` at a
    time (default: three times ``rounds``, three looks; docs/verdicts.md, "Stage 2")."""

    enabled: bool = True
    rounds: int = 5
    max_rounds: int = 15


@dataclass(frozen=True)
class Config:
    """Every setting the verdicts depend on; the defaults are the documented product defaults."""

    threshold: float = 0.20
    memory_threshold: float | None = None  # None: the same as threshold
    memory_floor_bytes: int = 64 * MiB
    work_threshold: float | None = None  # None: the same as threshold
    # the accuracy metric (perfguard.engine.accuracy): a regression is an error that grew by more
    # than 1 + accuracy_threshold (default: doubled) and ends above the floor; None: the floor is
    # the dtype's unit roundoff (ACCURACY_FLOORS), below which an error is rounding, not a change
    accuracy_threshold: float = 1.0
    accuracy_floor: float | None = None
    alpha: float = 0.01
    confidence: float = 0.95
    max_iqr_ratio: float = 0.10
    max_round_cv: float = 0.05
    suspect_fraction: float = 0.75
    rounds: int = 3  # rounds (fresh processes) a side of a measurement (research/gpu_timing.md §0)
    retry: RetryConfig = field(default_factory=RetryConfig)
    overrides: tuple[Override, ...] = ()
    source: str = "defaults"
    threshold_source: str = "default"

    @property
    def effective_memory_threshold(self) -> float:
        return self.threshold if self.memory_threshold is None else self.memory_threshold

    @property
    def effective_work_threshold(self) -> float:
        return self.threshold if self.work_threshold is None else self.work_threshold

    def accuracy_floor_for(self, dtype: str | None) -> float:
        """The error below which a change is rounding: ``accuracy_floor``, else the dtype's roundoff."""
        if self.accuracy_floor is not None:
            return self.accuracy_floor
        return ACCURACY_FLOORS.get(str(dtype), ACCURACY_FLOORS["float32"])

    def with_threshold(self, threshold: float | None) -> Config:
        """The configuration with the CLI's ``--threshold`` as the global threshold (None: unchanged)."""
        if threshold is None:
            return self
        value = _fraction("--threshold", threshold, "the command line")
        return replace(self, threshold=value, threshold_source="--threshold")

    def rule_for(
        self, impl: str, benchmark: str, metric: str, params: Mapping[str, Any] | None = None
    ) -> Rule:
        """Threshold and gate for one benchmark x params: defaults, then every matching override in order."""
        params = params or {}
        if metric == "memory":
            threshold = self.effective_memory_threshold
            source = "memory_threshold" if self.memory_threshold is not None else self.threshold_source
        elif metric in WORK_METRICS:
            threshold = self.effective_work_threshold
            source = "work_threshold" if self.work_threshold is not None else self.threshold_source
        elif metric == ERROR:
            threshold, source = self.accuracy_threshold, "accuracy_threshold"
        else:
            threshold = self.threshold
            source = self.threshold_source
        gate: bool | None = None
        note: str | None = None
        applied = []
        for i, ov in enumerate(self.overrides):
            if not ov.matches(impl, benchmark, metric, params):
                continue
            applied.append(f"override #{i + 1} ({ov.describe()})")
            if ov.threshold is not None:
                threshold = ov.threshold
            if ov.gate is not None:
                gate = ov.gate
            if ov.note is not None:
                note = ov.note
        if applied:
            source = ", ".join(applied)
        return Rule(threshold=threshold, gate=gate, source=source, note=note)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON-able values (stored with every check)."""
        return {
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "memory_threshold": self.effective_memory_threshold,
            "memory_floor_bytes": self.memory_floor_bytes,
            "work_threshold": self.effective_work_threshold,
            "accuracy_threshold": self.accuracy_threshold,
            "accuracy_floor": self.accuracy_floor,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "max_iqr_ratio": self.max_iqr_ratio,
            "max_round_cv": self.max_round_cv,
            "suspect_fraction": self.suspect_fraction,
            "rounds": self.rounds,
            "retry": {
                "enabled": self.retry.enabled,
                "rounds": self.retry.rounds,
                "max_rounds": self.retry.max_rounds,
            },
            "overrides": [
                {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in vars(ov).items() if v is not None}
                for ov in self.overrides
            ],
            "source": self.source,
        }


# --------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or one of its parents."""
    start = start.resolve()
    for d in (start, *start.parents):
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, *, threshold: float | None = None) -> Config:
    """Read ``[tool.perfguard]`` from ``path`` (a pyproject.toml); apply ``--threshold``.

    No path, or a file without the table, gives the defaults.  A file that is not valid TOML or a
    table with an unknown key or a bad value raises :class:`~perfguard.errors.ConfigError` naming
    the file, the key and the value.
    """
    if path is None:
        return Config().with_threshold(threshold)
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist", hint="pass the project's pyproject.toml") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}", hint="fix the file's syntax") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path} is not valid UTF-8 (byte {e.object[e.start : e.start + 1]!r} at offset {e.start}): "
            "TOML files are UTF-8",
            hint="save the file as UTF-8",
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{path} nests arrays or tables too deeply to be read",
            hint="a pyproject.toml needs a few levels of nesting; remove the deeply nested value",
        ) from None
    tool = document.get("tool", {})
    table = tool.get("perfguard", {}) if isinstance(tool, dict) else {}
    return parse_config(table, source=str(path)).with_threshold(threshold)


def parse_config(table: Mapping[str, Any], *, source: str = "[tool.perfguard]") -> Config:
    """Validate a parsed ``[tool.perfguard]`` table into a :class:`Config`."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: [tool.perfguard] must be a table, not {table!r}")
    _reject_unknown(table, _TOP_KEYS, "[tool.perfguard]", source)
    defaults = Config()
    kw: dict[str, Any] = {"source": source}
    if "threshold" in table:
        kw["threshold"] = _fraction("threshold", table["threshold"], source)
        kw["threshold_source"] = "threshold"
    if "memory_threshold" in table:
        kw["memory_threshold"] = _fraction("memory_threshold", table["memory_threshold"], source)
    if "memory_floor_bytes" in table:
        kw["memory_floor_bytes"] = _bytes("memory_floor_bytes", table["memory_floor_bytes"], source)
    if "work_threshold" in table:
        kw["work_threshold"] = _fraction("work_threshold", table["work_threshold"], source)
    if "accuracy_threshold" in table:
        kw["accuracy_threshold"] = _fraction("accuracy_threshold", table["accuracy_threshold"], source)
    if "accuracy_floor" in table:
        kw["accuracy_floor"] = _number(
            "accuracy_floor", table["accuracy_floor"], source, lo=0.0, hi=1.0, what="in (0, 1], e.g. 1e-6"
        )
    if "alpha" in table:
        kw["alpha"] = _number("alpha", table["alpha"], source, lo=0.0, hi=0.5, what="in (0, 0.5]")
    if "confidence" in table:
        kw["confidence"] = _number(
            "confidence", table["confidence"], source, lo=0.5, hi=1.0, what="in (0.5, 1)", hi_open=True
        )
    for key in ("max_iqr_ratio", "max_round_cv"):
        if key in table:
            kw[key] = _fraction(key, table[key], source)
    if "suspect_fraction" in table:
        kw["suspect_fraction"] = _number(
            "suspect_fraction", table["suspect_fraction"], source, lo=0.0, hi=1.0, what="in (0, 1]"
        )
    if "rounds" in table:
        kw["rounds"] = _integer("rounds", table["rounds"], source, 1, MAX_ROUNDS)
    if "retry" in table:
        kw["retry"] = _retry(table["retry"], source, defaults.retry)
    if "override" in table:
        kw["overrides"] = _overrides(table["override"], source)
    return replace(defaults, **kw)


def _bad(key: str, value: Any, source: str, expected: str, hint: str | None = None) -> ConfigError:
    return ConfigError(f"{source}: {key} = {value!r} is not valid: {expected}", hint=hint)


#: Keys of older versions, with what replaced them (issue 30: the interval over rounds needs no
#: resampling and no seed).
_REMOVED = {
    "bootstrap_resamples": "timings are tested over their round medians, with no bootstrap",
    "seed": "timings are tested over their round medians, with no bootstrap to seed",
}


def _reject_unknown(table: Mapping[str, Any], known: set[str], where: str, source: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown and unknown[0] in _REMOVED:
        raise ConfigError(
            f"{source}: {unknown[0]!r} in {where} is no longer a setting: {_REMOVED[unknown[0]]}",
            hint=f"remove {unknown[0]!r} (docs/verdicts.md, 'The rule for a timing')",
        )
    if unknown:
        raise ConfigError(
            f"{source}: unknown key {unknown[0]!r} in {where}",
            hint=f"known keys: {', '.join(sorted(known))} (see docs/verdicts.md, Configuration)",
        )


def _number(
    key: str, value: Any, source: str, *, lo: float, hi: float, what: str, hi_open: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(key, value, source, f"expected a number {what}")
    v = float(value)
    if not (lo < v and (v < hi if hi_open else v <= hi)):
        raise _bad(key, value, source, f"expected a number {what}")
    return v


def _fraction(key: str, value: Any, source: str) -> float:
    """A relative threshold such as 0.20 (20%): a finite number > 0."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise _bad(key, value, source, "expected a fraction > 0, e.g. 0.20 for 20%")
    if value > 10:
        raise _bad(key, value, source, "expected a fraction such as 0.20 for 20%, not a percentage")
    return float(value)


def _integer(key: str, value: Any, source: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise _bad(key, value, source, f"expected an integer from {minimum} to {maximum:,}")
    return value


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def _bytes(key: str, value: Any, source: str) -> int:
    """A byte count: an integer, or a string such as "64 MiB" or "1GB"."""
    if isinstance(value, bool):
        raise _bad(key, value, source, 'expected bytes: an integer or a string such as "64 MiB"')
    expected = f'expected bytes: an integer from 0 to {MAX_BYTES:,} (1 EiB) or a string such as "64 MiB"'
    if isinstance(value, int) and 0 <= value <= MAX_BYTES:
        return value
    if isinstance(value, str) and len(value) <= 40:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?[bB]|[bB])?\s*", value)
        if m:
            number = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
            if number <= MAX_BYTES:
                return int(number)
    raise _bad(key, value, source, expected)


def _retry(value: Any, source: str, defaults: RetryConfig) -> RetryConfig:
    if not isinstance(value, Mapping):
        raise _bad("retry", value, source, "expected a table [tool.perfguard.retry]")
    _reject_unknown(value, _RETRY_KEYS, "[tool.perfguard.retry]", source)
    enabled = value.get("enabled", defaults.enabled)
    if not isinstance(enabled, bool):
        raise _bad("retry.enabled", enabled, source, "expected true or false")
    rounds = _integer("retry.rounds", value.get("rounds", defaults.rounds), source, 2, MAX_ROUNDS)
    # by default three looks: the rounds of the first re-measurement, then twice as many more
    most = value.get("max_rounds", min(3 * rounds, MAX_ROUNDS))
    max_rounds = _integer("retry.max_rounds", most, source, rounds, MAX_ROUNDS)
    return RetryConfig(enabled=enabled, rounds=rounds, max_rounds=max_rounds)


def _overrides(value: Any, source: str) -> tuple[Override, ...]:
    if not isinstance(value, list):
        raise _bad("override", value, source, "expected an array of tables [[tool.perfguard.override]]")
    out = []
    for i, entry in enumerate(value):
        where = f"override #{i + 1}"
        if not isinstance(entry, Mapping):
            raise _bad(where, entry, source, "expected a table")
        _reject_unknown(entry, _OVERRIDE_KEYS, f"[[tool.perfguard.override]] #{i + 1}", source)
        if not any(k in entry for k in _SELECTOR_KEYS):
            raise ConfigError(
                f"{source}: {where} selects nothing",
                hint="give at least one of impl, benchmark, metric, params (or set the top-level key)",
            )
        if not any(k in entry for k in _SETTING_KEYS):
            raise ConfigError(f"{source}: {where} changes nothing", hint="give threshold and/or gate")
        kw: dict[str, Any] = {}
        for key in ("impl", "benchmark", "note"):
            if key in entry:
                if not isinstance(entry[key], str) or not entry[key]:
                    raise _bad(f"{where}.{key}", entry[key], source, "expected a non-empty string")
                kw[key] = entry[key]
        if "metric" in entry:
            if entry["metric"] not in NAMES:
                expected = f"expected one of {', '.join(NAMES)}"
                raise _bad(f"{where}.metric", entry["metric"], source, expected)
            kw["metric"] = entry["metric"]
        if "params" in entry:
            params = entry["params"]
            if not isinstance(params, Mapping) or not params:
                expected = "expected a non-empty table such as {seq_len = 256}"
                raise _bad(f"{where}.params", params, source, expected)
            for pk, pv in params.items():
                if not isinstance(pv, str | int | float) or isinstance(pv, bool):
                    raise _bad(f"{where}.params.{pk}", pv, source, "expected a string or a number")
            kw["params"] = dict(params)
        if "threshold" in entry:
            kw["threshold"] = _fraction(f"{where}.threshold", entry["threshold"], source)
        if "gate" in entry:
            if not isinstance(entry["gate"], bool):
                raise _bad(f"{where}.gate", entry["gate"], source, "expected true or false")
            kw["gate"] = entry["gate"]
        out.append(Override(**kw))
    return tuple(out)
