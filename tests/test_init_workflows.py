"""The workflows ``perfguard init`` writes: this repository's own, for a repository that installs perfguard.

perfguard's repository gates fork pull requests behind a maintainer's label, runs the untrusted
check on an ephemeral runner, posts the comment from a job that runs no pull-request code and
publishes the history site to GitHub Pages (docs/ci.md).  Another repository gets the same
workflows from ``perfguard init`` (perfguard/templates/init/), with one difference: perfguard is not
its code, so every job installs the pinned ``PERFGUARD_REQUIREMENT`` instead of checking out and
installing the base branch.  These tests hold the written files to that: the same jobs, triggers,
conditions, runners and permissions (never wider) as .github/workflows/, the trust model's rules
checked on the files themselves, actionlint and shellcheck clean, and never an overwritten file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_workflows import (
    PR_CODE_JOBS,
    _checkouts,
    _format,
    _needs,
    _runs_only_when_the_gate_approved,
    logical_lines,
    run_actionlint,
    shellcheck,
)
from test_workflows_emulator import WORKFLOWS, Evaluator, evaluate_value, load_workflow

from perfguard import __version__
from perfguard.scaffold import WORKFLOWS as INIT_WORKFLOWS
from perfguard.scaffold import init_repository

#: the keys of a job that must be what this repository's workflow says
SAME_KEYS = (
    "name",
    "runs-on",
    "needs",
    "if",
    "concurrency",
    "timeout-minutes",
    "environment",
    "outputs",
    "env",
)
REQUIREMENT = '"${PERFGUARD_REQUIREMENT}"'


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository after ``perfguard init``."""
    root = tmp_path_factory.mktemp("repo")
    (root / ".git").mkdir()  # what actionlint finds a project's .github/actionlint.yaml by
    (root / "flashdil").mkdir()
    (root / "flashdil" / "__init__.py").write_text("")
    init_repository(root, "flashdil")
    return root


def workflows(root: Path) -> dict[str, dict[str, Any]]:
    return {name: load_workflow(root / ".github" / "workflows" / name) for name in INIT_WORKFLOWS}


def test_init_writes_the_three_workflows_and_their_lint_config_and_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "flashdil").mkdir()
    (tmp_path / "flashdil" / "__init__.py").write_text("")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    mine = tmp_path / ".github" / "workflows" / "perfguard-pr.yml"
    mine.write_text("name: my own\n")
    outcome = init_repository(tmp_path, "flashdil")
    written = {p.relative_to(tmp_path).as_posix() for p in outcome.written}
    assert {".github/workflows/perfguard-main.yml", ".github/workflows/perfguard-fork-approval.yml",
            ".github/actionlint.yaml"} <= written  # fmt: skip
    assert mine.read_text() == "name: my own\n"
    assert (mine, "exists") in outcome.skipped
    again = init_repository(tmp_path, "flashdil")
    assert again.written == [] and len(again.skipped) == len(outcome.written) + 1


def test_every_job_installs_the_perfguard_that_wrote_it(written: Path) -> None:
    for name, workflow in workflows(written).items():
        if name == "perfguard-fork-approval.yml":
            continue  # API calls only: no perfguard at all
        requirement = workflow["env"]["PERFGUARD_REQUIREMENT"]
        assert evaluate_value(requirement, Evaluator({"vars": {}})) == f"perfguard=={__version__}", name
        mine = {"PERFGUARD_REQUIREMENT": "perfguard @ https://example.invalid/perfguard.whl"}
        assert evaluate_value(requirement, Evaluator({"vars": mine})) == mine["PERFGUARD_REQUIREMENT"]
        text = (written / ".github" / "workflows" / name).read_text()
        assert "$version" not in text and "./trusted" not in text and "sparse-checkout" not in text, name


def test_the_jobs_are_this_repositorys(written: Path) -> None:
    """Same triggers, jobs, conditions, runners, concurrency and environment as .github/workflows/;
    permissions the same or narrower (no checkout of perfguard: no ``contents: read`` for it)."""
    for name, template in workflows(written).items():
        ours = load_workflow(WORKFLOWS / name)
        assert template["on"] == ours["on"] and template["permissions"] == ours["permissions"] == {}, name
        assert list(template["jobs"]) == list(ours["jobs"]), name
        for job_id, job in template["jobs"].items():
            mine = ours["jobs"][job_id]
            where = f"{name}/{job_id}"
            for key in SAME_KEYS:
                assert job.get(key) == mine.get(key), f"{where}: {key}"
            assert set((job.get("permissions") or {}).items()) <= set(
                (mine.get("permissions") or {}).items()
            ), where
    pr, ours = workflows(written)["perfguard-pr.yml"], load_workflow(WORKFLOWS / "perfguard-pr.yml")
    assert pr["jobs"]["gate"]["steps"] == ours["jobs"]["gate"]["steps"]  # the fork gate, word for word
    fork = workflows(written)["perfguard-fork-approval.yml"]
    assert fork["jobs"] == load_workflow(WORKFLOWS / "perfguard-fork-approval.yml")["jobs"]
    main = workflows(written)["perfguard-main.yml"]
    assert (
        main["jobs"]["deploy"] == load_workflow(WORKFLOWS / "perfguard-main.yml")["jobs"]["deploy"]
    )  # Pages


def test_the_untrusted_jobs_hold_the_trust_model(written: Path) -> None:
    """The jobs that run pull-request code: only after the gate, the approved commit only, perfguard
    installed before it is on the machine, ``check --untrusted`` (suite and rules from the
    merge-base) with its own results store and only the runner's read-only baseline store."""
    pr = workflows(written)["perfguard-pr.yml"]
    for job_id, (pool, variables) in PR_CODE_JOBS.items():
        job, where = pr["jobs"][job_id], job_id
        assert "gate" in _needs(job) and _runs_only_when_the_gate_approved(job, variables), where
        assert job["permissions"] == {"contents": "read"} and job["runs-on"] == pool, where
        assert job["env"]["PERFGUARD_UNTRUSTED"] == "1", where
        (checkout,) = _checkouts(job)
        assert checkout["with"]["ref"] == "${{ needs.gate.outputs.sha }}" and checkout["with"]["path"] == "pr"
        assert checkout["with"]["persist-credentials"] is False and checkout["with"]["fetch-depth"] == 0
        names = [s.get("name", "") for s in job["steps"]]
        install = names.index("Install perfguard (pinned) into the job's virtualenv")
        assert install < names.index("Check out the approved head commit (untrusted, full history)"), where
        assert f"pip install --disable-pip-version-check {REQUIREMENT}" in job["steps"][install]["run"]
        lines = [line for step in job["steps"] for line in logical_lines(step.get("run", ""))]
        calls = [line for line in lines if re.search(r"(?:^|\s)perfguard\s+\w", line)]
        assert any(re.search(r"perfguard\s+check\b", line) for line in calls), where
        for line in calls:
            assert not re.search(r"perfguard\s+(run|db|calibrate)\b", line), line
            if re.search(r"perfguard\s+check\b", line):
                assert "--untrusted" in line and '--results-db "${PERFGUARD_RESULTS_DB}"' in line, line
                assert re.search(r'\$\{PERFGUARD_DB:\+--db "\$\{PERFGUARD_DB\}"\}', line), line
    text = (written / ".github" / "workflows" / "perfguard-pr.yml").read_text()
    assert "secrets." not in text
    for job_id, job in pr["jobs"].items():
        for step in job.get("steps", []):
            assert "${{" not in step.get("run", ""), f"{job_id}: an expression inside run: (use env:)"
        if job_id not in PR_CODE_JOBS:
            assert not _checkouts(job), f"{job_id} runs no code of the repository: it checks out nothing"


def test_the_comment_job_installs_only_pinned_files_and_runs_no_pr_code(written: Path) -> None:
    comment = workflows(written)["perfguard-pr.yml"]["jobs"]["comment"]
    assert comment["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert not _checkouts(comment) and comment["runs-on"] == "ubuntu-latest"
    install = next(s["run"] for s in comment["steps"] if s.get("name", "").startswith("Install perfguard"))
    assert f'--no-deps --target "${{RUNNER_TEMP}}/perfguard-github" {REQUIREMENT}' in install
    assert "--require-hashes --no-deps" in install and "perfguard/github/requirements.txt" in install
    # the file the job reads its hashes from ships in perfguard's wheel
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"github/requirements.txt"' in pyproject


def test_the_written_workflows_pass_actionlint(written: Path) -> None:
    """With the actionlint.yaml init writes (its runner labels), in the repository it wrote them to."""
    files = sorted((written / ".github" / "workflows").glob("*.yml"))
    assert [p.name for p in files] == sorted(INIT_WORKFLOWS)
    findings = run_actionlint(files, written)
    assert findings == [], "actionlint findings:\n" + _format(findings)


def test_the_written_workflows_pass_shellcheck(written: Path) -> None:
    problems = []
    for name, workflow in workflows(written).items():
        for job_id, job in workflow["jobs"].items():
            for index, step in enumerate(job.get("steps", [])):
                if "run" in step:
                    for f in shellcheck(step["run"]):
                        where = f"{name} {job_id}/{step.get('name', index)}"
                        problems.append(f"{where}: SC{f['code']} line {f['line'] - 1}: {f['message']}")
    assert problems == [], "\n".join(problems)
