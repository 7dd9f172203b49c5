"""The site's views over ranks, from a real SQLite store written through ``Store``: the scaling view
(``ranks.html``) and the distributed errors on the accuracy page (``accuracy.html``, issue 31).

The store holds the distributed suite of two commits at N = 1, 2 and 4 H200s (one machine key per
number of ranks, as ``perfguard run --profile distributed`` stores them), the CPU at N = 2, and a
single-process series that must stay out of the view.  Planted: ``ring``'s forward time at 128K
tokens is 1.0, 0.55 and 0.30 s at N = 1, 2, 4 on the newest commit (efficiency 1, 0.909, 0.833);
its per-GPU peak memory 100, 60 and 31.25 GiB (efficiency 1, 0.833, 0.8).  Its errors at 4K tokens
(:data:`ERRORS`, the older commit's 10% larger): the output error grows 1.25x and 1.5x at N = 2, 4;
``multihead_ring`` is measured at N = 1 and 2 only, its causal error skipped (no causal mode: no
row); a single-process error series belongs to the accuracy page's view over lengths, never to the
one over ranks.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from browser_support import open_page

from perfguard.report import build_site
from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=timezone.utc)
FORWARD = "bench_distributed.Forward.track_time"
MEMORY = "bench_distributed.PeakMemory.track_forward"
GIB = 2**30
#: (ranks -> (forward seconds, peak bytes)) of the newest commit; the older one is 10% slower everywhere
NEWEST = {1: (1.0, 100 * GIB), 2: (0.55, 60 * GIB), 4: (0.30, 31.25 * GIB)}
ACCURACY = "bench_distributed.Accuracy.track_{}"
#: (implementation, error benchmark) -> {ranks: the newest commit's error}
ERRORS = {
    ("ring", "output_error"): {1: 4e-3, 2: 5e-3, 4: 6e-3},
    ("ring", "q_error"): {1: 6e-3, 2: 6e-3, 4: 6e-3},
    ("ring", "output_error_causal"): {1: 3e-3, 2: 3e-3, 4: 3.3e-3},
    ("multihead_ring", "output_error"): {1: 8e-3, 2: 8.8e-3},
}


def _result(benchmark: str, value: float, *, metric: str, unit: str, impl: str = "ring") -> ResultRecord:
    return ResultRecord(
        benchmark=benchmark,
        impl=impl,
        params={"impl": impl, "seq_len": 131072, "dtype": "bfloat16"},
        metric=metric,
        unit=unit,
        direction="lower",
        gated=True,
        samples=[value] * 5 if metric == "time" else [value],
        method="cuda-events" if metric == "time" else "cuda-allocator",
    )


def _error(benchmark: str, value: float, *, impl: str, seq_len: int) -> ResultRecord:
    return ResultRecord(
        benchmark=benchmark,
        impl=impl,
        params={"impl": impl, "seq_len": seq_len, "dtype": "bfloat16"},
        metric="error",
        unit="relative error",
        direction="lower",
        gated=True,
        samples=[value],
        method="float64 reference",
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ranks-site")
    url = f"sqlite:///{root / 'history.db'}"
    commits = [
        CommitRecord(sha=f"{i + 1:02x}" + "ab" * 19, base_sha=f"{i + 1:02x}" + "ab" * 19, branch="main",
                     parents=[], subject=f"commit {i}", author="dev", committed_at=T0 + timedelta(days=i))
        for i in range(2)
    ]  # fmt: skip
    with Store.open(url) as store:
        for i, commit in enumerate(commits):
            slower = 1.1 if i == 0 else 1.0
            for n, (seconds, peak) in NEWEST.items():
                key, label = f"NVIDIA H200 x{n} ranks={n}", f"NVIDIA H200 ×{n}, {n} ranks"
                machine = MachineRecord(key=key, kind="cuda", label=label, attributes={"ranks": n})
                results = [
                    _result(FORWARD, seconds * slower, metric="time", unit="seconds"),
                    _result(MEMORY, peak * slower, metric="memory", unit="bytes"),
                ]
                results += [
                    _error(ACCURACY.format(name), by_n[n] * slower, impl=impl, seq_len=4096)
                    for (impl, name), by_n in ERRORS.items()
                    if n in by_n
                ]
                # multihead_ring "declares no causal mode" here: its causal error is skipped, no row
                no_causal = _error(
                    ACCURACY.format("output_error_causal"), 0.0, impl="multihead_ring", seq_len=4096
                )
                results.append(
                    replace(
                        no_causal, status="skipped", samples=None, value=None, error="declares no causal mode"
                    )
                )
                _record(store, machine, commit, "distributed", results, i)
            cpu = MachineRecord(key="cpu:Xeon x2 ranks=2", kind="cpu", label="Xeon, 2 ranks", attributes={})
            _record(
                store,
                cpu,
                commit,
                "distributed-quick",
                [_result(FORWARD, 0.003, metric="time", unit="seconds")],
                i,
            )
            single = MachineRecord(key="NVIDIA H200 x1", kind="cuda", label="NVIDIA H200", attributes={})
            plain = _result("bench_attention.Forward.track_time", 0.5, metric="time", unit="seconds")
            one_gpu = [
                _error(
                    "bench_attention.Accuracy.track_output_error", 2e-3 * n / 1024, impl="improved", seq_len=n
                )
                for n in (1024, 2048)
            ]
            _record(store, single, commit, "production", [plain, *one_gpu], i)
    build_site(url, root / "site")
    return root / "site"


def _record(
    store: Store, machine: MachineRecord, commit: CommitRecord, profile: str, results: list, i: int
) -> None:
    store.record_run(
        machine, commit, profile=profile, purpose="run", software={"torch": "2.13.0"}, fingerprint={},
        settings={"world_size": machine.attributes.get("ranks", 1)}, command="perfguard run",
        started_at=T0 + timedelta(days=i, hours=1), finished_at=T0 + timedelta(days=i, hours=2),
        results=results, trusted=True,  # the baseline workflow's runs: what the site draws
    )  # fmt: skip


def _sections(html: str) -> dict[tuple[str, str], str]:
    pattern = (
        r'<section class="group ranks-group" data-hardware="([^"]*)" data-benchmark="([^"]*)">(.*?)</section>'
    )
    found = re.findall(pattern, html, flags=re.DOTALL)
    return {(hw, bench): body for hw, bench, body in found}


def test_each_hardware_and_benchmark_is_a_group_over_its_ranks(site: Path) -> None:
    html = (site / "ranks.html").read_text(encoding="utf-8")
    sections = _sections(html)
    assert set(sections) == {("NVIDIA H200", FORWARD), ("NVIDIA H200", MEMORY), ("cpu:Xeon x2", FORWARD)}
    assert "bench_attention" not in html  # the single-process suite is not scaled over ranks
    forward = sections[("NVIDIA H200", FORWARD)]
    assert re.findall(r"N = (\d+)", forward) == ["1", "2", "4"]
    # the newest commit's values (not the older, 10% slower ones), each linked to its series' page
    values = [
        float(v) for v in re.findall(r'class="num value" data-ranks="\d" data-value="([^"]+)"', forward)
    ]
    assert values == pytest.approx([1.0, 0.55, 0.30])
    efficiency = re.findall(r'class="num efficiency" data-ranks="\d">([^<]+)<', forward)
    assert efficiency == ["1.00", "0.91", "0.83"]
    memory = sections[("NVIDIA H200", MEMORY)]
    assert re.findall(r'class="num efficiency" data-ranks="\d">([^<]+)<', memory) == ["1.00", "0.83", "0.80"]
    assert 'href="bench/' in forward and "NVIDIA H200 x4 ranks=4" in forward


@pytest.mark.slow
def test_the_page_draws_every_point_and_its_ideal(site: Path) -> None:
    visit = open_page((site / "ranks.html").as_uri())
    page = visit.page
    try:
        visit.assert_clean()
        group = page.locator('section[data-benchmark="bench_distributed.Forward.track_time"]').first
        points = group.locator("g.impl-line circle")
        assert points.count() == 3
        assert sorted(int(points.nth(i).get_attribute("data-n")) for i in range(3)) == [1, 2, 4]
        assert group.locator("polyline.guide").count() == 1  # ideal ring
        assert "ranks (GPUs)" in (group.locator("svg.loglog").text_content() or "")
        assert page.locator('nav a[aria-current="page"]').inner_text() == "Scaling over GPUs"
    finally:
        visit.close()


def test_the_accuracy_page_shows_each_error_at_each_number_of_ranks_side_by_side(site: Path) -> None:
    html = (site / "accuracy.html").read_text(encoding="utf-8")
    sections = re.findall(
        r'<section class="group ranks-group accuracy-ranks" data-hardware="([^"]*)" data-params="([^"]*)">'
        r"(.*?)</section>",
        html,
        flags=re.DOTALL,
    )
    # one group per hardware x (seq_len, dtype): the CPU stored no error
    [(hardware, params, body)] = sections
    assert hardware == "NVIDIA H200" and "4096" in params and "bfloat16" in params
    assert re.findall(r"N = (\d+)", body) == ["1", "2", "4"]
    rows = re.findall(
        r'<tr data-impl="(\w+)" data-benchmark="[\w.]+\.track_(\w+)">(.*?)</tr>', body, re.DOTALL
    )
    # an implementation's rows together: the output error, the gradients, then the causal errors
    order = [("multihead_ring", "output_error"), ("ring", "output_error"), ("ring", "q_error")]
    assert [(impl, name) for impl, name, _ in rows] == [*order, ("ring", "output_error_causal")]
    for impl, name, row in rows:
        planted = ERRORS[(impl, name)]
        values = re.findall(r'class="num value" data-ranks="(\d)" data-value="([^"]+)"', row)
        assert {int(n): float(v) for n, v in values} == pytest.approx(planted)  # the newest commit's
        growth = re.findall(r'class="num growth" data-ranks="\d">([^<]+)<', row)
        assert growth == [f"{planted[n] / planted[1]:.2f}" for n in sorted(planted)]
        assert row.count('<td class="num">–</td>') == 2 * (3 - len(planted))  # not measured at N = 4
    assert re.findall(r'class="num growth" data-ranks="\d">([^<]+)<', rows[1][2]) == ["1.00", "1.25", "1.50"]
    # the view over lengths: the single-process series only
    lengths = re.findall(r'<section class="group" data-machine="([^"]*)" data-benchmark="([^"]*)">', html)
    assert lengths == [("NVIDIA H200 x1", "bench_attention.Accuracy.track_output_error")]
    # and the scaling page has no errors (no ideal: N ranks do not divide an error)
    scaled = _sections((site / "ranks.html").read_text(encoding="utf-8"))
    assert scaled and not any(".Accuracy." in benchmark for _, benchmark in scaled)


@pytest.mark.slow
def test_the_accuracy_page_draws_the_output_errors_over_the_ranks(site: Path) -> None:
    visit = open_page((site / "accuracy.html").as_uri())
    page = visit.page
    try:
        visit.assert_clean()
        group = page.locator("section.accuracy-ranks").first
        lines = group.locator("g.impl-line")
        drawn = {
            lines.nth(i).get_attribute("data-impl"): lines.nth(i).locator("circle").count()
            for i in range(lines.count())
        }
        assert drawn == {"multihead_ring": 2, "ring": 3, "ring causal": 3}
        assert group.locator("polyline.guide").count() == 0
        assert "ranks (GPUs)" in (group.locator("svg.loglog").text_content() or "")
        assert group.locator("table.ranks tbody tr").count() == 4
        visit.screenshot("site-accuracy-ranks-planted")
    finally:
        visit.close()
