"""Steps on the baseline branch and acceptances on the history site, where a maintainer looks.

The history comes from ``site_changes``: real commits recorded through the store, the real
``perfguard changes`` after each (a step with a torch update at c4: flagged; a doubled op count with
an approved ``Perfguard-Accept`` trailer at c6: accepted), and a maintainer's ``perfguard accept``
at c7.  The site is rendered by the real ``perfguard report --out`` and read in headless Chromium:
the index lists the unaccepted steps, each chart flags its steps in red (ratio, likely cause) or
blue (who, why, up to what) at their commit, and acceptances are shown at their commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from site_changes import (
    ACCEPT_AT,
    COMMAND_REASON,
    FLAGGED_AT,
    FWD,
    OPS,
    TRAILER_AT,
    TRAILER_REASON,
    BaselineBranch,
    build_baseline_branch,
)

from perfguard.report.series import page_slug
from perfguard.store import Store
from tests.helpers.project import perfguard


@dataclass
class Site:
    branch: BaselineBranch
    out: Path

    def page(self, benchmark: str, impl: str) -> Path:
        params = {"impl": impl, "seq_len": 512, "dtype": "float32"}
        return (
            self.out
            / "bench"
            / f"{page_slug(benchmark, params, f'dtype=float32,impl={impl},seq_len=512')}.html"
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("site-steps")
    branch = build_baseline_branch(base)
    out = base / "site"
    rendered = perfguard(branch.repo, "report", "--out", str(out), db=branch.url)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    yield Site(branch, out)


def test_the_changes_the_pages_show_are_the_stored_ones(site: Site) -> None:
    """What perfguard changes decided (its JSON) is what the store holds and the site's data says."""
    c4, c6 = site.branch.changes[FLAGGED_AT - 1], site.branch.changes[TRAILER_AT - 1]
    assert c4["flagged"] == 2 and c4["cause"] == "torch 2.12.0 → 2.13.0"
    assert c6["flagged"] == 0 and c6["accepted"] == 1
    with Store.open(site.branch.url) as store:
        flagged = store.change_points(flagged_only=True)
        stored = store.change_points()
        acceptances = store.acceptances()
    assert {(p.sha, p.benchmark) for p in flagged} == {(site.branch.shas[FLAGGED_AT], b) for b in (FWD, OPS)}
    data = json.loads((site.out / "data" / "history.json").read_text())
    assert [(p["sha"], p["benchmark"], p["flagged"]) for p in data["change_points"]] == [
        (p.sha, p.benchmark, p.flagged) for p in stored
    ]
    assert {a["sha"]: a["source"] for a in data["acceptances"]} == {
        site.branch.shas[TRAILER_AT]: "trailer",
        site.branch.shas[ACCEPT_AT]: "command",
    }
    assert {a.sha for a in acceptances} == {site.branch.shas[TRAILER_AT], site.branch.shas[ACCEPT_AT]}


def _flags(page: object) -> dict[str, str]:
    """kind of each flag on the chart -> the short sha of its commit (from the list under it)."""
    items = page.locator("ul.steps li")  # type: ignore[attr-defined]
    return {li.get_attribute("data-kind"): li.get_attribute("data-sha")[:8] for li in items.all()}


@pytest.mark.slow
def test_a_flagged_step_and_an_acceptance_are_visible_where_a_maintainer_looks(site: Site) -> None:
    from browser_support import open_page

    shas = site.branch.shas
    visit = open_page((site.out / "index.html").as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        # The index: the unaccepted steps, first thing on the page, with ratio and likely cause.
        section = page.locator("#unaccepted-steps")
        assert section.is_visible()
        assert section.locator("h2").inner_text() == "2 Unaccepted steps on the baseline branch"
        steps = section.locator("li.step-flagged")
        assert steps.count() == 2
        for li in steps.all():
            assert li.get_attribute("data-sha") == shas[FLAGGED_AT]
            text = li.inner_text()
            assert re.search(r"×2\.00\d worse", text) and "likely cause: torch 2.12.0 → 2.13.0" in text
            assert f"perfguard accept --commit {shas[FLAGGED_AT][:12]} dilated" in text
        box = section.bounding_box()
        assert box is not None and box["y"] < page.viewport_size["height"]  # above the fold
        visit.screenshot("site-index-unaccepted-steps")

        # Follow the link of the op-count step to its chart.
        section.locator(f"li[data-benchmark='{OPS}'] a.series-name").click()
        page.wait_for_load_state("load")
        assert page.url.endswith(site.page(OPS, "dilated").name)
        visit.assert_clean()
        chart = page.locator("figure.chart")
        flags = chart.locator("g.flag")
        assert [f.get_attribute("data-kind") for f in flags.all()] == ["flagged", "accepted"]
        data = json.loads(page.locator("script[type='application/json']").inner_text())
        for flag in flags.all():
            index = int(flag.get_attribute("data-index"))
            line_x = float(flag.locator("line.flag-line").get_attribute("x1"))
            assert abs(line_x - data["x"][index]) < 0.11  # at its commit's point
            assert flag.is_visible()
        red = page.evaluate("getComputedStyle(document.querySelector('g.flag-flagged path.flag-head')).fill")
        assert red == "rgb(207, 34, 46)"
        assert _flags(page) == {"flagged": shas[FLAGGED_AT][:8], "accepted": shas[TRAILER_AT][:8]}
        flagged = page.locator("ul.steps li.step-flagged").inner_text()
        assert "×2.000 worse (433 aten ops → 866 aten ops)" in flagged
        assert "likely cause: torch 2.12.0 → 2.13.0" in flagged
        accepted = page.locator("ul.steps li.step-accepted").inner_text()
        assert "up to ×2.1 by Pat Author <pat@example.invalid> (approved by maint)" in accepted
        assert repr(TRAILER_REASON) in accepted and "Perfguard-Accept trailer" in accepted
        # Hovering the flagged commit's point reads the step out.
        svg = chart.locator("svg.line-chart")
        box = svg.bounding_box()
        index = int(flags.first.get_attribute("data-index"))
        plot_width = float(svg.get_attribute("viewBox").split()[2])
        page.mouse.move(box["x"] + data["x"][index] * box["width"] / plot_width, box["y"] + box["height"] / 2)
        tip = chart.locator(".tip")
        assert tip.is_visible() and "flagged step: ×2.000 worse" in tip.inner_text()
        visit.screenshot("site-chart-flagged-and-accepted-step")

        # The forward time: flagged at c4, and the maintainer's perfguard accept shown at c7.
        visit.goto(site.page(FWD, "dilated").as_uri())
        visit.assert_clean()
        assert _flags(page) == {"flagged": shas[FLAGGED_AT][:8], "acceptance": shas[ACCEPT_AT][:8]}
        acceptance = page.locator("ul.steps li.step-acceptance").inner_text()
        assert "dilated Forward.track_time up to ×1.5" in acceptance and repr(COMMAND_REASON) in acceptance
        assert re.search(r"perfguard accept #\d+ at " + shas[ACCEPT_AT][:8], acceptance)
        assert page.locator("g.flag-acceptance").is_visible()
        visit.screenshot("site-chart-acceptance-at-its-commit")

        # A series without a step has no flag.
        visit.goto(site.page(OPS, "improved").as_uri())
        assert page.locator("g.flag").count() == 0 and page.locator("ul.steps").count() == 0

        # The changes page lists every step and every acceptance.
        visit.goto((site.out / "regressions.html").as_uri())
        visit.assert_clean()
        assert page.locator("#steps-table tbody tr.step-flagged").count() == 2
        assert page.locator("#steps-table tbody tr.step-accepted").count() == 1
        assert page.locator("#acceptances-table tbody tr").count() == 2
    finally:
        visit.close()


def test_without_steps_the_index_says_nothing_about_them(tmp_path: Path) -> None:
    """A store where perfguard changes never ran: no section, no claim that nothing was flagged."""
    from report_store import build_history_store

    facts = build_history_store(tmp_path / "h.db")
    from perfguard.report import build_site

    summary = build_site(facts.url, tmp_path / "site")
    assert summary.change_points == 0 and summary.acceptances == 0
    index = (tmp_path / "site" / "index.html").read_text()
    assert "unaccepted-steps" not in index and 'class="flag' not in index
