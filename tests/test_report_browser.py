"""The single-file HTML check report in a real headless Chromium, over file://."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import DESKTOP, MOBILE, open_page
from report_readme import build_readme_store
from report_store import XSS, CheckFacts, build_check_store
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from perfguard.report import load_check, render_html
from perfguard.store import Store
from perfguard.store.models import CheckItem
from perfguard.units import format_value

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
        assert page.locator("h1").inner_text() == "fails perfguard: 2 regressions, 1 broken (gated)"
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
        # The items that decide the check link to their rows, the worst implementation first.
        assert page.locator(".deciding .impl-group").first.get_attribute("data-impl") == "dilated"
        first = page.locator(".deciding a.item-name").first
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
        assert "speed up | ring <b>attention</b>" in page.locator("p.context").inner_text()
        assert "RuntimeError: CUDA error: <oops>" in page.locator("tr.v-row-broken td.note").text_content()
        assert "RuntimeError: CUDA error: <oops>" in page.locator(".deciding").inner_text()
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
        assert page.locator("h1").inner_text() == "passes perfguard: no regressions (gated) · 9 unchanged"
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


# --- what the reader sees on the README flow's checks (issue 14) -------------------------------------


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The README flow twice: the same software on both sides, and a head that upgraded torch."""
    root = tmp_path_factory.mktemp("readme-html")
    out: dict[str, Any] = {}
    for name, software in (("same", None), ("upgraded", {"torch": "2.13.1+cpu"})):
        facts = build_readme_store(root / f"{name}.db", software=software)
        with Store.open(facts.url) as store:
            for check, check_id in (("aa", facts.aa_id), ("planted", facts.planted_id)):
                path = root / f"{name}-{check}.html"
                path.write_text(render_html(load_check(store, check_id), store=store), encoding="utf-8")
                out[f"{name}-{check}"] = path
        out[f"{name}-facts"] = facts
    return out


def _gated_counts(url: str, check_id: int) -> Counter[str]:
    engine = create_engine(url)
    with Session(engine) as session:
        rows = session.execute(
            select(CheckItem.verdict, CheckItem.gated).where(CheckItem.check_id == check_id)
        ).all()
    engine.dispose()
    return Counter(verdict for verdict, gated in rows if gated)


def test_headline_numbers_are_the_gated_verdicts(readme: dict[str, Any]) -> None:
    facts = readme["same-facts"]
    for name, check_id in (("same-planted", facts.planted_id), ("same-aa", facts.aa_id)):
        visit = open_page(readme[name].as_uri())
        try:
            visit.assert_clean()
            headline = visit.page.locator("h1").inner_text()
            gated = _gated_counts(facts.url, check_id)
            shown = {
                word: int(n) for n, word in re.findall(r"(\d+) (regressions?|unchanged|unstable)\b", headline)
            }
            for word, n in shown.items():
                verdict = "regression" if word.startswith("regression") else word
                assert n == gated[verdict], (headline, gated)
            if gated["regression"]:
                assert f"{gated['regression']} regressions (gated)" in headline
                # The failing items named at the top are exactly the gated regressions.
                named = visit.page.locator(".deciding a.item-name").count()
                assert named == gated["regression"]
            else:
                assert "no regressions (gated)" in headline
            visit.screenshot(f"check-readme-{name}")
        finally:
            visit.close()


def test_results_table_fits_1280_px(readme: dict[str, Any], reports: dict[str, Path]) -> None:
    """No cell of the results table is cut or pushes the page sideways at 1280 px."""
    overflow = """() => {
        const scroll = document.getElementById('results-scroll');
        const box = scroll.getBoundingClientRect();
        const bad = [];
        const cells = '#results-table th, #results-table td, #results-table td *';
        for (const el of document.querySelectorAll(cells)) {
            const r = el.getBoundingClientRect();
            if (r.width === 0 && r.height === 0) continue;  // hidden
            const html = el.outerHTML.slice(0, 80);
            if (r.right > box.right + 0.5 || r.left < box.left - 0.5) bad.push(html);
            if (el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'svg') bad.push('cut: ' + html);
        }
        const page = document.documentElement.scrollWidth;
        return {bad, scroll: scroll.scrollWidth - scroll.clientWidth, page};
    }"""
    for path in (readme["same-planted"], readme["same-aa"], reports["mixed"]):
        visit = open_page(path.as_uri())
        try:
            page = visit.page
            page.locator("input.toggle-quiet").uncheck()  # every row, the longest names included
            result = page.evaluate(overflow)
            assert result["bad"] == [] and result["scroll"] <= 0, (path.name, result)
            assert result["page"] <= DESKTOP["width"]
            # The statistics columns come on demand; then the table may scroll in its own box, never the page.
            assert page.locator("#results-table th.extra").first.is_hidden()
            page.locator("input.toggle-columns").check()
            assert page.locator("#results-table th.extra").first.is_visible()
            assert page.evaluate("document.documentElement.scrollWidth") <= DESKTOP["width"]
            visit.screenshot(f"check-{path.stem}-all-columns")
        finally:
            visit.close()


def test_software_banner_appears_exactly_when_software_differs(readme: dict[str, Any]) -> None:
    """Both sides ran one virtualenv (the head side recorded without settings): no banner;
    the head upgraded torch: a banner that names torch and nothing else."""
    for name, expected in (("same-planted", None), ("same-aa", None), ("upgraded-planted", "torch")):
        visit = open_page(readme[name].as_uri())
        try:
            banner = visit.page.locator("#software-differs")
            if expected is None:
                assert banner.count() == 0, banner.all_inner_texts()
                assert visit.page.locator("table.env tr.differs").count() == 0
            else:
                assert banner.is_visible()
                assert "torch 2.13.0+cpu → 2.13.1+cpu" in banner.inner_text()
                differs = visit.page.locator("table.env tr.differs th").all_inner_texts()
                assert differs == [expected]
            visit.screenshot(f"check-banner-{name}")
        finally:
            visit.close()


def test_derived_rows_carry_their_timings_verdict(readme: dict[str, Any]) -> None:
    for name in ("same-planted", "same-aa"):
        visit = open_page(readme[name].as_uri())
        try:
            pairs = visit.page.evaluate(
                """() => [...document.querySelectorAll('tr.role-derived')].map(tr => [
                    tr.dataset.verdict, document.getElementById(tr.dataset.follows).dataset.verdict,
                    tr.querySelector('td.bench').innerText])"""
            )
            assert len(pairs) == 36  # tokens/s and TFLOP/s of 9 implementations x 2 lengths
            for derived, timing, label in pairs:
                assert derived == timing, (label, derived, timing)
            # Each derived row sits right under its timing.
            order = visit.page.evaluate(
                """() => [...document.querySelectorAll('tr.role-derived')].every(tr => {
                    let prev = tr.previousElementSibling;
                    while (prev && prev.classList.contains('role-derived')) {
                        prev = prev.previousElementSibling;
                    }
                    return prev && prev.id === tr.dataset.follows; })"""
            )
            assert order
        finally:
            visit.close()


def test_unstable_items_are_explained_with_this_checks_noise(readme: dict[str, Any]) -> None:
    visit = open_page(readme["same-aa"].as_uri())
    try:
        story = visit.page.locator("details.noise")
        assert story.get_attribute("open") is not None  # nothing failed: the explanation is the news
        text = story.inner_text()
        assert "A/A check" in text and "within-round IQR/median" in text
        rows = story.locator("table.undecided tbody tr")
        unstable = visit.page.locator("tr.role-gated.v-row-unstable").count()
        assert rows.count() == unstable > 0
        assert re.search(r"≈ \d+ rounds a side", text)
    finally:
        visit.close()
