"""The site's scaling view over ranks (``ranks.html``), from a real SQLite store written through ``Store``.

The store holds the distributed suite of two commits at N = 1, 2 and 4 H200s (one machine key per
number of ranks, as ``perfguard run --profile distributed`` stores them), the CPU at N = 2, and a
single-process series that must stay out of the view.  Planted: ``ring``'s forward time at 128K
tokens is 1.0, 0.55 and 0.30 s at N = 1, 2, 4 on the newest commit (efficiency 1, 0.909, 0.833);
its per-GPU peak memory 100, 60 and 31.25 GiB (efficiency 1, 0.833, 0.8).
"""

from __future__ import annotations

import re
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
            _record(store, single, commit, "production", [plain], i)
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
