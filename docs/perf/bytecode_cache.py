"""Files and bytes that `perfguard run` / `perfguard check` leave in the compile cache (warm caches).

Run from a checkout: ``PYTHONPATH=$PWD python docs/perf/bytecode_cache.py``.  A throwaway project
(``tests/helpers/project.py``) with its own ``PERFGUARD_CACHE_DIR``; a run and a check first warm
both trust domains (torch's bytecode), then the measured invocations; after each, the files and
bytes added under the cache, and the files under the mirror of the ``perfguard-*`` scratch
directories (docs/perf/test_suite_time.md, "branch `pycache`").
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, project_repo


def census(root: Path) -> tuple[int, int, int]:
    """Files and bytes under ``root``, and files under the mirror of the scratch directories."""
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    tmp = tempfile.gettempdir().lstrip(os.sep)
    scratch = [
        p
        for domain in ("trusted", "untrusted")
        for p in (root / domain / "pycache" / tmp).glob("perfguard-*/**/*")
        if p.is_file()
    ]
    return len(files), sum(p.stat().st_size for p in files), len(scratch)


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="bytecode-cache-"))
    repo = project_repo(base / "repo")
    git(repo, "checkout", "-q", "-b", "pr")
    append_commit(repo, "attention/dilated.py", "\n# a pull request\n", "pr")
    caches = base / "caches"

    def step(name: str, branch: str, *args: str) -> None:
        git(repo, "checkout", "-q", branch)
        before = census(caches)
        started = time.time()
        env = {"PERFGUARD_CACHE_DIR": str(caches)}
        result = perfguard(repo, *args, db=f"sqlite:///{base / 'history.db'}", env=env)
        assert result.returncode in (0, 1), result.stdout + result.stderr
        after = census(caches)
        print(
            f"| {name} | {time.time() - started:.0f} s | +{after[0] - before[0]} "
            f"| +{(after[1] - before[1]) / 1e6:.2f} MB | {after[2]} | {after[0]} |"
        )

    def check(i: int) -> tuple[str, ...]:  # no history store: both sides measured, with verification
        results, none = f"sqlite:///{base / f'r{i}.db'}", f"sqlite:///{base / 'none.db'}"
        return ("check", "--baseline", "main", "--bench", WORK_BENCH, "--rounds", "2", "--untrusted",
                "--results-db", results, "--db", none)  # fmt: skip

    print("| invocation | wall | files added | bytes added | files under perfguard-* mirrors | in cache |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    run = ("run", "--bench", WORK_BENCH, "--rounds", "2")
    step("warm-up: run (trusted, 2 rounds)", "main", *run)
    step("warm-up: check --untrusted (2+2 rounds, verify)", "pr", *check(0))
    step("run (trusted, 2 rounds)", "main", *run)
    for i in (1, 2, 3):
        step(f"check --untrusted #{i} (2+2 rounds, verify)", "pr", *check(i))


if __name__ == "__main__":
    main()
