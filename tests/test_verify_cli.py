"""The real ``perfguard verify`` command, in a subprocess, on broken and correct implementations.

Deliberately broken implementations (tests/verify_doubles.py, one per bug class that earlier
verify scripts let through) are registered into the real CLI run through
``PERFGUARD_EXTRA_IMPLS`` — the documented extension mechanism, not a patch of perfguard's
internals — and each run must exit 1 and name the check that caught it.  The runs are started
together by one fixture (they are independent processes) to keep the wall time down.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import verify_doubles as doubles
from click.testing import CliRunner, Result

from perfguard.cli import main

TESTS = Path(__file__).resolve().parent


@dataclass
class Ran:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    data: dict[str, Any] | None


def _env(extra: str | None = "verify_doubles:ALL") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"  # several runs share the CI machine's cores
    env.pop("PERFGUARD_EXTRA_IMPLS", None)
    if extra is not None:
        env["PERFGUARD_EXTRA_IMPLS"] = extra
    return env


def _start(repo_root: Path, args: list[str], json_path: Path | None, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perfguard", "verify", *args]
    if json_path is not None:
        cmd += ["--json", str(json_path)]
    pipe = subprocess.PIPE
    return subprocess.Popen(cmd, cwd=repo_root, env=env, stdout=pipe, stderr=pipe, text=True)


RUNS: dict[str, list[str]] = {
    **{name: ["--device", "cpu", "--impl", name] for name in doubles.BROKEN_CASES},
    "good": ["--impl", "good_core", "--impl", "good_multihead"],
}


@pytest.fixture(scope="module")
def runs(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    tmp = tmp_path_factory.mktemp("verify_cli")
    started = {}
    for key, args in RUNS.items():
        path = tmp / f"{key}.json"
        started[key] = (_start(repo_root, args, path, _env()), path, args)
    done = {}
    for key, (proc, path, args) in started.items():
        out, err = proc.communicate(timeout=600)
        data = json.loads(path.read_text()) if path.exists() else None
        done[key] = Ran(args, proc.returncode, out, err, data)
    return done


@pytest.mark.parametrize("name", sorted(doubles.BROKEN_CASES))
def test_each_broken_implementation_exits_1_and_names_the_check(runs: dict[str, Ran], name: str) -> None:
    _, check = doubles.BROKEN_CASES[name]
    ran = runs[name]
    assert ran.returncode == 1, ran.stdout + ran.stderr
    # the failure line under the table: "<impl> [cpu float32] <check>: <why> (<case>)"
    assert f"✗ {name} [cpu float32] {check}: " in ran.stdout, ran.stdout
    assert ran.data is not None and ran.data["passed"] is False
    (row,) = ran.data["results"]
    assert row["impl"] == name and row["checks"][check]["status"] == "fail"
    assert any(f.startswith(f"{check}: ") for f in row["failures"])


def test_why_is_spelled_out(runs: dict[str, Ran]) -> None:
    out = runs["broken_ring_no_lse"].stdout
    assert "broken_ring_no_lse [cpu float32] reference: rel err" in out
    assert "> 1e-05 (longnet, non-causal)" in out
    out = runs["broken_swapped_args"].stdout
    assert "same_fn: declared pattern differs from attention.pattern.dilated_pattern" in out
    out = runs["broken_tensor_return"].stdout
    assert "return: returned a plain Tensor; multihead modules must return exactly (output, None)" in out


def test_correct_implementations_exit_0(runs: dict[str, Ran]) -> None:
    ran = runs["good"]
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "all 2 rows passed (verification " in ran.stdout and "✗" not in ran.stdout
    assert ", setup " in ran.stdout and "imports " in ran.stdout
    assert ran.data is not None and ran.data["passed"] is True
    assert set(ran.data["setup_seconds"]) == {"imports"}
    # stderr is a pipe here (a CI log): one plain line per finished row, no progress display
    lines = [line for line in ran.stderr.splitlines() if line.startswith("[")]
    assert [line.split(" in ")[0] for line in lines] == [
        "[1/2] good_core cpu float32: passed",
        "[2/2] good_multihead cpu float32: passed",
    ]
    assert [r["impl"] for r in ran.data["results"]] == ["good_core", "good_multihead"]


# Usage errors exit before any implementation runs: the same command through click's CliRunner
# (in-process, no torch start-up per case).


def _invoke(args: list[str], extra: str | None = "verify_doubles:ALL") -> Result:
    env = {"PERFGUARD_EXTRA_IMPLS": extra}  # None unsets it for the call
    return CliRunner().invoke(main, ["verify", *args], env=env)


def test_unknown_implementation_is_a_usage_error_listing_known_names() -> None:
    result = _invoke(["--impl", "dilatd"])
    assert result.exit_code == 2
    assert "unknown implementation(s): dilatd" in result.output
    assert "multihead_block_sparse_ring" in result.output and "good_core" in result.output


def test_half_precision_on_cpu_is_a_usage_error() -> None:
    result = _invoke(["--device", "cpu", "--dtype", "bfloat16", "--impl", "dilated"], extra=None)
    assert result.exit_code == 2 and "bfloat16 is not verified on cpu" in result.output


def test_broken_extension_reference_is_a_usage_error() -> None:
    result = _invoke(["--impl", "dilated"], extra="verify_doubles:NOT_THERE")
    assert result.exit_code == 2
    assert "PERFGUARD_EXTRA_IMPLS: module 'verify_doubles' has no attribute 'NOT_THERE'" in result.output


def test_non_positive_seq_len_is_a_usage_error() -> None:
    result = _invoke(["--impl", "good_core", "--seq-len", "0"])
    assert result.exit_code == 2 and "--seq-len must be a positive integer" in result.output


def test_unknown_dtype_is_rejected_by_click() -> None:
    assert _invoke(["--dtype", "float64"]).exit_code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_without_a_gpu_is_a_usage_error() -> None:
    result = _invoke(["--device", "cuda"], extra=None)
    assert result.exit_code == 2 and "torch.cuda.is_available() is False" in result.output


@pytest.mark.skipif(
    importlib.util.find_spec("attention.factory") is None,
    reason="the implementations (attention/factory.py and the classes) have not been merged yet",
)
def test_the_real_registry_passes(repo_root: Path, tmp_path: Path) -> None:
    """The acceptance run: every registered implementation, default CPU matrix, exit 0."""
    path = tmp_path / "verify.json"
    proc = _start(repo_root, [], path, _env(None))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    data = json.loads(path.read_text())
    from attention.registry import REGISTRY

    assert [r["impl"] for r in data["results"]] == list(REGISTRY)
    assert all(r["passed"] for r in data["results"])
