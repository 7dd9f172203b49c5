"""The Markdown check report: what a PR comment and the job summary show."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from report_store import CheckFacts, build_check_store

from perfguard.report import GITHUB_COMMENT_LIMIT, MARKER, load_check, render_markdown
from perfguard.store import Store


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> CheckFacts:
    return build_check_store(tmp_path_factory.mktemp("checks") / "history.db")


@pytest.fixture
def store(checks: CheckFacts) -> Iterator[Store]:
    with Store.open(checks.url) as opened:
        yield opened


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def test_quiet_check_is_one_line_and_collapsed_details(store: Store, checks: CheckFacts) -> None:
    text = render_markdown(load_check(store, checks.quiet_id))
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert lines[1] == "### ✅ perfguard: no regressions: 9 benchmarks unchanged"
    visible = text.split("<details>")[0]
    # Above the fold: the headline and one line of context, no table.
    assert "|" not in visible.replace("\\|", "")
    assert len([ln for ln in visible.splitlines() if ln.strip()]) <= 4
    details = text.split("<details>")[1]
    assert details.count("✔️ unchanged") == 9
    assert text.rstrip().endswith("</details>")


def test_mixed_check_names_every_item_that_needs_attention(store: Store, checks: CheckFacts) -> None:
    check = load_check(store, checks.mixed_id)
    text = render_markdown(check, store=store)
    assert text.splitlines()[0] == MARKER
    headline = text.splitlines()[1]
    assert headline.startswith("### ❌ perfguard: 2 regressions, 1 broken")
    visible = text.split("<details>")[0]
    # Summary lines, in the order a reader needs them, biggest regression first.
    bullets = [ln for ln in visible.splitlines() if ln.startswith("- ")]
    assert [re.search(r"\*\*(\d+ \w+)\*\*", b).group(1) for b in bullets] == [
        "2 regressions",
        "1 broken",
        "1 improvement",
        "1 unstable",
        "1 new",
        "1 missing",
    ]
    assert bullets[0].index("dilated") < bullets[0].index("ring")  # ×1.87 before ×1.31
    # The notable table is visible; unchanged and skipped rows are in the details.
    table_rows = [ln for ln in visible.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(table_rows) == 7
    assert "×1.870" in table_rows[0] and "[1.814, 1.926]" in table_rows[0]
    details = text.split("<details>")[1]
    assert details.count("✔️ unchanged") == 3 and details.count("⏭️ skipped") == 1
    unchanged = [ln for ln in details.splitlines() if "✔️ unchanged" in ln]
    assert [re.search(r"seq\\_len=(\d+)", ln).group(1) for ln in unchanged] == ["1024", "2048", "4096"]
    # Environment: both sides' software, with what differs called out above the fold.
    assert "driver 570.86 → 575.51" in visible and "torch 2.13.0 → 2.13.1" in visible
    assert "| ⚠️ torch | 2.13.0 | 2.13.1 |" in details
    assert "hostname" not in visible  # metadata, not a difference
    # The command that reproduces it.
    pre = details.split("<pre>")[1].split("</pre>")[0]
    assert f"git checkout {'a' * 40}" in pre
    assert "perfguard check --baseline main --profile production" in pre
    assert "--bench" in pre


def test_user_text_cannot_break_the_markdown(store: Store, checks: CheckFacts) -> None:
    text = render_markdown(load_check(store, checks.mixed_id))
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<b>attention</b>" not in text  # the head commit's subject
    assert "<oops>" not in text
    # "block|sparse" stays inside its table cell: every table row has the header's cell count.
    rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header_cells = len(re.split(r"(?<!\\)\|", rows[0]))
    for row in rows:
        if row.startswith("| | base"):  # the environment table has its own header
            header_cells = len(re.split(r"(?<!\\)\|", row))
        assert len(re.split(r"(?<!\\)\|", row)) == header_cells, row
    assert "block\\|sparse" in text


def test_size_limit_cuts_rows_and_says_so(store: Store, checks: CheckFacts) -> None:
    check = load_check(store, checks.big_id)
    full = render_markdown(check, max_chars=10**9)
    assert _utf16(full) > GITHUB_COMMENT_LIMIT  # the case is real: uncut it would be rejected
    text = render_markdown(check)
    assert _utf16(text) <= 65_000 < GITHUB_COMMENT_LIMIT
    assert text.splitlines()[0] == MARKER
    shown = text.count("✔️ unchanged")
    note = re.search(r"_(\d+) more rows not shown", text)
    assert note is not None and int(note.group(1)) == checks.big_items - 1 - shown
    # The regression is never the row that gets cut, and the document still closes.
    assert "🔴 regression | ring" in text
    assert text.rstrip().endswith("</details>")
    # A tighter budget cuts more, and still fits.
    small = render_markdown(check, max_chars=20_000)
    assert _utf16(small) <= 20_000 and small.count("✔️ unchanged") < shown


def test_marker_can_be_chosen_per_machine_but_must_stay_a_comment(store: Store, checks: CheckFacts) -> None:
    check = load_check(store, checks.quiet_id)
    assert render_markdown(check, marker="<!-- perfguard-report h100 -->").startswith(
        "<!-- perfguard-report h100 -->\n"
    )
    with pytest.raises(ValueError):
        render_markdown(check, marker="<!-- a --> <script>")


def test_links_to_the_full_report_and_site(store: Store, checks: CheckFacts) -> None:
    text = render_markdown(
        load_check(store, checks.quiet_id),
        site_url="https://example.org/perf/",
        report_url="https://example.org/run/1?x=1&y=<2>",
    )
    assert '<a href="https://example.org/perf/">history</a>' in text
    assert 'href="https://example.org/run/1?x=1&amp;y=&lt;2&gt;"' in text


def test_recorded_environment_needs_no_store() -> None:
    """A check whose environment was recorded renders it without reading any run."""
    from datetime import datetime, timezone

    from perfguard.store import StoredCheck, StoredCheckItem, StoredCommit, StoredMachine

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    commit = StoredCommit(id=1, sha="c" * 40, base_sha="c" * 40, committed_at=when, subject="s")
    check = StoredCheck(
        id=7,
        machine=StoredMachine(id=1, key="k", kind="cpu", label="CPU", attributes={}, first_seen=when),
        head=commit,
        base=commit,
        baseline_ref="main",
        profile="quick",
        threshold=0.2,
        verdict="pass",
        exit_code=0,
        summary={},
        environment={"base": {"torch": "2.13.0"}, "head": {"torch": "2.13.0"}},
        config={},
        command="",
        created_at=when,
        items=(
            StoredCheckItem(
                id=1,
                benchmark="b.C.track_time",
                impl="dilated",
                params={"impl": "dilated"},
                params_key="impl=dilated",
                metric="time",
                unit="seconds",
                direction="lower",
                gated=True,
                verdict="unchanged",
                threshold=0.2,
                base_n=5,
                head_n=5,
            ),
        ),
    )
    text = render_markdown(check)
    assert "no regressions: 1 benchmark unchanged" in text
    assert "| torch | 2.13.0 | 2.13.0 |" in text
    assert "perfguard check --baseline main --profile quick --threshold 0.2" in text
