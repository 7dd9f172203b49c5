"""A/A repeatability of ``perfguard check``: a commit checked against itself, many times.

Builds a temporary git repository from this project's tracked files (the registry as it is, or
trimmed with ``--impls``), records the commit once with ``perfguard run``, then runs
``perfguard check --baseline main --fresh`` on that same commit ``--checks`` times: every check
measures HEAD again in fresh processes (3 rounds) and compares it with everything stored for the
commit, with the full rule (stage 1, interleaved re-measurement of suspects).  Nothing changed, so
every ``regression`` is a false alarm.  Prints one line per check and a summary; ``--json`` keeps
the details.

    python docs/perf/aa_bench.py --checks 20 --json docs/perf/logs/aa-cpu.json

The CPU ``quick`` profile by default (forward and forward+backward of every implementation at 512
and 1024 tokens).  Run it on a quiet machine: it measures the machine as much as the rule.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "aa", "GIT_AUTHOR_EMAIL": "aa@example.invalid",
           "GIT_COMMITTER_NAME": "aa", "GIT_COMMITTER_EMAIL": "aa@example.invalid"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def make_repo(top: Path, impls: list[str] | None) -> Path:
    repo = top / "project"
    for name in git(ROOT, "ls-files", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    if impls:
        with (repo / "attention" / "registry.py").open("a") as fh:
            fh.write(
                "\nimport types as _t\n"
                f"REGISTRY = _t.MappingProxyType({{k: REGISTRY[k] for k in {impls!r}}})\n"
            )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "A/A")
    return repo


def perfguard(repo: Path, db: str, *args: str) -> tuple[int, str, str, float]:
    env = {**os.environ, "PERFGUARD_DB": db}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfguard", *args], cwd=repo, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--bench", default=None, help="asv --bench regex (default: the whole profile)")
    parser.add_argument("--impls", default=None, help="comma-separated registry names to keep (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    top = Path(tempfile.mkdtemp(prefix="perfguard-aa-"))
    repo = make_repo(top, args.impls.split(",") if args.impls else None)
    db = f"sqlite:///{top / 'history.db'}"
    select = ["--bench", args.bench] if args.bench else []
    code, _, err, seconds = perfguard(repo, db, "run", "--profile", args.profile, *select)
    if code != 0:
        sys.exit(f"perfguard run failed ({code}):\n{err}")
    print(f"recorded the commit in {seconds:.0f} s", flush=True)

    checks = []
    for n in range(1, args.checks + 1):
        out = top / f"check-{n}.json"
        code, _, err, seconds = perfguard(
            repo, db, "check", "--baseline", "main", "--fresh", "--no-verify", "--profile", args.profile,
            *select, "--json", str(out),
        )  # fmt: skip
        if code not in (0, 1):
            sys.exit(f"check {n} failed with exit {code}:\n{err}")
        document = json.loads(out.read_text())
        gated = [i for i in document["items"] if i["gated"]]
        flagged = [
            f"{i['impl']} {i['benchmark']} {i['params']}"
            for i in gated
            if i["verdict"] in ("regression", "failed")
        ]
        record = {
            "check": n,
            "exit_code": code,
            "seconds": round(seconds, 1),
            "gated_comparisons": len(gated),
            "counts": document["counts"],
            "retried": sum(1 for i in document["items"] if i.get("retried")),
            "flagged": flagged,
        }
        checks.append(record)
        print(f"check {n:2d}: exit {code}, {len(gated)} gated comparisons, {record['retried']} re-measured, "
              f"counts {document['counts']}, {seconds:.0f} s", flush=True)  # fmt: skip

    flagged_checks = sum(1 for c in checks if c["exit_code"] != 0 or c["flagged"])
    comparisons = sum(c["gated_comparisons"] for c in checks)
    summary = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg(),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "profile": args.profile,
        "checks": len(checks),
        "checks_flagging_anything": flagged_checks,
        "gated_comparisons": comparisons,
        "false_alarms": sum(len(c["flagged"]) for c in checks),
        "re_measured_items": sum(c["retried"] for c in checks),
        "details": checks,
    }
    print(
        f"\n{len(checks)} A/A checks, {comparisons} gated comparisons: {flagged_checks} checks flagged "
        f"anything, {summary['false_alarms']} false alarms, {summary['re_measured_items']} items re-measured"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
