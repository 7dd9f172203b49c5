"""Start one worker process per rank of a gloo group and wait for all of them (the CPU's stand-in
for one process per GPU).

Every worker script takes ``RANK WORLD STORE_FILE OUT_DIR`` and writes its results into ``OUT_DIR``;
a worker that does not finish in time is killed with the others, so a deadlocked ring fails the
test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_ranks(worker: Path | str, world: int, out_dir: Path, *, timeout: float, what: str) -> None:
    """Run ``worker`` as ranks 0..world-1 (one thread each) with ``out_dir/store`` as the group's
    rendezvous; fail the test with the rank's output when a rank fails or the group hangs."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(rank), str(world), str(out_dir / "store"), str(out_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        for rank in range(world)
    ]
    logs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            pytest.fail(f"{what}: {world} ranks did not finish in {timeout:.0f} s (deadlock in the ring?)")
        logs.append(out.decode(errors="replace"))
    for rank, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"{what}: rank {rank} of {world} failed:\n{log[-3000:]}"
