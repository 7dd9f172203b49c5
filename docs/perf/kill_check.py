"""Kill a check with a planted regression at random moments; it must never end in exit 0 (issue 27).

    PYTHONPATH=. python docs/perf/kill_check.py --moments 20 --seed 27 | tee docs/perf/logs/kill_check.log

The project is the trimmed test project (tests/helpers/project.py): ``main`` is stored (2 rounds),
HEAD makes ``improved``'s forward 8 times the work, and only its forward *time* is selected, so the
regression can only be found by the timing rule: stage 1 always makes it a suspect, stage 2 (the
interleaved re-measurement) decides it.  An undisturbed check takes T seconds and exits 1.  Then, at
each of N moments drawn uniformly in [0, T) (seeded), one of two kills, alternating:

- ``processes``: SIGKILL every process the check started (benchmark processes of either side, in
  stage 1 or 2, git), as the OOM killer or a runner hiccup would; the check itself goes on.
- ``check``: SIGKILL the check itself, then run the same check again (it resumes with the rounds
  the killed one stored): the pair must not end in exit 0.

Every attempt starts from a copy of the same store (main stored, nothing of HEAD), so the moments
are comparable.  Exit status 1 when any attempt ended in exit 0.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.project import append_commit, git, perfguard, planted, project_repo  # noqa: E402

BENCH = r"Forward\.track_time\('improved', 512,"
CHECK = ["check", "--baseline", "main", "--bench", BENCH, "--rounds", "2", "--no-verify"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def start(repo: Path, db: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "perfguard", *CHECK], cwd=repo, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def last_line(text: str, *needles: str) -> str:
    lines = [ln for ln in text.splitlines() if any(n in ln for n in needles)]
    return lines[-1].strip()[:160] if lines else ""


def attempt(repo: Path, db: str, moment: float, mode: str) -> tuple[int, str]:
    proc = start(repo, db)
    deadline = time.monotonic() + moment
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    killed = []
    if proc.poll() is None:
        if mode == "check":
            proc.send_signal(signal.SIGKILL)
            killed = [proc.pid]
        else:
            for pid in descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
    out, _ = proc.communicate(timeout=900)
    code = proc.returncode
    what = f"killed {len(killed)} process(es)" if killed else "nothing to kill at that moment"
    if mode == "check" and killed:
        again = perfguard(repo, *CHECK, db=db, timeout=900)
        log = again.stderr + again.stdout  # the headline (stdout) last
        why = last_line(log, "resuming", "cannot be measured", "Error:", "perfguard: ")
        return again.returncode, f"{what}: exit {code}; then the check again: exit {again.returncode} ({why})"
    why = last_line(out, "cannot be measured", "Error:", "perfguard: ", "interrupted")
    return code, f"{what}: exit {code} ({why})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moments", type=int, default=20)
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kill-check-") as scratch:
        work = Path(scratch)
        repo = project_repo(work / "project")
        append_commit(
            repo, "pyproject.toml", "\n[tool.perfguard.retry]\nrounds = 2\n", "2 re-measurement rounds"
        )
        git(repo, "checkout", "-q", "-b", "slow")
        append_commit(
            repo, "attention/registry.py", planted(8, "slow", ("improved",)), "improved: 8x the work"
        )
        git(repo, "checkout", "-q", "main")
        seed_db = work / "seed.db"
        stored = perfguard(repo, "run", "--bench", BENCH, "--rounds", "2", db=f"sqlite:///{seed_db}")
        assert stored.returncode == 0, stored.stderr
        git(repo, "checkout", "-q", "slow")

        def fresh_db(name: str) -> str:
            path = work / f"{name}.db"
            shutil.copy(seed_db, path)
            return f"sqlite:///{path}"

        started = time.monotonic()
        undisturbed = perfguard(repo, *CHECK, db=fresh_db("undisturbed"), timeout=900)
        length = time.monotonic() - started
        print(f"undisturbed check: exit {undisturbed.returncode} in {length:.1f} s "
              f"({last_line(undisturbed.stdout, 'perfguard: ')})")  # fmt: skip
        if undisturbed.returncode != 1:
            print("the undisturbed check did not find the regression: nothing to test")
            return 2
        rng = random.Random(args.seed)
        passes = 0
        for i in range(args.moments):
            moment = rng.uniform(0.0, length)
            mode = "processes" if i % 2 == 0 else "check"
            code, what = attempt(repo, fresh_db(f"attempt{i}"), moment, mode)
            passes += code == 0
            verdict = "PASSED A REGRESSION" if code == 0 else "ok (not 0)"
            print(f"{i + 1:2d}. t={moment:5.1f} s kill {mode:9s} -> {verdict}: {what}", flush=True)
        print(f"{args.moments} moments (seed {args.seed}): {passes} ended in exit 0")
        return 1 if passes else 0


if __name__ == "__main__":
    sys.exit(main())
