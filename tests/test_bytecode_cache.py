"""The bytecode rounds compile stays bounded, is reused by every round of a side, and is never stale.

Rounds keep Python's bytecode in their trust domain's cache (``PYTHONPYCACHEPREFIX``,
:mod:`perfguard.engine.compile_cache`), where it mirrors the source's path.  Each round used to
import the suite through an import shim of its own, so every round compiled it again and left its
files for good (34,282 files, 667 MB on the CI machine: docs/perf/test_suite_time.md).  Now:

- every round of a side imports the same files, compiled once (same ``.pyc``, same inode and
  mtime in the second round), as checked-hash bytecode;
- nothing is left under the mirror of an invocation's scratch directory once it ends, and the
  bytecode of any directory that is gone (a killed invocation's scratch directory, a removed clone)
  is removed by the next;
- a trusted run writes only the trusted cache, an untrusted check only the untrusted one, and the
  two sides of a check never share a ``.pyc``;
- a same-size edit that keeps the file's mtime (a timestamp ``.pyc`` would pass for it) is measured
  as edited.

Real CLI, real git repositories, real round processes; a spy appended to the registry records, in
each round process, the ``.pyc`` of every module of the package and the suite it imported.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.project import WORK_BENCH, git, perfguard, project_repo

SPY_ENV = "PERFGUARD_TEST_BYTECODE_SPY"
SPY = f"""

# --- tests/test_bytecode_cache.py: the bytecode this round process imported ---
import json as _spy_json
import os as _spy_os
import sys as _spy_sys

_SPY_TAG = "aaaa"
if _spy_os.environ.get("{SPY_ENV}") and _spy_sys.argv[0].endswith("round_worker.py"):
    _spy_seen = {{}}
    for _spy_name, _spy_module in list(_spy_sys.modules.items()):
        _spy_cached = getattr(_spy_module, "__cached__", None)
        if _spy_name.split(".")[0] in ("attention", "asv_benchmarks") and _spy_cached:
            _spy_stat = _spy_os.stat(_spy_cached)
            with open(_spy_cached, "rb") as _spy_fh:
                _spy_flags = int.from_bytes(_spy_fh.read(8)[4:], "little")
            _spy_seen[_spy_name] = [_spy_cached, _spy_stat.st_ino, _spy_stat.st_mtime_ns, _spy_flags]
    with open(_spy_os.environ["{SPY_ENV}"], "a") as _spy_file:
        _spy_file.write(_spy_json.dumps({{
            "prefix": _spy_sys.pycache_prefix,
            "source": _spy_os.environ.get("PERFGUARD_SOURCE"),
            "tag": _SPY_TAG,
            "modules": _spy_seen,
        }}) + "\\n")
"""
CHECKED_HASH = 0b11  # PEP 552 flags: hash-based, checked against the source at every import


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = project_repo(tmp_path / "repo")
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(SPY)
    git(repo, "commit", "-qam", "spy on the rounds' bytecode")
    return repo


def spied(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.unlink()
    return lines


def scratch_mirrors(caches: Path) -> list[Path]:
    """What either domain keeps of ``perfguard-*`` scratch directories (the rounds' shims, worktrees)."""
    tmp = tempfile.gettempdir().lstrip(os.sep)
    return sorted(
        p for d in ("trusted", "untrusted") for p in (caches / d / "pycache" / tmp).glob("perfguard-*")
    )


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.rglob("*.pyc")}


def test_rounds_reuse_one_checked_bytecode_per_side_and_leave_none_behind(repo: Path, tmp_path: Path) -> None:
    caches = tmp_path / "caches"
    spy = tmp_path / "spy.jsonl"
    env = {"PERFGUARD_CACHE_DIR": str(caches), SPY_ENV: str(spy)}
    # left by a killed invocation (its scratch directory is gone) and by a removed clone; one in use
    tmp = tempfile.gettempdir().lstrip(os.sep)
    killed = caches / "untrusted" / "pycache" / tmp / "perfguard-killed0" / "import-shim-x" / "asv_benchmarks"
    removed = caches / "trusted" / "pycache" / str(tmp_path / "removed-clone").lstrip(os.sep) / "attention"
    kept = caches / "untrusted" / "pycache" / str(repo).lstrip(os.sep) / "not-a-module.cpython-311.pyc"
    for left in (killed, removed):
        left.mkdir(parents=True)
        (left / "x.cpython-311.pyc").write_bytes(b"left behind")
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"its directory exists")
    # a trusted run on main: two rounds of one side
    history = f"sqlite:///{tmp_path / 'h.db'}"
    result = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "2", db=history, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = spied(spy)
    assert first["prefix"] == second["prefix"] == str(caches / "trusted" / "pycache")
    assert {m.split(".")[0] for m in first["modules"]} == {"attention", "asv_benchmarks"}
    assert second["modules"] == first["modules"]  # the same files, not written again
    assert {flags for *_, flags in first["modules"].values()} == {CHECKED_HASH}
    assert scratch_mirrors(caches) == []
    assert not removed.exists() and not removed.parent.exists()
    assert kept.read_bytes() == b"its directory exists"
    trusted = listing(caches / "trusted")
    assert trusted

    # an untrusted check of a branch, both sides measured here (no history store yet)
    git(repo, "checkout", "-q", "-b", "pr")
    with (repo / "attention" / "dilated.py").open("a") as fh:
        fh.write("\n# a pull request\n")
    git(repo, "commit", "-qam", "pr")
    result = perfguard(repo, "check", "--baseline", "main", "--bench", WORK_BENCH, "--rounds", "2",
                       "--untrusted", "--results-db", f"sqlite:///{tmp_path / 'r.db'}", "--no-verify",
                       db=f"sqlite:///{tmp_path / 'none.db'}", env=env)  # fmt: skip
    assert result.returncode in (0, 1), result.stdout + result.stderr
    rounds = spied(spy)
    sides: dict[str, list[dict[str, Any]]] = {}
    for line in rounds:
        sides.setdefault(line["source"], []).append(line)
    assert len(rounds) == 4 and len(sides) == 2 and str(repo) in sides
    for lines in sides.values():
        assert [x["prefix"] for x in lines] == [str(caches / "untrusted" / "pycache")] * 2
        assert lines[1]["modules"] == lines[0]["modules"]
        assert {flags for *_, flags in lines[0]["modules"].values()} == {CHECKED_HASH}
    head = {cached for cached, *_ in sides.pop(str(repo))[0]["modules"].values()}
    (baseline,) = sides.values()
    base = {cached for cached, *_ in baseline[0]["modules"].values()}
    assert base and head and not base & head  # each side its own bytecode
    assert listing(caches / "trusted") == trusted  # the untrusted check wrote nothing there
    assert scratch_mirrors(caches) == []


def test_a_same_size_edit_that_keeps_the_mtime_is_measured_as_edited(repo: Path, tmp_path: Path) -> None:
    """The work tree's path is the same in every run, so its bytecode is reused across runs; a
    timestamp ``.pyc`` (mtime in seconds, size) would pass for the edited file."""
    env = {"PERFGUARD_CACHE_DIR": str(tmp_path / "caches"), SPY_ENV: str(tmp_path / "spy.jsonl")}
    db = f"sqlite:///{tmp_path / 'h.db'}"
    result = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [x["tag"] for x in spied(tmp_path / "spy.jsonl")] == ["aaaa"]
    registry = repo / "attention" / "registry.py"
    before = registry.stat()
    registry.write_text(registry.read_text().replace('_SPY_TAG = "aaaa"', '_SPY_TAG = "bbbb"'))
    os.utime(registry, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert registry.stat().st_size == before.st_size and registry.stat().st_mtime_ns == before.st_mtime_ns
    git(repo, "commit", "-qam", "the same size, the same mtime")
    result = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [x["tag"] for x in spied(tmp_path / "spy.jsonl")] == ["bbbb"]
