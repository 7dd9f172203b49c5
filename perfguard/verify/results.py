"""What ``perfguard verify`` found, as plain data: one :class:`RowResult` per impl × device × dtype.

The structures here are the single source of both the rich table and the ``--json`` file, so the
two can never disagree.  A check has one :class:`CaseOutcome` per case it ran (a case is a mode
and a causal flag, or just a mode for ``build``) and a status folded from them:

- ``fail`` if any case failed,
- ``not run`` if nothing failed but an earlier failure (build, forward, pattern) blocked it,
- ``pass`` if it ran and nothing failed,
- ``n/a`` if it does not apply to this implementation (``same_fn`` for an implementation with its
  own pattern, causal cases of an implementation without causal support, a skipped row).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "not run", "n/a"]

#: The checks, in table order, with the one-line meaning shown in ``--help``-like listings and docs.
CHECKS: dict[str, str] = {
    "build": "built through spec.build (the public factory for registered implementations), per mode",
    "forward": "forward runs, every mode × causal case",
    "backward": "backward runs and a gradient reaches every input (q, k, v / query, key, value)",
    "shape": "output has the input's shape (batch, seq_len, heads, head_dim or embed_dim), dtype, device",
    "return": "return contract: core modules return a Tensor, multihead modules exactly (output, None)",
    "written": "every output row is written: none left as allocated (poison), zero, or input-independent",
    "finite": "no NaN or inf in the output or the input gradients",
    "pattern": "declared attention_pattern is sane: non-negative ints (H, n, n), lower-triangular if causal",
    "same_fn": "'same function' implementations: declared pattern equals perfguard's dilated semantics",
    "reference": "output matches the float64 reference of the declared pattern within the dtype's tolerance",
    "grad": "input gradients match the float64 reference's within the dtype's tolerance",
    "deterministic": "two identical runs agree bitwise, or within tolerance (the difference is reported)",
}

SCHEMA = "perfguard.verify/1"


@dataclass
class CaseOutcome:
    """The result of one check in one case."""

    case: str
    status: Status
    detail: str = ""
    value: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "status": self.status, "detail": self.detail, "value": _num(self.value)}


@dataclass
class CheckResult:
    """One check over every case of a row."""

    name: str
    cases: list[CaseOutcome] = field(default_factory=list)
    not_applicable: str | None = None

    @property
    def status(self) -> Status:
        statuses = {c.status for c in self.cases}
        if "fail" in statuses:
            return "fail"
        if "not run" in statuses:
            return "not run"
        if "pass" in statuses:
            return "pass"
        return "n/a"

    @property
    def value(self) -> float | None:
        """The worst number measured by this check (relative error, nondeterminism), if any."""
        values = [c.value for c in self.cases if c.value is not None]
        return max(values) if values else None

    @property
    def detail(self) -> str:
        """Why it failed (first failing case, and how many more), or why it did not run."""
        failing = [c for c in self.cases if c.status == "fail"]
        if failing:
            first = failing[0]
            more = f"; {len(failing) - 1} more case(s) failed" if len(failing) > 1 else ""
            return f"{first.detail} ({first.case}){more}"
        blocked = [c for c in self.cases if c.status == "not run"]
        if blocked:
            return f"{blocked[0].detail} ({blocked[0].case})"
        if self.status == "n/a":
            return self.not_applicable or "not applicable"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "detail": self.detail,
            "value": _num(self.value),
            "cases": [c.to_json() for c in self.cases],
        }


@dataclass
class RowResult:
    """All checks of one implementation on one device in one dtype."""

    impl: str
    device: str
    dtype: str
    multihead: bool
    same_function_as: str | None
    tolerance: float
    config: dict[str, Any]
    checks: dict[str, CheckResult] = field(default_factory=lambda: {n: CheckResult(n) for n in CHECKS})
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: peak GPU memory allocated while the row ran (CUDA rows; ``None`` on the CPU)
    peak_memory_bytes: int | None = None

    def record(
        self, check: str, case: str, status: Status, detail: str = "", value: float | None = None
    ) -> None:
        self.checks[check].cases.append(CaseOutcome(case, status, detail, value))

    def block(self, checks: list[str], case: str, reason: str) -> None:
        """Mark checks that could not run in ``case`` because of an earlier failure."""
        for name in checks:
            self.record(name, case, "not run", reason)

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks.values())

    @property
    def worst_rel_err(self) -> float | None:
        """Worst relative error against the float64 reference (output or gradient)."""
        values = [v for v in (self.checks["reference"].value, self.checks["grad"].value) if v is not None]
        return max(values) if values else None

    def failures(self) -> Iterator[tuple[str, str]]:
        for name, check in self.checks.items():
            if check.status == "fail":
                yield name, check.detail

    def to_json(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "device": self.device,
            "dtype": self.dtype,
            "multihead": self.multihead,
            "same_function_as": self.same_function_as,
            "config": self.config,
            "tolerance": self.tolerance,
            "passed": self.passed,
            "skipped": self.skipped,
            "worst_rel_err": _num(self.worst_rel_err),
            "failures": [f"{name}: {detail}" for name, detail in self.failures()],
            "checks": {name: check.to_json() for name, check in self.checks.items()},
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
            "peak_memory_bytes": self.peak_memory_bytes,
        }


@dataclass
class VerifyReport:
    """Every row of one ``perfguard verify`` run, with the settings it ran under."""

    rows: list[RowResult]
    seed: int
    settings: dict[str, Any]
    environment: dict[str, Any]
    created: str
    #: the verification itself: every row, from the first to the last
    seconds: float = 0.0
    #: what came before the first row, by phase ("imports", "cuda_init"), in seconds
    setup_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": self.created,
            "passed": self.passed,
            "seed": self.seed,
            "seconds": round(self.seconds, 3),
            "setup_seconds": {k: round(v, 3) for k, v in self.setup_seconds.items()},
            "environment": self.environment,
            "settings": self.settings,
            "checks": dict(CHECKS),
            "results": [r.to_json() for r in self.rows],
        }


def _num(value: float | None) -> float | str | None:
    """JSON has no inf/NaN: write them as strings so the file stays valid for every parser."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
