"""The rows of a check report: each stored verdict with its role, and the order a reader needs.

**One verdict per measurement.**  tokens/s and TFLOP/s are the forward samples seen through a
constant (``perfguard.compare`` gives them their timing's verdict); here they are *derived* rows,
drawn under their timing and counted apart, never in the headline's verdicts.  Items that are
neither gated nor derived (new, missing, skipped, ``gate = false`` overrides) are *reported*.

**What changed underneath.**  When anything regresses, ``perfguard check`` stores in the check's
summary, per benchmark, the aten ops / CUDA kernels whose count (or time) differs between the two
sides (``summary["underneath"]``, issue 12), read through the one typed reader of a check's summary
(:class:`perfguard.store.check_summary.CheckSummary`: JSON from a store that older or newer
perfguards also write).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from perfguard.metrics import COLUMN_WORDS
from perfguard.report import formatting
from perfguard.store import StoredCheckItem, StoredCommit
from perfguard.store.check_summary import CheckSummary, UnderneathRow, UnderneathTable

#: Verdicts in the order a reader needs them (perfguard.compare.Verdict values).
VERDICT_ORDER = (
    "regression",
    "broken",
    "failed",
    "accepted",
    "improvement",
    "unstable",
    "new",
    "missing",
    "skipped",
    "not affected",
    "unchanged",
)
#: Verdicts that fail a check when the item is gated (``failed`` only where the baseline worked:
#: compare marks the others not gated).
FAILING = frozenset({"regression", "broken", "failed"})
#: A regression within a trusted acceptance's scope and ceiling (perfguard.accept): a gated item
#: that is counted and shown, never failing.
ACCEPTED = "accepted"
#: Verdicts that are news; everything else is "nothing changed".
QUIET = frozenset({"unchanged", "skipped", "not affected"})
#: An item's role: whether it can fail the check, is only reported, or follows another.
ROLES = ("gated", "reported", "derived")
#: Underneath rows the top of a report shows per benchmark.
UNDERNEATH_ROWS = 5

VERDICT_WORDS = {
    "regression": ("regression", "regressions"),
    "broken": ("broken", "broken"),
    "failed": ("failed", "failed"),
    "accepted": ("accepted", "accepted"),
    "improvement": ("improvement", "improvements"),
    "unstable": ("unstable", "unstable"),
    "new": ("new", "new"),
    "missing": ("missing", "missing"),
    "skipped": ("skipped", "skipped"),
    "not affected": ("not affected (not measured)", "not affected (not measured)"),
    "unchanged": ("unchanged", "unchanged"),
}


def phrase(verdict: str, n: int) -> str:
    """``2 regressions``, ``1 improvement``: a count with its verdict word."""
    words = VERDICT_WORDS.get(verdict, (verdict, verdict))
    return f"{n} {words[0 if n == 1 else 1]}"


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


class Underneath(UnderneathTable):
    """What changed underneath one benchmark x params (the check's ``summary.underneath``), as the
    report shows it: its label and its first rows."""

    @classmethod
    def of(cls, table: UnderneathTable) -> Underneath:
        return cls(**{f.name: getattr(table, f.name) for f in fields(table)})

    @property
    def label(self) -> str:
        return formatting.metric_label(self.benchmark)

    @property
    def top(self) -> tuple[UnderneathRow, ...]:
        return self.rows[:UNDERNEATH_ROWS]

    @property
    def more(self) -> int:
        return max(0, len(self.rows) - UNDERNEATH_ROWS)


def parse_underneath(summary: CheckSummary) -> list[Underneath]:
    """The check's ``summary.underneath`` (:meth:`CheckSummary.from_json` skipped what is not an object)."""
    return [Underneath.of(table) for table in summary.underneath]


@dataclass
class ItemView:
    """One verdict row, with its display strings and its place in the report."""

    item: StoredCheckItem
    params: dict[str, Any]  # without impl
    role: str = "gated"  # gated | reported | derived
    source: ItemView | None = None  # derived: the timing it follows
    derived: list[ItemView] = field(default_factory=list)  # the rows that follow this one

    @property
    def verdict(self) -> str:
        return self.item.verdict

    @property
    def fails(self) -> bool:
        """Whether this item fails the check (gated and regression / broken / failed)."""
        return self.item.gated and self.item.verdict in FAILING

    @property
    def notable(self) -> bool:
        """Worth a row in the "what changed" view: news, or a suspect that was re-measured."""
        return self.item.verdict not in QUIET or self.item.retried

    @property
    def params_text(self) -> str:
        return formatting.params_label(self.item.params or {})

    @property
    def label(self) -> str:
        """``forward time``, ``forward TFLOP/s``: what the benchmark measures, in words."""
        return formatting.metric_label(self.item.benchmark)

    @property
    def name(self) -> str:
        """``ring · forward time · seq_len=4096 dtype=float16``: how a reader names the row."""
        parts = [self.item.impl, self.label]
        if self.params_text:
            parts.append(self.params_text)
        return " · ".join(parts)

    def severity(self) -> float:
        """Rank within a verdict: the biggest change first (conbench #388); others keep their order."""
        r = self.item.ratio
        if r is None or self.item.verdict not in ("regression", "improvement", "unstable"):
            return 0.0
        return -r if self.item.verdict != "improvement" else r


def column_order(benchmark: str) -> tuple[int, bool, str]:
    """Timings, memory, then the work metrics (the order a reader scans them); forward first."""
    label = formatting.metric_label(benchmark)
    backward = label.startswith("forward+backward")
    for k, word in enumerate(COLUMN_WORDS):
        if label.endswith(word):
            # the errors: the output first, then the gradients in argument order (q, k, v)
            return (k, backward, _ERROR_ORDER.get(label, label))
    return (9, backward, label)


#: How the accuracy columns sort: output error, then the q, k, v gradient errors; the causal ones after.
_ERROR_ORDER = {
    f"{causal}{label}": f"{i}{j}"
    for i, causal in enumerate(("", "causal "))
    for j, label in enumerate(("output error", "q gradient error", "k gradient error", "v gradient error"))
}


def arrange(views: Sequence[ItemView]) -> list[ItemView]:
    """Set roles, put derived rows under their timing; return the display order.

    Primary items by verdict (regressions first), the biggest change first within one, then
    implementation, benchmark and parameters (seq_len as a number); each followed by its derived
    rows.  A derived item whose timing is not in the check stays on its own, as reported.
    """
    by_key = {(v.item.benchmark, v.item.params_key): v for v in views}
    for v in views:
        source = formatting.derived_source(v.item.benchmark)
        parent = by_key.get((source, v.item.params_key)) if source else None
        if parent is not None and not v.item.gated:
            v.role, v.source = "derived", parent
            parent.derived.append(v)
        elif not v.item.gated:
            v.role = "reported"
    order = {v: k for k, v in enumerate(VERDICT_ORDER)}
    primary = sorted(
        (v for v in views if v.role != "derived"),
        key=lambda i: (
            order.get(i.verdict, len(order)),
            i.severity(),
            i.item.impl,
            column_order(i.item.benchmark),
            i.item.benchmark,
            formatting.natural_key(i.params),
        ),
    )
    out = []
    for v in primary:
        out.append(v)
        out.extend(sorted(v.derived, key=lambda d: d.item.benchmark))
    return out
