"""The site's Changes page says what it covers and lists every stored check (issue 30).

A store whose only check with regressions is of a pull request (its head is no point of the
history charts) made the page say "No change has been detected".  Now it says what its marks cover,
and lists each check with its gated items counted exactly as that check's own report counts them.
The page is parsed as HTML; the store is real SQLite, written through ``perfguard.store.Store``.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_store import CheckFacts, HistoryFacts, build_check_store, build_history_store

from perfguard.report import build_report, build_site
from perfguard.report.items import phrase
from perfguard.store import Store


class Rows(HTMLParser):
    """The text of each ``<tr data-check>`` of the checks table, its cells apart, and ``#covers``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, list[str]] = {}
        self.row: int | None = None
        self.ids: list[str] = []
        self.texts: dict[str, str] = {}
        self.depth: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-check"):
            self.row = int(a["data-check"] or 0)
            self.rows[self.row] = []
        elif tag == "td" and self.row is not None:
            self.rows[self.row].append("")
        if tag in ("p", "h2") and a.get("id"):
            self.ids.append(a["id"] or "")
            self.texts[a["id"] or ""] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.row = None
        if tag in ("p", "h2") and self.ids:
            self.ids.pop()

    def handle_data(self, data: str) -> None:
        if self.row is not None and self.rows[self.row]:
            self.rows[self.row][-1] += data
        for key in self.ids:
            self.texts[key] += data


def changes_page(url: str, out: Path) -> Rows:
    build_site(url, out)
    page = Rows()
    page.feed((out / "regressions.html").read_text())
    return page


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> CheckFacts:
    return build_check_store(tmp_path_factory.mktemp("checks") / "checks.db")


def test_a_pull_requests_regressions_are_listed_not_hidden_behind_no_change(
    checks: CheckFacts, tmp_path: Path
) -> None:
    page = changes_page(checks.url, tmp_path / "site")
    assert "No change has been detected" not in (tmp_path / "site" / "regressions.html").read_text()
    assert "0 commits of trusted runs" in page.texts["covers"] and "3 stored checks" in page.texts["covers"]
    assert "2 stored checks with failing items are listed under Checks" in page.texts["no-marks"]
    with Store.open(checks.url) as store:
        for check_id in (checks.mixed_id, checks.quiet_id, checks.big_id):
            report = build_report(store.get_check(check_id))  # the check's own report counts
            gated = report.tally.roles["gated"]
            expected = " · ".join(phrase(v, n) for v, n in gated.items())
            cells = page.rows[check_id]
            assert cells[-1].strip() == expected, (check_id, cells)
            assert "not on the history charts" in cells[2]
            assert cells[-2].strip() == report.check.verdict


def test_a_check_of_a_history_commit_is_not_flagged_as_off_the_charts(tmp_path: Path) -> None:
    history: HistoryFacts = build_history_store(tmp_path / "history.db")
    page = changes_page(history.url, tmp_path / "site")
    assert "not on the history charts" not in page.rows[history.check_id][2]
    assert "no-marks" not in page.texts  # the planted regression is marked on its chart
    assert f"{len(history.shas)} commits of trusted runs" in page.texts["covers"], page.texts["covers"]
