"""Step 2 of the PR check: HEAD verified against the float64 reference before it is measured.

``perfguard verify`` runs in a fresh process over HEAD's code (only the implementations and dtypes
the check will measure, on the device it measures on, holding its device lock), or the report
``--verify-report`` names is read; an implementation that fails is ``broken`` in the check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.errors import PerfguardError, UsageError

if TYPE_CHECKING:
    from perfguard.measuring import Bench


def broken_impls(bench: Bench, report: Path | None, *, skip: bool) -> dict[str, list[str]]:
    """Implementations that fail ``perfguard verify`` in HEAD, with their failures."""
    if skip:
        bench.say("HEAD is not verified (--no-verify)")
        return {}
    if report is None:
        report = run_verify(bench)
    elif not report.is_file():
        raise UsageError(
            f"--verify-report {report} does not exist",
            hint="run `perfguard verify --json PATH` first, or leave the option out to verify now",
        )
    try:
        document = json.loads(report.read_text(encoding="utf-8"))
        rows = document["results"]
        broken: dict[str, list[str]] = {}
        for row in rows:
            if not row.get("passed") and not row.get("skipped"):
                broken.setdefault(str(row["impl"]), []).extend(str(f) for f in row.get("failures") or [])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{report} is not a perfguard verify report ({exc})",
            hint="pass the file `perfguard verify --json PATH` wrote",
        ) from None
    if broken:
        bench.say(f"HEAD fails perfguard verify for: {', '.join(sorted(broken))} (these are 'broken')")
    else:
        bench.say(f"HEAD passes perfguard verify ({len(rows)} rows)")
    return broken


def run_verify(bench: Bench) -> Path:
    """``perfguard verify --json`` of what this check measures, in a fresh process over HEAD's code."""
    from perfguard.declaration import SOURCE_ENV
    from perfguard.engine.compile_cache import compile_cache_env
    from perfguard.engine.rounds import import_shim

    out = bench.work_dir / "verify.json"
    shim = import_shim(bench.root, bench.work_dir)
    env = {
        **os.environ,
        **compile_cache_env(bench.runner.trust),
        "PYTHONPATH": os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p),
        SOURCE_ENV: str(bench.root),  # HEAD's declaration, HEAD's package
    }
    command = [sys.executable, "-X", "faulthandler", "-m", "perfguard", "verify", "--device", bench.device]
    command += ["--json", str(out)]
    command += ["--profile", bench.profile.name]
    for regex in bench.bench:
        command += ["--bench", regex]
    scope = f" (what --bench {bench.bench[0]!r} measures)" if bench.bench else ""
    bench.say(f"verifying HEAD ({bench.device}, {', '.join(bench.profile.dtypes(bench.device))}){scope} ...")
    # the device lock goes with it: verification computes on the device the check measures on
    lock = bench.runner.pass_fds
    proc = subprocess.run(command, cwd=shim, env=env, capture_output=True, text=True, check=False,
                          pass_fds=lock)  # fmt: skip
    if proc.returncode not in (0, 1) or not out.exists():
        lines = [x for x in (proc.stdout + proc.stderr).strip().splitlines() if not x.startswith("Extension")]
        tail = "\n  ".join(lines[-25:])
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise PerfguardError(
            f"perfguard verify could not run on HEAD ({how}):\n  {tail}",
            hint="run `perfguard verify` to see the problem, or pass --no-verify",
        )
    return out
