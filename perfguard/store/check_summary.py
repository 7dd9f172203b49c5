"""A check's ``summary``, typed: what ``perfguard check`` records beside its items, defined once.

``perfguard check`` (:mod:`perfguard.gate`) writes it, with what the acceptances did
(:meth:`perfguard.accept.Applied.summary`) and the code-path changes (:mod:`perfguard.compare.paths`);
the reports read it (:mod:`perfguard.report`).  It is stored as JSON (the ``checks.summary`` column,
no schema), so a store holds summaries of older perfguards (without the newer keys) and, in
principle, of newer ones: :meth:`CheckSummary.from_json` is the one reader, and it reads defensively.
A missing key reads as its default (an empty list, None for a scalar the check did not record); an
entry or a row that is not an object is skipped; a value of the wrong type reads as missing (a
count as 0, a text as "", a millisecond value or a ceiling that is not a finite number as None).
:meth:`CheckSummary.to_json` gives the JSON the store keeps (``from_json(s.to_json()) == s``).

The keys (docs/reports.md): ``counts`` (verdict -> items), ``retried`` (suspects re-measured),
``measured`` (per side, how its rounds came: stored or measured), ``rounds`` (per side),
``dirty``, ``bench``, ``seconds``, ``trust``, ``underneath`` (:class:`UnderneathTable`: what changed
underneath each regression), ``acceptances`` (:class:`AcceptanceSummary`), ``paths``
(:class:`PathChange`: timings whose code path differs) and ``selection`` (:class:`Selection`: the
implementations the change reaches, measured, and those it does not, not measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.units import format_value


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _count(value: Any) -> int:
    """An int or float as an int (not a bool), else 0."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _finite(value: Any) -> float | None:
    """A finite number (not a bool) as a float, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _entries(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def _strings(value: Any) -> tuple[str, ...]:
    """The strings of a JSON list (anything else: none)."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _as_text(value: Any) -> tuple[str, ...]:
    """Every element of a JSON list as text (anything else: none)."""
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


# --------------------------------------------------------------------------------------------
# what changed underneath
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnderneathRow:
    """One op or kernel whose count (or time) differs between the two sides."""

    name: str
    base_count: int
    head_count: int
    base_ms: float | None = None
    head_ms: float | None = None

    @property
    def delta(self) -> int:
        return self.head_count - self.base_count

    @property
    def change(self) -> str:
        """The change, to precede the name: ``+100 ×``, or for a count that held, ``0.12 → 0.5 ms``."""
        if self.delta or self.base_ms is None or self.head_ms is None:
            return f"{self.delta:+,} ×"
        return (
            f"{format_value(self.base_ms / 1e3, 'seconds')} → {format_value(self.head_ms / 1e3, 'seconds')}"
        )

    @property
    def counts(self) -> str:
        return f"{self.base_count:,} → {self.head_count:,}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base_count": self.base_count,
            "head_count": self.head_count,
            "base_ms": self.base_ms,
            "head_ms": self.head_ms,
        }

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> UnderneathRow:
        return cls(
            name=str(row.get("name", "?")),
            base_count=_count(row.get("base_count")),
            head_count=_count(row.get("head_count")),
            base_ms=_finite(row.get("base_ms")),
            head_ms=_finite(row.get("head_ms")),
        )


@dataclass(frozen=True)
class UnderneathTable:
    """What changed underneath one regressed implementation x params x pass, biggest difference first."""

    impl: str
    benchmark: str
    params_key: str
    kind: str  # "aten ops" | "CUDA kernels"
    source: str  # how it was measured, e.g. "dispatch counts, one call"
    rows: tuple[UnderneathRow, ...]
    pass_: str = ""  # "forward" | "forward_backward" (JSON: "pass")
    rows_left_out: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "benchmark": self.benchmark,
            "params_key": self.params_key,
            "pass": self.pass_,
            "kind": self.kind,
            "source": self.source,
            "rows": [r.to_json() for r in self.rows],
            "rows_left_out": self.rows_left_out,
        }

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> UnderneathTable:
        return cls(
            impl=str(entry.get("impl", "")),
            benchmark=str(entry.get("benchmark", "")),
            params_key=str(entry.get("params_key", "")),
            kind=str(entry.get("kind", "aten ops")),
            source=str(entry.get("source", "")),
            rows=tuple(UnderneathRow.from_json(r) for r in _entries(entry.get("rows"))),
            pass_=str(entry.get("pass", "")),
            rows_left_out=_count(entry.get("rows_left_out")),
        )


# --------------------------------------------------------------------------------------------
# acceptances
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IgnoredAcceptance:
    """An acceptance that does not count, and why (an unapproved trailer, unreadable, untrusted)."""

    sha: str
    text: str
    why: str

    @property
    def short(self) -> str:
        return self.sha[:10] if self.sha else "–"

    def to_json(self) -> dict[str, str]:
        return {"sha": self.sha, "text": self.text, "why": self.why}

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> IgnoredAcceptance:
        return cls(_text(entry.get("sha")), _text(entry.get("text")), _text(entry.get("why")))


@dataclass(frozen=True, kw_only=True)
class AppliedAcceptance:
    """A trusted acceptance that applied to the check, and the items it accepted or could not (over its
    ceiling), as ``Forward.track_time(dtype=float32,impl=improved,seq_len=512)`` labels."""

    id: int | None = None  # its store id (``perfguard accept``), None for a trailer
    sha: str = ""
    scope: str = ""
    impl: str = ""
    benchmark: str = ""
    metric: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    ceiling: float | None = None
    reason: str = ""
    source: str = ""  # "trailer" | "command"
    author: str = ""
    approved_by: str | None = None
    trusted: bool = True
    accepted: tuple[str, ...] = ()
    over_ceiling: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sha": self.sha,
            "scope": self.scope,
            "impl": self.impl,
            "benchmark": self.benchmark,
            "metric": self.metric,
            "params": dict(self.params),
            "ceiling": self.ceiling,
            "reason": self.reason,
            "source": self.source,
            "author": self.author,
            "approved_by": self.approved_by,
            "trusted": self.trusted,
            "accepted": list(self.accepted),
            "over_ceiling": list(self.over_ceiling),
        }

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> AppliedAcceptance:
        """One entry; a summary without ``scope`` names it by its implementation and benchmark globs."""
        entry_id, params = entry.get("id"), entry.get("params")
        impl, benchmark = _text(entry.get("impl")), _text(entry.get("benchmark"))
        return cls(
            id=entry_id if isinstance(entry_id, int) and not isinstance(entry_id, bool) else None,
            sha=_text(entry.get("sha")),
            scope=_text(entry.get("scope")) or " ".join(x for x in (impl, benchmark) if x),
            impl=impl,
            benchmark=benchmark,
            metric=_text(entry.get("metric")) or None,
            params=dict(params) if isinstance(params, Mapping) else {},
            ceiling=_finite(entry.get("ceiling")),
            reason=_text(entry.get("reason")),
            source=_text(entry.get("source")),
            author=_text(entry.get("author")),
            approved_by=_text(entry.get("approved_by")) or None,
            trusted=entry.get("trusted") is not False,
            accepted=_strings(entry.get("accepted")),
            over_ceiling=_strings(entry.get("over_ceiling")),
        )


@dataclass(frozen=True)
class AcceptanceSummary:
    """What the acceptances did to a check: each that applied, and every ignored one with why."""

    applied: tuple[AppliedAcceptance, ...] = ()
    ignored: tuple[IgnoredAcceptance, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": [a.to_json() for a in self.applied],
            "ignored": [i.to_json() for i in self.ignored],
        }

    @classmethod
    def from_json(cls, value: Any) -> AcceptanceSummary:
        raw = value if isinstance(value, Mapping) else {}
        return cls(
            applied=tuple(AppliedAcceptance.from_json(e) for e in _entries(raw.get("applied"))),
            ignored=tuple(IgnoredAcceptance.from_json(e) for e in _entries(raw.get("ignored"))),
        )


# --------------------------------------------------------------------------------------------
# code paths
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathChange:
    """A timed benchmark x params whose code path differs between the sides, or within one side's
    rounds (:mod:`perfguard.compare.paths`)."""

    impl: str
    params_key: str
    benchmark: str
    kind: str  # "CUDA kernels" | "aten ops" | "path"
    base: tuple[str, ...] = ()  # the digests of the baseline's rounds
    head: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()  # names in the baseline's path only (a few shown)
    added: tuple[str, ...] = ()
    varies: tuple[str, ...] = ()  # "base" / "head": the sides whose own rounds ran different paths

    def to_json(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "params_key": self.params_key,
            "benchmark": self.benchmark,
            "kind": self.kind,
            "base": list(self.base),
            "head": list(self.head),
            "removed": list(self.removed),
            "added": list(self.added),
            "varies": list(self.varies),
        }

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> PathChange:
        return cls(
            impl=_text(entry.get("impl")),
            params_key=_text(entry.get("params_key")),
            benchmark=_text(entry.get("benchmark")),
            kind=_text(entry.get("kind")),
            base=_as_text(entry.get("base")),
            head=_as_text(entry.get("head")),
            removed=_as_text(entry.get("removed")),
            added=_as_text(entry.get("added")),
            varies=_as_text(entry.get("varies")),
        )


@dataclass(frozen=True)
class Selection:
    """What the check measured (issue 32, :mod:`perfguard.reach`): every implementation and why, or
    the implementations the change reaches (``measured``, each with the changed modules reaching
    it) and those it does not (``not_measured``: their stored baseline stands)."""

    everything: bool = True
    reason: str = ""
    measured: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    not_measured: tuple[str, ...] = ()
    changed: int = 0  # files that differ between the merge-base and HEAD

    def to_json(self) -> dict[str, Any]:
        return {
            "everything": self.everything,
            "reason": self.reason,
            "measured": {k: list(v) for k, v in self.measured.items()},
            "not_measured": list(self.not_measured),
            "changed": self.changed,
        }

    @classmethod
    def from_json(cls, entry: Any) -> Selection | None:
        if not isinstance(entry, Mapping):
            return None
        measured = entry.get("measured")
        return cls(
            everything=entry.get("everything") is not False,
            reason=_text(entry.get("reason")),
            measured=(
                {str(k): _as_text(v) for k, v in measured.items()} if isinstance(measured, Mapping) else {}
            ),
            not_measured=_as_text(entry.get("not_measured")),
            changed=_count(entry.get("changed")),
        )


# --------------------------------------------------------------------------------------------
# the summary
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CheckSummary:
    """Everything a check records beside its items (see the module docstring)."""

    counts: Mapping[str, int] = field(default_factory=dict)  # verdict -> items (zero counts left out)
    retried: int = 0  # suspects re-measured (stage 2)
    measured: Mapping[str, str] = field(default_factory=dict)  # "base" / "head" -> how its rounds came
    rounds: Mapping[str, int] = field(default_factory=dict)  # "base" / "head" -> rounds of stage 1
    dirty: bool | None = None  # HEAD had uncommitted changes
    bench: tuple[str, ...] = ()  # the --bench selection
    seconds: float | None = None  # how long the check took
    trust: str | None = None  # "trusted" | "untrusted": how its rounds were stored
    underneath: tuple[UnderneathTable, ...] = ()
    acceptances: AcceptanceSummary = field(default_factory=AcceptanceSummary)
    paths: tuple[PathChange, ...] = ()
    selection: Selection | None = None  # None: a check from before selections (it measured everything)

    def to_json(self) -> dict[str, Any]:
        """The JSON the store keeps (a scalar the check did not record is left out)."""
        out: dict[str, Any] = {
            "counts": dict(self.counts),
            "retried": self.retried,
            "measured": dict(self.measured),
            "rounds": dict(self.rounds),
            "dirty": self.dirty,
            "bench": list(self.bench),
            "seconds": self.seconds,
            "trust": self.trust,
            "underneath": [t.to_json() for t in self.underneath],
            "acceptances": self.acceptances.to_json(),
            "paths": [p.to_json() for p in self.paths],
            "selection": self.selection.to_json() if self.selection is not None else None,
        }
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, summary: Any) -> CheckSummary:
        """The summary of a stored check (anything the ``summary`` column holds; see the module docstring)."""
        raw = summary if isinstance(summary, Mapping) else {}
        counts, measured, rounds = (raw.get(k) for k in ("counts", "measured", "rounds"))
        dirty, seconds, trust = raw.get("dirty"), raw.get("seconds"), raw.get("trust")
        return cls(
            counts={str(k): _count(v) for k, v in counts.items()} if isinstance(counts, Mapping) else {},
            retried=_count(raw.get("retried")),
            measured=(
                {str(k): v for k, v in measured.items() if isinstance(v, str)}
                if isinstance(measured, Mapping)
                else {}
            ),
            rounds={str(k): _count(v) for k, v in rounds.items()} if isinstance(rounds, Mapping) else {},
            dirty=dirty if isinstance(dirty, bool) else None,
            bench=_strings(raw.get("bench")),
            seconds=_finite(seconds),
            trust=trust if isinstance(trust, str) else None,
            underneath=tuple(UnderneathTable.from_json(e) for e in _entries(raw.get("underneath"))),
            acceptances=AcceptanceSummary.from_json(raw.get("acceptances")),
            paths=tuple(PathChange.from_json(e) for e in _entries(raw.get("paths"))),
            selection=Selection.from_json(raw.get("selection")),
        )
