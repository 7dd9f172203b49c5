"""perfguard as a library: the check called from Python (no click) gives the verdicts the CLI gives.

On a real temporary repository (``tests/helpers/project.py``: the project trimmed to ``dilated`` and
``improved``) with a branch whose ``dilated`` does twice the work: ``perfguard.run`` records main,
``perfguard.check`` compares the branch with it, then the real ``perfguard check`` runs on the same
store.  Only the work metrics are selected (FLOPs, aten ops, bytes allocated: exact counts, no
re-measurement), so both see the same numbers whatever the machine is doing, and the CLI reuses the
rounds the library stored for both sides.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.project import WORK_BENCH, append_commit, git, planted, project_repo
from tests.helpers.project import perfguard as perfguard_cli


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main, and the branch ``double`` on which ``dilated``'s forward runs twice."""
    repo = project_repo(tmp_path_factory.mktemp("api") / "project")
    git(repo, "checkout", "-q", "-b", "double")
    append_commit(repo, "attention/registry.py", planted(2), "dilated does twice the work")
    git(repo, "checkout", "-q", "main")
    return repo


def test_the_library_imports_no_click() -> None:
    code = (
        "import sys, perfguard, perfguard.api, perfguard.gate, perfguard.measuring, perfguard.calibrate; "
        "perfguard.check; "
        "print(sorted(m for m in sys.modules if m == 'click' or m.startswith('perfguard.cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_check_from_python_gives_the_clis_verdicts_on_the_same_store(repo: Path, tmp_path: Path) -> None:
    import perfguard
    from perfguard import api
    from perfguard.measuring import QuietReporter

    db = f"sqlite:///{tmp_path / 'history.db'}"
    recorded = perfguard.run("HEAD", profile="quick", bench=WORK_BENCH, rounds=1, db=db, cwd=repo)
    assert (recorded.exit_code, recorded.failed, len(recorded.runs)) == (0, 0, 1)
    assert {r.impl for r in recorded.runs[0].results} == {"dilated", "improved"}

    git(repo, "checkout", "-q", "double")
    reporter = QuietReporter()
    outcome = perfguard.check(
        "main", profile="quick", bench=WORK_BENCH, rounds=1, db=db, json_path=tmp_path / "python.json",
        reporter=reporter, cwd=repo,
    )  # fmt: skip
    assert outcome.exit_code == 1 and outcome.stored.verdict == "regression"
    assert outcome.written == [tmp_path / "python.json"] and outcome.store.endswith("history.db")
    assert any("baseline" in m and "using 1 stored round(s)" in m for m in reporter.messages)
    assert any("HEAD passes perfguard verify" in m for m in reporter.messages)
    verdicts = {
        (i.impl, i.benchmark, i.params_key): (str(i.verdict), i.ratio, i.gated) for i in outcome.result.items
    }
    assert len(verdicts) == 6  # 2 implementations x FLOPs, aten ops, bytes allocated
    for (impl, _, _), (verdict, ratio, gated) in verdicts.items():
        expected = ("regression", 2.0) if impl == "dilated" else ("unchanged", 1.0)
        assert (verdict, ratio, gated) == (*expected, True)

    cli = perfguard_cli(repo, "check", "--baseline", "main", "--profile", "quick", "--bench", WORK_BENCH,
                    "--rounds", "1", "--json", str(tmp_path / "cli.json"), db=db)  # fmt: skip
    assert cli.returncode == outcome.exit_code, cli.stdout + cli.stderr
    assert "using 1 stored round(s) (--fresh measures again)" in cli.stderr  # HEAD: the library's rounds
    # what the terminal shows comes from the library: the deciding rows, then the headline and counts
    terminal = outcome.terminal
    assert terminal is not None and terminal.headline == outcome.headline
    assert [(r.verdict, r.cells[1]) for r in terminal.rows] == [("regression", "dilated")] * 3
    assert cli.stdout.splitlines()[-2:] == [terminal.headline, terminal.counts] == [
        "perfguard: 3 regressions (gated)", "6 items: gated 3 regressions, 3 unchanged"
    ]  # fmt: skip
    document = json.loads((tmp_path / "cli.json").read_text())
    assert document["check_id"] == outcome.check_id + 1 and document["verdict"] == outcome.stored.verdict
    assert {(i["impl"], i["benchmark"], i["params_key"]): (i["verdict"], i["ratio"], i["gated"])
            for i in document["items"]} == verdicts  # fmt: skip

    # the reports of the library's check, rendered again from the store without click, are what it wrote
    again = api.report(check_id=outcome.check_id, json=True, db=db)
    assert again.json == json.loads((tmp_path / "python.json").read_text())
    # and the history holds the two commits the library measured
    found = perfguard.history(impl="dilated", benchmark="track_forward_ops", db=db)
    assert found.message is None and [len(s.points) for s in found.series] == [2]
