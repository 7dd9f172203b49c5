"""The history site's data, without a browser: downloads, marks, intervals, crossovers, exponents."""

from __future__ import annotations

import csv
import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from report_store import FORWARD, REGRESSED_AT, HistoryFacts, build_history_store, params_key
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from perfguard.report import SiteSummary, build_site
from perfguard.report.scaling import groups
from perfguard.report.series import MachineInfo, Point, Series, median_interval
from perfguard.store import Store
from perfguard.store.models import Commit, Result, Run


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[HistoryFacts, SiteSummary]:
    root = tmp_path_factory.mktemp("site-data")
    facts = build_history_store(root / "history.db")
    return facts, build_site(facts.url, root / "site")


def _history_count(url: str) -> int:
    engine = create_engine(url)
    with Session(engine) as session:
        n = session.scalar(
            select(func.count(Result.id))
            .join(Run, Result.run_id == Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .where(Run.purpose == "run", Commit.dirty.is_(False), Result.status == "ok")
        )
    engine.dispose()
    return int(n or 0)


def test_summary_counts_what_the_store_holds(built: tuple[HistoryFacts, SiteSummary]) -> None:
    facts, summary = built
    assert summary.commits == len(facts.shas)  # the PR head and the dirty tree are not history
    assert summary.machines == 2
    assert summary.points == _history_count(facts.url)
    assert summary.series == 3 * 3 * 2 + 3 * 3 + 2  # time on both, memory on the GPU, the XSS bench
    assert summary.check_marks == 1
    assert summary.index_bytes == (summary.out_dir / "index.html").stat().st_size


def test_csv_and_json_downloads_hold_every_point(built: tuple[HistoryFacts, SiteSummary]) -> None:
    facts, summary = built
    with (summary.out_dir / "data" / "history.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == summary.points
    doc = json.loads((summary.out_dir / "data" / "history.json").read_text(encoding="utf-8"))
    assert doc["schema"] == "perfguard-history/1"
    assert sum(len(s["points"]["value"]) for s in doc["series"]) == summary.points
    # One series, checked value by value against the store.
    key = params_key({"impl": "ring", "seq_len": 1024, "dtype": "float32"})
    engine = create_engine(facts.url)
    with Session(engine) as session:
        stored = session.execute(
            select(Commit.sha, Result.value)
            .join(Run, Result.run_id == Run.id)
            .join(Commit, Run.commit_id == Commit.id)
            .where(Result.benchmark == FORWARD, Result.params_key == key, Run.purpose == "run")
            .where(Commit.dirty.is_(False))
            .where(Run.machine.has(key=facts.gpu_key))
            .order_by(Commit.committed_at)
        ).all()
    engine.dispose()
    csv_series = [
        (r["sha"], float(r["value"]))
        for r in rows
        if r["machine"] == facts.gpu_key
        and r["benchmark"] == FORWARD
        and json.loads(r["params"])["impl"] == "ring"
        and json.loads(r["params"])["seq_len"] == 1024
    ]
    assert csv_series == [(sha, value) for sha, value in stored]
    (series,) = [
        s
        for s in doc["series"]
        if s["machine"] == facts.gpu_key and s["benchmark"] == FORWARD and s["params_key"] == key
    ]
    assert series["points"]["value"] == [value for _, value in stored]
    assert all(
        lo <= v <= hi
        for lo, v, hi in zip(
            series["points"]["low"], series["points"]["value"], series["points"]["high"], strict=True
        )
    )


def test_only_the_planted_step_is_found(built: tuple[HistoryFacts, SiteSummary]) -> None:
    facts, summary = built
    doc = json.loads((summary.out_dir / "data" / "history.json").read_text(encoding="utf-8"))
    marked = [(s["machine"], s["benchmark"], s["params_key"], m) for s in doc["series"] for m in s["marks"]]
    steps = [m for m in marked if m[3]["source"] == "step"]
    checks = [m for m in marked if m[3]["source"] == "check"]
    key = params_key({"impl": "ring", "seq_len": 1024, "dtype": "float32"})
    assert [(m[0], m[1], m[2], m[3]["sha"], m[3]["kind"]) for m in steps] == [
        (facts.gpu_key, FORWARD, key, facts.shas[REGRESSED_AT], "regression")
    ]
    change = float(steps[0][3]["text"].split("%")[0])  # "+49.6% (52.3 µs → 78.2 µs) from …"
    assert change == pytest.approx(50, abs=2)  # planted +50%, measured through ±1% sample noise
    assert [(m[0], m[2], m[3]["sha"], m[3]["kind"]) for m in checks] == [
        (facts.gpu_key, key, facts.shas[REGRESSED_AT], "regression")
    ]


def test_point_interval_is_the_normal_approximation_of_the_median_ci() -> None:
    """median ± 1.96 · 1.2533 · (IQR / 1.349) / √n; checked against a simulation, not a constant."""
    import random
    import statistics

    rng = random.Random(7)
    n, covered, trials = 20, 0, 2000
    for _ in range(trials):
        xs = [rng.gauss(10.0, 1.0) for _ in range(n)]
        q25, _, q75 = statistics.quantiles(xs, n=4, method="inclusive")
        low, high = median_interval(statistics.median(xs), q25, q75, n)  # type: ignore[misc]
        covered += low <= 10.0 <= high
    assert 0.92 <= covered / trials <= 0.98
    assert median_interval(1.0, 0.9, 1.1, 1) is None
    assert median_interval(1.0, None, None, 10) is None


def _series(impl: str, metric: str, points: dict[int, float], machine: MachineInfo) -> Series:
    from datetime import datetime, timezone

    from perfguard.report.series import CommitInfo

    commit = CommitInfo("a" * 40, datetime(2026, 1, 1, tzinfo=timezone.utc), "s")
    s = Series(
        machine, "b.F.track_time", impl, {"impl": impl, "seq_len": 0}, "", metric, "seconds", "lower", True
    )
    out = []
    for n, v in points.items():
        copy = Series(
            **{**s.__dict__, "params": {"impl": impl, "seq_len": n}, "params_key": f"impl={impl},seq_len={n}"}
        )
        copy.points = [Point(0, commit, v, None, None, "", 1, None, "ok")]
        out.append(copy)
    return out  # type: ignore[return-value]


def test_crossover_of_power_laws_is_exact() -> None:
    """a·n and b·n² cross at n = a/b; log-log interpolation is exact for power laws."""
    machine = MachineInfo("m", "M", "cuda")
    a, b = 3e-6, 1e-9  # cross at 3000
    linear = _series("ring", "time", {n: a * n for n in (1024, 2048, 4096, 8192)}, machine)
    square = _series("dilated", "time", {n: b * n * n for n in (1024, 2048, 4096, 8192)}, machine)
    slugs = {s.page_key: "x" for s in linear + square}
    (group,) = groups(linear + square, metrics=("time",), colors={}, slugs=slugs, min_lines=2)
    assert group.winners == {1024: "dilated", 2048: "dilated", 4096: "ring", 8192: "ring"}
    (cross,) = group.crossovers
    assert cross.seq_len == pytest.approx(a / b, rel=1e-9)
    assert (cross.below, cross.above, cross.before, cross.after) == (2048, 4096, "dilated", "ring")
    exponents = {line.impl: line.exponent for line in group.lines}
    assert exponents["ring"] == pytest.approx(1.0) and exponents["dilated"] == pytest.approx(2.0)


def test_empty_store_renders_an_empty_site(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'empty.db'}") as store:  # a Store is accepted as well as a URL
        summary = build_site(store, tmp_path / "site")
    assert summary.series == 0 and summary.points == 0
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "No results are stored yet" in index
    assert math.isfinite(summary.seconds)


def test_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    """D10: user-controlled names that a spreadsheet would run are written as text (OWASP)."""
    from datetime import datetime, timezone

    from perfguard.store import CommitRecord, MachineRecord, ResultRecord

    names = {
        "benchmark": '=HYPERLINK("http://evil.example","click")',
        "impl": "+cmd|' /C calc'!A0",
        "method": "@SUM(1+1)*cmd|' /C calc'!A0",
        "machine": "-2+3+cmd",
        "unit": "\tseconds",
    }
    url = f"sqlite:///{tmp_path / 'h.db'}"
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with Store.open(url) as store:
        store.record_run(
            MachineRecord(key=names["machine"], kind="cpu", label="m"),
            CommitRecord(sha="a" * 40, base_sha="a" * 40, branch="main", committed_at=when),
            profile="quick",
            software={},
            fingerprint={},
            settings={},
            started_at=when,
            finished_at=when,
            results=[
                ResultRecord(
                    benchmark=names["benchmark"],
                    impl=names["impl"],
                    params={"impl": names["impl"], "seq_len": 512},
                    metric="time",
                    unit=names["unit"],
                    direction="lower",
                    gated=True,
                    samples=[1e-3, 1.1e-3, 0.9e-3],
                    method=names["method"],
                )
            ],
            trusted=True,  # the site draws trusted runs only
        )
    build_site(url, tmp_path / "site")
    with (tmp_path / "site" / "data" / "history.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    (row,) = rows
    for field, name in names.items():
        assert row[field] == "'" + name, (field, row[field])
    for field, cell in row.items():
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), (field, cell)
    # The JSON download keeps the names as they were measured.
    doc = json.loads((tmp_path / "site" / "data" / "history.json").read_text(encoding="utf-8"))
    assert doc["series"][0]["benchmark"] == names["benchmark"]


@pytest.mark.parametrize("n_commits", [1, 2, 3, 5, 12, 40, 137, 1000])
def test_commit_labels_never_overlap(n_commits: int) -> None:
    """x labels (short sha over the time) keep a gap at every history length; first and last shown."""
    from perfguard.report.charts import CHAR_WIDTH, Box, Linear, commit_ticks

    box = Box(800, 260, left=48, top=30, right=28, bottom=44)
    x = Linear(0, max(n_commits - 1, 0), box.x0, box.x1)
    labels = [(f"{i:08x}", "03-01 09:00") for i in range(n_commits)]
    ticks = commit_ticks(n_commits, labels, x, box)
    assert ticks[0].label == labels[0][0] and ticks[-1].label == labels[-1][0]
    width = CHAR_WIDTH * 11
    spans = []
    for t in ticks:
        left = {"start": t.px, "middle": t.px - width / 2, "end": t.px - width}[t.anchor]
        spans.append((left, left + width))
        assert left >= 0 and left + width <= box.width
    for (_, right), (left, _) in itertools.pairwise(spans):
        assert left - right >= 8, (n_commits, spans)


def test_links_in_an_existing_site_are_replaced_never_written_through(tmp_path: Path) -> None:
    """Issue 27: a previous site whose bench/, data/, static/ (or a page) is a symbolic link had
    the new files written into the link's target; the links are replaced, the targets untouched."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(url).close()
    site = tmp_path / "site"
    build_site(url, site)
    outside = tmp_path / "outside"
    for name in ("bench", "data", "static"):
        (outside / name).mkdir(parents=True)
        (outside / name / "keep.txt").write_text("theirs")
        shutil.rmtree(site / name)
        (site / name).symlink_to(outside / name, target_is_directory=True)
    (outside / "page.html").write_text("theirs")
    (site / "index.html").unlink()
    (site / "index.html").symlink_to(outside / "page.html")
    build_site(url, site)
    for name in ("bench", "data", "static"):
        assert not (site / name).is_symlink() and (site / name).is_dir()
        assert sorted(p.name for p in (outside / name).iterdir()) == ["keep.txt"]
    assert (site / "static" / "perfguard.css").is_file() and (site / "data" / "history.json").is_file()
    assert not (site / "index.html").is_symlink() and (outside / "page.html").read_text() == "theirs"


def test_a_series_the_newest_recording_added_is_marked_new_on_the_index() -> None:
    """Issue 29: a newly registered implementation shows its number beside the others, marked new."""
    from datetime import datetime, timezone

    from perfguard.report.series import CommitInfo
    from perfguard.report.site_index import NEW_MARK, index_rows

    machine = MachineInfo("cpu:x", "x", "cpu")
    commits = [
        CommitInfo(c * 40, datetime(2026, 1, d, tzinfo=timezone.utc), c) for c, d in (("a", 1), ("b", 2))
    ]

    def series(impl: str, values: dict[int, float]) -> Series:
        s = Series(
            machine, "b.F.track_time", impl, {"impl": impl}, f"impl={impl}", "time", "seconds", "lower", True
        )
        s.points = [Point(i, commits[i], v, None, None, "", 1, None, "ok") for i, v in values.items()]
        return s

    old, added, first_ever = (
        series("old", {0: 1.0, 1: 1.0}),
        series("added", {1: 2.0}),
        series("gone", {0: 3.0}),
    )
    slugs = {s.page_key: s.impl for s in (old, added, first_ever)}
    cells = {r.impl: r.cells["cpu:x"] for r in index_rows([old, added, first_ever], slugs, [machine])}
    assert cells["added"].change == NEW_MARK and cells["added"].latest  # its number, marked new
    assert cells["old"].change != NEW_MARK and cells["gone"].change == ""  # a first-ever point is not "new"
