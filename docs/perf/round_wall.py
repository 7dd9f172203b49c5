"""Wall time of ``perfguard run --rounds 1`` for two perfguard versions, interleaved A B B A.

Each version runs from its own git worktree (``PYTHONPATH`` points at it, so the CLI, the suite and
``attention/`` are that version's), on the same profile, with a fresh SQLite store per run.

    python docs/perf/round_wall.py --before cee1821 --after HEAD --profile quick --pairs 2

Prints the walls and their medians; commit the printed block into the doc that quotes it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worktree(rev: str, parent: Path) -> Path:
    path = parent / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(path), rev], check=True)
    return path


def one_run(tree: Path, profile: str, scratch: Path) -> float:
    db = scratch / f"h-{time.monotonic_ns()}.db"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "perfguard", "run", "--profile", profile, "--rounds", "1", "--db", f"sqlite:///{db}"],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="round-wall-") as tmp:
        scratch = Path(tmp)
        trees = {"before": worktree(args.before, scratch), "after": worktree(args.after, scratch)}
        walls: dict[str, list[float]] = {"before": [], "after": []}
        load = []
        try:
            for i in range(args.pairs):
                for name in ("before", "after") if i % 2 == 0 else ("after", "before"):
                    load.append(os.getloadavg()[0])
                    walls[name].append(one_run(trees[name], args.profile, scratch))
                    print(f"{name}: {walls[name][-1]:.1f} s", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
                )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n- {stamp}, {os.cpu_count()} cores ({platform.processor() or platform.machine()}), 1-min load "
          f"{min(load):.1f}-{max(load):.1f}; `python docs/perf/round_wall.py --before {args.before} "
          f"--after {args.after} --profile {args.profile} --pairs {args.pairs}`")  # fmt: skip
    for name in ("before", "after"):
        print(f"- {name} ({getattr(args, name)}): {', '.join(f'{w:.1f}' for w in walls[name])} s, "
              f"median {statistics.median(walls[name]):.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
