"""The report of one ``perfguard check``: Markdown for the PR, a single-file HTML page, JSON.

All three are views of one :class:`CheckReport`, built from a ``StoredCheck``, so the PR
comment, the HTML artifact and the JSON never disagree.  Reading order (peers.md §12 F, §14
item 14): the verdict first, with the items that need attention named and ranked by size; then
the full table; then the environment of both sides with its differences; then the command that
reproduces the check.  When nothing changed, the Markdown is one line plus collapsed details.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from perfguard.report import formatting
from perfguard.report.charts import RatioAxis, ratio_axis
from perfguard.report.environment import Environment, check_environment
from perfguard.report.templating import environment, inline_csp, static_text
from perfguard.store import Store, StoredCheck, StoredCheckItem, StoredCommit

#: Verdicts in the order a reader needs them (perfguard.compare.Verdict values).
VERDICT_ORDER = (
    "regression",
    "broken",
    "failed",
    "improvement",
    "unstable",
    "new",
    "missing",
    "skipped",
    "unchanged",
)
#: Verdicts that fail a check (``failed`` only where the baseline worked: the check decides).
FAILING = frozenset({"regression", "broken", "failed"})
#: Verdicts that are news; everything else is "nothing changed".
QUIET = frozenset({"unchanged", "skipped"})

VERDICT_WORDS = {
    "regression": ("regression", "regressions"),
    "broken": ("broken", "broken"),
    "failed": ("failed", "failed"),
    "improvement": ("improvement", "improvements"),
    "unstable": ("unstable", "unstable"),
    "new": ("new", "new"),
    "missing": ("missing", "missing"),
    "skipped": ("skipped", "skipped"),
    "unchanged": ("unchanged", "unchanged"),
}

#: The first line of every Markdown report: a workflow finds its PR comment by it and edits it.
MARKER = "<!-- perfguard-report -->"
#: GitHub rejects issue and PR comments longer than this (characters).
GITHUB_COMMENT_LIMIT = 65_536
#: Default budget for the Markdown: under the limit, with room for a workflow to append a line.
MARKDOWN_BUDGET = 65_000

JSON_SCHEMA = "perfguard-check-report/1"


@dataclass(frozen=True)
class CommitView:
    sha: str
    short: str
    subject: str
    branch: str | None
    date: datetime | None
    dirty: bool

    @classmethod
    def of(cls, commit: StoredCommit) -> CommitView:
        return cls(
            sha=commit.sha,
            short=formatting.short_sha(commit.sha),
            subject=commit.subject or "",
            branch=commit.branch,
            date=commit.committed_at,
            dirty=bool(commit.dirty),
        )


@dataclass(frozen=True)
class ItemView:
    """One verdict row, with its display strings."""

    item: StoredCheckItem
    params: dict[str, Any]  # without impl

    @property
    def verdict(self) -> str:
        return self.item.verdict

    @property
    def notable(self) -> bool:
        return self.item.verdict not in QUIET

    @property
    def params_text(self) -> str:
        return formatting.params_label(self.item.params or {})

    @property
    def name(self) -> str:
        """``ring · Forward.track_time · seq_len=4096 dtype=float16``: how a reader names the row."""
        parts = [self.item.impl, formatting.benchmark_label(self.item.benchmark)]
        if self.params_text:
            parts.append(self.params_text)
        return " · ".join(parts)

    def severity(self) -> float:
        """Rank within a verdict: the biggest change first (conbench #388); others keep their order."""
        r = self.item.ratio
        if r is None or self.item.verdict not in ("regression", "improvement", "unstable"):
            return 0.0
        return -r if self.item.verdict != "improvement" else r


@dataclass
class CheckReport:
    """Everything any rendering of one check shows."""

    check: StoredCheck
    head: CommitView
    base: CommitView
    items: list[ItemView]
    counts: dict[str, int]
    environment: Environment
    repro: list[str]
    axis: RatioAxis
    site_url: str | None = None
    report_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failing(self) -> bool:
        return (
            self.check.exit_code == 1
            or self.check.verdict != "pass"
            or any(i.verdict in FAILING for i in self.items)
        )

    @property
    def quiet(self) -> bool:
        """Nothing worth a reader's attention: every item unchanged or skipped."""
        return not any(i.notable for i in self.items)

    @property
    def notable(self) -> list[ItemView]:
        return [i for i in self.items if i.notable]

    def phrase(self, verdict: str) -> str:
        """``2 regressions``, ``1 improvement``: a count with its verdict word."""
        n = self.counts.get(verdict, 0)
        words = VERDICT_WORDS.get(verdict, (verdict, verdict))
        return f"{n} {words[0 if n == 1 else 1]}"

    def named(self, verdict: str) -> list[ItemView]:
        return [i for i in self.items if i.verdict == verdict]

    @property
    def icon(self) -> str:
        return "❌" if self.failing else "✅"

    @property
    def headline(self) -> str:
        """One line: what happened, in words and counts (no icon; see ``icon``)."""

        phrase = self.phrase
        if self.failing:
            bad = [phrase(v) for v in VERDICT_ORDER if v in FAILING and self.counts.get(v)]
            if not bad:
                bad = [f"check verdict {self.check.verdict}"]
            rest = [phrase(v) for v in VERDICT_ORDER if v not in FAILING and self.counts.get(v)]
            return "perfguard: " + ", ".join(bad) + (f" ({', '.join(rest)})" if rest else "")
        unchanged = self.counts.get("unchanged", 0)
        noun = "benchmark" if unchanged == 1 else "benchmarks"
        if self.quiet:
            skipped = self.counts.get("skipped", 0)
            tail = f", {skipped} skipped" if skipped else ""
            return f"perfguard: no regressions: {unchanged} {noun} unchanged{tail}"
        others = [
            phrase(v) for v in VERDICT_ORDER if v not in FAILING and v != "unchanged" and self.counts.get(v)
        ]
        return f"perfguard: no regressions: {unchanged} {noun} unchanged, " + ", ".join(others)


def _side_runs(check: StoredCheck, store: Store | None) -> tuple[Any, Any]:
    """The runs that measured both sides (latest before the check), through ``store.runs_for``."""
    if store is None:
        return None, None

    def pick(sha: str, preferred: tuple[str, ...]) -> Any:
        runs = list(store.runs_for(check.machine.key, sha, check.profile, purposes=preferred)) or list(
            store.runs_for(check.machine.key, sha, check.profile)
        )
        before = [r for r in runs if check.created_at is None or r.started_at <= check.created_at]
        return (before or runs or [None])[-1]  # runs_for is oldest first

    return pick(check.base.sha, ("baseline", "run")), pick(check.head.sha, ("head",))


def build_report(
    check: StoredCheck,
    *,
    store: Store | None = None,
    site_url: str | None = None,
    report_url: str | None = None,
) -> CheckReport:
    """The view of a stored check (``Store.get_check``).

    The software of both sides comes from ``check.environment["base"/"head"]`` when recorded,
    else from the runs of both commits through ``store.runs_for`` when the store is passed.
    """
    recorded = check.environment or {}
    if isinstance(recorded.get("base"), Mapping) and isinstance(recorded.get("head"), Mapping):
        base_run = head_run = None  # what check recorded wins: no need to read the runs (4 queries)
    else:
        base_run, head_run = _side_runs(check, store)
    items = [
        ItemView(item=i, params={k: v for k, v in (i.params or {}).items() if k != "impl"})
        for i in check.items
    ]
    order = {v: k for k, v in enumerate(VERDICT_ORDER)}
    items.sort(
        key=lambda i: (
            order.get(i.verdict, len(order)),
            i.severity(),
            i.item.impl,
            i.item.benchmark,
            formatting.natural_key(i.params),
        )
    )
    counted = Counter(i.verdict for i in items)
    counts = {v: counted[v] for v in VERDICT_ORDER if counted[v]}
    counts.update({v: n for v, n in counted.items() if v not in counts})  # unknown verdicts still show
    ratios = [
        x for i in items for x in (i.item.ratio, i.item.ci_low, i.item.ci_high) if x is not None and x > 0
    ]
    return CheckReport(
        check=check,
        head=CommitView.of(check.head),
        base=CommitView.of(check.base),
        items=items,
        counts=counts,
        environment=check_environment(check.environment, base_run, head_run),
        repro=repro_commands(check, items),
        axis=ratio_axis(ratios, check.threshold),
        site_url=site_url,
        report_url=report_url,
    )


def repro_commands(check: StoredCheck, items: list[ItemView]) -> list[str]:
    """Shell lines that reproduce the check, then only what needs attention (pytorch #136647)."""
    lines = [f"git checkout {shlex.quote(check.head.sha.partition('+')[0])}"]
    base_cmd = [
        "perfguard",
        "check",
        "--baseline",
        check.baseline_ref,
        "--profile",
        check.profile,
        "--threshold",
        f"{check.threshold:g}",
    ]
    lines.append(check.command.strip() if check.command and check.command.strip() else shlex.join(base_cmd))
    attention = sorted({i.item.benchmark for i in items if i.verdict in FAILING | {"unstable"}})
    if attention:
        regex = "^(" + "|".join(re.escape(b) for b in attention) + ")"
        lines.append("# only the benchmarks that need attention:")
        lines.append(shlex.join([*base_cmd, "--bench", regex]))
    return lines


def _report(check: Any, **options: Any) -> CheckReport:
    return check if isinstance(check, CheckReport) else build_report(check, **options)


def render_markdown(
    check: StoredCheck,
    *,
    max_chars: int = MARKDOWN_BUDGET,
    marker: str = MARKER,
    site_url: str | None = None,
    report_url: str | None = None,
    store: Store | None = None,
) -> str:
    """GitHub-flavoured Markdown for the job summary and the sticky PR comment.

    Starts with ``marker`` (a hidden HTML comment) so a workflow can find and update its comment.
    When the text would exceed ``max_chars`` (counted in UTF-16 units, as GitHub does; the default
    stays under GitHub's 65,536 limit), table rows are dropped from the end (unchanged first, since
    notable rows sort first) and a note says how many and where the full report is.
    """
    if not (marker.startswith("<!--") and marker.endswith("-->") and "-->" not in marker[4:-3]):
        raise ValueError(f"marker must be one HTML comment, got {marker!r}")
    report = _report(check, site_url=site_url, report_url=report_url, store=store)
    template = environment().get_template("check/report.md")

    def render(limit: int | None) -> str:
        return template.render(r=report, marker=marker, limit=limit)

    text = render(None)
    if _utf16_len(text) <= max_chars:
        return text
    lo, hi = 0, len(report.items)  # largest limit that fits, by bisection
    if _utf16_len(render(0)) > max_chars:
        return _hard_cut(render(0), max_chars)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _utf16_len(render(mid)) <= max_chars:
            lo = mid
        else:
            hi = mid - 1
    return render(lo)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _hard_cut(text: str, max_chars: int) -> str:
    """Last resort (a giant environment): cut, and say so."""
    note = "\n\n… report cut to fit GitHub's comment limit; see the HTML or JSON report.\n"
    budget = max_chars - _utf16_len(note)
    cut = text[:budget]
    while _utf16_len(cut) > budget:
        cut = cut[:-100]
    return cut + note


def render_html(check: StoredCheck, *, site_url: str | None = None, store: Store | None = None) -> str:
    """A single self-contained HTML page (inline CSS and JS, nothing fetched)."""
    report = _report(check, site_url=site_url, store=store)
    css, js = static_text("perfguard.css"), static_text("perfguard.js")
    return (
        environment()
        .get_template("check/report.html")
        .render(
            r=report,
            css=css,
            js=js,
            csp=inline_csp(css, js),
            inline_assets=True,
            root="",
            page="check",
        )
    )


def check_to_json(check: StoredCheck, *, store: Store | None = None) -> dict[str, Any]:
    """The report's data as plain JSON types; the schema is documented in ``docs/reports.md``."""
    report = _report(check, store=store)
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
            "params": dict(i.params or {}),
            "params_key": i.params_key,
            "metric": i.metric,
            "unit": i.unit,
            "direction": i.direction,
            "gated": i.gated,
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
        "counts": dict(report.counts),
        "items": [item(i) for i in report.items],
        "environment": {
            "recorded": report.environment.recorded,
            "base": {r.key: r.base for r in report.environment.rows if r.base != "–"},
            "head": {r.key: r.head for r in report.environment.rows if r.head != "–"},
            "differs": [
                {"key": r.key, "base": r.base, "head": r.head} for r in report.environment.differences
            ],
        },
        "repro": report.repro,
        "command": c.command,
        "config": dict(c.config or {}),
        "summary": dict(c.summary or {}),
    }
