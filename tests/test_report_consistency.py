"""One stored check, rendered on the terminal, in Markdown, HTML and JSON: the same counts and words.

Issue 30 saw one check say "13 unstable" and "unstable 29" on the terminal, "2 improvements" in the
Markdown headline and "🟢 6 improvements" below it, "6 improvements" on the HTML badge under a
title of "2 improvements", and a p column of ``1`` beside a reason of ``p=4e-61``.  Here a check
with every verdict, every role (gated, reported with ``gate = false``, derived tokens/s and
TFLOP/s) and the comparison's own reasons is stored in a real SQLite store and rendered by the
real CLI (``perfguard report --check ID``); every count a rendering states is compared with the
count of the stored items, and every p-value shown with the one its reason states.  HTML is parsed
(``html.parser``), Markdown through markdown-it-py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt

from perfguard.compare import Measurement, Verdict, compare_suite
from perfguard.config import parse_config
from perfguard.gate.selection import not_affected_items
from perfguard.reach import Reach
from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, Store
from perfguard.units import format_p

ROOT = Path(__file__).resolve().parents[1]
FWD = "bench_attention.Forward.track_time"
TOKENS = "bench_attention.Throughput.track_tokens_per_second"
TFLOPS = "bench_attention.Throughput.track_tflops"
MEMORY = "bench_attention.PeakMemory.track_forward"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
#: The implementation whose timings are reported only (``gate = false``).
LOOSE = "loose"


def _timing(impl: str, factor: float, *, seed: int, call: float = 0.02, rounds: int = 3) -> list[Measurement]:
    """A forward timing and the two numbers derived from it (as asvrun stores them)."""
    rng = np.random.default_rng([seed, int(factor * 1000), sum(map(ord, impl))])
    data = [1e-3 * factor * rng.lognormal(rng.normal(0.0, 0.01), call, 60) for _ in range(rounds)]
    params = {"impl": impl, "seq_len": 512, "dtype": "float32"}
    derived = {"metric": "throughput", "direction": "higher", "gated": False}
    return [
        Measurement(FWD, params, rounds=data),
        Measurement(TOKENS, params, rounds=[512.0 / r for r in data], unit="tokens/s", **derived),
        Measurement(
            TFLOPS,
            params,
            rounds=[3.2e-3 / r for r in data],
            unit="TFLOP/s",
            **{**derived, "metric": "efficiency"},
        ),
    ]


def _side(factors: dict[str, tuple[float, float]], *, seed: int) -> list[Measurement]:
    return [m for impl, (f, call) in factors.items() for m in _timing(impl, f, seed=seed, call=call)]


def every_verdict() -> list[CheckItemRecord]:
    """Items of the real comparison with every verdict and role (``accepted`` as ``perfguard.accept``
    marks a regression within an acceptance's ceiling)."""
    config = parse_config({"override": [{"impl": LOOSE, "gate": False}]})
    head_factors = {
        "slow": (1.6, 0.02),  # regression
        "traded": (1.5, 0.02),  # regression, then accepted
        "fast": (0.6, 0.02),  # improvement
        "faster": (0.5, 0.02),  # improvement
        "noisy": (1.25, 0.35),  # unstable
        "same": (1.0, 0.02),  # unchanged
        LOOSE: (0.55, 0.02),  # reported timing: stage 1 sees x0.55, never re-measured, so unstable
    }
    base = _side({impl: (1.0, call) for impl, (_, call) in head_factors.items()}, seed=1)
    head = _side(head_factors, seed=2)
    memory = {"metric": "memory", "direction": "lower", "gated": False, "unit": "bytes"}
    params = {"impl": LOOSE, "seq_len": 512, "dtype": "float32"}
    base.append(Measurement(MEMORY, params, rounds=[[2.0e9]], **memory))
    head.append(Measurement(MEMORY, params, rounds=[[1.0e9]], **memory))  # exact: improvement, not gated
    base += _timing("gone", 1.0, seed=3)  # missing
    head += _timing("added", 1.0, seed=3)  # new
    params = {"impl": "crashy", "seq_len": 512, "dtype": "float32"}
    base.append(Measurement(FWD, params, rounds=[[1e-3] * 20]))
    head.append(Measurement(FWD, params, status="failed", error="RuntimeError: boom"))  # failed
    params = {"impl": "cuda_only", "seq_len": 512, "dtype": "float32"}
    base.append(Measurement(FWD, params, status="skipped", error="needs CUDA"))
    head.append(Measurement(FWD, params, status="skipped", error="needs CUDA"))  # skipped
    base += _timing("wrong", 1.0, seed=4)
    head += _timing("wrong", 1.0, seed=4)  # broken
    items = compare_suite(base, head, config, broken_impls={"wrong"}).items
    reach = Reach(False, "1 implementation(s) import a changed module", frozenset({"slow"}), {"slow": ("m",)})
    items += tuple(not_affected_items(reach, ["slow", "untouched"], 0.2))  # not affected (not measured)
    items = tuple(
        replace(i, verdict=Verdict.ACCEPTED, reason=f"accepted up to 1.6× by dev: 'why'; {i.reason}")
        if i.impl == "traded"
        else i
        for i in items
    )
    return [CheckItemRecord(**i.as_row()) for i in items]


def store_check(path: Path) -> tuple[str, int, list[CheckItemRecord]]:
    url = f"sqlite:///{path}"
    items = every_verdict()
    machine = MachineRecord(key="cpu-test", kind="cpu", label="Test CPU (2 cores)")
    base = CommitRecord(sha="b" * 40, base_sha="b" * 40, branch="main", subject="base", committed_at=T0)
    head = CommitRecord(sha="a" * 40, base_sha="a" * 40, branch="pr", parents=["b" * 40], committed_at=T0)
    with Store.open(url) as store:
        check_id = store.record_check(
            machine,
            head,
            base,
            baseline_ref="main",
            profile="quick",
            threshold=0.2,
            verdict="broken",
            exit_code=1,
            summary={},
            environment={},
            config={"threshold": 0.2},
            command="perfguard check --baseline main",
            created_at=T0,
            items=items,
        )
    return url, check_id, items


def perfguard(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


class Texts(HTMLParser):
    """The text of the HTML page's title, headline, chips and results heading."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.found: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("meta", "link", "input", "br", "img"):
            return
        classes = dict(attrs).get("class") or ""
        self.stack.append((tag, classes))
        for key in ("title", "h1", "h2"):
            if tag == key:
                self.found.setdefault(key, []).append("")
        if "chip" in classes.split():
            self.found.setdefault("chip", []).append("")

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        tags = {t for t, _ in self.stack}
        chips = any("chip" in c.split() for _, c in self.stack)
        for key in ("title", "h1", "h2"):
            if key in tags:
                self.found[key][-1] += data
        if chips:
            self.found["chip"][-1] += data


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("consistency")
    url, check_id, items = store_check(tmp / "history.db")
    html_path = tmp / "report.html"
    out: dict[str, object] = {"items": items}
    out["terminal"] = perfguard("report", "--db", url, "--check", str(check_id))
    out["markdown"] = perfguard("report", "--db", url, "--check", str(check_id), "--markdown", "-")
    out["json"] = json.loads(perfguard("report", "--db", url, "--check", str(check_id), "--json", "-"))
    perfguard("report", "--db", url, "--check", str(check_id), "--html", str(html_path))
    out["html"] = html_path.read_text()
    return out


def _role(item: CheckItemRecord) -> str:
    if item.gated:
        return "gated"
    return "derived" if item.benchmark in (TOKENS, TFLOPS) else "reported"


def test_the_check_has_every_verdict_and_role(rendered: dict[str, object]) -> None:
    items = rendered["items"]
    assert isinstance(items, list)
    assert {i.verdict for i in items} == {str(v) for v in Verdict}
    roles = Counter((_role(i), i.verdict) for i in items)
    assert roles[("gated", "improvement")] == 2 and roles[("reported", "improvement")] == 1
    assert roles[("derived", "improvement")] == 4 and roles[("gated", "unstable")] == 1
    # a reported timing that stage 1 saw move is not claimed (never re-measured): its derived rows follow
    loose = {i.benchmark: i for i in items if i.impl == LOOSE}
    assert loose[FWD].verdict == "unstable" and "never re-measured" in loose[FWD].reason
    assert loose[TOKENS].verdict == loose[TFLOPS].verdict == "unstable"
    assert loose[MEMORY].verdict == "improvement"  # exact numbers keep their claim


def test_every_rendering_counts_the_same_items_with_the_same_words(rendered: dict[str, object]) -> None:
    items = rendered["items"]
    assert isinstance(items, list)
    roles = Counter((_role(i), i.verdict) for i in items)
    gated_improvements, loose = roles[("gated", "improvement")], roles[("reported", "improvement")]
    improvements = f"{gated_improvements} improvements (+ {loose} not gated)"
    unstable = f"{roles[('gated', 'unstable')]} unstable (+ {roles[('reported', 'unstable')]} not gated)"
    total = f"{len(items)} items: gated "

    # JSON: the counts of the stored items, by role
    doc = rendered["json"]
    assert isinstance(doc, dict)
    by_role: dict[str, dict[str, int]] = {}
    for (role, verdict), n in roles.items():
        by_role.setdefault(role, {})[verdict] = n
    assert doc["counts_by_role"] == by_role
    assert doc["counts"] == dict(Counter(i.verdict for i in items)) | doc["counts"]
    assert sum(doc["counts"].values()) == len(items)
    headline = doc["headline"]
    assert headline.startswith("perfguard: 1 regression, 1 broken, 1 failed (gated) · 1 accepted"), headline
    assert doc["counts_text"].startswith(total)

    # terminal: the headline, the count of every item, the unstable line
    lines = str(rendered["terminal"]).splitlines()
    assert lines[-2:] == [headline, doc["counts_text"]]
    assert any(line.startswith(f"{unstable} (too noisy") for line in lines), lines

    # Markdown: the heading is the headline; the improvement and unstable lines count as it does
    tokens = MarkdownIt("commonmark").enable("table").parse(str(rendered["markdown"]))
    texts = [t.content for t in tokens if t.type == "inline"]
    heading = next(t for t in texts if "perfguard:" in t)
    assert heading.endswith(headline), heading
    strong = [
        tokens[k + 1].content
        for t in tokens
        if t.type == "inline" and t.children
        for k, tokens in [(j, t.children) for j, c in enumerate(t.children) if c.type == "strong_open"]
    ]
    assert improvements in strong and unstable in strong, strong
    assert not any(re.fullmatch(r"\d+ improvements?", s) and s != improvements for s in strong)
    blocks = [t.content for t in tokens if t.type == "html_block"]
    assert any(f"<summary>All {len(items)} results" in b for b in blocks), blocks

    # HTML: the title, the headline, the chips and the results heading
    page = Texts()
    page.feed(str(rendered["html"]))
    assert page.found["title"][0].strip().startswith(headline)
    assert " ".join(page.found["h1"][0].split()).endswith(headline)
    chips = [c.strip() for c in page.found["chip"]]
    assert improvements in chips and unstable in chips, chips
    assert any(h.strip() == f"Results {doc['counts_text']}" for h in page.found["h2"]), page.found["h2"]


def test_every_p_value_shown_is_the_one_its_reason_states(rendered: dict[str, object]) -> None:
    doc = rendered["json"]
    assert isinstance(doc, dict)
    stated = 0
    for item in doc["items"]:
        if item["role"] == "derived":
            continue  # a derived row carries its timing's verdict; its own reason says so
        shown = re.search(r"p=([0-9.e-]+)\)", item["reason"])
        if item["p_value"] is None:
            assert shown is None, item
            continue
        assert shown is not None and shown.group(1) == format_p(item["p_value"]), item
        stated += 1
    assert stated >= 4
    # the terminal's p column shows the same string for each gated row it lists
    terminal = str(rendered["terminal"])
    for item in doc["items"]:
        if item["role"] == "gated" and item["verdict"] in ("regression", "improvement") and item["p_value"]:
            row = next(line for line in terminal.splitlines() if f" {item['impl']} " in line)
            assert f" {format_p(item['p_value'])} " in row, row
