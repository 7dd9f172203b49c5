# ruff: noqa: E501  (Markdown table rows and command lines are kept one per line)
"""Issue 12's CPU acceptance: work metrics decide, whatever the machine is doing.

On this machine with every core kept busy by other processes for the whole check, repeat:

- **planted**: a commit on top of HEAD whose ``DilatedAttention.forward`` runs the forward twice
  (a second, wasted call): ``perfguard check --baseline main --profile quick`` must exit 1 and
  fail exactly ``dilated`` and ``multihead_dilated`` (the multihead module is built on it), with
  their work metrics among the failing items;
- **comment**: a commit that only adds a comment: the check must exit 0 with every work metric
  at ratio exactly 1.000.

By default each repetition is a fresh ``git clone --shared`` of HEAD (``main`` = HEAD, ``feature``
= the variant) with its own empty SQLite store, so both sides are measured every time.  With
``--stored-baseline`` (what a PR check on a runner does) one clone and one store serve every
repetition: ``main`` is measured once, by the first check, under the same load, and each
repetition is a new commit on top of ``main`` (the variant plus a comment naming the repetition), so
HEAD is measured afresh every time.  The variants are interleaved.  The busy processes are plain
``while True: pass`` loops, one per core by default, started before and stopped after each check.

    python docs/perf/work_metrics_busy.py --repeats 10 --out docs/perf/work_metrics_busy.md

Writes the Markdown table (and ``--json``, one line per check as it finishes) and exits 1 if any
repetition missed its target.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = {"flops", "ops", "kernels", "allocated"}
PLANT = """

# --- planted by docs/perf/work_metrics_busy.py: a second, wasted forward call ---
_planted_forward = DilatedAttention.forward


def _planted_twice(self, *args, **kwargs):
    _planted_forward(self, *args, **kwargs)
    return _planted_forward(self, *args, **kwargs)


DilatedAttention.forward = _planted_twice
"""
COMMENT = "\n# A comment, and nothing else (docs/perf/work_metrics_busy.py).\n"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "b@x"}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def prepare(parent: Path, variant: str, sha: str, rep: int = 0) -> Path:
    """A clone of ``sha`` as ``main`` (made once per ``parent``) with the variant on a new branch."""
    clone = parent / "repo"
    if not clone.exists():
        git(parent, "clone", "-q", "--shared", str(ROOT), str(clone))
        git(clone, "checkout", "-q", "-B", "main", sha)
    branch = f"{variant}-{rep}"
    git(clone, "checkout", "-q", "-B", branch, "main")
    target = clone / "attention" / "dilated.py"
    addition = PLANT if variant == "planted" else COMMENT
    target.write_text(target.read_text() + addition + f"# repetition {rep} ({variant})\n")
    git(clone, "commit", "-q", "-am", f"work_metrics_busy: {variant}, repetition {rep}")
    return clone


def run_check(clone: Path, busy: int) -> dict[str, Any]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    out = clone.parent / "check.json"  # outside the work tree, as is the store: HEAD stays clean
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "perfguard", "check", "--baseline", "main", "--profile", "quick",
             "--db", f"sqlite:///{clone.parent / 'history.db'}", "--json", str(out)],
            cwd=clone, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    wall = time.perf_counter() - started
    result: dict[str, Any] = {"exit": proc.returncode, "wall_s": round(wall, 1)}
    if not out.exists():
        result["error"] = (proc.stdout + proc.stderr)[-3000:]
        return result
    doc = json.loads(out.read_text())
    items = doc["items"]
    failing = [i for i in items if i["gated"] and i["verdict"] in ("regression", "failed", "broken")]
    work = [i for i in items if i["metric"] in WORK and i["ratio"] is not None]
    result.update(
        failing_impls=sorted({i["impl"] for i in failing}),
        failing_work=sorted({f"{i['impl']} {i['benchmark'].split('.', 1)[-1]}" for i in failing if i["metric"] in WORK}),
        failing_time=sorted({f"{i['impl']} {i['benchmark'].split('.', 1)[-1]}" for i in failing if i["metric"] == "time"}),
        work_items=len(work),
        work_ratios_not_one=[f"{i['impl']} {i['benchmark'].split('.', 1)[-1]} {i['ratio']:.4f}" for i in work if i["ratio"] != 1.0],
        counts=doc.get("counts"),
        retried=doc.get("summary", {}).get("retried"),
        underneath=len(doc.get("summary", {}).get("underneath") or []),
    )  # fmt: skip
    return result


def met(variant: str, r: dict[str, Any]) -> bool:
    if variant == "planted":
        return (
            r["exit"] == 1
            and r.get("failing_impls") == ["dilated", "multihead_dilated"]
            and {x.split()[0] for x in r.get("failing_work", [])} == {"dilated", "multihead_dilated"}
        )
    return r["exit"] == 0 and r.get("work_items", 0) > 0 and not r.get("work_ratios_not_one")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy-loop processes")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--stored-baseline", action="store_true", help="one store for every repetition: main measured once"
    )
    args = parser.parse_args()
    if git(ROOT, "status", "--porcelain", "--untracked-files=no").strip():
        print("commit your changes first: the script clones HEAD", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    started = datetime.now(timezone.utc)
    sha = git(ROOT, "rev-parse", "HEAD").strip()  # every repetition measures this commit
    shared = tempfile.TemporaryDirectory(prefix="pg-busy-shared-")
    if args.json:
        args.json.write_text("")
    for rep in range(args.repeats):
        for variant in ("planted", "comment") if rep % 2 == 0 else ("comment", "planted"):
            with tempfile.TemporaryDirectory(prefix="pg-busy-") as scratch:
                parent = Path(shared.name if args.stored_baseline else scratch)
                clone = prepare(parent, variant, sha, rep + 1)
                r = run_check(clone, args.busy)
            r.update(repetition=rep + 1, variant=variant, met=met(variant, r))
            rows.append(r)
            print(json.dumps(r), flush=True)
            if args.json:
                with args.json.open("a") as fh:
                    fh.write(json.dumps(r) + "\n")
    shared.cleanup()
    finished = datetime.now(timezone.utc)
    lines = [
        f"- **Date**: {started:%Y-%m-%d %H:%M}–{finished:%H:%M} UTC; perfguard at {sha[:10]}",
        f"- **Machine**: {os.cpu_count()} cores of {platform.processor() or platform.machine()}, {platform.platform()}, "
        f"Python {platform.python_version()}; {args.busy} busy-loop processes during every check",
        f"- **Command**: `python docs/perf/work_metrics_busy.py --repeats {args.repeats} --busy {args.busy}"
        f"{' --stored-baseline' if args.stored_baseline else ''}`"
        + ("; main measured once (by the first check, under the same load), HEAD afresh in every check"
           if args.stored_baseline else "; both sides measured in every check (a new store each)"),
        "",
        "| variant | met | exit (count) | failing implementations | check wall (s, median) |",
        "| --- | --- | --- | --- | ---: |",
    ]  # fmt: skip
    for variant in ("planted", "comment"):
        these = [r for r in rows if r["variant"] == variant]
        exits: dict[int, int] = {}
        for r in these:
            exits[r["exit"]] = exits.get(r["exit"], 0) + 1
        impls = sorted({", ".join(r.get("failing_impls", [])) or "–" for r in these})
        walls = sorted(r["wall_s"] for r in these)
        lines.append(
            f"| {variant} | {sum(r['met'] for r in these)}/{len(these)} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(exits.items()))} | {'; '.join(impls)} | "
            f"{walls[len(walls) // 2]:.0f} |"
        )
    lines += ["", "| rep | variant | exit | failing work metrics | failing timings | work ratios ≠ 1 | retried |",
              "| ---: | --- | ---: | --- | --- | --- | ---: |"]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['repetition']} | {r['variant']} | {r['exit']} | {'; '.join(r.get('failing_work', [])) or '–'} | "
            f"{'; '.join(r.get('failing_time', [])) or '–'} | {'; '.join(r.get('work_ratios_not_one', [])) or '–'} | "
            f"{r.get('retried', '')} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
