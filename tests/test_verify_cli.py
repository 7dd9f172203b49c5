"""The real ``perfguard verify`` command, in a subprocess, on broken and correct implementations.

Deliberately broken implementations (tests/verify_doubles.py, one per bug class that earlier
verify scripts let through) are registered into the real CLI run by a repository that declares
them (``[tool.perfguard]`` package and registry, docs/guarding-your-package.md — the documented
mechanism, not a patch of perfguard's internals), and each run must exit 1 and name the check
that caught it.  The runs are started
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


def declared_repository(where: Path, registry: str = "DECLARED", package: str = "doubles_pkg") -> Path:
    """A repository whose guarded package (``package``) registers this repository's implementations
    and every double (``registry`` names the attribute the declaration points at).  One process
    imports a package name from one tree only: in-process tests give each repository its own name."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "pyproject.toml").write_text(
        f'[tool.perfguard]\npackage = "{package}"\nregistry = "{package}:{registry}"\n'
    )
    (where / package).mkdir(exist_ok=True)
    (where / package / "__init__.py").write_text(
        "import verify_doubles\nfrom attention.registry import REGISTRY\n\n"
        "DECLARED = {**REGISTRY, **verify_doubles.ALL}\n"
    )
    return where


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"  # several runs share the CI machine's cores
    env.pop("PERFGUARD_SOURCE", None)
    return env


def _start(repo: Path, args: list[str], json_path: Path | None, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perfguard", "verify", *args]
    if json_path is not None:
        cmd += ["--json", str(json_path)]
    pipe = subprocess.PIPE
    return subprocess.Popen(cmd, cwd=repo, env=env, stdout=pipe, stderr=pipe, text=True)


RUNS: dict[str, list[str]] = {
    **{name: ["--device", "cpu", "--impl", name] for name in doubles.BROKEN_CASES},
    "good": ["--impl", "good_core", "--impl", "good_multihead"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    tmp = tmp_path_factory.mktemp("verify_cli")
    repo = declared_repository(tmp / "repo")
    started = {}
    for key, args in RUNS.items():
        path = tmp / f"{key}.json"
        started[key] = (_start(repo, args, path, _env()), path, args)
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
    assert "same_fn: declared pattern differs from perfguard.engine.dilation.dilated_pattern" in out
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


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return declared_repository(tmp_path_factory.mktemp("declared") / "repo")


def _invoke(args: list[str], repo: Path) -> Result:
    """In-process; ``repo`` is the repository verified (``$PERFGUARD_SOURCE``, what a check sets)."""
    return CliRunner().invoke(main, ["verify", *args], env={"PERFGUARD_SOURCE": str(repo)})


def test_unknown_implementation_is_a_usage_error_listing_known_names(declared: Path) -> None:
    result = _invoke(["--impl", "dilatd"], declared)
    assert result.exit_code == 2
    assert "unknown implementation(s): dilatd" in result.output
    assert "multihead_block_sparse_ring" in result.output and "good_core" in result.output


def test_half_precision_on_cpu_is_a_usage_error(declared: Path) -> None:
    result = _invoke(["--device", "cpu", "--dtype", "bfloat16", "--impl", "dilated"], declared)
    assert result.exit_code == 2 and "bfloat16 is not verified on cpu" in result.output


def test_a_registry_the_module_does_not_define_is_an_error(tmp_path: Path) -> None:
    repo = declared_repository(tmp_path / "repo", "NOT_THERE", package="doubles_not_there")
    result = _invoke(["--impl", "dilated"], repo)
    assert result.exit_code == 2
    assert "module 'doubles_not_there' has no attribute 'NOT_THERE'" in result.output


def test_a_repository_without_a_declaration_exits_2_saying_what_to_write(tmp_path: Path) -> None:
    """Never a pass of some other package (issue 29: it verified perfguard's own `attention`)."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "flashdil"\n')
    result = _invoke([], tmp_path)
    assert result.exit_code == 2, result.output
    assert "declares no guarded package" in result.output and "perfguard init" in result.output
    assert "passed" not in result.output


def test_a_package_imported_from_elsewhere_exits_2_naming_the_file(tmp_path: Path) -> None:
    """The tree declares ``shadowed``, but a copy elsewhere was imported first (sitecustomize)."""
    repo = declared_repository(tmp_path / "repo", package="shadowed")
    other = tmp_path / "elsewhere"
    declared_repository(other, package="shadowed")
    (other / "sitecustomize.py").write_text("import shadowed\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join((str(other), env["PYTHONPATH"]))
    proc = subprocess.run(
        [sys.executable, "-m", "perfguard", "verify", "--impl", "good_core"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"`import shadowed` gave {other / 'shadowed' / '__init__.py'}" in proc.stderr
    assert str(repo / "shadowed" / "__init__.py") in proc.stderr


def test_non_positive_seq_len_is_a_usage_error(declared: Path) -> None:
    result = _invoke(["--impl", "good_core", "--seq-len", "0"], declared)
    assert result.exit_code == 2 and "--seq-len must be a positive integer" in result.output


def test_unknown_dtype_is_rejected_by_click(declared: Path) -> None:
    assert _invoke(["--dtype", "float64"], declared).exit_code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_without_a_gpu_is_a_usage_error(declared: Path) -> None:
    result = _invoke(["--device", "cuda"], declared)
    assert result.exit_code == 2 and "torch.cuda.is_available() is False" in result.output


@pytest.mark.skipif(
    importlib.util.find_spec("attention.factory") is None,
    reason="the implementations (attention/factory.py and the classes) have not been merged yet",
)
def test_the_real_registry_passes(repo_root: Path, tmp_path: Path) -> None:
    """The acceptance run: every registered implementation, default CPU matrix, exit 0."""
    path = tmp_path / "verify.json"
    proc = _start(repo_root, [], path, _env())
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    data = json.loads(path.read_text())
    from attention.registry import REGISTRY

    assert [r["impl"] for r in data["results"]] == list(REGISTRY)
    assert all(r["passed"] for r in data["results"])
