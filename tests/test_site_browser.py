"""The history site in a real headless Chromium, over file:// URLs.

The site is rendered from a real SQLite store (``report_store.build_history_store``); what the
browser shows is compared with what the store holds, read here with plain SQLAlchemy queries.
Screenshots (desktop and mobile width) are kept under ``test-artifacts/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from browser_support import MOBILE, Visit, open_page
from report_readme import ReadmeFacts, build_readme_store
from report_store import FORWARD, MEMORY, REGRESSED_AT, XSS, HistoryFacts, build_history_store, params_key
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from perfguard.report import build_site
from perfguard.report.formatting import short_sha
from perfguard.store.models import Commit, Machine, Result, Run
from perfguard.units import format_value

pytestmark = pytest.mark.slow

RING_1024 = params_key({"impl": "ring", "seq_len": 1024, "dtype": "float32"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[HistoryFacts, Path]:
    root = tmp_path_factory.mktemp("site")
    facts = build_history_store(root / "history.db")
    build_site(facts.url, root / "site")
    return facts, root / "site"


def stored(url: str, machine_key: str, benchmark: str, key: str) -> list[tuple[str, float]]:
    """(sha, value) of one series as stored: history runs, clean commits, oldest commit first."""
    engine = create_engine(url)
    with Session(engine) as session:
        rows = session.execute(
            select(Commit.sha, Result.value)
            .join(Run, Result.run_id == Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .join(Machine, Run.machine_id == Machine.id)
            .where(
                Machine.key == machine_key,
                Result.benchmark == benchmark,
                Result.params_key == key,
                Result.status == "ok",
                Run.purpose == "run",
                Commit.dirty.is_(False),
            )
            .order_by(Commit.committed_at)
        ).all()
    engine.dispose()
    return [(sha, value) for sha, value in rows]


def page_for(site_dir: Path, benchmark: str, key: str) -> Path:
    """The benchmark page that holds this series (found by reading the pages, not by naming rules)."""
    for path in sorted((site_dir / "bench").glob("*.html")):
        text = path.read_text(encoding="utf-8")
        if f'data-params-key="{key}"' in text and f'data-benchmark="{_attr(benchmark)}"' in text:
            return path
    raise AssertionError(f"no page for {benchmark} {key}")


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")


def chart_points(visit: Visit, machine_key: str) -> tuple[list[float], list[float], dict[str, float]]:
    """Read one line chart back from the DOM: vertex x, the values its y encodes, and its axes."""
    figure = visit.page.locator(f'figure.chart[data-machine="{machine_key}"]')
    svg = figure.locator("svg.line-chart")
    lo = float(svg.get_attribute("data-y-lo"))
    hi = float(svg.get_attribute("data-y-hi"))
    x0, y1, x1, y0 = (float(v) for v in svg.get_attribute("data-plot").split())
    pts = [
        tuple(map(float, p.split(",")))
        for p in svg.locator("polyline.series").get_attribute("points").split()
    ]
    values = [lo + (y0 - y) / (y0 - y1) * (hi - lo) for _, y in pts]
    return [x for x, _ in pts], values, {"lo": lo, "hi": hi, "x0": x0, "x1": x1, "y0": y0, "y1": y1}


def test_index_shows_every_series_and_marks_the_regression(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    visit = open_page((site_dir / "index.html").as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        # The injected benchmark name is text on the page, and no script of it ran.
        assert page.get_by_text(XSS).first.is_visible()
        srcs = page.eval_on_selector_all(
            "script", "els => els.map(e => e.getAttribute('src') || e.getAttribute('type'))"
        )
        assert srcs == ["static/perfguard.js"]
        # Both machines are columns; the regressed series' sparkline is red on the GPU only.
        headers = page.locator("table.index thead th").all_inner_texts()
        assert any(facts.gpu_label in h for h in headers) and any(facts.cpu_label in h for h in headers)
        ring_rows = page.locator('tbody[data-impl="ring"] tr.series-row')
        flagged = ring_rows.filter(has=page.locator("svg.spark-regression"))
        assert flagged.count() == 1
        assert "seq_len=1024" in flagged.first.inner_text()
        assert page.locator("svg.spark-regression").count() == 1
        # Latest value shown = the stored latest value, formatted.
        latest = stored(facts.url, facts.gpu_key, FORWARD, RING_1024)[-1][1]
        assert format_value(latest, "seconds") in flagged.first.inner_text()
        visit.screenshot("site-index-desktop")
    finally:
        visit.close()


def test_benchmark_chart_holds_the_stored_points(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    path = page_for(site_dir, FORWARD, RING_1024)
    visit = open_page(path.as_uri())
    try:
        visit.assert_clean()
        for machine_key in (facts.gpu_key, facts.cpu_key):
            expected = stored(facts.url, machine_key, FORWARD, RING_1024)
            xs, values, axes = chart_points(visit, machine_key)
            assert len(values) == len(expected) == len(facts.shas)
            tolerance = (axes["hi"] - axes["lo"]) * 1e-3  # coordinates carry 0.1 of a viewBox unit
            for got, (_, want) in zip(values, expected, strict=True):
                assert got == pytest.approx(want, abs=tolerance)
            # One commit per x position, evenly spaced, oldest left.
            step = (axes["x1"] - axes["x0"]) / (len(facts.shas) - 1)
            assert xs == pytest.approx([axes["x0"] + i * step for i in range(len(xs))], abs=0.06)
            # The hover data names the same commits in the same order.
            data = visit.page.evaluate(
                "id => JSON.parse(document.getElementById(id).textContent)",
                visit.page.locator(f'figure.chart[data-machine="{machine_key}"]').get_attribute(
                    "data-points"
                ),
            )
            assert data["sha"] == [short_sha(sha) for sha, _ in expected]
            # The PR head (9.99 s) and the dirty work tree are stored but are not history.
            assert short_sha(facts.pr_sha) not in data["sha"] and max(values) < 1.0
    finally:
        visit.close()


def test_planted_regression_is_marked_from_both_sources(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    visit = open_page(page_for(site_dir, FORWARD, RING_1024).as_uri())
    try:
        page = visit.page
        gpu = page.locator(f'figure.chart[data-machine="{facts.gpu_key}"]')
        xs, _, _ = chart_points(visit, facts.gpu_key)
        for source in ("step", "check"):
            marker = gpu.locator(f'path.marker-regression[data-source="{source}"]')
            assert marker.count() == 1, source
            assert int(marker.get_attribute("data-index")) == REGRESSED_AT
            # The marker sits over the regressed commit's vertex.
            first = re.match(r"M([\d.]+),", marker.get_attribute("d"))
            assert first is not None and float(first.group(1)) == pytest.approx(xs[REGRESSED_AT], abs=0.11)
        assert gpu.locator("path.marker-improvement").count() == 0
        # The CPU series of the same benchmark did not change and carries no marker.
        assert page.locator(f'figure.chart[data-machine="{facts.cpu_key}"] path.marker').count() == 0
        # The marks are listed in words too, with the stored check's id.
        marks = page.locator("ul.marks li.mark-regression").all_inner_texts()
        assert any(re.search(r"\+(4[89]|5[01])\.\d% \(", m) for m in marks), marks  # planted +50%
        assert any("check #" in m and "×1.500" in m for m in marks)

        # Hovering the regressed commit reads out commit, date, value and CI.
        expected = stored(facts.url, facts.gpu_key, FORWARD, RING_1024)[REGRESSED_AT]
        gpu.locator("svg").scroll_into_view_if_needed()
        point = page.evaluate(
            """([sel, x]) => {
                const svg = document.querySelector(sel);
                const pt = svg.createSVGPoint(); pt.x = x; pt.y = 150;
                const p = pt.matrixTransform(svg.getScreenCTM());
                return [p.x, p.y];
            }""",
            [f'figure.chart[data-machine="{facts.gpu_key}"] svg', xs[REGRESSED_AT]],
        )
        page.mouse.move(point[0], point[1])
        tip = gpu.locator(".tip")
        tip.wait_for(state="visible")
        text = tip.inner_text()
        assert short_sha(expected[0]) in text
        assert "2026-03-09" in text
        assert format_value(expected[1], "seconds") in text
        assert "95% CI" in text and "regression" in text  # "≈95% CI"
        visit.screenshot("site-benchmark-hover")
    finally:
        visit.close()


def test_xss_benchmark_page_shows_the_name_as_text(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    key = params_key({"impl": "dilated", "seq_len": 1024, "dtype": "float32"})
    visit = open_page(page_for(site_dir, XSS, key).as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        assert XSS in page.locator("h1").inner_text()
        assert XSS in page.title()
        assert page.get_by_text(XSS).first.is_visible()
        assert page.evaluate("typeof window.alert") == "function" and visit.dialogs == []
        # The hover data carries the name safely escaped, and it parses.
        _, values, _ = chart_points(visit, facts.gpu_key)
        assert values == pytest.approx([v for _, v in stored(facts.url, facts.gpu_key, XSS, key)], rel=1e-3)
        # The commit whose subject is an <img onerror> appears as text in the tooltip data, not as markup.
        assert page.locator("img").count() == 0
        visit.screenshot("site-xss-benchmark")
    finally:
        visit.close()


def test_compare_page_finds_the_crossover(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    visit = open_page((site_dir / "compare.html").as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        section = page.locator(f'section.group[data-machine="{facts.gpu_key}"][data-benchmark="{FORWARD}"]')
        assert section.count() == 1
        text = section.inner_text()
        assert re.search(r"between 1024 and 4096\), ring has the best value instead of", text), text
        # The chart's points are the stored latest values.
        for impl in ("dilated", "improved", "ring"):
            circles = section.locator(f'g.impl-line[data-impl="{impl}"] circle')
            got = {
                int(c.get_attribute("data-n")): float(c.get_attribute("data-value")) for c in circles.all()
            }
            want = {
                n: stored(
                    facts.url,
                    facts.gpu_key,
                    FORWARD,
                    params_key({"impl": impl, "seq_len": n, "dtype": "float32"}),
                )[-1][1]
                for n in (256, 1024, 4096)
            }
            assert got == want
        assert section.locator("line.vertical").count() == 1
        best = section.locator("td.best").all_inner_texts()
        assert len(best) == 3
        visit.screenshot("site-compare")
    finally:
        visit.close()


def test_memory_page_fits_the_exponents(site: tuple[HistoryFacts, Path]) -> None:
    facts, site_dir = site
    visit = open_page((site_dir / "memory.html").as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        section = page.locator(f'section.group[data-benchmark="{MEMORY}"]')
        assert section.count() == 1
        exponents = {
            row.get_attribute("data-impl"): float(row.locator("td.exponent").inner_text())
            for row in section.locator("table.exponents tbody tr").all()
        }
        assert exponents["dilated"] == pytest.approx(2.0, abs=0.01)
        assert exponents["ring"] == pytest.approx(1.0, abs=0.01)
        assert "≈ O(n²)" in section.locator('tr[data-impl="dilated"]').inner_text()
        # Log-log axes: the circles' y decode (in log space) to the stored peak memory.
        svg = section.locator("svg.loglog")
        y_lo, y_hi = float(svg.get_attribute("data-y-lo")), float(svg.get_attribute("data-y-hi"))
        _, top, _, bottom = (float(v) for v in svg.get_attribute("data-plot").split())
        import math

        for circle in section.locator('g.impl-line[data-impl="dilated"] circle').all():
            n = int(circle.get_attribute("data-n"))
            cy = float(circle.get_attribute("cy"))
            decoded = math.exp(
                math.log(y_lo) + (bottom - cy) / (bottom - top) * (math.log(y_hi) - math.log(y_lo))
            )
            want = stored(
                facts.url,
                facts.gpu_key,
                MEMORY,
                params_key({"impl": "dilated", "seq_len": n, "dtype": "float32"}),
            )
            assert decoded == pytest.approx(want[-1][1], rel=0.01)
        assert section.locator("polyline.guide").count() == 2
        visit.screenshot("site-memory")
    finally:
        visit.close()


def test_every_page_loads_clean_and_every_link_resolves(site: tuple[HistoryFacts, Path]) -> None:
    _, site_dir = site
    pages = sorted(site_dir.rglob("*.html"))
    assert len(pages) >= 4 + 9 * 2 + 1
    visit = open_page(pages[0].as_uri())
    try:
        for path in pages:
            visit.goto(path.as_uri())
            visit.assert_clean()
            hrefs = visit.page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
            for href in set(hrefs):
                parsed = urlparse(href)
                assert parsed.scheme == "file", f"{path.name} links off-site: {href}"
                assert Path(unquote(parsed.path)).is_file(), f"{path.name} has a dead link: {href}"
    finally:
        visit.close()


@pytest.mark.parametrize(
    "name", ["index.html", "compare.html", "memory.html", "accuracy.html", "regressions.html", "bench"]
)
def test_mobile_width_stays_readable(site: tuple[HistoryFacts, Path], name: str) -> None:
    _, site_dir = site
    path = page_for(site_dir, FORWARD, RING_1024) if name == "bench" else site_dir / name
    visit = open_page(path.as_uri(), viewport=MOBILE)
    try:
        visit.assert_clean()
        # Nothing pushes the page sideways (wide tables scroll inside their own box).
        width = visit.page.evaluate("document.documentElement.scrollWidth")
        assert width <= MOBILE["width"] + 1, f"{name} is {width}px wide at {MOBILE['width']}px"
        # Body text stays at a readable size.
        size = visit.page.evaluate("parseFloat(getComputedStyle(document.querySelector('main')).fontSize)")
        assert size >= 13
        visit.screenshot(f"site-{name.removesuffix('.html')}-mobile")
    finally:
        visit.close()


# --- the README flow's site: one commit, then two (issue 14) ------------------------------------------


@pytest.fixture(scope="module")
def readme_sites(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[ReadmeFacts, Path]]:
    out = {}
    for commits in (1, 2):
        root = tmp_path_factory.mktemp(f"readme-site-{commits}")
        facts = build_readme_store(root / "history.db", commits=commits)
        build_site(facts.url, root / "site")
        out[commits] = (facts, root / "site")
    return out


def _sample_pages(site_dir: Path) -> list[Path]:
    """One page per benchmark (every metric, derived and work metrics included)."""
    seen: dict[str, Path] = {}
    for path in sorted((site_dir / "bench").glob("*.html")):
        bench = re.search(r'data-benchmark="([^"]+)"', path.read_text(encoding="utf-8"))
        assert bench is not None
        seen.setdefault(bench.group(1), path)
    return list(seen.values())


def _screen_xy(visit: Visit, figure: Any, x: float, y: float) -> tuple[float, float]:
    return visit.page.evaluate(
        """([fig, x, y]) => {
            const svg = fig.querySelector('svg');
            const pt = svg.createSVGPoint(); pt.x = x; pt.y = y;
            const p = pt.matrixTransform(svg.getScreenCTM());
            return [p.x, p.y];
        }""",
        [figure.element_handle(), x, y],
    )


def test_one_commit_site_shows_one_visible_point_per_series_with_a_tooltip(
    readme_sites: dict[int, tuple[ReadmeFacts, Path]],
) -> None:
    facts, site_dir = readme_sites[1]
    pages = _sample_pages(site_dir)
    assert len(pages) >= 10  # time, tokens/s, TFLOP/s and the work metrics each have pages
    visit = open_page(pages[0].as_uri())
    try:
        for path in pages:
            visit.goto(path.as_uri())
            visit.assert_clean()
            for figure in visit.page.locator("figure.chart[data-points]").all():
                dots = figure.locator("path.points")
                d = dots.get_attribute("d")
                match = re.fullmatch(r"M([\d.]+),([\d.]+)h0", d)
                assert match is not None, (path.name, d)  # exactly one point
                x, y = float(match.group(1)), float(match.group(2))
                figure.scroll_into_view_if_needed()
                sx, sy = _screen_xy(visit, figure, x, y)
                # The dot is painted there: the browser's hit test finds it (a bare polyline of one
                # point draws nothing).
                hit = visit.page.evaluate(
                    "([x, y]) => { const e = document.elementFromPoint(x, y); "
                    "return e.tagName + ' ' + e.getAttribute('class'); }",
                    [sx, sy],
                )
                assert hit is not None and "points" in hit, (path.name, hit)
                # Hovering it reads out the commit, its date and time, and the value.
                visit.page.mouse.move(sx, sy)
                tip = figure.locator(".tip")
                tip.wait_for(state="visible")
                text = tip.inner_text()
                assert short_sha(facts.main_shas[0]) in text
                assert "2026-11-24 09:00 UTC" in text
                assert figure.get_attribute("data-machine") and "value " in text
            # One commit: too few for a change, and the page says so instead of "no change".
            note = visit.page.locator(".change-note").first.inner_text()
            assert "1 commit measured" in note
        visit.goto(pages[0].as_uri())
        visit.screenshot("site-one-commit")
    finally:
        visit.close()


def test_two_commits_read_from_zero_by_commit_with_an_honest_note(
    readme_sites: dict[int, tuple[ReadmeFacts, Path]],
) -> None:
    facts, site_dir = readme_sites[2]
    key = params_key({"impl": facts.step_impl, "seq_len": 512, "dtype": "float32"})
    visit = open_page(page_for(site_dir, FORWARD, key).as_uri())
    try:
        visit.assert_clean()
        svg = visit.page.locator("figure.chart svg.line-chart").first
        assert float(svg.get_attribute("data-y-lo")) == 0.0  # y from zero: no cliff out of noise
        # x: the machine's commits in commit order, named by short sha and time.
        labels = svg.locator("text.commit").all_text_contents()
        assert labels == [short_sha(sha) for sha in facts.main_shas]
        assert svg.locator("text.commit-date").all_text_contents() == ["11-24 09:00", "11-24 12:00"]
        # The +21% step between two commits is stated, not hidden under "no change".
        note = visit.page.locator(".change-note").inner_text()
        assert re.search(r"too few for step detection .* \+2\d\.\d% from the previous commit", note), note
        assert "No change" not in visit.page.locator("main").inner_text()
        visit.screenshot("site-two-commits")
    finally:
        visit.close()


def test_axis_labels_stay_inside_their_charts(readme_sites: dict[int, tuple[ReadmeFacts, Path]]) -> None:
    """Issue 14: a TFLOP/s label was clipped to ".0100"; every tick label must fit its viewBox."""
    _, site_dir = readme_sites[2]
    pages = [site_dir / name for name in ("compare.html", "memory.html", "work.html", "accuracy.html")]
    pages += _sample_pages(site_dir)
    visit = open_page(pages[0].as_uri())
    try:
        for path in pages:
            visit.goto(path.as_uri())
            outside = visit.page.evaluate(
                """() => {
                    const bad = [];
                    for (const svg of document.querySelectorAll('svg.loglog, svg.line-chart')) {
                        const vb = svg.viewBox.baseVal;
                        for (const t of svg.querySelectorAll('text')) {
                            const b = t.getBBox();
                            if (b.width === 0) continue;
                            const right = vb.x + vb.width + 0.5;
                            if (b.x < vb.x - 0.5 || b.x + b.width > right) bad.push(t.textContent);
                        }
                    }
                    return bad;
                }"""
            )
            assert outside == [], (path.name, outside)
        visit.goto((site_dir / "compare.html").as_uri())
        labels = visit.page.locator("section.group svg.loglog .axis text").all_text_contents()
        assert any(label.endswith("FLOP/s") for label in labels)
        visit.screenshot("site-compare-readme")
    finally:
        visit.close()


def test_work_metrics_have_their_pages(readme_sites: dict[int, tuple[ReadmeFacts, Path]]) -> None:
    _, site_dir = readme_sites[1]
    visit = open_page((site_dir / "work.html").as_uri())
    try:
        visit.assert_clean()
        titles = visit.page.locator("section.group h2").all_inner_texts()
        for label in (
            "forward FLOPs",
            "forward aten ops",
            "forward bytes allocated",
            "forward+backward FLOPs",
        ):
            assert any(t.startswith(label) for t in titles), titles
        flops = visit.page.locator("section.group").filter(has_text="forward FLOPs · dtype").first
        rows = flops.locator("table.exponents tbody tr").all()
        assert rows
        for row in rows:  # 4·n²·h·d FLOPs: O(n²), fitted only to 3 or more lengths (issue 30)
            exponent, _, points = row.locator("td").all_inner_texts()[:3]
            if int(points) >= 3:
                assert abs(float(exponent) - 2.0) < 0.01, exponent
            else:
                assert exponent == "–", (exponent, points)
        visit.screenshot("site-work")
        # The index shows the gated timings; tokens/s, TFLOP/s and work metrics are one click away.
        visit.goto((site_dir / "index.html").as_uri())
        rows = visit.page.locator("table.index tr.series-row")
        shown = [r for r in rows.all() if r.is_visible()]
        assert len(shown) == 9 * 2 * 2  # forward and forward+backward time x 2 lengths
        visit.page.locator("label[for=show-all-series]").click()
        assert sum(1 for r in rows.all() if r.is_visible()) == rows.count() > len(shown)
        assert visit.page.get_by_text("forward aten ops").first.is_visible()
    finally:
        visit.close()
