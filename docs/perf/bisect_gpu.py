"""``perfguard bisect`` on timings: a 16-commit range with one planted doubled forward, on this machine.

Builds the project (this checkout's tracked files, registry trimmed to ``dilated`` and
``improved``) as a throwaway repository with 16 commits after ``good``; the 11th makes
``dilated``'s forward run twice, the others change a comment.  Then runs the real CLI,
``perfguard bisect --good GOOD --bad BAD --bench REGEX``, on an empty store, and reports whether it
found the planted commit, how many commits it measured (a binary search needs 6: good, bad and 4
probes) and what that cost.

On a GPU the default selection is the forward *time* of ``dilated`` at 4096 tokens in bfloat16
(CUDA-graph replay), so the bisection decides on timings, with the re-measurement of suspects that
``perfguard check`` does (retry rounds cut to 2 in the throwaway repository's ``pyproject.toml`` to
keep the whole run under 4 minutes on one H100).  On a CPU the default is the work metrics (exact).

    python docs/perf/bisect_gpu.py                       # everything; $OUT gets the logs when set
    python docs/perf/bisect_gpu.py --rounds 3 --bench "Forward\\.track_time\\('dilated', 1024"

Prints a short table last.  Exit 0 when the culprit was found with at most 6 commits measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.project import append_commit, git, planted, project_repo  # noqa: E402

GPU_BENCH = r"Forward\.track_time\('dilated', 4096, 'bfloat16'\)"
CPU_BENCH = r"Work\.track_forward_(flops|ops|allocated)\('dilated', 512,"
CULPRIT_AT = 11


def has_gpu() -> bool:
    from perfguard.engine.machine import fingerprint

    return fingerprint().has_cuda


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=None, help="--bench of the bisection (default: by device)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds a commit (default 2)")
    parser.add_argument("--retry-rounds", type=int, default=2, help="rounds a side of a re-measurement")
    parser.add_argument("--timeout", type=float, default=230.0, help="seconds the bisection may take")
    args = parser.parse_args()
    gpu = has_gpu()
    bench = args.bench or (GPU_BENCH if gpu else CPU_BENCH)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    with tempfile.TemporaryDirectory(prefix="perfguard-bisect-") as scratch:
        work = Path(scratch)
        repo = project_repo(work / "project")
        _set_retry_rounds(repo / "pyproject.toml", args.retry_rounds)  # the throwaway project's own
        git(repo, "commit", "-q", "-am", "bisect_gpu.py: retry rounds")
        good = git(repo, "rev-parse", "HEAD")
        commits = []
        for n in range(1, 17):
            if n == CULPRIT_AT:
                commits.append(
                    append_commit(repo, "attention/registry.py", planted(2), "registry: doubled forward")
                )
            else:
                commits.append(
                    append_commit(repo, "attention/dilated.py", f"\n# comment {n}\n", f"comment {n}")
                )
        culprit = commits[CULPRIT_AT - 1]
        result_json = work / "bisect.json"
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PERFGUARD_DB": f"sqlite:///{work / 'history.db'}", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": path}  # fmt: skip
        command = [sys.executable, "-m", "perfguard", "bisect", "--good", good, "--bad", commits[-1],
                   "--bench", bench, "--rounds", str(args.rounds), "--json", str(result_json)]  # fmt: skip
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                command, cwd=repo, env=env, capture_output=True, text=True, timeout=args.timeout
            )
            code, log = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = 124
            log = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        wall = time.perf_counter() - started
        document = json.loads(result_json.read_text()) if result_json.exists() else None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "bisect.log").write_text(log)
            if document is not None:
                (out / "bisect.json").write_text(json.dumps(document, indent=2) + "\n")
    found = document is not None and document["culprit"]["sha"] == culprit
    measured = len(document["measured"]) if document else None
    ratio = None
    if document:
        probe = next((p for p in document["probes"] if p["sha"] == culprit), None)
        ratios = [i["ratio"] for i in (probe or {}).get("items", []) if i.get("ratio")]
        ratio = max(ratios) if ratios else None
    print(log[-4000:] if code else "")
    print("| device | bench | rounds | exit | culprit found | commits measured | ratio at culprit | wall s |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
    ratio_text = f"{ratio:.3f}" if ratio else "-"
    print(f"| {'cuda' if gpu else 'cpu'} | `{bench}` | {args.rounds} (+{args.retry_rounds} retry) | {code} | "
          f"{'yes' if found else 'no'} | {measured} of 16 | {ratio_text} | {wall:.0f} |")  # fmt: skip
    return 0 if found and measured is not None and measured <= 6 else 1


def _set_retry_rounds(pyproject: Path, rounds: int) -> None:
    """``[tool.perfguard.retry] rounds = N`` in the throwaway project's configuration."""
    text = pyproject.read_text()
    if "[tool.perfguard.retry]" in text:
        head, _, rest = text.partition("[tool.perfguard.retry]")
        lines = rest.split("\n")
        lines = [f"rounds = {rounds}" if line.strip().startswith("rounds") else line for line in lines]
        pyproject.write_text(head + "[tool.perfguard.retry]" + "\n".join(lines))
    else:
        pyproject.write_text(text + f"\n[tool.perfguard.retry]\nrounds = {rounds}\n")


if __name__ == "__main__":
    sys.exit(main())
