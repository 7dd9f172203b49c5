"""Accepted regressions in the check report (Markdown, HTML in Chromium, JSON).

The checks come from ``report_readme`` with ``acceptances=True``: the planted pull request (the
``improved`` forward pass does twice the work) with its commit message's ``Perfguard-Accept:``
trailers read and applied by the real :mod:`perfguard.accept`, as the gate applies them after
stage 2, and stored with ``summary["acceptances"] = Applied.summary()``:

* ``approved``: ``improved * <=2.8`` approved by ``maint``: all 8 gated regressions accepted, the
  check passes; a second trailer without a ceiling is ignored, with why;
* ``over``: ``improved * <=2.1`` approved: the forward aten ops (x2.724) are over the ceiling and
  still fail, the other 6 are accepted;
* ``unapproved``: nobody approved the trailer: it is ignored and all 8 fail.

What :mod:`perfguard.accept` decided (``facts.applied``) is the truth the reports are held to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from report_readme import ACCEPT_REASON, ReadmeFacts, build_readme_store

from perfguard.report import check_to_json, load_check, render_html, render_markdown
from perfguard.store import Store, StoredCheck, StoredCheckItem, StoredCommit, StoredMachine

REPORT_URL = "https://ci.example/run/7/pr.html"


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> ReadmeFacts:
    return build_readme_store(tmp_path_factory.mktemp("accepted") / "history.db", acceptances=True)


@pytest.fixture
def store(readme: ReadmeFacts) -> Iterator[Store]:
    with Store.open(readme.url) as opened:
        yield opened


def _markdown(store: Store, readme: ReadmeFacts, scenario: str, **kw: str) -> str:
    return render_markdown(load_check(store, readme.accepted[scenario]), store=store, **kw)


def test_accepted_items_are_counted_in_the_headline_never_as_failing(
    store: Store, readme: ReadmeFacts
) -> None:
    """Before this change the Markdown said "no regressions (gated) · 4 unstable · 132 unchanged" for
    this check: the 8 accepted items appeared nowhere above the fold."""
    applied = readme.applied["approved"]
    assert applied.exit_code == 0 and len(applied.accepted) == 8
    text = _markdown(store, readme, "approved")
    lines = text.splitlines()
    assert lines[1].startswith("### ✅ perfguard: 8 accepted · 0 regressions (gated) · ")
    visible = text.split("<details>")[0]
    assert "fails the check" not in visible
    # Who accepted, why, up to what, and where the acceptance came from.
    block = visible.split("☑️ **8 accepted**", 1)[1]
    assert f"`improved *` up to **×2.8**: “{ACCEPT_REASON}”" in block
    assert "Pat Author, approved by maint" in block and "pat@example.invalid" not in block
    assert f"Perfguard-Accept trailer in {readme.feature_sha[:10]}" in block
    # Every accepted item of the check, with its measured ratio, by parameter set.
    check = load_check(store, readme.accepted["approved"])
    accepted = [i for i in check.items if i.verdict == "accepted" and i.gated]
    assert len(accepted) == 8
    for n in (512, 1024):
        line = next(ln for ln in block.splitlines() if f"improved seq\\_len={n} dtype=float32:" in ln)
        mine = [i for i in accepted if i.params["seq_len"] == n]
        assert len(re.findall(r"×\d\.\d{3}", line)) == len(mine) == 4
        for i in mine:
            assert f"×{i.ratio:.3f}" in line
    # The trailer that could not be read is shown to the author, with why.
    ignored = '⚠️ **1 acceptance ignored** (not counted): `improved Forward.track_time "forgot the ceiling"`'
    assert ignored in visible
    assert "hint: write it as" in visible
    # The results grid marks them accepted, not failing.
    rows = [ln for ln in text.split("<details>")[1].splitlines() if ln.startswith("| ☑️ | improved")]
    assert len(rows) == 2 and all(ln.count("☑️ ×") == 4 for ln in rows)
    assert "🔴" not in text


@pytest.mark.parametrize("link", [None, REPORT_URL])
def test_one_accepted_implementation_keeps_the_comment_short(
    store: Store, readme: ReadmeFacts, link: str | None
) -> None:
    text = _markdown(store, readme, "approved", **({"report_url": link} if link else {}))
    # Rows of the results grid for items other than the accepted ones come from timings of a real
    # check on a shared 2-core machine: how many are unstable, and get a row, depends on its load.
    # What must stay short is everything else.
    noisy = [ln for ln in text.splitlines() if ln.startswith("| ") and "☑️" not in ln and "---" not in ln]
    assert len(text.splitlines()) - len(noisy) <= 38, text


def test_beyond_the_ceiling_still_fails_and_says_which_ceiling(store: Store, readme: ReadmeFacts) -> None:
    applied = readme.applied["over"]
    assert applied.exit_code == 1 and len(applied.over_ceiling) == 2 and len(applied.accepted) == 6
    text = _markdown(store, readme, "over")
    assert text.splitlines()[1] == "### ❌ perfguard: 2 regressions (gated) · 6 accepted"
    visible = text.split("<details>")[0]
    assert visible.count("🔴 forward aten ops 58 → 158 (×2.724) over the accepted ×2.1") == 2
    assert visible.index("fails the check") < visible.index("☑️ **6 accepted**")
    assert "🔴 over its ceiling, still failing: improved forward aten ops ×2.724" in visible


def test_an_unapproved_trailer_is_shown_to_the_author_with_why(store: Store, readme: ReadmeFacts) -> None:
    assert readme.applied["unapproved"].exit_code == 1
    text = _markdown(store, readme, "unapproved")
    assert text.splitlines()[1] == "### ❌ perfguard: 8 regressions (gated) · 4 derived"
    visible = text.split("<details>")[0]
    assert "☑️" not in visible
    ignored = next(ln for ln in visible.splitlines() if ln.startswith("⚠️ **1 acceptance ignored**"))
    assert f'`improved * <=2.8 "{ACCEPT_REASON}"` in {readme.feature_sha[:10]}' in ignored
    assert "not approved by a maintainer" in ignored
    # It comes right after what fails, before the noise story.
    assert visible.index("fails the check") < visible.index("acceptance ignored") < visible.index("unstable")


def test_json_counts_accepted_items_and_keeps_the_acceptances(store: Store, readme: ReadmeFacts) -> None:
    document = check_to_json(load_check(store, readme.accepted["over"]), store=store)
    assert document["counts_by_role"]["gated"]["accepted"] == 6
    assert document["counts_by_role"]["gated"]["regression"] == 2
    assert list(document["counts"])[:2] == ["regression", "accepted"]  # reading order
    assert document["headline"] == "perfguard: 2 regressions (gated) · 6 accepted"
    [row] = document["summary"]["acceptances"]["applied"]
    assert row["ceiling"] == 2.1 and len(row["accepted"]) == 6 and len(row["over_ceiling"]) == 2
    accepted = [i for i in document["items"] if i["verdict"] == "accepted" and i["role"] == "gated"]
    assert all(i["reason"].startswith("accepted up to 2.1× by Pat Author") for i in accepted)


def test_perfguard_report_renders_the_stored_acceptances(readme: ReadmeFacts, tmp_path: Path) -> None:
    """The real CLI, from the store: ``perfguard report --check ID --markdown - --html FILE``."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    html = tmp_path / "r.html"
    argv = ["report", "--db", readme.url, "--check", str(readme.accepted["approved"])]
    proc = subprocess.run(
        [sys.executable, "-m", "perfguard", *argv, "--markdown", "-", "--html", str(html)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "### ✅ perfguard: 8 accepted · 0 regressions (gated)" in proc.stdout
    assert "Pat Author, approved by maint · Perfguard-Accept trailer in" in proc.stdout
    page = html.read_text()
    assert 'id="accepted"' in page and 'approved by <span class="approved-by">maint</span>' in page


def _stored(summary: dict[str, object], items: list[StoredCheckItem]) -> StoredCheck:
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    commit = StoredCommit(id=1, sha="c" * 40, base_sha="c" * 40, committed_at=when, subject="s")
    base = StoredCommit(id=2, sha="d" * 40, base_sha="d" * 40, committed_at=when, subject="b")
    return StoredCheck(
        id=9,
        machine=StoredMachine(id=1, key="k", kind="cpu", label="CPU", attributes={}, first_seen=when),
        head=commit,
        base=base,
        baseline_ref="main",
        profile="quick",
        threshold=0.2,
        verdict="pass",
        exit_code=0,
        summary=summary,
        environment={"base": {"torch": "2.13.0"}, "head": {"torch": "2.13.0"}},
        config={},
        command="",
        created_at=when,
        items=tuple(items),
    )


def _item(verdict: str, reason: str = "") -> StoredCheckItem:
    return StoredCheckItem(
        id=1,
        benchmark="bench_attention.Forward.track_time",
        impl="ring",
        params={"impl": "ring", "seq_len": 4096},
        params_key="impl=ring,seq_len=4096",
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        verdict=verdict,
        threshold=0.2,
        base_n=5,
        head_n=5,
        base_value=1e-3,
        head_value=1.3e-3,
        ratio=1.3,
        ci_low=1.25,
        ci_high=1.35,
        reason=reason,
    )


def test_malformed_acceptances_are_skipped_and_user_text_stays_text() -> None:
    """summary["acceptances"] is JSON from the store: entries that are not objects are skipped, a
    label naming no row is dropped, and a reason cannot inject HTML or Markdown."""
    summary = {
        "acceptances": {
            "applied": [
                "not an object",
                {
                    "sha": "e" * 40,
                    "scope": "ring *",
                    "ceiling": 1.5,
                    "reason": "<img src=x onerror=alert(1)> **bold** | pipe",
                    "source": "command",
                    "id": 7,
                    "author": "Maint <m@x>",
                    "approved_by": None,
                    "accepted": ["Forward.track_time(impl=ring,seq_len=4096)", "Nope.track(x=1)", 3],
                    "over_ceiling": "not a list",
                },
            ],
            "ignored": [None, {"sha": "f" * 40, "text": "ring * <=0.9 x", "why": "accepts nothing"}],
        }
    }
    check = _stored(summary, [_item("accepted", "accepted up to 1.5× by Maint <m@x>: ...")])
    text = render_markdown(check)
    assert "### ✅ perfguard: 1 accepted · 0 regressions (gated)" in text
    assert f"Maint · perfguard accept \\#7 at {'e' * 10}" in text
    assert "&lt;img src=x onerror=alert(1)&gt; \\*\\*bold\\*\\* \\| pipe" in text
    assert "<img" not in text
    assert "ring forward time ×1.300" not in text  # the item is named once, under its acceptance
    assert "seq\\_len=4096: forward time ×1.300" in text
    assert f"`ring * <=0.9 x` in {'f' * 10}: accepts nothing" in text
    html = render_html(check)
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img" not in html


def test_an_acceptance_that_found_nothing_or_only_items_over_its_ceiling_says_so() -> None:
    entry = {"sha": "e" * 40, "scope": "ring *", "ceiling": 1.1, "reason": "why", "source": "command",
             "id": 3, "author": "Maint", "accepted": [], "over_ceiling": []}  # fmt: skip
    unused = _stored({"acceptances": {"applied": [entry], "ignored": []}}, [_item("unchanged")])
    text = render_markdown(unused)
    assert "### ✅ perfguard: no regressions (gated) · 1 unchanged" in text
    assert "Also: 1 acceptance found no regression in its scope." in text
    assert "No regression in its scope." in render_html(unused)
    over = {**entry, "over_ceiling": ["Forward.track_time(impl=ring,seq_len=4096)"]}
    failing = _stored({"acceptances": {"applied": [over], "ignored": []}}, [_item("regression")])
    text = render_markdown(failing)
    assert "**Acceptances** in scope, none within its ceiling:" in text and "0 accepted" not in text
    assert "🔴 forward time ×1.300 (+30.0%, 95% CI [1.250, 1.350]) over the accepted ×1.1" in text
    assert "over its ceiling, still failing: ring forward time ×1.300" in text
    assert "none accepted a regression of this check" in render_html(failing)


def test_an_accepted_row_without_a_stored_acceptance_is_still_shown() -> None:
    """A check stored before summary["acceptances"] existed: the accepted row is listed, its note says who."""
    text = render_markdown(_stored({}, [_item("accepted", "accepted up to 1.5× by Maint")]))
    assert "### ✅ perfguard: 1 accepted · 0 regressions (gated)" in text
    assert "- ring forward time ×1.300 (seq\\_len=4096): who accepted them is in each row's note" in text


@pytest.mark.slow
def test_the_html_report_shows_who_accepted_what_in_chromium(
    store: Store, readme: ReadmeFacts, tmp_path: Path
) -> None:
    from browser_support import open_page

    check = load_check(store, readme.accepted["over"])
    path = tmp_path / "accepted.html"
    path.write_text(render_html(check, store=store), encoding="utf-8")
    visit = open_page(path.as_uri())
    try:
        visit.assert_clean()
        page = visit.page
        assert page.locator("h1").inner_text() == "fails perfguard: 2 regressions (gated) · 6 accepted"
        section = page.locator("#accepted")
        assert section.is_visible()
        card = section.locator(".acceptance")
        assert card.count() == 1
        assert card.get_attribute("data-ceiling") == "2.1" and card.get_attribute("data-source") == "trailer"
        assert card.locator("code.scope").inner_text() == "improved *"
        assert card.locator("q.reason").inner_text() == ACCEPT_REASON
        assert card.locator(".author").inner_text() == "Pat Author <pat@example.invalid>"
        assert card.locator(".approved-by").inner_text() == "maint"
        assert (
            card.locator(".origin").inner_text() == f"Perfguard-Accept trailer in {readme.feature_sha[:10]}"
        )
        # Each accepted item links to its row, whose chip says accepted; the over-ceiling ones to
        # failing rows.
        links = card.locator("ul.accepted-items a.item-name")
        assert links.count() == 6
        for link in links.all():
            row = page.locator(link.get_attribute("href"))
            assert row.get_attribute("data-verdict") == "accepted" and row.is_visible()
            assert "accepted up to 2.1×" in row.locator("td.verdict-cell .chip").get_attribute("title")
        over = card.locator(".over-ceiling a")
        assert over.count() == 2
        for link in over.all():
            assert page.locator(link.get_attribute("href")).get_attribute("data-verdict") == "regression"
        assert page.locator(".deciding .over-ceiling").count() == 2  # named where the failure is
        visit.screenshot("check-report-accepted")
    finally:
        visit.close()
    # The unapproved check: the ignored trailer, with why, in the summary at the top.
    path.write_text(
        render_html(load_check(store, readme.accepted["unapproved"]), store=store), encoding="utf-8"
    )
    visit = open_page(path.as_uri())
    try:
        visit.assert_clean()
        box = visit.page.locator("#ignored-acceptances")
        assert box.is_visible() and "not approved by a maintainer" in box.locator(".why").inner_text()
        assert visit.page.locator("#accepted").count() == 0
    finally:
        visit.close()
