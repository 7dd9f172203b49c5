"""perfguard guarding a package we did not write, as docs/guarding-your-package.md says (issue 29).

One module-scoped fixture does the expensive part once: perfguard built as a wheel from this
checkout's tracked files and installed (not editable) into a fresh virtual environment (torch and
the rest from the system's site-packages); the source of ``dilated-attention-pytorch`` 0.2.0 from
PyPI (fkodom's; the wheel is its source, downloaded once and kept in pytest's cache) in a fresh git
repository; ``perfguard init`` there; the registry taken from the guide's code block.  The package
imports ``xformers.ops``, which has no CPU wheel: the environment gets a stand-in whose
``memory_efficient_attention`` is SDPA (and only that); ``einops`` comes from PyPI too.

Every verdict asserted here is of a deterministic quantity: the work counts (FLOPs, aten ops) of
one forward, on the CPU ``quick`` profile.  No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guarding-your-package.md"
PACKAGE = "dilated_attention_pytorch"
DOWNLOADS = ("dilated-attention-pytorch==0.2.0", "einops==0.8.1")
#: the deterministic benchmarks the checks compare (both implementations, both lengths of quick)
WORK = r"Work\.track_forward_(flops|ops)\("

XFORMERS_STAND_IN = '''"""Stand-in for xformers.ops (no CPU wheel): memory_efficient_attention is SDPA."""
import torch.nn.functional as F

AttentionOp = object


class LowerTriangularMask:
    pass


def memory_efficient_attention(query, key, value, op=None, attn_bias=None):
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # xformers: (batch, seq, heads, dim)
    causal = isinstance(attn_bias, LowerTriangularMask)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
'''

#: a 2x slowdown planted in MultiheadDilatedAttention only: its forward runs twice
PLANT = """

_planted_forward = MultiheadDilatedAttention.forward


def _planted_twice(self, *args, **kwargs):
    _planted_forward(self, *args, **kwargs)
    return _planted_forward(self, *args, **kwargs)


MultiheadDilatedAttention.forward = _planted_twice
"""


def guide_registry() -> str:
    """The registry block of docs/guarding-your-package.md (the one after its marker comment)."""
    text = GUIDE.read_text(encoding="utf-8")
    after = text.split("<!-- registry example", 1)[1]
    match = re.search(r"```python\n(.*?)```", after, flags=re.DOTALL)
    assert match, "the guide has no registry example"
    return match.group(1)


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    proc = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@dataclass
class Guarded:
    repo: Path
    python: Path
    env: dict[str, str]
    init_output: str

    def perfguard(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([str(self.python), "-m", "perfguard", *args], self.repo, self.env)


def _downloads(cache: Path) -> dict[str, Path]:
    """The wheels of DOWNLOADS, downloaded once (pytest's cache keeps them between sessions)."""
    wheels = {w.name.split("-")[0].lower(): w for w in cache.glob("*.whl")}
    if not {"dilated_attention_pytorch", "einops"} <= set(wheels):
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(cache),
             *DOWNLOADS],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"PyPI must be reachable for this test: {proc.stderr[-2000:]}"
        wheels = {w.name.split("-")[0].lower(): w for w in cache.glob("*.whl")}
    return wheels


def _perfguard_wheel(tmp: Path) -> Path:
    """perfguard built from this checkout's tracked files (a copy: the build writes beside them)."""
    source = tmp / "perfguard-src"
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, out.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)  # a link (asv_benchmarks/) is copied as its file
    # the build backend of this environment when it has one (fast, offline), else pip's isolated build
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(tmp / "dist"), str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("perfguard-*.whl")
    return wheel


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Guarded:
    tmp = tmp_path_factory.mktemp("external")
    # pytest's cache keeps the downloads between sessions; `-p no:cacheprovider` has none: this session's
    cache = getattr(request.config, "cache", None)
    wheels = _downloads(Path(cache.mkdir("pypi-wheels")) if cache else tmp_path_factory.mktemp("pypi-wheels"))

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check"]
    proc = run([*install, str(_perfguard_wheel(tmp)), str(wheels["einops"])], tmp, dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       tmp, dict(os.environ)).stdout.strip())  # fmt: skip
    (purelib / "xformers").mkdir()
    (purelib / "xformers" / "__init__.py").write_text("")
    (purelib / "xformers" / "ops.py").write_text(XFORMERS_STAND_IN)

    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGUARD_") and k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PERFGUARD_DB=f"sqlite:///{tmp / 'history.db'}")
    where = run([str(python), "-c", "import perfguard; print(perfguard.__file__)"], tmp, env)
    assert where.stdout.startswith(str(venv)), where  # the wheel, not an editable checkout

    repo = tmp / "repo"
    repo.mkdir()
    with zipfile.ZipFile(wheels["dilated_attention_pytorch"]) as whl:
        for name in whl.namelist():
            if name.startswith(f"{PACKAGE}/"):
                whl.extract(name, repo)
    (repo / "pyproject.toml").write_text('[project]\nname = "dilated-attention-pytorch"\nversion = "0.2.0"\n')
    git(repo, "init", "-q", "-b", "main")
    init = run([str(python), "-m", "perfguard", "init", "--package", PACKAGE], repo, env)
    assert init.returncode == 0, init.stdout + init.stderr
    (repo / PACKAGE / "perfguard_registry.py").write_text(guide_registry())  # the guide's step 3
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "dilated-attention-pytorch 0.2.0, guarded by perfguard")

    git(repo, "checkout", "-q", "-b", "slow", "main")
    with (repo / PACKAGE / "dilated_attention.py").open("a") as fh:
        fh.write(PLANT)
    git(repo, "commit", "-qam", "MultiheadDilatedAttention does its work twice")
    git(repo, "checkout", "-q", "-b", "comment", "main")
    with (repo / PACKAGE / "dilated_attention.py").open("a") as fh:
        fh.write("\n# A comment changed; the code did not.\n")
    git(repo, "commit", "-qam", "a comment")
    git(repo, "checkout", "-q", "main")
    return Guarded(repo, python, env, init.stdout)


def init_wrote_what_the_guide_lists_and_never_overwrites(guarded: Guarded) -> None:
    for path in ("asv.conf.json", "asv_benchmarks/bench_attention.py", f"{PACKAGE}/perfguard_registry.py",
                 ".github/workflows/perfguard-main.yml", ".github/workflows/perfguard-pr.yml"):  # fmt: skip
        assert f"wrote   {path}" in guarded.init_output, guarded.init_output
    assert f'package = "{PACKAGE}"' in (guarded.repo / "pyproject.toml").read_text()
    again = guarded.perfguard("init", "--package", PACKAGE)
    assert again.returncode == 0 and "wrote" not in again.stdout, again.stdout
    assert f"skipped {PACKAGE}/perfguard_registry.py (exists)" in again.stdout
    assert "skipped pyproject.toml (already declares package" in again.stdout
    assert git(guarded.repo, "status", "--porcelain") == ""  # nothing was touched


def verify_checks_both_and_says_where_they_differ_from_the_reference(
    guarded: Guarded, tmp_path: Path
) -> None:
    report = tmp_path / "verify.json"
    ran = guarded.perfguard("verify", "--device", "cpu", "--json", str(report))
    assert ran.returncode == 1, ran.stdout + ran.stderr  # they do not compute head_groups exactly
    rows = {r["impl"]: r for r in json.loads(report.read_text())["results"]}
    assert set(rows) == {"dilated", "multihead_dilated"}
    for row in rows.values():
        checks = row["checks"]
        assert all(checks[c]["status"] == "pass" for c in ("build", "forward", "shape", "return")), row
        assert all(c["detail"].startswith("declared head_groups") for c in checks["pattern"]["cases"])
        assert checks["reference"]["status"] == "fail" and row["worst_rel_err"] > 1e-2, row
    assert "dilated [cpu float32] reference: rel err" in ran.stdout


def a_planted_slowdown_fails_naming_only_that_one_and_a_comment_passes(
    guarded: Guarded, tmp_path: Path
) -> None:
    repo = guarded.repo
    recorded = guarded.perfguard("run", "--profile", "quick", "--bench", WORK, "--rounds", "1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr

    git(repo, "checkout", "-q", "slow")
    out = tmp_path / "slow.json"
    slow = guarded.perfguard("check", "--baseline", "main", "--profile", "quick", "--bench", WORK,
                             "--rounds", "1", "--no-verify", "--json", str(out))  # fmt: skip
    assert slow.returncode == 1, slow.stdout + slow.stderr
    items = json.loads(out.read_text())["items"]
    regressed = {i["impl"] for i in items if i["verdict"] == "regression" and i["gated"]}
    assert regressed == {"multihead_dilated"}, items
    twice = [i for i in items if i["impl"] == "multihead_dilated"]
    assert len(twice) == 4 and all(i["ratio"] == pytest.approx(2.0, rel=1e-9) for i in twice), twice
    assert all(i["verdict"] == "unchanged" for i in items if i["impl"] == "dilated")
    assert "multihead_dilated" in slow.stdout

    git(repo, "checkout", "-q", "comment")
    out = tmp_path / "comment.json"
    same = guarded.perfguard("check", "--baseline", "main", "--profile", "quick", "--bench", WORK,
                             "--rounds", "1", "--no-verify", "--json", str(out))  # fmt: skip
    assert same.returncode == 0, same.stdout + same.stderr
    items = json.loads(out.read_text())["items"]
    assert len(items) == 8 and all(i["verdict"] == "unchanged" for i in items), items
    git(repo, "checkout", "-q", "main")

    site = tmp_path / "site"
    rendered = guarded.perfguard("report", "--out", str(site))
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    index = (site / "index.html").read_text()
    assert "multihead_dilated" in index and "dilated" in index


def the_suite_init_wrote_runs_under_plain_asv(guarded: Guarded) -> None:
    """``python -m asv run`` on the repository as ``perfguard init`` left it: no perfguard driving it."""
    env = {**guarded.env, "PERFGUARD_DEVICE": "cpu"}
    asv = [str(guarded.python), "-m", "asv"]
    machine = run([*asv, "machine", "--yes", "--machine", "plain"], guarded.repo, env)
    assert machine.returncode == 0, machine.stdout + machine.stderr
    proc = run([*asv, "run", "-E", "existing:same", "--set-commit-hash", "HEAD", "--machine", "plain",
                "-b", r"Work\.track_forward_ops", "--show-stderr"], guarded.repo, env)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "failed" not in out.lower(), out
    results = list((guarded.repo / ".asv" / "results" / "plain").glob("*-existing*.json"))
    assert results, out
    data = json.loads(results[0].read_text())
    ops = data["results"]["bench_attention.Work.track_forward_ops"]
    # two implementations x two lengths (quick): every one measured, none skipped or failed
    assert ops[1] == [["'dilated'", "'multihead_dilated'"], ["512", "1024"], ["'float32'"]], ops
    assert all(isinstance(v, float) and v > 0 for v in ops[0]), ops


def test_dilated_attention_pytorch_guarded_as_the_guide_says(guarded: Guarded, tmp_path: Path) -> None:
    """The guide's steps in its order, in one test: the fixture is built once even under xdist
    (which may hand each test of a module to another worker), and plain asv, which writes .asv/
    into the work tree, runs last."""
    init_wrote_what_the_guide_lists_and_never_overwrites(guarded)
    verify_checks_both_and_says_where_they_differ_from_the_reference(guarded, tmp_path)
    a_planted_slowdown_fails_naming_only_that_one_and_a_comment_passes(guarded, tmp_path)
    the_suite_init_wrote_runs_under_plain_asv(guarded)
