"""How many items of a stored check have each verdict, by role: the one count every rendering shows.

Issue 30 saw one check counted three ways in one output: the headline over the gated items
("2 improvements"), the improvement line over every item, derived tokens/s and TFLOP/s included
("6 improvements"), and the terminal's last line over every item without saying so ("252 items:
unchanged 151" under "131 unchanged").  Each number was right for what it counted; none said what
that was.  So the terminal, Markdown, HTML and JSON reports take every count and its words from
:func:`tally` over the check's items, and every phrase says which items it counts:

* the headline counts the *gated* items (the ones that can fail the check);
* a line that names items of one verdict (improvements, unstable) names the primary items
  (gated and reported: a derived row follows its timing) and counts them as the headline does,
  with the ones that cannot fail said apart: ``2 improvements (+ 1 not gated)``;
* the line with every item counts each role by name: ``252 items: gated 131 unchanged, 13
  unstable · derived 100 unchanged, 8 unstable``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from perfguard.report.items import ROLES, VERDICT_ORDER, ItemView, phrase

#: How the role of a primary item that cannot fail the check is said beside a gated count.
NOT_GATED = "not gated"


def _ordered(counter: Counter[str]) -> dict[str, int]:
    """Verdicts in reading order (unknown ones after, by name), zero counts left out."""
    return {v: counter[v] for v in [*VERDICT_ORDER, *sorted(set(counter) - set(VERDICT_ORDER))] if counter[v]}


@dataclass(frozen=True)
class Tally:
    """Items per role (``gated`` / ``reported`` / ``derived``) and verdict, zero counts left out."""

    roles: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def count(self, verdict: str, role: str | None = None) -> int:
        """Items of ``verdict`` (of one role, or of every role)."""
        roles = self.roles.values() if role is None else [self.roles.get(role, {})]
        return sum(r.get(verdict, 0) for r in roles)

    @property
    def total(self) -> int:
        return sum(sum(r.values()) for r in self.roles.values())

    @property
    def by_verdict(self) -> dict[str, int]:
        """Every item's verdict counted, whatever its role (the JSON report's ``counts``)."""
        return _ordered(Counter({v: self.count(v) for r in self.roles.values() for v in r}))

    def phrase(self, verdict: str, role: str = "gated") -> str:
        """``2 regressions``: the items of one role (the gated ones by default) with their word."""
        return phrase(verdict, self.count(verdict, role))

    def primary_phrase(self, verdict: str) -> str:
        """What a line naming the primary items of ``verdict`` says: the gated count, as the headline
        has it, and the reported ones apart: ``2 improvements``, ``2 improvements (+ 1 not gated)``,
        ``1 improvement (not gated)``."""
        gated, reported = self.count(verdict, "gated"), self.count(verdict, "reported")
        if not reported:
            return phrase(verdict, gated)
        if not gated:
            return f"{phrase(verdict, reported)} ({NOT_GATED})"
        return f"{phrase(verdict, gated)} (+ {reported} {NOT_GATED})"

    def primary(self, verdict: str) -> int:
        """The primary items of ``verdict`` (gated and reported): how many a line names."""
        return self.count(verdict, "gated") + self.count(verdict, "reported")

    @property
    def line(self) -> str:
        """``252 items: gated 131 unchanged, 13 unstable · derived 108 unchanged``."""
        parts = [
            f"{role} " + ", ".join(phrase(v, n) for v, n in self.roles[role].items())
            for role in ROLES
            if self.roles.get(role)
        ]
        noun = "item" if self.total == 1 else "items"
        return f"{self.total:,} {noun}" + (": " + " · ".join(parts) if parts else "")


def tally(views: Iterable[ItemView]) -> Tally:
    """The counts of a check's items (``views``, roles set by :func:`perfguard.report.items.arrange`)."""
    per_role: dict[str, Counter[str]] = {}
    for v in views:
        per_role.setdefault(v.role, Counter())[v.verdict] += 1
    return Tally({role: _ordered(per_role[role]) for role in [*ROLES, *sorted(per_role)] if role in per_role})
