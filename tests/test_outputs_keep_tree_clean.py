"""Issue 27, item 10: perfguard's own outputs never make the work tree dirty.

``perfguard check --html pr.html`` (as the README suggested) left ``pr.html`` untracked in the
repository, so the next check measured ``HEAD+dirty`` and reused nothing.  Now an output path that git
would see is written under ``.perfguard/reports/`` (which ignores itself) and the command says where;
ignored paths and paths outside the work tree are written as given; and a dirty tree's message names
the files that make it so.

Real CLI, a real git repository whose ``.gitignore`` does not name ``.perfguard/``, the work metrics,
one round.  SQLite: no store behaviour is involved beyond reusing HEAD's stored rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, planted, project_repo

ARGS = ("--bench", WORK_BENCH, "--rounds", "1", "--no-verify")


@pytest.mark.slow
def test_reports_in_the_repository_leave_it_clean_and_the_next_check_reuses_head(tmp_path: Path) -> None:
    repo = project_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text("site/\n")  # a project that does not ignore .perfguard/
    git(repo, "commit", "-qam", "ignore only the site")
    git(repo, "checkout", "-q", "-b", "feature")
    head = append_commit(repo, "attention/registry.py", planted(2), "twice the work")
    db = f"sqlite:///{tmp_path / 'history.db'}"
    (repo / "docs").mkdir(exist_ok=True)
    first = perfguard(repo, "check", "--baseline", "main", *ARGS, "--html", "pr.html", "--markdown",
                      "docs/pr.md", "--json", str(tmp_path / "pr.json"), db=db)  # fmt: skip
    assert first.returncode == 1, first.stdout + first.stderr
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    reports = repo / ".perfguard" / "reports"
    assert (reports / "pr.html").read_text().lower().startswith("<!doctype html>")
    assert (reports / "docs" / "pr.md").is_file() and (tmp_path / "pr.json").is_file()
    assert f"wrote {reports / 'pr.html'}" in first.stderr
    assert not (repo / "pr.html").exists() and not (repo / "docs" / "pr.md").exists()

    second = perfguard(repo, "check", "--baseline", "main", *ARGS, "--html", "pr.html", db=db)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "uncommitted changes" not in second.stderr
    assert f"HEAD {head[:10]}: using 1 stored round(s)" in second.stderr  # not measured again

    # an ignored path is written as given; the site too
    site = perfguard(repo, "report", "--out", "site", db=db)
    assert site.returncode == 0, site.stdout + site.stderr
    assert (repo / "site" / "index.html").is_file() and git(repo, "status", "--porcelain") == ""
    listed = perfguard(repo, "history", "--json", "history.json", db=db)
    assert listed.returncode == 0 and json.loads((reports / "history.json").read_text())["series"]

    # a dirty tree says which files make it so
    (repo / "notes.txt").write_text("mine\n")
    dirty = perfguard(repo, "check", "--baseline", "main", *ARGS, db=db)
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    assert "the work tree has uncommitted changes (1 file: notes.txt)" in dirty.stderr

    # a tracked file is named on purpose (to be updated and committed): written where asked
    (repo / "notes.txt").unlink()
    (repo / "docs" / "series.json").write_text("{}\n")
    git(repo, "add", "docs/series.json")
    git(repo, "commit", "-qm", "a tracked report")
    tracked = perfguard(repo, "history", "--json", "docs/series.json", db=db)
    assert tracked.returncode == 0, tracked.stdout + tracked.stderr
    assert json.loads((repo / "docs" / "series.json").read_text())["series"]
    assert git(repo, "status", "--porcelain") == "M docs/series.json"
