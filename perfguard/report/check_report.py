"""The report of one ``perfguard check``: :class:`CheckReport`, what every rendering of it shows.

Markdown for the PR and a single-file HTML page (:mod:`perfguard.report.check_render`) and JSON
(:mod:`perfguard.report.check_json`) are all views of one :class:`CheckReport`, built from a
``StoredCheck``, so the PR comment, the HTML artifact and the JSON never disagree.  Reading order
(issue 14: "readable top-down in ten seconds"): the verdict, counted over the *gated* items only
(the ones that can fail the check) and saying so; the few items that decide it, by implementation
and parameter set, with what changed underneath (aten ops / CUDA kernels) when the check recorded
it; one line with everything else; why anything is ``unstable`` (this check's measured noise and
what would decide it) and what the re-measurement did; then the full table, the environment and
the command that reproduces the check.  Roles (gated / reported / derived) are explained in
:mod:`perfguard.report.items`, the explanations in :mod:`perfguard.report.stories`; the check's
stored summary is read through :class:`perfguard.store.check_summary.CheckSummary`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfguard.report import formatting
from perfguard.report.acceptances import AcceptanceStory, parse_acceptances
from perfguard.report.charts import RatioAxis, ratio_axis
from perfguard.report.environment import Environment, check_environment
from perfguard.report.grid import ResultGrid, result_grid
from perfguard.report.items import (
    ACCEPTED,
    FAILING,
    QUIET,
    VERDICT_ORDER,
    CommitView,
    ItemView,
    Underneath,
    arrange,
    parse_underneath,
    phrase,
)
from perfguard.report.stories import (
    DECIDING_IMPLS,
    ImplGroup,
    NoiseStory,
    RetryStory,
    deciding,
    noise_story,
    retry_story,
)
from perfguard.report.tally import Tally, tally
from perfguard.store import Store, StoredCheck
from perfguard.store.check_summary import CheckSummary

#: How many code-path changes the "Also" line names (the JSON report has them all).
PATHS_SHOWN = 3

__all__ = ["FAILING", "QUIET", "VERDICT_ORDER", "CheckReport", "build_report", "report_of"]


@dataclass
class CheckReport:
    """Everything any rendering of one check shows."""

    check: StoredCheck
    summary: CheckSummary  # check.summary, read through the one typed reader
    head: CommitView
    base: CommitView
    items: list[ItemView]  # display order: each primary item followed by its derived rows
    tally: Tally  # items per role and verdict: every count any rendering shows
    environment: Environment
    repro: list[str]
    axis: RatioAxis
    underneath: list[Underneath]
    noise: NoiseStory | None
    retry: RetryStory | None
    site_url: str | None = None
    report_url: str | None = None
    acceptances: AcceptanceStory | None = None  # summary["acceptances"], tied to the rows

    @property
    def primary(self) -> list[ItemView]:
        """Every item that is not derived from another."""
        return [i for i in self.items if i.role != "derived"]

    @property
    def gated(self) -> list[ItemView]:
        return [i for i in self.items if i.role == "gated"]

    @property
    def failing_items(self) -> list[ItemView]:
        """The gated items that fail the check, worst first."""
        order = {v: k for k, v in enumerate(VERDICT_ORDER)}
        return sorted(
            (i for i in self.items if i.fails), key=lambda i: (order.get(i.verdict, 99), i.severity())
        )

    @property
    def failing(self) -> bool:
        return self.check.exit_code == 1 or self.check.verdict != "pass" or bool(self.failing_items)

    @property
    def aa(self) -> bool:
        """An A/A check: the commit against a fresh measurement of itself."""
        return self.head.sha == self.base.sha

    @property
    def quiet(self) -> bool:
        """Nothing worth a reader's attention: every item unchanged or skipped, none re-measured."""
        return not any(i.notable for i in self.items)

    @property
    def notable(self) -> list[ItemView]:
        return [i for i in self.items if i.notable]

    @property
    def deciding(self) -> list[ImplGroup]:
        """The failing gated items by implementation and parameter set, the worst first."""
        return deciding(self.failing_items, self.underneath)

    @property
    def deciding_shown(self) -> list[ImplGroup]:
        return self.deciding[:DECIDING_IMPLS]

    @property
    def unmatched_underneath(self) -> list[Underneath]:
        """Underneath entries of no failing or accepted case (still worth a line)."""
        shown = {(i.item.impl, i.item.params_key) for i in self.failing_items}
        shown |= {(i.item.impl, i.item.params_key) for i in self.accepted_items}
        return [u for u in self.underneath if (u.impl, u.params_key) not in shown]

    @property
    def accepted_items(self) -> list[ItemView]:
        """The gated items an acceptance accepted: counted in the headline, never failing."""
        return [i for i in self.items if i.role == "gated" and i.verdict == ACCEPTED]

    def underneath_of(self, impl: str, params_key: str) -> list[Underneath]:
        return [u for u in self.underneath if (u.impl, u.params_key) == (impl, params_key)]

    def ceiling_broken(self, item: ItemView) -> float | None:
        """The accepted ceiling a failing item is over, if an acceptance covered it."""
        return self.acceptances.ceiling_broken(item) if self.acceptances is not None else None

    @property
    def grid(self) -> ResultGrid:
        return result_grid(self.primary)

    def named(self, verdict: str) -> list[ItemView]:
        """The primary items of ``verdict``: what a line that names them lists, counted by
        ``tally.primary_phrase(verdict)``."""
        return [i for i in self.primary if i.verdict == verdict]

    @property
    def icon(self) -> str:
        return "❌" if self.failing else "✅"

    @property
    def headline(self) -> str:
        """One line, counted over the gated items (no icon; see ``icon``).

        ``perfguard: 2 regressions (gated) · 2 derived`` or ``perfguard: no regressions (gated) ·
        16 unchanged · 2 unstable``.  Derived items (tokens/s, TFLOP/s) follow their timing and are
        counted apart; so are items that cannot fail the check.  Accepted regressions are gated
        items that do not fail: ``perfguard: 2 accepted · 0 regressions (gated) · 16 unchanged``.
        """
        gated = self.tally.roles.get("gated", {})
        derived = self.tally.roles.get("derived", {})
        reported = self.tally.roles.get("reported", {})
        accepted = gated.get(ACCEPTED, 0)
        if self.failing:
            bad = [phrase(v, gated[v]) for v in VERDICT_ORDER if v in FAILING and gated.get(v)]
            text = ", ".join(bad) + " (gated)" if bad else f"check verdict {self.check.verdict}"
            if accepted:
                text += f" · {phrase(ACCEPTED, accepted)}"
            follow = sum(n for v, n in derived.items() if v in FAILING)
            if follow:
                text += f" · {follow} derived"
            loose = sum(n for v, n in reported.items() if v in FAILING)
            if loose:
                text += f" · {loose} not gated"
            return "perfguard: " + text
        parts = [phrase(v, gated[v]) for v in VERDICT_ORDER if v not in FAILING | {ACCEPTED} and gated.get(v)]
        if accepted:  # "2 accepted · 0 regressions (gated)": counted first, never as failing
            return f"perfguard: {phrase(ACCEPTED, accepted)} · 0 regressions (gated)" + "".join(
                f" · {p}" for p in parts
            )
        return "perfguard: no regressions (gated)" + "".join(f" · {p}" for p in parts)

    @property
    def also(self) -> list[str]:
        """What neither the headline nor the lines above it count, as phrases.

        Improvements and ``unstable`` items have lines of their own; derived items follow their
        timing; items that cannot fail the check are marked so.
        """
        gated = self.tally.roles.get("gated", {})
        reported = self.tally.roles.get("reported", {})
        own_lines = {"improvement", "unstable", ACCEPTED, "not affected"}
        out = self.selection_phrases
        if self.failing:
            out += [
                phrase(v, gated[v])
                for v in VERDICT_ORDER
                if v not in FAILING and v not in own_lines and gated.get(v)
            ]
        out += [
            f"{phrase(v, reported[v])} (not gated)"
            for v in VERDICT_ORDER
            if reported.get(v) and v not in own_lines
        ]
        derived = sum(self.tally.roles.get("derived", {}).values())
        if derived:
            out.append(f"{derived} derived (tokens/s, TFLOP/s: their timing's verdict)")
        unused = self.acceptances.unused if self.acceptances is not None else []
        if unused:
            out.append(f"{formatting.count(len(unused), 'acceptance')} found no regression in its scope")
        out += self.path_phrases
        return out

    @property
    def selection_phrases(self) -> list[str]:
        """What the check measured when the change could not reach everything (issue 32,
        ``summary.selection``), or why it measured everything when that was its choice to make."""
        sel = self.summary.selection
        if sel is None:
            return []
        if sel.everything:
            return [f"every implementation measured: {sel.reason}"] if sel.reason else []
        total = len(sel.measured) + len(sel.not_measured)
        reached = "; ".join(
            f"{impl} ({', '.join(mods[:3])}{' …' if len(mods) > 3 else ''})"
            for impl, mods in sel.measured.items()
        )
        if reached:
            lead = f"{len(sel.measured)} of {total} implementations measured, those the change reaches"
            out = [f"{lead}: {reached}"]
        else:
            out = [f"no implementation measured: {sel.reason}"]
        if sel.not_measured:
            out.append(
                f"{len(sel.not_measured)} not affected, not measured (their stored baseline stands): "
                + ", ".join(sel.not_measured)
            )
        return out

    @property
    def path_phrases(self) -> list[str]:
        """The timings whose code path differs between the sides (or between a side's own rounds).

        ``summary.paths`` (:mod:`perfguard.compare.paths`); said whatever the verdict, because
        a changed path means the two numbers are of different code (issue 26).
        """
        entries = self.summary.paths
        out = []
        for e in entries[:PATHS_SHOWN]:
            where = f"{e.impl} {formatting.metric_label(e.benchmark)} ({e.params_key})"
            if e.varies:
                out.append(f"{where}: the {' and '.join(e.varies)} rounds ran different code paths")
                continue
            removed, added = ", ".join(e.removed), ", ".join(e.added)
            if removed or added:
                out.append(f"{where} runs another code path ({e.kind}): {removed or '–'} → {added or '–'}")
            else:
                out.append(f"{where} runs its {e.kind} a different number of times")
        if len(entries) > PATHS_SHOWN:
            out.append(f"{len(entries) - PATHS_SHOWN} more code-path changes (JSON report)")
        return out


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


def _needs_runs(recorded: Mapping[str, Any]) -> bool:
    """Whether the recorded environment lacks something the runs would add (4 queries otherwise saved)."""
    sides = [recorded.get("base"), recorded.get("head")]
    if not all(isinstance(s, Mapping) for s in sides):
        return True
    return any(not s.get(section) for s in sides for section in ("settings", "fingerprint"))  # type: ignore[union-attr]


def build_report(
    check: StoredCheck,
    *,
    store: Store | None = None,
    site_url: str | None = None,
    report_url: str | None = None,
) -> CheckReport:
    """The view of a stored check (``Store.get_check``).

    The software of both sides comes from ``check.environment["base"/"head"]`` when recorded
    (sections it lacks from the runs), else from the runs of both commits through
    ``store.runs_for`` when the store is passed.
    """
    recorded = check.environment or {}
    base_run, head_run = _side_runs(check, store) if _needs_runs(recorded) else (None, None)
    views = [
        ItemView(item=i, params={k: v for k, v in (i.params or {}).items() if k != "impl"})
        for i in check.items
    ]
    items = arrange(views)
    ratios = [
        x for i in items for x in (i.item.ratio, i.item.ci_low, i.item.ci_high) if x is not None and x > 0
    ]
    head, base = CommitView.of(check.head), CommitView.of(check.base)
    summary = CheckSummary.from_json(check.summary)
    report = CheckReport(
        check=check,
        summary=summary,
        head=head,
        base=base,
        items=items,
        tally=tally(items),
        environment=check_environment(check.environment, base_run, head_run),
        repro=repro_commands(check, items),
        axis=ratio_axis(ratios, check.threshold),
        underneath=parse_underneath(summary),
        noise=noise_story(check, summary, items, head.sha == base.sha),
        retry=retry_story(check, summary, items),
        site_url=site_url,
        report_url=report_url,
    )
    report.acceptances = parse_acceptances(summary, items)
    return report


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
    attention = sorted(
        {i.item.benchmark for i in items if i.role != "derived" and i.verdict in FAILING | {"unstable"}}
    )
    if attention:
        regex = "^(" + "|".join(re.escape(b) for b in attention) + ")"
        lines.append("# only the benchmarks that need attention:")
        lines.append(shlex.join([*base_cmd, "--bench", regex]))
    return lines


def report_of(check: StoredCheck | CheckReport, **options: Any) -> CheckReport:
    """``check``'s report (built with ``options``, :func:`build_report`), or ``check`` if it is one."""
    return check if isinstance(check, CheckReport) else build_report(check, **options)
