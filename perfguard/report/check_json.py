"""A check report as JSON (``perfguard check --json``, ``perfguard report --check ID --json``): the
schema ``perfguard-check-report/1`` of docs/reports.md."""

from __future__ import annotations

from typing import Any

from perfguard.report.check_report import CheckReport, report_of
from perfguard.report.items import CommitView, ItemView
from perfguard.store import Store, StoredCheck

JSON_SCHEMA = "perfguard-check-report/1"


def check_to_json(check: StoredCheck | CheckReport, *, store: Store | None = None) -> dict[str, Any]:
    """The report's data as plain JSON types; the schema is documented in ``docs/reports.md``."""
    report = report_of(check, store=store)
    c = report.check

    def commit(view: CommitView) -> dict[str, Any]:
        return {
            "sha": view.sha,
            "subject": view.subject,
            "branch": view.branch,
            "committed_at": view.date.isoformat() if view.date else None,
            "dirty": view.dirty,
        }

    def item(view: ItemView) -> dict[str, Any]:
        i = view.item
        return {
            "impl": i.impl,
            "benchmark": i.benchmark,
            "label": view.label,
            "params": dict(i.params or {}),
            "params_key": i.params_key,
            "metric": i.metric,
            "unit": i.unit,
            "direction": i.direction,
            "gated": i.gated,
            "role": view.role,
            "derived_from": view.source.item.benchmark if view.source is not None else None,
            "verdict": i.verdict,
            "base_value": i.base_value,
            "head_value": i.head_value,
            "ratio": i.ratio,
            "ci_low": i.ci_low,
            "ci_high": i.ci_high,
            "p_value": i.p_value,
            "noise": i.noise,
            "threshold": i.threshold,
            "method": i.method,
            "retried": i.retried,
            "base_n": i.base_n,
            "head_n": i.head_n,
            "reason": i.reason,
        }

    return {
        "schema": JSON_SCHEMA,
        "check_id": c.id,
        "verdict": c.verdict,
        "exit_code": c.exit_code,
        "headline": report.headline,
        "baseline_ref": c.baseline_ref,
        "profile": c.profile,
        "threshold": c.threshold,
        "created_at": c.created_at.isoformat() if c.created_at else None,
        "machine": {"key": c.machine.key, "label": c.machine.label, "kind": c.machine.kind},
        "head": commit(report.head),
        "base": commit(report.base),
        "aa": report.aa,
        "counts": report.tally.by_verdict,
        "counts_by_role": {role: dict(n) for role, n in report.tally.roles.items()},
        "counts_text": report.tally.line,
        "items": [item(i) for i in report.items],
        "environment": {
            "recorded": report.environment.recorded,
            "base": {r.key: r.base for r in report.environment.rows if r.base not in ("–", "not recorded")},
            "head": {r.key: r.head for r in report.environment.rows if r.head not in ("–", "not recorded")},
            "differs": [
                {"key": r.key, "base": r.base, "head": r.head} for r in report.environment.differences
            ],
        },
        "repro": report.repro,
        "command": c.command,
        "config": dict(c.config or {}),
        "summary": dict(c.summary or {}),
    }
