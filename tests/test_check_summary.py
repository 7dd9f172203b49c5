"""A check's summary, typed (perfguard.store.check_summary): written once, read through one reader.

The summary is a JSON column of the store: what the gate writes comes back equal through a real
SQLite store; a summary an older perfguard stored (without the newer keys) still loads and renders;
a value of the wrong type reads as missing, as the reports always read it.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfguard.report import build_report, check_to_json, render_markdown
from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, Store
from perfguard.store.check_summary import (
    AcceptanceSummary,
    AppliedAcceptance,
    CheckSummary,
    IgnoredAcceptance,
    PathChange,
    UnderneathRow,
    UnderneathTable,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
CPU = MachineRecord(key="cpu:Test CPU x2", kind="cpu", label="Test CPU")
LABEL = "Forward.track_time(dtype=float32,impl=dilated,seq_len=512)"


def commit(n: int) -> CommitRecord:
    sha = f"{n:040x}"
    return CommitRecord(sha=sha, base_sha=sha, committed_at=T0, subject=f"commit {n}", branch="main")


def item(verdict: str = "regression", ratio: float = 2.0) -> CheckItemRecord:
    return CheckItemRecord(
        benchmark="bench_attention.Forward.track_time",
        impl="dilated",
        params={"impl": "dilated", "seq_len": 512, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        verdict=verdict,
        base_value=1e-3,
        head_value=ratio * 1e-3,
        ratio=ratio,
        ci_low=ratio * 0.95,
        ci_high=ratio * 1.05,
        p_value=0.001,
        noise=0.01,
        threshold=0.2,
        method="cpu-wall",
        base_n=3,
        head_n=3,
        reason=f"{ratio:.3f}× slower",
    )


def full_summary() -> CheckSummary:
    """A summary as ``perfguard check`` writes it, every key filled."""
    return CheckSummary(
        counts={"regression": 1},
        retried=1,
        measured={"base": "3 stored round(s)", "head": "measured (3 rounds)"},
        rounds={"base": 3, "head": 3},
        dirty=False,
        bench=("Forward",),
        seconds=12.5,
        trust="trusted",
        underneath=(
            UnderneathTable(
                impl="dilated",
                benchmark="bench_attention.Forward.track_time",
                params_key="dtype=float32,impl=dilated,seq_len=512",
                kind="aten ops",
                source="torch.profiler, one eager call",
                rows=(
                    UnderneathRow("aten::add", 2, 4, 0.5, 1.25),
                    UnderneathRow("aten::mm", 1, 1, 0.25, 0.75),
                ),
                pass_="forward",
                rows_left_out=3,
            ),
        ),
        acceptances=AcceptanceSummary(
            applied=(
                AppliedAcceptance(
                    id=7,
                    sha="a" * 40,
                    scope="dilated Forward.track_time",
                    impl="dilated",
                    benchmark="Forward.track_time",
                    params={"seq_len": "512"},
                    ceiling=2.5,
                    reason="the reference pass runs twice",
                    source="command",
                    author="Maint <m@example.invalid>",
                    accepted=(LABEL,),
                ),
            ),
            ignored=(IgnoredAcceptance("b" * 40, 'dilated * "no ceiling"', "has no ceiling"),),
        ),
        paths=(
            PathChange(
                impl="dilated",
                params_key="dtype=float32,impl=dilated,seq_len=512",
                benchmark="bench_attention.Forward.track_time",
                kind="aten ops",
                base=("d1",),
                head=("d2",),
                removed=("aten::bmm",),
                added=("aten::mm",),
            ),
        ),
    )


def stored_check(tmp_path: Path, summary: dict[str, Any], items: list[CheckItemRecord] | None = None) -> Any:
    with Store.open(f"sqlite:///{tmp_path / 'history.db'}") as store:
        check_id = store.record_check(
            CPU, commit(2), commit(1), baseline_ref="main", profile="quick", threshold=0.2,
            verdict="regression", exit_code=1, summary=summary, environment={}, config={"rounds": 3},
            created_at=T0, items=items if items is not None else [item()],
        )  # fmt: skip
        stored = store.get_check(check_id)
    assert stored is not None
    return stored


def test_a_summary_round_trips_through_json_and_a_real_store(tmp_path: Path) -> None:
    summary = full_summary()
    document = summary.to_json()
    assert list(document) == [
        "counts", "retried", "measured", "rounds", "dirty", "bench", "seconds", "trust", "underneath",
        "acceptances", "paths",
    ]  # fmt: skip
    assert document["underneath"][0]["pass"] == "forward" and document["underneath"][0]["rows_left_out"] == 3
    assert document["acceptances"]["applied"][0]["accepted"] == [LABEL]
    assert json.loads(json.dumps(document)) == document  # plain JSON, nothing else
    assert CheckSummary.from_json(document) == summary
    stored = stored_check(tmp_path, document)
    assert stored.summary == document  # the column holds exactly what was written
    assert CheckSummary.from_json(stored.summary) == summary


def test_an_old_summary_without_the_newer_keys_loads_and_renders(tmp_path: Path) -> None:
    """What perfguard stored before ``trust``, ``underneath``, ``acceptances`` and ``paths`` existed."""
    old = {"counts": {"regression": 1}, "retried": 0, "rounds": {"base": 5, "head": 5}}
    summary = CheckSummary.from_json(old)
    assert summary.rounds == {"base": 5, "head": 5} and summary.counts == {"regression": 1}
    assert (summary.trust, summary.dirty, summary.seconds) == (None, None, None)
    assert summary.underneath == () and summary.paths == () and summary.acceptances == AcceptanceSummary()
    assert summary.to_json() == {**old, "measured": {}, "bench": [], "underneath": [],
                                 "acceptances": {"applied": [], "ignored": []}, "paths": []}  # fmt: skip
    assert CheckSummary.from_json({}) == CheckSummary() == CheckSummary.from_json(None)

    stored = stored_check(tmp_path, old, [item("accepted", 1.5)])
    report = build_report(stored)
    assert report.underneath == [] and report.path_phrases == []
    assert report.acceptances is not None and not report.acceptances.applied  # the accepted row, unclaimed
    assert [v.item.verdict for v in report.acceptances.unclaimed] == ["accepted"]
    assert check_to_json(stored)["summary"] == old  # the JSON report keeps the summary as stored
    assert "perfguard" in render_markdown(stored)


def test_values_of_the_wrong_type_read_as_missing_and_bad_entries_are_skipped() -> None:
    raw = {
        "counts": {"regression": "1", "unchanged": 2.0},
        "retried": True,
        "measured": {"base": 3, "head": "measured"},
        "rounds": {"base": "3", "head": 4},
        "dirty": "no",
        "bench": ["Forward", 3],
        "seconds": math.inf,
        "trust": 1,
        "underneath": [
            "not an object",
            {
                "impl": "ring",
                "rows": [
                    "not a row",
                    {
                        "name": "k",
                        "base_count": "2",
                        "head_count": 5,
                        "base_ms": "x",
                        "head_ms": float("nan"),
                    },
                ],
            },
            {"impl": "dilated", "rows": {"not": "a list"}},
        ],
        "acceptances": {
            "applied": [
                7,
                {
                    "id": True,
                    "impl": "ring",
                    "benchmark": "Forward.*",
                    "ceiling": "2",
                    "accepted": [LABEL, 5],
                },
            ],
            "ignored": [{"sha": 5, "text": "t", "why": None}, "x"],
        },
        "paths": [{"impl": "ring", "varies": "base", "removed": ["a", 1]}, None],
    }
    summary = CheckSummary.from_json(raw)
    assert summary.counts == {"regression": 0, "unchanged": 2} and summary.retried == 0
    assert summary.measured == {"head": "measured"} and summary.rounds == {"base": 0, "head": 4}
    assert (summary.dirty, summary.seconds, summary.trust, summary.bench) == (None, None, None, ("Forward",))
    ring, dilated = summary.underneath
    assert ring.impl == "ring" and ring.kind == "aten ops"  # the default kind, as the reports always read it
    assert ring.rows == (UnderneathRow("k", 0, 5, None, None),)
    assert ring.rows[0].change == "+5 ×"
    assert dilated.rows == ()
    [applied] = summary.acceptances.applied
    assert applied.id is None and applied.ceiling is None and applied.accepted == (LABEL,)
    assert applied.scope == "ring Forward.*"  # a summary without a scope: named by its globs
    assert summary.acceptances.ignored == (IgnoredAcceptance("", "t", ""),)
    [path] = summary.paths
    assert path.varies == () and path.removed == ("a", "1") and path.kind == ""
    for broken in ("text", 3, [1, 2], {"underneath": "x", "acceptances": [], "paths": {}}):
        assert CheckSummary.from_json(broken).underneath == ()
