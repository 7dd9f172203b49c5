"""Claims of the implementations and scaling pages carry intervals or say why not (issue 30).

"ring is best at every measured length" and "crossover ≈927" were stated from single noisy values;
dilated was labelled "≈ O(n²) (k=2.00)" from two points.  A best value is a claim only when its
≈95% interval and the runner-up's are apart and both come from two or more rounds; a fit needs
three or more lengths.  The pages are rendered by the real site builder from a real SQLite store.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

from perfguard.report import build_site
from perfguard.report.scaling import MIN_FIT_POINTS, groups
from perfguard.report.series import CommitInfo, MachineInfo, Point, Series
from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

COMMIT = CommitInfo("a" * 40, datetime(2026, 1, 1, tzinfo=timezone.utc), "s")
MACHINE = MachineInfo("m", "M", "cuda")


def series(impl: str, values: dict[int, tuple[float, float, int]]) -> list[Series]:
    """One series per length: (value, half-width of its interval, rounds)."""
    out = []
    for n, (v, half, runs) in values.items():
        key = f"impl={impl},seq_len={n}"
        params = {"impl": impl, "seq_len": n}
        s = Series(MACHINE, "b.Forward.track_time", impl, params, key, "time", "seconds", "lower", True)
        s.points = [Point(0, COMMIT, v, v - half, v + half, "≈95% CI", 40, None, "ok", runs=runs)]
        out.append(s)
    return out


def group_of(*members: list[Series]):  # type: ignore[no-untyped-def]
    flat = [s for m in members for s in m]
    (group,) = groups(flat, metrics=("time",), colors={}, slugs={s.page_key: "x" for s in flat}, min_lines=2)
    return group


def test_a_best_value_is_a_claim_only_with_intervals_apart_from_several_rounds() -> None:
    ring = series("ring", {512: (1.0, 0.01, 5), 1024: (2.0, 0.01, 5), 2048: (4.0, 0.5, 5)})
    dilated = series("dilated", {512: (1.5, 0.01, 5), 1024: (2.1, 0.2, 5), 2048: (4.2, 0.5, 1)})
    group = group_of(ring, dilated)
    assert group.winners == {512: "ring", 1024: "ring", 2048: "ring"}
    assert 512 not in group.undecided
    assert group.undecided[1024] == "the ≈95% intervals of ring and dilated overlap"
    assert group.undecided[2048] == "one round (no interval across processes)"
    assert group.claim.startswith(
        "the best value at every measured length, but decided at 512; not decided at"
    )


def test_a_crossover_says_whether_the_lengths_around_it_decide_it() -> None:
    ring = series("ring", {512: (2.0, 0.01, 1), 1024: (2.0, 0.01, 5), 2048: (2.0, 0.01, 5)})
    dilated = series("dilated", {512: (1.0, 0.01, 1), 1024: (4.0, 0.01, 5), 2048: (8.0, 0.01, 5)})
    group = group_of(ring, dilated)
    (cross,) = group.crossovers
    assert (cross.before, cross.after) == ("dilated", "ring")
    assert cross.undecided == "at 512: one round (no interval across processes)"


def test_a_complexity_needs_three_lengths() -> None:
    assert MIN_FIT_POINTS == 3
    two = group_of(series("ring", {512: (1.0, 0.01, 5), 1024: (2.0, 0.01, 5)}),
                   series("dilated", {512: (1.0, 0.01, 5), 1024: (4.0, 0.01, 5)}))  # fmt: skip
    assert all(line.exponent is None and line.complexity == "–" for line in two.lines)
    three = group_of(series("ring", {n: (n * 1e-3, 1e-6, 5) for n in (512, 1024, 2048)}),
                     series("dilated", {n: (n * n * 1e-6, 1e-6, 5) for n in (512, 1024, 2048)}))  # fmt: skip
    assert {line.impl: line.complexity for line in three.lines} == {"dilated": "≈ O(n²)", "ring": "≈ O(n)"}


class Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.claims: list[str] = []
        self.inside = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.inside:
            self.inside += 1
        elif tag == "p" and "claims" in (dict(attrs).get("class") or ""):
            self.inside = 1
            self.claims.append("")

    def handle_endtag(self, tag: str) -> None:
        if self.inside:
            self.inside -= 1

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.claims[-1] += data


def test_the_compare_page_says_one_round_for_values_of_one_round(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    machine = MachineRecord(key="cpu:Claims", kind="cpu", label="Claims CPU")
    commit = CommitRecord(sha="c" * 40, base_sha="c" * 40, branch="main", subject="c",
                          committed_at=datetime(2026, 1, 1, tzinfo=timezone.utc))  # fmt: skip
    results = [
        ResultRecord(
            benchmark="bench_attention.Forward.track_time",
            impl=impl,
            params={"impl": impl, "seq_len": n},
            metric="time",
            unit="seconds",
            direction="lower",
            gated=True,
            samples=[per_n * n * (1 + 0.01 * k) for k in range(20)],
        )
        for impl, per_n in (("ring", 1e-6), ("dilated", 2e-6))
        for n in (512, 1024)
    ]
    with Store.open(url) as store:
        store.record_run(machine, commit, profile="quick", software={}, fingerprint={}, settings={},
                         started_at=commit.committed_at, finished_at=commit.committed_at, results=results,
                         trusted=True)  # fmt: skip
    build_site(url, tmp_path / "site")
    page = Text()
    page.feed((tmp_path / "site" / "compare.html").read_text())
    [claim] = page.claims
    text = " ".join(claim.split())
    assert text.startswith(
        "ring has the best value at every measured length, but not decided at 512: one round"
    )
    assert not re.search(r"is best at every", text)
