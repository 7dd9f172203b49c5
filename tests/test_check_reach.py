"""``perfguard check`` measures only what the change can reach (issue 32): real git repositories, real CLI.

The project is this checkout's tracked files with every implementation registered.  Each check
measures the aten-op count of the forward at 512 tokens (``--bench``), one round a side: a count
repeats exactly whatever the machine does, so the verdicts below do not depend on CI's load.  The
implementations a change should reach are read by the test itself from the project's import
statements (:mod:`tests.helpers.import_walk`), never listed by hand.

Branches of ``main``:

- ``docs``: a page of docs/ changes;
- ``dilated-comment``: a comment in ``attention/dilated.py``;
- ``base-comment``: a comment in ``attention/_base.py``, a module every implementation imports;
- ``ring-double``: ``attention/ring.py`` makes the ring's forward run twice (its work doubles).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import import_walk
from tests.helpers.project import ROOT, add_branches, check_branch, perfguard, project_repo

Project = tuple[Path, str]

OPS = r"Work\.track_forward_ops\('\w+', 512,"

RING_DOUBLE = """

# --- tests/test_check_reach.py: the ring's forward runs twice (its work doubles) ---
_reach_test_forward = RingDilatedAttention.forward


def _reach_test_twice(self, *args, **kwargs):
    _reach_test_forward(self, *args, **kwargs)
    return _reach_test_forward(self, *args, **kwargs)


RingDilatedAttention.forward = _reach_test_twice
"""

BRANCHES = {
    "docs": [("docs/ci.md", "\nA sentence more.\n")],
    "dilated-comment": [("attention/dilated.py", "\n# A comment changed; the code did not.\n")],
    "base-comment": [("attention/_base.py", "\n# A comment in the module every implementation imports.\n")],
    "ring-double": [("attention/ring.py", RING_DOUBLE)],
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The project with its branches, and a store holding one recorded round of main."""
    repo = tmp_path_factory.mktemp("reach") / "project"
    repo = project_repo(repo, trim=False)
    add_branches(repo, BRANCHES)
    db = repo.parent / "main.db"
    recorded = perfguard(repo, "run", "--bench", OPS, "--rounds", "1", db=f"sqlite:///{db}")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    return repo, str(db)


def _check(
    project: Project, tmp_path: Path, branch: str, *extra: str, bench: str = OPS
) -> tuple[int, dict[str, Any], str]:
    """``perfguard check --baseline main`` of ``branch`` on a copy of the recorded store."""
    return check_branch(*project, tmp_path, branch, bench, *extra)


def _measured(document: dict[str, Any]) -> set[str]:
    return {i["impl"] for i in document["items"] if i["verdict"] != "not affected"}


def _not_affected(document: dict[str, Any]) -> set[str]:
    return {i["impl"] for i in document["items"] if i["verdict"] == "not affected"}


def _everything() -> set[str]:
    return set(import_walk.roots())


@pytest.mark.slow
def test_a_docs_only_change_measures_nothing_and_passes(project: Project, tmp_path: Path) -> None:
    code, document, output = _check(project, tmp_path, "docs")
    assert code == 0, output
    assert _measured(document) == set()
    assert _not_affected(document) == _everything()
    summary = document["summary"]
    assert summary["measured"] == {"base": "not measured", "head": "not measured"}
    assert summary["selection"]["everything"] is False and summary["selection"]["measured"] == {}
    assert "round 1/1" not in output  # no round process was started
    assert "no implementation measured" in output and "not affected, not measured" in output


@pytest.mark.slow
def test_a_change_in_dilated_measures_exactly_what_imports_it(project: Project, tmp_path: Path) -> None:
    expected = import_walk.importers(ROOT / "attention", "attention.dilated")
    assert expected and expected != _everything()  # the project's import graph makes this a real selection
    code, document, output = _check(project, tmp_path, "dilated-comment")
    assert code == 0, output
    assert _measured(document) == expected
    assert _not_affected(document) == _everything() - expected
    assert all(i["ratio"] == 1.0 for i in document["items"] if i["verdict"] != "not affected")
    reached = document["summary"]["selection"]["measured"]
    assert set(reached) == expected and all(mods == ["attention.dilated"] for mods in reached.values())


@pytest.mark.slow
def test_a_module_every_implementation_imports_measures_all(project: Project, tmp_path: Path) -> None:
    assert import_walk.importers(ROOT / "attention", "attention._base") == _everything()
    code, document, output = _check(project, tmp_path, "base-comment")
    assert code == 0, output
    assert _measured(document) == _everything() and not _not_affected(document)


@pytest.mark.slow
def test_a_slower_ring_fails_naming_ring_and_what_builds_on_it(project: Project, tmp_path: Path) -> None:
    expected = import_walk.importers(ROOT / "attention", "attention.ring")
    assert {"ring", "multihead_ring"} <= expected and "dilated" not in expected
    code, document, output = _check(project, tmp_path, "ring-double")
    assert code == 1, output
    regressed = {i["impl"] for i in document["items"] if i["verdict"] == "regression"}
    assert regressed <= expected and {"ring", "multihead_ring"} <= regressed
    assert _measured(document) == expected


@pytest.mark.slow
def test_a_baseline_measured_with_other_software_measures_everything(
    project: Project, tmp_path: Path
) -> None:
    """The stored baseline's torch differs from this machine's: every number may move."""
    repo, main_db = project
    copy = tmp_path / "other-torch.db"
    copy.write_bytes(Path(main_db).read_bytes())
    con = sqlite3.connect(copy)  # the record of a run made under another torch
    for run_id, software in con.execute("SELECT id, software FROM runs").fetchall():
        changed = json.dumps({**json.loads(software), "torch": "2.0.0"})
        con.execute("UPDATE runs SET software = ? WHERE id = ?", (changed, run_id))
    con.commit()
    con.close()  # the last connection: the write-ahead log goes into the file that is copied
    code, document, output = _check((repo, str(copy)), tmp_path, "docs")
    assert code == 0, output
    assert "torch 2.0.0" in document["summary"]["selection"]["reason"]
    assert _measured(document) == _everything()


@pytest.mark.slow
def test_all_measures_everything_whatever_changed(project: Project, tmp_path: Path) -> None:
    code, document, output = _check(project, tmp_path, "docs", "--all")
    assert code == 0, output
    assert _measured(document) == _everything() and not _not_affected(document)
    assert document["summary"]["selection"] == {
        "everything": True, "reason": "--all", "measured": {}, "not_measured": [], "changed": 0
    }  # fmt: skip


@pytest.mark.slow
def test_a_bench_selection_of_none_of_the_reached_ones_measures_nothing(
    project: Project, tmp_path: Path
) -> None:
    """The change reaches dilated's importers; ``--bench`` asks for improved only: nothing to measure
    (before: the rounds found no benchmark and the check stopped with exit 2)."""
    code, document, output = _check(
        project, tmp_path, "dilated-comment", bench=r"Work\.track_forward_ops\('improved', 512,"
    )
    assert code == 0, output
    assert _measured(document) == set() and "round 1/1" not in output
    assert "--bench measures none of them" in document["summary"]["selection"]["reason"]
