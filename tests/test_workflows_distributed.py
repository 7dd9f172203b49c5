"""The multi-GPU jobs of the workflows: when they run, and both of them run for real on this CPU.

``record-distributed`` (perfguard-main.yml) and ``distributed`` (perfguard-pr.yml) run the
distributed suite on a runner labelled ``multi-gpu``, only where one is registered (repository
variable ``PERFGUARD_MULTI_GPU_RUNNER``).  Here each job is executed step by step by the workflow
emulator of ``tests/test_workflows_emulator.py`` on this CPU machine standing in for a multi-GPU
runner (2 gloo ranks, ``PERFGUARD_DISTRIBUTED_PROFILE=distributed-quick``): the baseline job records
``main`` under the machine key with its ranks, and the PR job, for a head whose ring does twice the
work per step, fails on that baseline without writing the runner's store.  Verdicts come from the
exact work counts only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_workflows_emulator import (
    WORKFLOWS,
    Evaluator,
    copy_tree_handler,
    evaluate_if,
    evaluate_value,
    load_workflow,
    needs_context,
    to_string,
)
from test_workflows_pr_run import (  # noqa: F401  (prepared_python is a fixture)
    REPO,
    _store_state,
    checkout_handler,
    git,
    make_runner,
    pr_event,
    prepared_python,
    run_gate,
    tracked_files,
)

from perfguard.store import Store

ROOT = Path(__file__).resolve().parents[1]
WORK_BENCH = r"Work\.track_forward_flops\('ring', 2048,"
VARS = {
    "PERFGUARD_MULTI_GPU_RUNNER": "true",
    "PERFGUARD_DISTRIBUTED_PROFILE": "distributed-quick",
    "PERFGUARD_DISTRIBUTED_BENCH": WORK_BENCH,
}
TRIM = """

# --- tests/test_workflows_distributed.py: a project with the ring only ---
import types as _fixture_types

REGISTRY = _fixture_types.MappingProxyType({k: REGISTRY[k] for k in ("ring",)})
"""
DOUBLE_STEP = """

# --- tests/test_workflows_distributed.py: every ring step computes its pieces twice ---
_planted_once = run_pieces_forward


def run_pieces_forward(plan, pieces, q, k, v, *which):
    _planted_once(plan, pieces, q, k, v, *which)
    return _planted_once(plan, pieces, q, k, v, *which)
"""


def _job_if(workflow: str, job_id: str, variables: dict[str, str], run: str = "true") -> tuple[bool, str]:
    job = load_workflow(WORKFLOWS / workflow)["jobs"][job_id]
    contexts = {"needs": {"gate": {"outputs": {"run": run}}}, "github": {}, "vars": variables}
    name = to_string(evaluate_value(job["name"], Evaluator(contexts)))
    return evaluate_if(job.get("if"), Evaluator(contexts)), name


def test_the_distributed_jobs_wait_for_a_registered_multi_gpu_runner() -> None:
    for workflow, job_id in (
        ("perfguard-main.yml", "record-distributed"),
        ("perfguard-pr.yml", "distributed"),
    ):
        assert not _job_if(workflow, job_id, {})[0], f"{workflow}/{job_id} would queue for a missing runner"
        assert _job_if(workflow, job_id, {"PERFGUARD_MULTI_GPU_RUNNER": "true"})[0]
        job = load_workflow(WORKFLOWS / workflow)["jobs"][job_id]
        assert "multi-gpu" in job["runs-on"] and "gpu" not in job["runs-on"]
        assert {job["env"][k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")} == {"0", "1"}
        contexts = {"vars": {}, "github": {}}
        assert (
            to_string(evaluate_value(job["env"]["PERFGUARD_CI_PROFILE"], Evaluator(contexts)))
            == "distributed"
        )
    # the PR job reports under its check name only when it runs; the gate still decides first
    assert _job_if("perfguard-pr.yml", "distributed", {"PERFGUARD_MULTI_GPU_RUNNER": "true"})[1] == (
        "distributed check (multi-GPU)"
    )
    skipped, name = _job_if("perfguard-pr.yml", "distributed", {}, run="true")
    assert not skipped and name != "distributed check (multi-GPU)"
    assert not _job_if(
        "perfguard-pr.yml", "distributed", {"PERFGUARD_MULTI_GPU_RUNNER": "true"}, run="false"
    )[0]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bare origin with ``main`` (ring only) and the PR head ``double-step``."""
    top = tmp_path_factory.mktemp("origin")
    src = top / "src"
    src.mkdir()
    for name in tracked_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    with (src / "attention" / "registry.py").open("a") as fh:
        fh.write(TRIM)
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "base")
    base = git(src, "rev-parse", "HEAD")
    git(src, "checkout", "-q", "-b", "double-step")
    with (src / "attention" / "_distributed.py").open("a") as fh:
        fh.write(DOUBLE_STEP)
    git(src, "commit", "-qam", "every ring step twice")
    head = git(src, "rev-parse", "HEAD")
    bare = top / "origin.git"
    git(top, "clone", "-q", "--bare", str(src), str(bare))
    return {"url": str(bare), "base": base, "head": head}


@pytest.mark.slow
def test_the_baseline_is_recorded_under_its_ranks_and_a_pr_that_doubles_the_ring_fails(
    tmp_path: Path,
    origin: dict[str, Any],
    prepared_python: Path,  # noqa: F811  (the imported fixture)
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    Store.open(f"sqlite:///{store / 'history.db'}").close()
    base_env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PERFGUARD_DB": f"sqlite:///{store}/history.db",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    variables = {"PERFGUARD_PYTHON": str(prepared_python), **VARS}

    # the baseline workflow's multi-GPU job, on a push to main
    main = load_workflow(WORKFLOWS / "perfguard-main.yml")
    event = {"repository": {"full_name": REPO, "default_branch": "main"}, "ref": "refs/heads/main"}
    recorder = make_runner(tmp_path / "baseline", event, event_name="push", sha=origin["base"],
                           ref="refs/heads/main", vars=variables, base_env=base_env)  # fmt: skip
    recorder.workspace.parent.mkdir(parents=True, exist_ok=True)
    recorder.handlers = {
        "actions/checkout": checkout_handler(origin["url"], recorder.workspace),
        "actions/upload-artifact": copy_tree_handler(tmp_path / "baseline-artifacts"),
    }
    recorded = recorder.run_job(main, "record-distributed")
    assert recorded.outcome == "success", recorded.log
    with Store.open(f"sqlite:///{store / 'history.db'}", read_only=True) as stored:
        [machine] = stored.machines()
        assert machine.key.endswith(" ranks=2")
    assert (tmp_path / "baseline-artifacts" / "perfguard-baseline-distributed-logs").is_dir()

    # the PR workflow's multi-GPU job for a head that doubles the ring's per-step work
    pr = load_workflow(WORKFLOWS / "perfguard-pr.yml")
    pr_event_ = pr_event(origin["head"])
    gate = run_gate(tmp_path / "gate", pr_event_)
    assert gate.outputs["run"] == "true", gate.log
    runner = make_runner(tmp_path / "gpu", pr_event_, sha=origin["base"], vars=variables, base_env=base_env)
    runner.workspace.parent.mkdir(parents=True, exist_ok=True)
    artifacts = tmp_path / "artifacts"
    runner.handlers = {
        "actions/checkout": checkout_handler(origin["url"], runner.workspace, pr_head=origin["head"]),
        "actions/upload-artifact": copy_tree_handler(artifacts),
    }
    before = _store_state(store)
    job = runner.run_job(pr, "distributed", needs_context(gate))
    check = job.step("perfguard check")
    assert check.returncode == 1, check.output
    assert job.outcome == "failure"
    assert "ring" in check.output and "regression" in check.output
    assert "stored round(s)" in check.output  # the baseline job's rounds
    report = artifacts / "perfguard-report-distributed"
    assert (report / "report.json").stat().st_size > 0 and (report / "results.db").stat().st_size > 0
    assert _store_state(store) == before, "the PR job changed the runner's baseline store"
    assert sorted(p.name for p in runner.workspace.iterdir()) == []
