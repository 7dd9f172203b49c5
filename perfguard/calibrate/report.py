"""The calibration report: what was asked, what was found, what it cost.

:class:`Calibration` holds a finished calibration; ``to_json()`` (schema ``perfguard-calibration/1``,
docs/calibration.md), ``tables()`` (for the terminal, rendered with rich by the command) and
``to_markdown()`` (the ``calibration/report.md`` template, through the Jinja environment of every
report: :func:`perfguard.report.templating.environment`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.calibrate.asv_rule import ASV_NOTE
from perfguard.calibrate.noise import CV_FLAG_MAX, CV_FLAG_MIN_SECONDS
from perfguard.calibrate.planting import PLANTED_BENCHMARK, percent
from perfguard.calibrate.protocol import Comparison, Findings, PhaseClock, Plan
from perfguard.compare import Verdict
from perfguard.config import Config
from perfguard.units import format_value

#: The ``schema`` of ``perfguard calibrate --json`` (documented in docs/calibration.md).
SCHEMA = "perfguard-calibration/1"
DILUTION_NOTE = (
    "The planted work is in forward only: in a forward+backward pass it is diluted to about "
    "f x forward / (forward + backward), so ForwardBackward.track_time is not measured in this phase "
    "and detection rates are for Forward.track_time only."
)


@dataclass(frozen=True)
class Tally:
    """One row of the verdict table: an A/A or a planted fraction over all its repetitions."""

    label: str
    fraction: float | None
    comparisons: int
    flagged: int  # perfguard: final regressions (false alarms in A/A, detections when planted)
    stage1: int  # regressions stage 1 alone would have reported
    suspects: int
    unstable: int
    improvements: int
    median_ratio: float | None  # of the stage-1 ratios
    median_final_ratio: float | None  # of the final ratios (a suspect's re-measurement): the plant's size
    asv_flagged: int | None
    asv_stats_flagged: int | None

    @staticmethod
    def of(label: str, fraction: float | None, comparisons: Sequence[Comparison], asv: bool) -> Tally:
        outcomes = [o for c in comparisons for o in c.outcomes]
        ratios = [o.ratio for o in outcomes if o.ratio is not None]
        finals = [o.final_ratio for o in outcomes if o.final_ratio is not None]
        return Tally(
            label=label,
            fraction=fraction,
            comparisons=len(outcomes),
            flagged=sum(o.flagged for o in outcomes),
            stage1=sum(o.first == Verdict.REGRESSION for o in outcomes),
            suspects=sum(o.suspect for o in outcomes),
            unstable=sum(o.verdict == Verdict.UNSTABLE for o in outcomes),
            improvements=sum(o.verdict == Verdict.IMPROVEMENT for o in outcomes),
            median_ratio=statistics.median(ratios) if ratios else None,
            median_final_ratio=statistics.median(finals) if finals else None,
            asv_flagged=sum(bool(o.asv and o.asv.worse) for o in outcomes) if asv else None,
            asv_stats_flagged=sum(bool(o.asv_stats and o.asv_stats.worse) for o in outcomes) if asv else None,
        )

    @staticmethod
    def rate(k: int | None, n: int) -> float | None:
        return k / n if k is not None and n else None

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["rate"] = self.rate(self.flagged, self.comparisons)
        out["asv_rate"] = self.rate(self.asv_flagged, self.comparisons)
        out["asv_stats_rate"] = self.rate(self.asv_stats_flagged, self.comparisons)
        return out


@dataclass(frozen=True)
class TableData:
    """A table for both renderers (rich on the terminal, Markdown for docs/perf/calibration.md)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}%}"


def _ratio(r: float | None) -> str:
    return "" if r is None else f"{r:.3f}"


def _count(k: int | None, n: int) -> str:
    if k is None:
        return "n/a"
    return f"{k}/{n} ({k / n:.0%})" if n else f"{k}/0"


def _seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


@dataclass
class Calibration:
    """A finished calibration: what was asked, what was found, and what it cost."""

    meta: dict[str, Any]  # machine, commit, profile, device, command, created_at, store, planted commits
    plan: Plan
    config: Config
    findings: Findings
    clock: PhaseClock
    wall_s: float
    warnings: list[str] = field(default_factory=list)

    @property
    def device_time(self) -> bool:
        return self.meta.get("device") == "cuda"

    def tallies(self) -> list[Tally]:
        out = [Tally.of("A/A (false alarms)", None, self.findings.aa, self.plan.asv)] if self.plan.aa else []
        for f in self.plan.planted:
            these = [c for c in self.findings.planted if c.fraction == f]
            if these:
                out.append(Tally.of(f"planted {percent(f)}", f, these, self.plan.asv))
        return out

    # --- tables ---------------------------------------------------------------------------

    def noise_table(self) -> TableData:
        noise = self.findings.noise
        skipped = [r for r in noise if r.status == "skipped"]
        rows = []
        for r in noise:
            if r.status == "skipped":
                continue
            params = " ".join(f"{k}={v}" for k, v in r.params.items() if k != "impl")
            flag = f"CV > {CV_FLAG_MAX:.0%}" if r.flagged else (r.note if r.status != "ok" else "")
            rows.append(
                (
                    r.benchmark.split(".", 1)[-1], r.impl, params, r.method or r.status, str(r.rounds),
                    format_value(r.median, r.unit), _pct(r.process_cv),
                    f"{r.spread:.3f}" if r.spread is not None else "", _pct(r.iqr_median), _pct(r.iqr_max),
                    "yes" if r.gated else "no", flag,
                )
            )  # fmt: skip
        flagged = [r for r in noise if r.flagged]
        notes = [
            f"{len(flagged)} of {sum(r.gated and r.metric == 'time' and r.status == 'ok' for r in noise)} "
            f"gated timings are flagged: at least {CV_FLAG_MIN_SECONDS * 1e3:g} ms with a process CV above "
            f"{CV_FLAG_MAX:.0%}. Process CV: CV of the round medians; spread: largest / smallest round "
            "median; IQR/median: within one round (median and largest over the rounds)."
        ]
        for method in sorted({r.method or "" for r in flagged}):
            example = next(r for r in flagged if (r.method or "") == method)
            notes.append(f"Flagged, {method or 'no method'}: {example.note.split(': ', 1)[-1]}.")
        if skipped:
            notes.append(
                f"{len(skipped)} benchmark x params skipped on this machine are left out (e.g. "
                f"{skipped[0].benchmark.split('.', 1)[-1]}: {skipped[0].note}); the JSON has them."
            )
        return TableData(
            title=f"Process-to-process noise: {self.findings.noise_rounds} rounds of HEAD (fresh processes)",
            columns=(
                "benchmark",
                "impl",
                "params",
                "method",
                "rounds",
                "median",
                "process CV",
                "spread",
                "IQR/median",
                "max IQR/median",
                "gated",
                "flag",
            ),
            rows=tuple(rows),
            notes=tuple(notes),
        )

    def verdict_table(self) -> TableData:
        asv = self.plan.asv
        columns = ["test", "comparisons", "perfguard: regression", "stage 1 alone", "re-measured",
                   "unstable", "ratio (stage 1)", "ratio (final)"]  # fmt: skip
        if asv:
            columns += [f"asv -f {1 + self.config.threshold:g} (track_)", "asv + stats"]
        rows = []
        for t in self.tallies():
            row = [
                t.label, str(t.comparisons), _count(t.flagged, t.comparisons), str(t.stage1), str(t.suspects),
                str(t.unstable), _ratio(t.median_ratio), _ratio(t.median_final_ratio),
            ]  # fmt: skip
            if asv:
                row += [_count(t.asv_flagged, t.comparisons), _count(t.asv_stats_flagged, t.comparisons)]
            rows.append(tuple(row))
        notes = [
            f"Threshold {self.config.threshold:.0%}: a regression needs a ratio above "
            f"{1 + self.config.threshold:.2f}. "
            + (
                f"A/A: HEAD against itself, {self.plan.aa} repetition(s) of {self.plan.rounds} + "
                f"{self.plan.rounds} interleaved rounds; every regression is a false alarm. "
                if self.plan.aa
                else "No A/A (--aa 0). "
            )
            + f"Planted: {self.plan.repeats} repetition(s) of HEAD against each planted commit, "
            f"{self.plan.rounds} + {self.plan.rounds} rounds; the rate is detections / comparisons. "
            f"Suspects were re-measured {self.config.retry.rounds} + {self.config.retry.rounds} rounds, "
            f"interleaved{'' if self.config.retry.enabled else ' (disabled: stage 1 is final)'}. "
            "Ratios: medians over the comparisons of the ratio of medians, of stage 1 and final (a "
            "suspect's re-measurement, else stage 1); for a plant, the final ratio is the slowdown "
            "actually planted.",
        ]
        if self.plan.planted:
            notes.append(self.findings.planted_skipped or DILUTION_NOTE)
        if asv:
            notes.append(ASV_NOTE)
        return TableData(
            title="False alarms and detection: perfguard against asv",
            columns=tuple(columns),
            rows=tuple(rows),
            notes=tuple(notes),
        )

    def time_table(self) -> TableData:
        label = "device time (rounds)" if self.device_time else "rounds' wall time"
        rows = [
            (p.name, _seconds(p.wall_s), str(p.rounds), _seconds(p.rounds_s) if p.rounds else "")
            for p in self.clock.phases.values()
        ]
        total_rounds = sum(p.rounds for p in self.clock.phases.values())
        total_rounds_s = sum(p.rounds_s for p in self.clock.phases.values())
        rows.append(("total", _seconds(self.wall_s), str(total_rounds), _seconds(total_rounds_s)))
        return TableData(
            title="Time",
            columns=("phase", "wall clock", "rounds", label),
            rows=tuple(rows),
            notes=(
                f"{label}: the sum of the measured rounds' own wall time (asv start to end, fresh "
                "processes included)" + ("; the GPU was held for that long." if self.device_time else "."),
            ),
        )

    def tables(self) -> list[TableData]:
        return [self.verdict_table(), self.noise_table(), self.time_table()]

    def summary(self) -> list[str]:
        """The findings in a few sentences (stdout and the Markdown's opening)."""
        lines = []
        for t in self.tallies():
            asv = ""
            if t.asv_flagged is not None:
                asv = f"; asv: {_count(t.asv_flagged, t.comparisons)}"
            if t.fraction is None:
                lines.append(f"A/A: {t.flagged} false alarm(s) in {t.comparisons} comparisons "
                             f"(stage 1 alone: {t.stage1}){asv}")  # fmt: skip
            else:
                ratio = f", measured ratio {_ratio(t.median_final_ratio)}" if t.median_final_ratio else ""
                lines.append(f"{t.label}: detected {_count(t.flagged, t.comparisons)}{ratio}{asv}")
        flagged = sum(r.flagged for r in self.findings.noise)
        timings = sum(r.gated and r.metric == "time" for r in self.findings.noise)
        lines.append(
            f"process noise: {flagged} of {timings} gated timings with a process CV above {CV_FLAG_MAX:.0%}"
        )
        lines.append(f"calibration took {_seconds(self.wall_s)}")
        return lines

    # --- outputs --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        tallies = self.tallies()
        aa = next((t for t in tallies if t.fraction is None), None)
        asv_rule_text = {"factor": 1 + self.config.threshold, "rule": "factor only (track_)"}
        asv_stats_text = {"factor": 1 + self.config.threshold, "rule": "round values as samples"}
        planted = []
        commits = {c["fraction"]: c for c in self.meta.get("planted_commits", [])}
        for t in tallies:
            if t.fraction is None:
                continue
            runs = [c for c in self.findings.planted if c.fraction == t.fraction]
            planted.append(
                {
                    "fraction": t.fraction,
                    "label": t.label,
                    "expected_ratio": 1 + t.fraction,
                    "commit": commits.get(t.fraction, {}).get("sha"),
                    "comparisons": t.comparisons,
                    "detected": t.flagged,
                    "rate": Tally.rate(t.flagged, t.comparisons),
                    "stage1_regressions": t.stage1,
                    "suspects": t.suspects,
                    "unstable": t.unstable,
                    "median_ratio": t.median_ratio,
                    "median_final_ratio": t.median_final_ratio,
                    "asv": {**asv_rule_text, "flagged": t.asv_flagged,
                            "rate": Tally.rate(t.asv_flagged, t.comparisons)} if self.plan.asv else None,
                    "asv_stats": {**asv_stats_text, "flagged": t.asv_stats_flagged,
                                  "rate": Tally.rate(t.asv_stats_flagged, t.comparisons)}
                    if self.plan.asv else None,
                    "runs": [c.to_json() for c in runs],
                }
            )  # fmt: skip
        phases = [
            {"phase": p.name, "wall_s": p.wall_s, "rounds": p.rounds, "rounds_s": p.rounds_s}
            for p in self.clock.phases.values()
        ]
        return _finite_json(
            {
                "schema": SCHEMA,
                **self.meta,
                "plan": {
                    "rounds": self.plan.rounds,
                    "aa": self.plan.aa,
                    "planted": list(self.plan.planted),
                    "repeats": self.plan.repeats,
                    "asv": self.plan.asv,
                    "bench": list(self.plan.bench) or None,
                },
                "config": self.config.to_dict(),
                "process_noise": {
                    "rounds": self.findings.noise_rounds,
                    "cv_flag": {"min_seconds": CV_FLAG_MIN_SECONDS, "max_cv": CV_FLAG_MAX},
                    "flagged": sum(r.flagged for r in self.findings.noise),
                    "benchmarks": [r.to_json() for r in self.findings.noise],
                },
                "aa": None
                if aa is None
                else {
                    "repetitions": self.plan.aa,
                    "rounds": self.plan.rounds,
                    "comparisons": aa.comparisons,
                    "false_alarms": aa.flagged,
                    "rate": Tally.rate(aa.flagged, aa.comparisons),
                    "stage1_regressions": aa.stage1,
                    "suspects": aa.suspects,
                    "unstable": aa.unstable,
                    "improvements": aa.improvements,
                    "median_ratio": aa.median_ratio,
                    "median_final_ratio": aa.median_final_ratio,
                    "asv": {**asv_rule_text, "flagged": aa.asv_flagged} if self.plan.asv else None,
                    "asv_stats": {**asv_stats_text, "flagged": aa.asv_stats_flagged}
                    if self.plan.asv
                    else None,
                    "runs": [c.to_json() for c in self.findings.aa],
                },
                "planted": {
                    "benchmark": PLANTED_BENCHMARK,
                    "note": DILUTION_NOTE,
                    "skipped": self.findings.planted_skipped,
                    "fractions": planted,
                },
                "summary": [t.to_json() for t in tallies],
                "time": {
                    "wall_s": self.wall_s,
                    "rounds": sum(p.rounds for p in self.clock.phases.values()),
                    "rounds_s": sum(p.rounds_s for p in self.clock.phases.values()),
                    "device_time": self.device_time,
                    "phases": phases,
                },
                "warnings": list(self.warnings),
            }
        )

    def to_markdown(self) -> str:
        """The report as Markdown (the ``calibration/report.md`` template)."""
        from perfguard.report.templating import environment

        m = self.meta
        machine = m.get("machine", {})
        commit = m.get("commit", {})
        text = (
            environment()
            .get_template("calibration/report.md")
            .render(
                label=machine.get("label", ""),
                key=machine.get("key", ""),
                device=m.get("device", ""),
                profile=m.get("profile", ""),
                selection=f", `--bench {' '.join(self.plan.bench)}`" if self.plan.bench else "",
                sha=str(commit.get("sha", ""))[:12],
                subject=commit.get("subject", ""),
                created_at=m.get("created_at", ""),
                command=m.get("command", ""),
                software=", ".join(
                    f"{k} {v}" for k, v in sorted((machine.get("software") or {}).items()) if v
                ),
                summary=self.summary(),
                warnings=self.warnings,
                tables=self.tables(),
            )
        )
        return text.rstrip() + "\n"


def _finite_json(value: Any) -> Any:
    """``value`` with every non-finite float as None: strict JSON (an infinite ratio is "no number")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value
