"""The Markdown check report: what a PR comment and the job summary show."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from report_readme import ReadmeFacts, build_readme_store
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


def _grid_rows(text: str) -> list[str]:
    """The rows of the collapsed results grid (implementation x parameters)."""
    lines = text.split("<details>")[1].splitlines()
    start = next((k for k, ln in enumerate(lines) if ln.startswith("| | implementation")), None)
    if start is None:
        return []
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("| "):
            break
        rows.append(ln)
    return rows


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> ReadmeFacts:
    return build_readme_store(tmp_path_factory.mktemp("readme") / "history.db")


def test_quiet_check_is_one_line_and_collapsed_details(store: Store, checks: CheckFacts) -> None:
    text = render_markdown(load_check(store, checks.quiet_id))
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert lines[1] == "### ✅ perfguard: no regressions (gated) · 9 unchanged"
    visible = text.split("<details>")[0]
    # Above the fold: the headline, one line of context and the software banner, no table.
    assert "|" not in visible.replace("\\|", "")
    assert len([ln for ln in visible.splitlines() if ln.strip()]) <= 4
    # Without a full report to link to, every row is in the details.
    assert len(_grid_rows(text)) == 9
    assert text.rstrip().endswith("</details>")


def test_mixed_check_names_what_decides_it_worst_first(store: Store, checks: CheckFacts) -> None:
    check = load_check(store, checks.mixed_id)
    text = render_markdown(check, store=store)
    assert text.splitlines()[0] == MARKER
    assert text.splitlines()[1] == "### ❌ perfguard: 2 regressions, 1 broken (gated)"
    visible = text.split("<details>")[0]
    # One paragraph per failing implementation, the biggest change first.
    failing = re.findall(r"^\*\*(.+?)\*\* fails the check", visible, flags=re.M)
    assert failing == ["dilated", "ring", "block\\_sparse\\_ring"]
    assert "×1.870 (+87.0%, 95% CI [1.814, 1.926])" in visible
    assert "RuntimeError: CUDA error: &lt;oops&gt;" in visible
    assert "🟢 **1 improvement**: improved forward time ×0.710" in visible
    assert "🟡 **1 unstable**" in visible
    assert "Also: 1 new · 1 missing · 1 skipped · 3 unchanged." in visible
    # The collapsed grid: rows with news first, then the unchanged ones by seq_len.
    rows = _grid_rows(text)
    assert len(rows) == 11
    assert rows[0].startswith("| 🔴 | dilated | seq\\_len=8192")
    unchanged = [r for r in rows if r.startswith("|  | dilated")]
    assert [re.search(r"seq\\_len=(\d+)", r).group(1) for r in unchanged] == ["1024", "2048", "4096"]
    # Environment: both sides' software, with what differs called out above the fold.
    assert "driver 570.86 → 575.51" in visible and "torch 2.13.0 → 2.13.1" in visible
    details = text.split("<details>")[1]
    assert "| ⚠️ torch | 2.13.0 | 2.13.1 |" in details
    assert "hostname" not in text  # metadata, not a difference
    # The command that reproduces it.
    pre = details.split("<pre>")[1].split("</pre>")[0]
    assert f"git checkout {'a' * 40}" in pre
    assert "perfguard check --baseline main --profile production" in pre
    assert "--bench" in pre


def test_planted_regression_comment_is_short_and_names_the_implementation_first(readme: ReadmeFacts) -> None:
    """Issue 14: one regressed implementation, a comment of at most ~40 lines that names it first."""
    with Store.open(readme.url) as store:
        text = render_markdown(
            load_check(store, readme.planted_id), store=store, report_url="https://ci.example/run/7/pr.html"
        )
        check = load_check(store, readme.planted_id)
    lines = text.splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines:\n{text}"
    with Store.open(readme.url) as store:  # without a link too (the job summary)
        unlinked = render_markdown(load_check(store, readme.planted_id), store=store)
    assert len(unlinked.splitlines()) <= 40
    assert "each in the HTML and JSON reports" in unlinked
    gated = [i for i in check.items if i.gated and i.verdict == "regression"]
    derived = [i for i in check.items if not i.gated and i.verdict == "regression"]
    assert lines[1] == f"### ❌ perfguard: {len(gated)} regressions (gated) · {len(derived)} derived"
    assert {i.impl for i in gated} == {"improved"}
    body = [ln for ln in lines[2:] if ln.strip() and not ln.startswith("<sub>")]
    assert body[0] == f"**improved** fails the check ({len(gated)} gated items):"
    # What changed underneath, right under the items it explains.
    visible = text.split("<details>")[0]
    assert "what changed underneath (aten ops, dispatch counts, one call): +100 × `aten::add`" in visible
    order = [visible.index(x) for x in ("fails the check", "what changed underneath", "unstable")]
    assert order == sorted(order)
    # The full report is one click away, twice (the header and the collapsed results).
    assert text.count('href="https://ci.example/run/7/pr.html"') == 2
    # The collapsed grid lists the rows with news; the others are one line.
    assert any(r.startswith("| 🔴 | improved |") for r in _grid_rows(text))
    assert re.search(r"_\d+ other implementation × parameter rows: every benchmark unchanged", text)


def test_derived_cells_never_disagree_with_their_timing(readme: ReadmeFacts) -> None:
    """tokens/s and TFLOP/s have no column of their own: nothing can contradict the forward time."""
    with Store.open(readme.url) as store:
        for check_id in (readme.aa_id, readme.planted_id):
            check = load_check(store, check_id)
            text = render_markdown(check, store=store)
            header = next(ln for ln in text.splitlines() if ln.startswith("| | implementation"))
            assert "tokens/s" not in header and "TFLOP/s" not in header
            forward = {
                (i.impl, i.params_key): i.verdict
                for i in check.items
                if i.benchmark.endswith("Forward.track_time")
            }
            for i in check.items:
                if "Throughput" in i.benchmark:
                    assert i.verdict == forward[(i.impl, i.params_key)], i


def test_aa_check_explains_its_unstable_items(readme: ReadmeFacts) -> None:
    with Store.open(readme.url) as store:
        check = load_check(store, readme.aa_id)
        text = render_markdown(check, store=store)
    unstable = [i for i in check.items if i.verdict == "unstable" and i.gated]
    assert unstable, "the scenario must have noisy benchmarks"
    visible = text.split("<details>")[0]
    assert text.splitlines()[1].startswith("### ✅ perfguard: no regressions (gated) · ")
    assert f"{len(unstable)} unstable" in text.splitlines()[1]
    assert "An A/A check compares a commit with itself, so each of these is this machine's noise" in visible
    # This check's measured noise, in numbers: the within-round IQR/median range of those items.
    noises = sorted(i.noise for i in unstable)
    assert f"within-round IQR/median {noises[0] * 100:.1f}–{noises[-1] * 100:.1f}%" in visible
    # And what would decide them: more rounds (with an estimate), or a GPU.
    assert re.search(r"With `--rounds \d+` about \d+ of \d+ would be decided", visible)
    assert "On a GPU runner, graph-replayed timings vary" in visible


def test_size_limit_cuts_rows_and_says_so(store: Store, checks: CheckFacts) -> None:
    check = load_check(store, checks.big_id)
    full = render_markdown(check, max_chars=10**9)
    assert _utf16(full) > GITHUB_COMMENT_LIMIT  # the case is real: uncut it would be rejected
    text = render_markdown(check)
    assert _utf16(text) <= 65_000 < GITHUB_COMMENT_LIMIT
    assert text.splitlines()[0] == MARKER
    shown = len(_grid_rows(text))
    note = re.search(r"_(\d+) more rows not shown", text)
    assert note is not None and int(note.group(1)) == checks.big_items - shown
    # The regression is never the row that gets cut, and the document still closes.
    assert _grid_rows(text)[0].startswith("| 🔴 | ring |")
    assert text.rstrip().endswith("</details>")
    # A tighter budget cuts more, and still fits.
    small = render_markdown(check, max_chars=20_000)
    assert _utf16(small) <= 20_000 and len(_grid_rows(small)) < shown


def test_user_text_cannot_break_the_markdown(store: Store, checks: CheckFacts) -> None:
    text = render_markdown(load_check(store, checks.mixed_id))
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<b>attention</b>" not in text  # the head commit's subject
    assert "<oops>" not in text
    # "block|sparse" stays inside its table cell: every table row has its header's cell count.
    cells = 0
    for row in (ln for ln in text.splitlines() if ln.startswith("| ")):
        n = len(re.split(r"(?<!\\)\|", row))
        if row.startswith("| | "):  # a header
            cells = n
        assert n == cells, row
    assert "block\\|sparse" in text


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
    assert "no regressions (gated) · 1 unchanged" in text
    assert "**Environment**: the same software on both sides" in text
    assert "perfguard check --baseline main --profile quick --threshold 0.2" in text


def test_quotes_are_written_as_quotes() -> None:
    """D5: GitHub shows ``&#39;``/``&#34;`` literally (in code, in the raw job summary): never write them."""
    from datetime import datetime, timezone

    from perfguard.store import StoredCheck, StoredCheckItem, StoredCommit, StoredMachine

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    head = StoredCommit(id=1, sha="c" * 40, base_sha="c" * 40, committed_at=when, subject='say "hi" it\'s')
    base = StoredCommit(id=2, sha="d" * 40, base_sha="d" * 40, committed_at=when, subject="base")
    reason = "implementation 'ring' failed perfguard verify in head: \"boom\" <here> & there"
    check = StoredCheck(
        id=8,
        machine=StoredMachine(id=1, key="k", kind="cpu", label="CPU 'x'", attributes={}, first_seen=when),
        head=head,
        base=base,
        baseline_ref="main",
        profile="quick",
        threshold=0.2,
        verdict="broken",
        exit_code=1,
        summary={},
        environment={"base": {"torch": "2.13.0"}, "head": {"torch": "2.13.0"}},
        config={},
        command="perfguard check --baseline main --bench 'Forward\\.track_time\\(.ring'",
        created_at=when,
        items=(
            StoredCheckItem(
                id=1,
                benchmark="bench_attention.Forward.track_time",
                impl="ring",
                params={"impl": "ring", "note": 'it\'s "quoted"'},
                params_key="impl=ring",
                metric="time",
                unit="seconds",
                direction="lower",
                gated=True,
                verdict="broken",
                threshold=0.2,
                base_n=5,
                head_n=0,
                reason=reason,
            ),
        ),
    )
    text = render_markdown(check, report_url="https://example.org/r?a='1'")
    assert "&#39;" not in text.replace('href="https://example.org/r?a=&#39;1&#39;"', "")
    assert "&#34;" not in text
    assert "implementation 'ring' failed" in text
    assert "--bench 'Forward" in text  # the repro line, copy-pasteable
    assert "&lt;here&gt; &amp; there" in text  # still no HTML from user text
    assert 'say "hi" it\'s' in text


def test_underneath_kernels_are_literal_code_and_bad_entries_are_skipped() -> None:
    """summary["underneath"] is JSON from the store: names go into code spans as written (cut when
    long, a backtick cannot close the span), malformed entries are ignored."""
    from datetime import datetime, timezone

    from perfguard.store import StoredCheck, StoredCheckItem, StoredCommit, StoredMachine

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    kernel = "void at::native::elementwise_kernel<128, 2, `gpu_kernel_impl<AddFunctor<float>>`>(int, Func)"
    params = {"impl": "ring", "seq_len": 4096, "dtype": "bfloat16"}
    key = "dtype=bfloat16,impl=ring,seq_len=4096"
    summary = {
        "underneath": [
            "not an object",
            {
                "impl": "ring",
                "benchmark": "bench_attention.Forward.track_time",
                "params_key": key,
                "kind": "CUDA kernels",
                "source": "torch.profiler, retry round",
                "rows": [
                    {"name": kernel, "base_count": 12, "head_count": 48, "base_ms": 0.1, "head_ms": 0.4},
                    {
                        "name": "flash_fwd_kernel",
                        "base_count": 1,
                        "head_count": 1,
                        "base_ms": 1.5,
                        "head_ms": 2.25,
                    },
                    "junk",
                ],
            },
        ]
    }
    commit = StoredCommit(id=1, sha="c" * 40, base_sha="c" * 40, committed_at=when, subject="s")
    base = StoredCommit(id=2, sha="d" * 40, base_sha="d" * 40, committed_at=when, subject="b")
    check = StoredCheck(
        id=9,
        machine=StoredMachine(id=1, key="h100", kind="cuda", label="H100", attributes={}, first_seen=when),
        head=commit,
        base=base,
        baseline_ref="main",
        profile="production",
        threshold=0.2,
        verdict="regression",
        exit_code=1,
        summary=summary,
        environment={},
        config={},
        command="",
        created_at=when,
        items=(
            StoredCheckItem(
                id=1,
                benchmark="bench_attention.Forward.track_time",
                impl="ring",
                params=params,
                params_key=key,
                metric="time",
                unit="seconds",
                direction="lower",
                gated=True,
                verdict="regression",
                threshold=0.2,
                base_value=1e-3,
                head_value=1.5e-3,
                ratio=1.5,
                ci_low=1.45,
                ci_high=1.55,
                base_n=50,
                head_n=50,
            ),
        ),
    )
    text = render_markdown(check)
    line = next(ln for ln in text.splitlines() if "what changed underneath" in ln)
    assert line.startswith(
        "  - what changed underneath (CUDA kernels, torch.profiler, retry round): +36 × `void"
    )
    code = re.findall(r"`([^`]*)`", line)
    assert len(code) == 2 and code[0].endswith("…") and len(code[0]) == 80
    assert "&lt;" not in code[0] and "<128, 2, ˋgpu_kernel_impl" in code[0]  # literal, backtick replaced
    assert "1.50 ms → 2.25 ms `flash_fwd_kernel`" in line  # perfguard.units: one formatter


def test_a_stored_unit_cannot_write_markdown() -> None:
    """Issue 27: ``unit`` is stored text (a tampered store, a PR's results store); the comment's
    "before → after" line must show it as text, not as a link or emphasis."""
    from dataclasses import replace
    from datetime import datetime, timezone

    from markdown_it import MarkdownIt

    from perfguard.store import StoredCheck, StoredCheckItem, StoredCommit, StoredMachine

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    unit = "[ops](https://evil.example/x) *loud* | `x`"
    item = StoredCheckItem(id=1, benchmark="bench_attention.Work.track_forward_ops", impl="ring",
                           params={"impl": "ring"}, params_key="impl=ring", metric="ops", unit=unit,
                           direction="lower", gated=True, verdict="regression", threshold=0.2,
                           base_n=1, head_n=1, base_value=100.0, head_value=200.0, ratio=2.0,
                           reason="ops 100 → 200")  # fmt: skip
    commit = StoredCommit(id=1, sha="c" * 40, base_sha="c" * 40, committed_at=when, subject="s")
    check = StoredCheck(
        id=9, machine=StoredMachine(id=1, key="k", kind="cpu", label="CPU", attributes={}, first_seen=when),
        head=commit, base=replace(commit, id=2, sha="d" * 40, base_sha="d" * 40), baseline_ref="main",
        profile="quick", threshold=0.2, verdict="regression", exit_code=1, summary={}, environment={},
        config={}, command="perfguard check --baseline main", created_at=when, items=(item,),
    )  # fmt: skip
    text = render_markdown(check)
    assert "100 [ops]" not in text and "\\[ops\\]" in text
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "https://evil.example" not in html.replace("(https://evil.example/x)", "")
    assert "<em>loud</em>" not in html and "*loud*" in html
