"""Reports on a store written through ``perfguard.store.Store`` (SQLite and a real PostgreSQL).

What ``perfguard run`` / ``perfguard check`` will write, read back the two ways a caller can:
a ``StoredCheck`` from ``Store.get_check`` with the store for the environment, and the history
site from the ``Store`` object or from the URL (opened read-only).
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from perfguard.report import build_site, check_to_json, render_html, render_markdown
from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, ResultRecord, Store

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
FORWARD = "bench_attention.Forward.track_time"
N = 8
STEP_AT = 5


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("postgres_url")


def _value(impl: str, i: int) -> float:
    base = 0.002 if impl == "ring" else 0.001
    return base * (1.4 if impl == "ring" and i >= STEP_AT else 1.0)


def _results(i: int, round_: int = 0) -> list[ResultRecord]:
    out = []
    for impl in ("dilated", "ring"):
        v = _value(impl, i)
        samples = [v * (1 + 0.002 * ((k * 7 + round_) % 5 - 2)) for k in range(8)]
        out.append(
            ResultRecord(
                benchmark=FORWARD,
                impl=impl,
                params={"impl": impl, "seq_len": 2048, "dtype": "float16"},
                metric="time",
                unit="seconds",
                direction="lower",
                gated=True,
                value=sorted(samples)[4],
                samples=samples,
                method="cuda-graph",
            )
        )
    return out


def fill(store: Store) -> tuple[list[str], int]:
    machine = MachineRecord(key="nvidia-h100-x1", kind="cuda", label="NVIDIA H100 ×1", attributes={})
    commits = [
        CommitRecord(
            sha=f"{i:02d}" * 20,
            base_sha=f"{i:02d}" * 20,
            committed_at=T0 + timedelta(days=i),
            branch="main",
            subject=f"change {i} | <i>{i}</i>",
        )
        for i in range(N)
    ]
    for i, commit in enumerate(commits):
        purpose = "baseline" if i == STEP_AT - 1 else "run"
        store.record_run(
            machine,
            commit,
            profile="production",
            purpose=purpose,
            software={"torch": "2.13.0", "driver": "570.86", "cuda": "12.8"},
            fingerprint={"hostname": "runner-a"},
            settings={},
            command="perfguard run",
            started_at=T0 + timedelta(days=i, hours=1),
            finished_at=T0 + timedelta(days=i, hours=2),
            results=_results(i),
            trusted=True,  # the baseline workflow's runs: what the site draws
        )
    head = commits[STEP_AT]
    # The PR's head was measured by the check with a newer torch: not history, but its environment.
    store.record_run(
        machine,
        head,
        profile="production",
        purpose="head",
        software={"torch": "2.13.1", "driver": "570.86", "cuda": "12.8"},
        fingerprint={"hostname": "runner-b"},
        settings={},
        command="perfguard check --baseline main",
        started_at=T0 + timedelta(days=STEP_AT, hours=3),
        finished_at=T0 + timedelta(days=STEP_AT, hours=4),
        results=_results(STEP_AT, round_=1),
    )
    items = [
        CheckItemRecord(
            benchmark=FORWARD,
            impl=impl,
            params={"impl": impl, "seq_len": 2048, "dtype": "float16"},
            metric="time",
            unit="seconds",
            direction="lower",
            gated=True,
            verdict="regression" if impl == "ring" else "unchanged",
            threshold=0.2,
            base_value=_value(impl, STEP_AT - 1),
            head_value=_value(impl, STEP_AT),
            ratio=1.4 if impl == "ring" else 1.0,
            ci_low=1.38 if impl == "ring" else 0.99,
            ci_high=1.42 if impl == "ring" else 1.01,
            p_value=0.0002 if impl == "ring" else 0.5,
            noise=0.004,
            method="cuda-graph",
            base_n=8,
            head_n=8,
        )
        for impl in ("dilated", "ring")
    ]
    check_id = store.record_check(
        machine,
        head,
        commits[STEP_AT - 1],
        baseline_ref="main",
        profile="production",
        threshold=0.2,
        verdict="regression",
        exit_code=1,
        summary={},
        environment={},
        config={},
        command="perfguard check --baseline main",
        created_at=T0 + timedelta(days=STEP_AT, hours=5),
        items=items,
    )
    return [c.sha for c in commits], check_id


def test_stored_check_reports_read_the_environment_through_the_store(url: str) -> None:
    with Store.open(url) as store:
        _, check_id = fill(store)
        stored = store.get_check(check_id)
        assert stored is not None
        markdown = render_markdown(stored, store=store)
        doc = check_to_json(stored, store=store)
        html = render_html(stored, store=store)
    assert markdown.startswith("<!-- perfguard-report -->\n### ❌ perfguard: 1 regression (gated)\n")
    assert "torch 2.13.0 → 2.13.1" in markdown
    assert {d["key"] for d in doc["environment"]["differs"]} == {"torch"}
    assert doc["items"][0]["impl"] == "ring" and doc["items"][0]["ratio"] == 1.4
    assert doc["head"]["sha"] == f"{STEP_AT:02d}" * 20
    assert "&lt;i&gt;" in html and "<i>5</i>" not in html
    # Without the store, a StoredCheck still renders; the environment is then "not recorded".
    with Store.open(url) as store:
        bare = check_to_json(store.get_check(check_id))
    assert bare["environment"] == {"recorded": False, "base": {}, "head": {}, "differs": []}


def test_site_from_the_store_object_and_from_the_url(url: str, tmp_path: Path) -> None:
    with Store.open(url) as store:
        shas, _ = fill(store)
        from_store = build_site(store, tmp_path / "a")
    from_url = build_site(url, tmp_path / "b")  # read-only engine; PostgreSQL returns JSON as text here
    for summary in (from_store, from_url):
        assert (summary.series, summary.points, summary.commits) == (2, 2 * N, N)
        assert (summary.step_marks, summary.check_marks) == (1, 1)
    with (tmp_path / "b" / "data" / "history.csv").open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if json.loads(r["params"])["impl"] == "ring"]
    assert [r["sha"] for r in rows] == shas
    # The PR head run (round 1 samples) is not history: commit STEP_AT shows its history run.
    assert [float(r["value"]) for r in rows] == pytest.approx(
        [_value("ring", i) for i in range(N)], rel=0.005
    )
    assert all(r["interval"] == "≈95% CI" for r in rows)
    doc = json.loads((tmp_path / "b" / "data" / "history.json").read_text(encoding="utf-8"))
    (ring,) = [s for s in doc["series"] if s["impl"] == "ring"]
    assert {(m["source"], m["kind"], m["sha"]) for m in ring["marks"]} == {
        ("step", "regression", shas[STEP_AT]),
        ("check", "regression", shas[STEP_AT]),
    }
