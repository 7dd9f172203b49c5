"""The project as a throwaway git repository, for end-to-end tests that measure real commits.

Built from the tracked files of this checkout with the registry trimmed to two implementations
(``dilated`` and ``improved``), so a round on the CPU takes seconds.  Planted changes append code to
``attention/registry.py``; :data:`DOUBLE` makes ``dilated``'s forward run twice, which doubles its
work metrics exactly (FLOPs, aten ops, bytes allocated: ratio 2.000 whatever the machine does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The work metrics of both implementations' forward at 512 tokens: exact, so verdicts are too.
WORK_BENCH = r"Work\.track_forward_(flops|ops|allocated)\('(dilated|improved)', 512,"

TRIM = """

# --- test fixture (tests/helpers/project.py): a project with two implementations ---
import types as _fixture_types

REGISTRY = _fixture_types.MappingProxyType({k: REGISTRY[k] for k in ("dilated", "improved")})
"""


def planted(times: int, tag: str = "", impls: tuple[str, ...] = ("dilated",)) -> str:
    """Registry code that makes the forward of ``impls`` run ``times`` times (their work x ``times``)."""
    name = f"_planted_{times}{tag}"
    who = ", ".join(impls)
    return f"""

# --- tests/helpers/project.py: {who} does {times} times the work{f" ({tag})" if tag else ""} ---
{name}_build = ImplSpec.build


def {name}(self, *args, **kwargs):
    module = {name}_build(self, *args, **kwargs)
    if self.name in {tuple(impls)!r}:
        forward = module.forward

        def repeated(*a, **k):
            for _ in range({times - 1}):
                forward(*a, **k)
            return forward(*a, **k)

        module.forward = repeated
    return module


ImplSpec.build = {name}
"""


DOUBLE = planted(2)


def git(cwd: Path, *args: str, author: str = "Pat Author <pat@example.invalid>") -> str:
    name, email = author.split(" <")
    email = email.rstrip(">")
    env = {**os.environ, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name,
           "GIT_COMMITTER_EMAIL": email}  # fmt: skip
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (ROOT / f).is_file()]


def project_repo(path: Path, *, trim: bool = True) -> Path:
    """The project at ``path`` as a git repository with one commit on ``main``: trimmed to
    ``dilated`` and ``improved`` (:data:`TRIM`), or with every implementation (``trim=False``)."""
    for name in tracked_files():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, path / name)
    if trim:
        with (path / "attention" / "registry.py").open("a") as fh:
            fh.write(TRIM)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Pat Author")
    git(path, "config", "user.email", "pat@example.invalid")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def add_branches(repo: Path, branches: Mapping[str, Sequence[tuple[str, str]]]) -> None:
    """One branch off ``main`` per entry, each appending its texts to its files (a commit each)."""
    for branch, changes in branches.items():
        git(repo, "checkout", "-q", "-b", branch, "main")
        for path, addition in changes:
            append_commit(repo, path, addition, branch)
    git(repo, "checkout", "-q", "main")


def append_commit(repo: Path, path: str, text: str, message: str) -> str:
    """Append ``text`` to ``path`` and commit it; returns the new sha."""
    with (repo / path).open("a") as fh:
        fh.write(text)
    git(repo, "commit", "-q", "-a", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def perfguard(repo: Path, *args: str, db: str, env: dict[str, str] | None = None,
              timeout: float = 900) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The real CLI in a fresh process, with this checkout's perfguard first on the path."""
    environment = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1", **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=repo,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def check_branch(
    repo: Path, main_db: str, tmp_path: Path, branch: str, bench: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    """``perfguard check --baseline main --bench BENCH --rounds 1 --no-verify`` of ``branch`` on a
    copy of the store ``main_db`` (each test its own copy): exit code, JSON report, output."""
    db = tmp_path / "history.db"
    db.write_bytes(Path(main_db).read_bytes())
    git(repo, "checkout", "-q", branch)
    try:
        out = tmp_path / "check.json"
        args = ("--bench", bench, "--rounds", "1", "--no-verify", "--json", str(out), *extra)
        result = perfguard(repo, "check", "--baseline", "main", *args, db=f"sqlite:///{db}")
    finally:
        git(repo, "checkout", "-q", "main")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(out.read_text()), result.stdout + result.stderr
