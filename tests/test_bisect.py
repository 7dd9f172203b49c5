"""``perfguard bisect`` through the real CLI on a real repository: 16 commits, one planted slowdown.

``main`` gets 16 commits after the ``good`` one; the 11th makes ``dilated``'s forward run twice (its
work metrics double exactly), the others change a comment.  The bisection follows ``dilated``'s
work metrics at 512 tokens, which repeat exactly on a busy CPU, so the culprit is certain and the
number of commits measured is the binary search's: good, bad and ceil(log2(16)) = 4 probes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.project import append_commit, git, perfguard, planted, project_repo

BENCH = r"Work\.track_forward_(flops|ops|allocated)\('dilated', 512,"
CULPRIT_AT = 11  # 1-based position of the planted commit in good..bad


@dataclass
class Range:
    repo: Path
    db: str
    good: str
    commits: list[str]  # good..bad, oldest first

    @property
    def culprit(self) -> str:
        return self.commits[CULPRIT_AT - 1]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Range]:
    base = tmp_path_factory.mktemp("bisect")
    repo = project_repo(base / "project")
    good = git(repo, "rev-parse", "HEAD")
    commits = []
    for n in range(1, 17):
        if n == CULPRIT_AT:
            commits.append(
                append_commit(repo, "attention/registry.py", planted(2), "registry: exact reference pass")
            )
        else:
            commits.append(append_commit(repo, "attention/dilated.py", f"\n# comment {n}\n", f"comment {n}"))
    yield Range(repo, f"sqlite:///{base / 'history.db'}", good, commits)


def bisect(history: Range, *args: str, out: Path) -> tuple[int, str, str, dict | None]:  # type: ignore[type-arg]
    result = perfguard(history.repo, "bisect", "--bench", BENCH, "--rounds", "1", "--json", str(out), *args,
                       db=history.db)  # fmt: skip
    document = json.loads(out.read_text()) if out.exists() else None
    return result.returncode, result.stdout, result.stderr, document


@pytest.mark.slow
def test_finds_the_planted_commit_measuring_six_of_sixteen(history: Range, tmp_path: Path) -> None:
    code, stdout, stderr, document = bisect(
        history, "--good", history.good, "--bad", "main", out=tmp_path / "b.json"
    )
    assert code == 0, stdout + stderr
    assert document is not None
    assert document["candidates"] == 16 and document["culprit"]["sha"] == history.culprit
    assert len(document["measured"]) <= 6, document["measured"]
    assert set(document["measured"]) == {history.good, history.commits[-1]} | {
        p["sha"] for p in document["probes"] if p["position"] not in (0, 16)
    }
    # every probe after the planted commit moved, every one before it did not
    for probe in document["probes"]:
        assert probe["moved"] == (probe["position"] >= CULPRIT_AT), probe
    culprit_probe = next(p for p in document["probes"] if p["sha"] == history.culprit)
    assert {i["metric"] for i in culprit_probe["items"]} == {"flops", "ops", "allocated"}
    assert all(i["ratio"] == pytest.approx(2.0, rel=1e-9) for i in culprit_probe["items"])
    # the culprit is printed with its diff stat
    assert f"first regressing commit: {history.culprit}" in stdout
    assert "registry: exact reference pass" in stdout and "attention/registry.py" in stdout
    assert "1 file changed" in stdout
    assert f"{len(document['measured'])} commit(s) measured, 0 reused" in stderr


def test_a_second_bisection_reuses_every_stored_round(history: Range, tmp_path: Path) -> None:
    first_out = tmp_path / "first.json"
    code, *_ = bisect(history, "--good", history.good, "--bad", "main", out=first_out)
    assert code == 0
    code, _, stderr, document = bisect(
        history, "--good", history.good, "--bad", "main", out=tmp_path / "b.json"
    )
    assert code == 0, stderr
    assert document is not None and document["culprit"]["sha"] == history.culprit
    assert document["measured"] == [] and len(document["reused"]) == len(document["probes"])
    assert "using 1 stored round(s)" in stderr


def test_refuses_what_is_not_a_range_and_a_range_where_nothing_moved(history: Range, tmp_path: Path) -> None:
    code, _, stderr, _ = bisect(history, "--good", "main", "--bad", history.good, out=tmp_path / "x.json")
    assert code == 2 and "is not an ancestor of --bad" in stderr and "hint:" in stderr
    code, _, stderr, _ = bisect(history, "--good", "main", "--bad", "main", out=tmp_path / "y.json")
    assert code == 2 and "are the same commit" in stderr
    code, _, stderr, _ = bisect(history, "--good", "no-such-ref", "--bad", "main", out=tmp_path / "z.json")
    assert code == 2 and "unknown --good 'no-such-ref'" in stderr
    before = history.commits[CULPRIT_AT - 2]  # the commit just before the planted one
    code, _, stderr, document = bisect(
        history, "--good", history.good, "--bad", before, out=tmp_path / "n.json"
    )
    assert code == 2 and "has not moved from" in stderr and "nothing to find" in stderr
    assert document is None


def test_exact_series_are_measured_once_a_commit_and_each_move_names_its_params(
    history: Range, tmp_path: Path
) -> None:
    """Issue 30: bisect ran the profile's rounds on every probe even for work counts, which repeat
    exactly, and its "moved" line said the same reason once per parameter set without naming them."""
    from perfguard.store import Store

    db = f"sqlite:///{tmp_path / 'exact.db'}"
    good, bad = history.commits[CULPRIT_AT - 3], history.culprit  # 2 candidates: 3 commits measured
    result = perfguard(
        history.repo,
        "bisect",
        "--bench",
        BENCH,
        "--good",
        good,
        "--bad",
        bad,
        "--json",
        str(tmp_path / "b.json"),
        db=db,
    )  # fmt: skip  (no --rounds: the profile's)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((tmp_path / "b.json").read_text())
    assert document["culprit"]["sha"] == history.culprit and len(document["measured"]) == 3
    assert "the selected series are exact (allocated, flops, ops): one round a commit" in result.stderr
    with Store.open(db) as store:
        [machine] = store.machines()
        for sha in document["measured"]:
            assert len(store.runs_for(machine.key, sha, "quick")) == 1, sha
    [moved] = [line for line in result.stderr.splitlines() if "moved: " in line]
    named = moved.split("moved: ", 1)[1].split("; ")
    assert len(named) == 3 and len(set(named)) == 3, moved
    assert all(n.startswith("dilated forward ") and "(dtype=float32, seq_len=512)" in n for n in named), moved
