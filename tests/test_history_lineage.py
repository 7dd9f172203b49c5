"""``perfguard history`` follows the baseline branch's first parents (issue 30).

A comment-only commit of ``main`` showed "-72.2%" because the commit before it by date was a slow
branch's.  Here a real git repository has ``main`` (c0, c1, c2: the same speed) and a branch
``slow`` off c0 (s1, 3.6× slower, committed between c1 and c2); the real CLI reads a real SQLite
store holding all four.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

ROOT = Path(__file__).resolve().parents[1]
FORWARD = "bench_attention.Forward.track_time"
MACHINE = MachineRecord(key="cpu:Lineage CPU", kind="cpu", label="Lineage CPU")
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)


def git(cwd: Path, *args: str, when: datetime | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "Mae", "GIT_AUTHOR_EMAIL": "m@x.invalid", "GIT_COMMITTER_NAME": "Mae",
           "GIT_COMMITTER_EMAIL": "m@x.invalid", "PATH": "/usr/bin:/bin"}  # fmt: skip
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def history(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    env.update({"PYTHONPATH": str(ROOT), "COLUMNS": "250"})
    return subprocess.run([sys.executable, "-m", "perfguard", "history", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def build(repo: Path) -> dict[str, str]:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas: dict[str, str] = {}

    def commit(name: str, hours: int) -> None:
        git(repo, "commit", "-q", "--allow-empty", "-m", name, when=T0 + timedelta(hours=hours))
        shas[name] = git(repo, "rev-parse", "HEAD")

    commit("c0", 0)
    commit("c1", 1)
    git(repo, "checkout", "-q", "-b", "slow", shas["c0"])
    commit("s1", 2)
    git(repo, "checkout", "-q", "main")
    commit("c2", 3)
    url = f"sqlite:///{repo / '.perfguard' / 'history.db'}"
    (repo / ".perfguard").mkdir()
    with Store.open(url) as store:
        for name, hours, branch, value in (("c0", 0, "main", 1e-3), ("c1", 1, "main", 1e-3),
                                           ("s1", 2, "slow", 3.6e-3), ("c2", 3, "main", 1e-3)):  # fmt: skip
            result = ResultRecord(benchmark=FORWARD, impl="ring", params={"impl": "ring", "seq_len": 512},
                                  metric="time", unit="seconds", direction="lower", gated=True,
                                  samples=[value] * 10)  # fmt: skip
            commit_record = CommitRecord(sha=shas[name], base_sha=shas[name], branch=branch, subject=name,
                                         committed_at=T0 + timedelta(hours=hours))  # fmt: skip
            store.record_run(MACHINE, commit_record, profile="quick", software={}, fingerprint={},
                             settings={}, started_at=T0, finished_at=T0, results=[result],
                             trusted=True)  # fmt: skip
    return shas


def test_changes_follow_main_and_a_branch_point_is_shown_as_off_it(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    shas = build(repo)
    result = history(repo, "--impl", "ring")
    assert result.returncode == 0, result.stderr
    rows = {line.split("│")[4].strip(): line for line in result.stdout.splitlines() if line.count("│") > 8}
    c2, s1, c1 = (rows[shas[n][:10]] for n in ("c2", "s1", "c1"))
    assert "+0.0%" in c2 and "-72.2%" not in c2, c2  # c2 against c1, the commit before it on main
    assert "off main: slow" in s1 and "+260.0% vs main" in s1, s1  # the branch against main's c1
    assert "off main" not in c1 and "+0.0%" in c1
    assert "changes along main's first parents" in " ".join(result.stdout.split())  # the title, wrapped

    document = json.loads(history(repo, "--impl", "ring", "--json", "-").stdout)
    assert document["baseline"] == {"ref": "main", "known": True, "why": ""}
    [series] = document["series"]
    assert {p["subject"]: p["on_baseline"] for p in series["points"]} == {
        "c0": True, "c1": True, "s1": False, "c2": True,
    }  # fmt: skip

    # another baseline: the branch's own lineage (c0, s1); main's c1 and c2 are then off it
    other = history(repo, "--impl", "ring", "--baseline", "slow")
    assert "off slow: main" in other.stdout and "changes along slow's first parents" in " ".join(
        other.stdout.split()
    )
    unknown = history(repo, "--impl", "ring", "--baseline", "nope")
    assert (
        unknown.returncode == 0
        and "changes by commit date (nope's lineage unknown: 'nope' is not a ref"
        in " ".join(unknown.stdout.split())
    )


class Others(HTMLParser):
    """The ``li.other`` commits of a benchmark page and its figure captions."""

    def __init__(self) -> None:
        super().__init__()
        self.others: list[str] = []
        self.captions: list[str] = []
        self.in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "li" and a.get("class") == "other":
            self.others.append(a.get("data-sha") or "")
        if tag == "figcaption":
            self.in_caption = True
            self.captions.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption":
            self.in_caption = False

    def handle_data(self, data: str) -> None:
        if self.in_caption:
            self.captions[-1] += data


def test_the_site_draws_mains_lineage_and_lists_a_branch_point_apart(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    shas = build(repo)
    env = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "perfguard", "report", "--out", str(tmp_path / "site")]
    result = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    [page_path] = [p for p in (tmp_path / "site" / "bench").glob("*.html") if "ring" in p.read_text()]
    page = Others()
    page.feed(page_path.read_text())
    assert page.others == [shas["s1"]]
    assert page.captions[0].startswith("3 commits;"), page.captions
    covers = (tmp_path / "site" / "regressions.html").read_text()
    assert "on main&#39;s first-parent lineage" in covers or "on main's first-parent lineage" in covers


def test_a_lineage_that_holds_none_of_the_stored_commits_falls_back_to_the_date_order(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    build(repo)
    git(repo, "checkout", "-q", "--orphan", "elsewhere")
    git(repo, "commit", "-q", "--allow-empty", "-m", "unrelated")
    result = history(repo, "--impl", "ring", "--baseline", "elsewhere")
    assert result.returncode == 0, result.stderr
    assert "first parents hold none of the stored commits" in " ".join(result.stdout.split())
    assert "off elsewhere" not in result.stdout and "-72.2%" in result.stdout  # the order by date, as before
