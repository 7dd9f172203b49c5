"""The single-file HTML check report in a real headless Chromium, over file://."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import MOBILE, open_page
from report_store import XSS, CheckFacts, build_check_store
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from perfguard.report import load_check, render_html
from perfguard.report.formatting import format_value
from perfguard.store import Store
from perfguard.store.models import CheckItem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> CheckFacts:
    return build_check_store(tmp_path_factory.mktemp("checks") / "history.db")


@pytest.fixture(scope="module")
def reports(checks: CheckFacts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("html")
    paths = {}
    with Store.open(checks.url) as store:
        for name, check_id in (
            ("mixed", checks.mixed_id),
            ("quiet", checks.quiet_id),
            ("big", checks.big_id),
        ):
            path = out / f"check-{name}.html"
            path.write_text(render_html(load_check(store, check_id), store=store), encoding="utf-8")
            paths[name] = path
    return paths


@pytest.fixture
def store(checks: CheckFacts) -> Iterator[Store]:
    with Store.open(checks.url) as opened:
        yield opened


def test_mixed_report_renders_clean_and_marks_the_regressions(
    reports: dict[str, Path], store: Store, checks: CheckFacts
) -> None:
    visit = open_page(reports["mixed"].as_uri())
    try:
        # Inline CSS and JS run under a hash-based CSP: a wrong hash would be a console error.
        visit.assert_clean()
        page = visit.page
        assert page.evaluate("getComputedStyle(document.body).margin") == "0px"  # the inline CSS applied
        assert "perfguard: 2 regressions, 1 broken" in page.locator("h1").inner_text()
        assert page.locator("section.verdict-fail").count() == 1
        rows = page.locator("tr.v-row-regression")
        assert rows.count() == 2
        engine = create_engine(checks.url)  # the truth, read straight from the database
        with Session(engine) as session:
            stored = session.scalars(
                select(CheckItem).where(
                    CheckItem.check_id == checks.mixed_id, CheckItem.verdict == "regression"
                )
            ).all()
        engine.dispose()
        texts = rows.all_inner_texts()
        for item in stored:
            assert any(item.impl in t and format_value(item.head_value, item.unit) in t for t in texts)
        # The forest plot puts each regression's dot beyond the threshold line.
        for row in rows.all():
            dot = float(row.locator("circle.dot").get_attribute("cx"))
            limit = float(row.locator("line.limit").get_attribute("x1"))
            assert dot > limit
        # Named items link to their rows.
        first = page.locator(".named a.item-name").first
        assert first.get_attribute("href").startswith("#item-")
        # The environment differences are highlighted.
        differs = page.locator("table.env tr.differs th").all_inner_texts()
        assert sorted(differs) == ["driver", "torch"]
        assert "git checkout " + "a" * 40 in page.locator("pre.repro").inner_text()
        visit.screenshot("check-report-desktop")
    finally:
        visit.close()


def test_xss_benchmark_name_is_text(reports: dict[str, Path]) -> None:
    visit = open_page(reports["mixed"].as_uri())
    try:
        page = visit.page
        assert visit.dialogs == []
        cell = page.locator("tr.v-row-new td.bench")
        assert cell.inner_text() == XSS
        assert cell.is_visible()
        assert page.locator("tr.v-row-new td.impl").inner_text() == "block|sparse"
        # Exactly one script element (the report's own), nothing injected.
        assert page.locator("script").count() == 1
        assert page.locator("b").filter(has_text="attention").count() == 0  # the head commit subject
        assert "speed up | ring <b>attention</b>" in page.locator("dl.meta").inner_text()
        assert "RuntimeError: CUDA error: <oops>" in page.locator("tr.v-row-broken").inner_text()
    finally:
        visit.close()


def test_filters_narrow_the_table(reports: dict[str, Path]) -> None:
    visit = open_page(reports["mixed"].as_uri())
    try:
        page = visit.page
        visible = "document.querySelectorAll('#results-table tbody tr:not([hidden])').length"
        # Opens on what changed: unchanged and skipped rows are hidden.
        assert page.evaluate(visible) == 7
        page.locator("input.toggle-quiet").uncheck()
        assert page.evaluate(visible) == 11
        page.locator("input.filter").fill("hilbert")
        assert page.evaluate(visible) == 1
        assert page.locator("#results-table tbody tr:not([hidden]) td.impl").inner_text() == "hilbert_ring"
        visit.assert_clean()
    finally:
        visit.close()


def test_quiet_report_shows_every_row(reports: dict[str, Path]) -> None:
    visit = open_page(reports["quiet"].as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        assert page.locator("h1").inner_text() == "perfguard: no regressions: 9 benchmarks unchanged"
        assert page.locator("section.verdict-pass").count() == 1
        assert page.evaluate("document.querySelectorAll('#results-table tbody tr:not([hidden])').length") == 9
    finally:
        visit.close()


def test_big_report_keeps_every_row(reports: dict[str, Path], checks: CheckFacts) -> None:
    visit = open_page(reports["big"].as_uri())
    try:
        visit.assert_clean()
        assert visit.page.locator("#results-table tbody tr").count() == checks.big_items
    finally:
        visit.close()


def test_mobile_width(reports: dict[str, Path]) -> None:
    visit = open_page(reports["mixed"].as_uri(), viewport=MOBILE)
    try:
        visit.assert_clean()
        width = visit.page.evaluate("document.documentElement.scrollWidth")
        assert width <= MOBILE["width"] + 1
        assert visit.page.locator("h1").is_visible()
        visit.screenshot("check-report-mobile")
    finally:
        visit.close()
