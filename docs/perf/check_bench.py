"""What ``perfguard check`` costs by itself (everything but running benchmarks) at 100,000 stored results.

Issue 4: "``perfguard check`` adds under 2 s of its own work with a store of 100,000 stored results".
This script builds the situation where a check has nothing to measure and times the real command:

1. a temporary git repository with the project's tracked files: ``base`` on ``main``, ``head`` on
   ``feature`` (a comment changed in ``attention/dilated.py``), like ``tests/test_workflows_pr_run.py``;
2. a store (SQLite file; ``--pg URL`` also a PostgreSQL database) filled through the public
   ``Store.record_runs`` with ~100,000 results: this machine key (``perfguard.engine.machine.fingerprint``)
   with the profile ``check`` resolves to (``quick`` without CUDA) for the last ``--local-commits``
   commits of ``main`` plus the merge-base and HEAD (3 rounds each, every registry implementation x
   the profile's lengths x the six benchmarks, settings that ``Bench.stored_rounds`` accepts), and
   three GPU machine keys (``production``) for every commit.  Time samples: 50-300 per result.  HEAD
   is drawn from the same distributions as the base (some implementations 3% faster), so nothing is
   a suspect and stage 2 (re-measurement, which runs benchmarks) never starts;
3. ``perfguard check --baseline main --no-verify --db URL --markdown --html --json`` run in the
   repository ``--repeat`` times (wall clock and CPU time of the process).  ``PERFGUARD_ASV`` points
   at a tripwire: if the check started asv (or printed anything about measuring or suspects) the
   script fails;
4. the split of runs into phases, each run in a child process that wraps the phase functions with
   timers (exclusive time: a git call inside ``_record`` counts as git): *cold* (a plain run: each
   phase includes the imports it starts) and *warm* (every module the check imports is imported
   first, so each phase is its own work); then ``-X importtime``, one run under ``python -m
   cProfile`` and one warm run under cProfile for the hot functions.

Usage (from the repository root; the perfguard measured is this checkout's, through PYTHONPATH and
PYTHONSAFEPATH, not the copy inside the temporary repository)::

    python docs/perf/check_bench.py                          # temporary directory, SQLite
    python docs/perf/check_bench.py --work /tmp/cb100k       # kept: the repo and store are reused
    python docs/perf/check_bench.py --pg postgresql://postgres@127.0.0.1:55439/checkbench
    python docs/perf/check_bench.py --perfguard /tmp/other --no-write   # another perfguard checkout

The generated block of ``docs/perf/check.md`` is rewritten (``--write PATH`` for another page,
``--no-write`` to only print) when the store holds 100,000 results and this checkout was measured.

Results: ``docs/perf/check.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

HEADING = "## perfguard check's own work with 100,000 stored results (CPU)"
BEGIN = "<!-- check_bench.py: generated, begin -->"
END = "<!-- check_bench.py: generated, end -->"
ROUNDS = 3
GPU_PROFILE = "production"
GPU_SEQ_LENS = (1024, 4096, 16384)
GPU_MACHINES = (
    ("NVIDIA H100 80GB HBM3 x1", "H100", 1.0),
    ("NVIDIA H200 x1", "H200", 0.85),
    ("NVIDIA L4 x1", "L4", 3.2),
)
# (benchmark without the module, metric, unit, direction, gated)
BENCHMARKS = (
    ("Forward.track_time", "time", "seconds", "lower", True),
    ("ForwardBackward.track_time", "time", "seconds", "lower", True),
    ("PeakMemory.track_forward", "memory", "bytes", "lower", True),
    ("PeakMemory.track_forward_backward", "memory", "bytes", "lower", True),
    ("Throughput.track_tokens_per_second", "throughput", "tokens/s", "higher", False),
    ("Throughput.track_tflops", "efficiency", "TFLOP/s", "higher", False),
)
PARAM_NAMES = ["impl", "seq_len", "dtype"]
# Packages whose import is worth naming in the phase table when the check loaded them.
HEAVY = ("torch", "scipy", "numpy", "sqlalchemy", "alembic", "jinja2", "rich", "click", "asv", "psycopg")
# HEAD of the planted check is 3% faster for these (index in the registry): no item may be a suspect.
FASTER_IN_HEAD = {1, 4}


# --------------------------------------------------------------------------------------------
# the repository
# --------------------------------------------------------------------------------------------


def git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Bench",
        "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "Bench",
        "GIT_COMMITTER_EMAIL": "bench@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def make_repo(repo: Path) -> tuple[str, str]:
    """The project's tracked files as ``base`` on main and a one-comment change on ``feature``."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    repo.mkdir(parents=True)
    for name in (n for n in names.decode().split("\0") if n):
        source = ROOT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base", date="2026-11-20T10:00:00+00:00")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    path = repo / "attention" / "dilated.py"
    path.write_text(path.read_text() + "\n# a comment: nothing measurable changes\n")
    git(repo, "commit", "-qam", "a comment in dilated.py", date="2026-11-20T12:00:00+00:00")
    head = git(repo, "rev-parse", "HEAD")
    if git(repo, "status", "--porcelain", "--untracked-files=all"):
        raise SystemExit(f"{repo} is not clean after committing: the check would measure a dirty tree")
    return base, head


def commit_record(repo: Path, sha: str, branch: str) -> Any:
    from perfguard.store import CommitRecord

    out = git(repo, "show", "-s", "--format=%H%x00%P%x00%s%x00%an <%ae>%x00%ct", sha)
    full, parents, subject, author, stamp = out.split("\x00")
    return CommitRecord(
        sha=full,
        base_sha=full,
        branch=branch,
        parents=tuple(parents.split()),
        subject=subject,
        author=author,
        committed_at=datetime.fromtimestamp(int(stamp), tz=timezone.utc),
    )


# --------------------------------------------------------------------------------------------
# the planted history
# --------------------------------------------------------------------------------------------


def fake_commit(n: int, at: datetime) -> Any:
    from perfguard.store import CommitRecord

    sha = hashlib.sha1(f"history commit {n}".encode()).hexdigest()
    parent = hashlib.sha1(f"history commit {n - 1}".encode()).hexdigest()
    return CommitRecord(
        sha=sha,
        base_sha=sha,
        branch="main",
        parents=(parent,) if n else (),
        subject=f"change number {n}",
        author="Dev <dev@example.com>",
        committed_at=at,
    )


def suite_results(
    rng: random.Random,
    *,
    impls: list[str],
    seq_lens: tuple[int, ...],
    dtype: str,
    device: str,
    profile: str,
    speed: float,
    round_factor: float,
    faster: float | None = None,
) -> list[Any]:
    """One round of the suite as ``parse_results`` returns it: 6 benchmarks per impl x length."""
    from perfguard.engine.cases import SUITE_VERSION
    from perfguard.store import ResultRecord

    heads, head_dim = (4, 32) if device == "cpu" else (12, 64)
    method = "cpu-wall" if device == "cpu" else "cuda-graph"
    settings = {"float32_matmul_precision": "highest", "cpu_intra_op_threads": 1 if device == "cpu" else 16}
    out = []
    for index, impl in enumerate(impls):
        for seq_len in seq_lens:
            params = {"impl": impl, "seq_len": seq_len, "dtype": dtype}
            segments = [seq_len // 4, seq_len // 2, seq_len] if seq_len < 8192 else [2048, 4096, 8192]
            config = {"segment_lengths": segments, "dilation_rates": [1, 2, 4], "num_heads": heads,
                      "head_dim": head_dim, "batch": 1}  # fmt: skip
            flops = 4.0 * head_dim * heads * seq_len * min(seq_len, 2048) / 2
            base_time = 4e-4 * speed * (1 + index / 3) * (seq_len / 512) ** 1.4 * round_factor
            if faster is not None and index in FASTER_IN_HEAD:
                base_time *= faster
            forward_samples: list[float] = []
            for name, metric, unit, direction, gated in BENCHMARKS:
                common = {
                    "benchmark": f"bench_attention.{name}",
                    "impl": impl,
                    "params": params,
                    "metric": metric,
                    "unit": unit,
                    "direction": direction,
                    "gated": gated,
                    "benchmark_version": SUITE_VERSION,
                }
                if metric == "time":
                    t = base_time * (3.0 if "Backward" in name else 1.0)
                    samples = [t * rng.lognormvariate(0.0, 0.02) for _ in range(rng.randint(50, 300))]
                    if name.startswith("Forward."):
                        forward_samples = samples
                    info = {
                        "config": config,
                        "tokens": seq_len,
                        "forward_flops": flops,
                        "device_name": "cpu" if device == "cpu" else "NVIDIA H100 80GB HBM3",
                        "warmup_s": 1.0 + rng.random() * 0.1,
                        "warmup_calls": rng.randint(20, 400),
                        "settings": settings,
                        "profile": profile,
                        "process_seconds": 2.0 + rng.random(),
                        "param_names": PARAM_NAMES,
                    }
                    out.append(ResultRecord(**common, samples=samples, method=method, info=info))
                elif metric == "memory":
                    if device == "cpu":
                        out.append(
                            ResultRecord(
                                **common,
                                status="skipped",
                                error="peak GPU memory needs CUDA",
                                info={"param_names": PARAM_NAMES},
                            )
                        )
                    else:
                        peak = float(2**20 * seq_len * (4 if "backward" in name else 2) * (1 + index % 3))
                        out.append(
                            ResultRecord(
                                **common,
                                samples=[peak],
                                method="cuda-allocator",
                                info={"param_names": PARAM_NAMES, "config": config},
                            )
                        )
                else:
                    work = seq_len if metric == "throughput" else flops / 1e12
                    out.append(
                        ResultRecord(
                            **common,
                            samples=[work / s for s in forward_samples],
                            method=method,
                            info={
                                "derived_from": "bench_attention.Forward.track_time",
                                "config": config,
                                "param_names": PARAM_NAMES,
                            },
                        )
                    )
    return out


def run_records(
    rng: random.Random,
    *,
    rounds: int,
    purpose: str,
    started: datetime,
    software: dict[str, Any],
    fingerprint: dict[str, Any],
    settings: dict[str, Any],
    profile: str,
    **suite: Any,
) -> list[Any]:
    from perfguard.store import RunRecord

    runs = []
    for r in range(rounds):
        at = started + timedelta(minutes=6 * r)
        runs.append(
            RunRecord(
                profile=profile,
                purpose=purpose,
                round=r,
                software=software,
                fingerprint=fingerprint,
                settings=settings,
                command=f"perfguard run --profile {profile}",
                started_at=at,
                finished_at=at + timedelta(minutes=5),
                results=suite_results(
                    rng, profile=profile, round_factor=rng.lognormvariate(0.0, 0.01), **suite
                ),
            )
        )
    return runs


def plan(target: int, local_commits: int, per_local_run: int, per_gpu_run: int) -> int:
    """How many main commits the GPU machines have measured, so the store holds >= target results."""
    local = (local_commits + 2) * ROUNDS * per_local_run
    return max(local_commits, math.ceil((target - local) / (per_gpu_run * len(GPU_MACHINES))))


def fill(store: Any, repo: Path, base: str, head: str, target: int, local_commits: int) -> dict[str, Any]:
    """Write the planted history through ``Store.record_runs``; one transaction per commit x machine."""
    from attention.registry import names
    from perfguard import profiles
    from perfguard.engine.cases import SUITE_VERSION
    from perfguard.engine.machine import fingerprint
    from perfguard.store import MachineRecord

    machine = fingerprint()
    profile = profiles.resolve("auto", cuda=machine.has_cuda)
    device = machine.kind
    impls = list(names())
    dtype = profile.dtypes(device)[0]
    local = MachineRecord(key=machine.key, kind=machine.kind, label=machine.label,
                          attributes=dict(machine.hardware))  # fmt: skip
    local_settings = {
        "suite_version": SUITE_VERSION,
        "bench": None,
        "device": device,
        "timer": {"float32_matmul_precision": "highest", "cpu_intra_op_threads": 1},
    }
    local_suite = {"impls": impls, "seq_lens": profile.seq_lens, "dtype": dtype, "device": device,
                   "speed": 1.0}  # fmt: skip
    per_local_run = len(impls) * len(profile.seq_lens) * len(BENCHMARKS)
    per_gpu_run = len(impls) * len(GPU_SEQ_LENS) * len(BENCHMARKS)
    n_main = plan(target, local_commits, per_local_run, per_gpu_run)
    base_commit = commit_record(repo, base, "main")
    head_commit = commit_record(repo, head, "feature")
    rng = random.Random(20261120)
    started = time.perf_counter()
    written = 0
    for n in range(n_main):
        at = base_commit.committed_at - timedelta(hours=7 * (n_main - n))
        commit = fake_commit(n, at)
        for key, label, speed in GPU_MACHINES:
            gpu = MachineRecord(key=key, kind="cuda", label=label, attributes={"gpu_name": label})
            runs = run_records(
                rng,
                rounds=1,
                purpose="baseline" if n % 10 == 0 else "run",
                started=at + timedelta(minutes=30),
                software={"torch": "2.13.0", "cuda_runtime": "12.8", "driver": "570.86", "python": "3.11.7"},
                fingerprint={"kind": "cuda", "key": key, "metadata": {"hostname": f"runner-{label}"}},
                settings={"suite_version": SUITE_VERSION, "bench": None, "device": "cuda", "timer": {}},
                profile=GPU_PROFILE,
                impls=impls,
                seq_lens=GPU_SEQ_LENS,
                dtype="bfloat16",
                device="cuda",
                speed=speed * 0.05,
            )
            store.record_runs(gpu, commit, runs)
            written += per_gpu_run
        if n >= n_main - local_commits:
            runs = run_records(
                rng, rounds=ROUNDS, purpose="run", started=at + timedelta(minutes=40),
                software=dict(machine.software), fingerprint=machine.as_dict(), settings=local_settings,
                profile=profile.name, **local_suite,
            )  # fmt: skip
            store.record_runs(local, commit, runs)
            written += ROUNDS * per_local_run
        if n % 20 == 0:
            print(f"  filled {written:,} results ({n + 1}/{n_main} commits)", file=sys.stderr, flush=True)
    # The merge-base, measured by `perfguard run` on the push to main, and HEAD, measured by an
    # earlier check of this pull request: the same distributions (HEAD 3% faster for some).
    for commit, purpose, faster, offset in ((base_commit, "run", None, 1), (head_commit, "head", 0.97, 3)):
        runs = run_records(
            rng, rounds=ROUNDS, purpose=purpose, started=commit.committed_at + timedelta(minutes=offset),
            software=dict(machine.software), fingerprint=machine.as_dict(), settings=local_settings,
            profile=profile.name, faster=faster, **local_suite,
        )  # fmt: skip
        store.record_runs(local, commit, runs)
        written += ROUNDS * per_local_run
    return {
        "results": written,
        "seconds": time.perf_counter() - started,
        "main_commits": n_main,
        "per_local_run": per_local_run,
        "per_gpu_run": per_gpu_run,
        "machine_key": machine.key,
        "profile": profile.name,
    }


def store_state(store: Any, key: str, profile: str, base: str, head: str) -> tuple[int, int, int]:
    """(results in the store, complete runs of base, of head) for this machine key and profile."""
    from sqlalchemy import func, select

    from perfguard.store.models import Result

    with store.engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(Result)).scalar_one()
    return total, len(store.runs_for(key, base, profile)), len(store.runs_for(key, head, profile))


def prepare_store(url: str, repo: Path, base: str, head: str, args: argparse.Namespace) -> dict[str, Any]:
    """Fill the store at ``url`` unless it already holds the planted history (then reuse it)."""
    from perfguard import profiles
    from perfguard.engine.machine import fingerprint
    from perfguard.store import Store

    machine = fingerprint()
    profile = profiles.resolve("auto", cuda=machine.has_cuda).name
    with Store.open(url) as store:
        total, n_base, n_head = store_state(store, machine.key, profile, base, head)
        info: dict[str, Any]
        if total >= args.results and n_base >= ROUNDS and n_head >= ROUNDS:
            print(f"reusing {store.url}: {total:,} results", file=sys.stderr)
            info = {"results": total, "seconds": None, "machine_key": machine.key, "profile": profile}
        else:
            if total:
                raise SystemExit(f"{store.url} has {total:,} results but not the planted check: use another")
            print(f"filling {store.url} with >= {args.results:,} results ...", file=sys.stderr)
            info = fill(store, repo, base, head, args.results, args.local_commits)
            info["results"], n_base, n_head = store_state(store, machine.key, profile, base, head)
        groups = store.results_for(machine.key, head, profile)
        info.update(base_runs=n_base, head_runs=n_head, items=len(groups))
        with store.engine.connect() as conn:
            from sqlalchemy import func, select

            from perfguard.store.models import Commit, Machine, Run

            info["runs"] = conn.execute(select(func.count()).select_from(Run)).scalar_one()
            info["commits"] = conn.execute(select(func.count()).select_from(Commit)).scalar_one()
            info["machines"] = conn.execute(select(func.count()).select_from(Machine)).scalar_one()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        info["size_mb"] = sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6
    return info


# --------------------------------------------------------------------------------------------
# running the check
# --------------------------------------------------------------------------------------------


def check_args(url: str, out: Path) -> list[str]:
    return ["check", "--baseline", "main", "--no-verify", "--db", url, "--markdown", str(out / "m.md"),
            "--html", str(out / "r.html"), "--json", str(out / "r.json")]  # fmt: skip


def child_env(work: Path, perfguard: Path) -> dict[str, str]:
    """The perfguard measured (not the repository copy's), and asv replaced by a tripwire."""
    tripwire = work / "asv_tripwire.py"
    tripwire.write_text(
        "import pathlib, sys\n"
        f"pathlib.Path({str(work / 'ASV_STARTED')!r}).write_text(' '.join(sys.argv))\n"
        "sys.exit('check_bench.py: perfguard check started asv, but both sides were stored')\n"
    )
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(perfguard), os.environ.get("PYTHONPATH")) if p),
        "PYTHONSAFEPATH": "1",  # python >= 3.11: the repository copy's perfguard/ is not imported
        "PERFGUARD_ASV": f"{sys.executable} {tripwire}",
        "COLUMNS": "200",
    }


@dataclass(frozen=True)
class Setup:
    """The repository the check runs in, its two commits, the child environment and scratch space."""

    repo: Path
    base: str
    head: str
    env: dict[str, str]
    work: Path
    perfguard: Path  # the checkout whose perfguard/ runs the check


def verify_outcome(proc: subprocess.CompletedProcess[str], ctx: Setup, out: Path) -> None:
    """Fail loudly unless the check used stored rounds for both sides and measured nothing."""
    work, base, head = ctx.work, ctx.base, ctx.head
    text = proc.stdout + proc.stderr
    problems = []
    if proc.returncode != 0:
        problems.append(f"exit code {proc.returncode}")
    if (work / "ASV_STARTED").exists():
        problems.append("asv was started: " + (work / "ASV_STARTED").read_text())
    for needle in (
        f"baseline {base[:10]}: using {ROUNDS} stored round(s)",
        f"HEAD {head[:10]}: using {ROUNDS} stored round(s)",
    ):
        if needle not in text:
            problems.append(f"no line {needle!r}")
    for bad in ("measuring", "suspect", "re-measur", "round 1/"):
        if bad in text:
            problems.append(f"the output mentions {bad!r}")
    try:
        report = json.loads((out / "r.json").read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"no JSON report ({exc})")
        report = {}
    if report and (report["summary"].get("retried") or any(i["retried"] for i in report["items"])):
        problems.append(f"{report['summary'].get('retried')} item(s) re-measured")
    if report and "stored" not in json.dumps(report["summary"].get("measured")):
        problems.append(f"the summary says the sides were {report['summary'].get('measured')}")
    if problems:
        raise SystemExit(
            "check_bench.py: the check did not run on stored results only:\n  "
            + "\n  ".join(problems)
            + "\n--- output ---\n"
            + text[-4000:]
        )


def run_cli(
    command: list[str], ctx: Setup, out: Path
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child) of one command; checks that it measured nothing."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ctx.repo, env=ctx.env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    verify_outcome(proc, ctx, out)
    return wall, cpu, proc


# --------------------------------------------------------------------------------------------
# the phase split (child process)
# --------------------------------------------------------------------------------------------

# (phase, what is wrapped): time is exclusive, the innermost wrapped call gets it.
PHASES = (
    ("store: open (schema check)", "perfguard.store.connection:StoreConnection.open"),
    ("machine fingerprint", "perfguard.engine.machine:fingerprint"),
    ("config, profile, asv config", "perfguard.config:load_config"),
    ("config, profile, asv config", "perfguard.config:find_pyproject"),
    ("config, profile, asv config", "perfguard.engine.suite:load_benchmark_dir"),
    ("git calls", "perfguard.gitrepo:git"),
    ("reading stored rounds", "perfguard.measuring:Bench.stored_rounds"),
    ("stage 1: Measurement objects", "perfguard.compare:measurements_from_rounds"),
    ("stage 1: compare_suite (MWU, bootstrap)", "perfguard.compare:compare_suite"),
    ("stage 2 (retry; must be 0)", "perfguard.gate:_retry"),
    ("recording the check", "perfguard.gate:_record"),
    ("reading the check back (get_check)", "perfguard.store.store:Store.get_check"),
    ("printing the verdict table", "perfguard.cli.check:_print_verdicts"),
    ("report: Markdown", "perfguard.report:render_markdown"),
    ("report: HTML", "perfguard.report:render_html"),
    ("report: JSON", "perfguard.report:check_to_json"),
    ("report: writing the files", "perfguard.gate:write_reports"),
    ("closing the store", "perfguard.store.connection:StoreConnection.close"),
)


class PhaseClock:
    """Exclusive time per phase: entering a wrapped call pauses the phase that called it."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.stack: list[list[Any]] = []

    def wrap(self, phase: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            if self.stack:
                self.totals[self.stack[-1][0]] += now - self.stack[-1][1]
            self.stack.append([phase, now])
            self.calls[phase] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.totals[phase] += end - self.stack.pop()[1]
                if self.stack:
                    self.stack[-1][1] = end

        return wrapper


def _patch(module: Any, attr: str, phase: str, clock: PhaseClock) -> None:
    owner_name, _, method = attr.rpartition(".")
    owner = getattr(module, owner_name) if owner_name else module
    name = method or attr
    raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    if isinstance(raw, classmethod):
        setattr(owner, name, classmethod(clock.wrap(phase, raw.__func__)))
    else:
        setattr(owner, name, clock.wrap(phase, raw))


class _AfterImport:
    """A meta path finder that wraps the phase functions of a module right after it is executed.

    In a cold process (nothing imported first) this leaves every import where the check makes it,
    so each phase's time includes the imports it starts.
    """

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.targets: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for phase, target in PHASES:
            module_name, _, attr = target.partition(":")
            self.targets[module_name].append((phase, attr))

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.targets:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                execute = spec.loader.exec_module

                def exec_module(module: Any, execute: Any = execute, name: str = name) -> None:
                    execute(module)
                    for phase, attr in self.targets[name]:
                        _patch(module, attr, phase, self.clock)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


def install(clock: PhaseClock, *, cold: bool) -> None:
    """Time the phases: wrap them now (modules imported already) or as their modules are imported."""
    if cold:
        sys.meta_path.insert(0, _AfterImport(clock))  # type: ignore[arg-type]
        return
    import importlib

    for phase, target in PHASES:
        module_name, _, attr = target.partition(":")
        _patch(importlib.import_module(module_name), attr, phase, clock)


class GcClock:
    """Time spent in the cyclic garbage collector, per generation (it runs inside whatever phase)."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = defaultdict(float)
        self.count: dict[int, int] = defaultdict(int)
        self._started = 0.0

    def __call__(self, event: str, info: dict[str, int]) -> None:
        if event == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started
            self.count[info["generation"]] += 1

    def take(self) -> dict[str, Any]:
        out = {"seconds": sum(self.seconds.values()), "gen2": self.count[2], "gen2_s": self.seconds[2]}
        self.seconds.clear()
        self.count.clear()
        return out


def child(mode: str, modules_file: Path, result_file: Path, cli_args: list[str]) -> None:
    """``collect``: run the check, write the modules it imported.  ``phases``: import them, then time.

    With ``$CHECK_BENCH_CPROFILE`` set (phases only), the CLI part runs under cProfile into that file.
    """
    import gc

    gc_clock = GcClock()
    gc.callbacks.append(gc_clock)
    started = time.perf_counter()
    modules_before = len(sys.modules)
    if mode == "phases":
        import importlib

        for name in json.loads(modules_file.read_text()):
            if name in sys.modules or name == "__main__":
                continue
            with contextlib.suppress(Exception):  # imported later by the check itself, if it needs it
                importlib.import_module(name)
    imported = len(sys.modules) - modules_before
    imports = time.perf_counter() - started
    gc_imports = gc_clock.take()
    clock = PhaseClock()
    spawned: list[str] = []
    if mode in ("phases", "cold"):
        install(clock, cold=mode == "cold")
        popen_init = subprocess.Popen.__init__

        def counting_init(self: Any, args: Any, *a: Any, **k: Any) -> None:
            spawned.append(str(args[0] if isinstance(args, (list, tuple)) else args))
            popen_init(self, args, *a, **k)

        subprocess.Popen.__init__ = counting_init  # type: ignore[method-assign]
    from perfguard.cli import main

    profile_path = os.environ.get("CHECK_BENCH_CPROFILE") if mode == "phases" else None
    profiler = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile()
    sys.argv = ["perfguard", *cli_args]
    cli_started = time.perf_counter()
    code = 0
    try:
        if profiler is not None:
            profiler.enable()
        main(cli_args, prog_name="perfguard")
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        if profiler is not None:
            profiler.disable()
    cli = time.perf_counter() - cli_started
    gc_cli = gc_clock.take()
    if profiler is not None and profile_path:
        profiler.dump_stats(profile_path)
    if mode == "collect":
        modules_file.write_text(json.dumps(list(sys.modules)))
    result_file.write_text(
        json.dumps(
            {
                "exit_code": code,
                "imports": imports,
                "modules_imported": imported,
                "cli": cli,
                "in_process": time.perf_counter() - started,
                "phases": dict(clock.totals),
                "calls": dict(clock.calls),
                "subprocesses": spawned,
                "gc_imports": gc_imports,
                "gc_cli": gc_cli,
                "objects": len(gc.get_objects()),
                "packages": sorted(p for p in HEAVY if p in sys.modules),
            }
        )
    )


def phase_split(url: str, ctx: Setup, repeat: int) -> dict[str, Any]:
    """Each repetition: a cold run (phases include the imports they start), then a warm one."""
    out = ctx.work / "out-phases"
    modules, result = ctx.work / "modules.json", ctx.work / "phases.json"
    script = [sys.executable, str(Path(__file__).resolve()), "--child"]
    run_cli([*script, "collect", str(modules), str(result), *check_args(url, out)], ctx, out)
    runs, colds = [], []
    for _ in range(repeat):
        for mode, into in (("cold", colds), ("phases", runs)):
            command = [*script, mode, str(modules), str(result), *check_args(url, out)]
            wall, cpu, _proc = run_cli(command, ctx, out)
            doc = json.loads(result.read_text())
            doc.update(wall=wall, cpu=cpu)
            into.append(doc)
    bare = [timed_wall([sys.executable, "-c", "pass"], ctx.repo, ctx.env) for _ in range(5)]
    phases = sorted({p for r in runs + colds for p in r["phases"]} | {p for p, _ in PHASES}, key=_phase_order)
    median_phase = {p: statistics.median(r["phases"].get(p, 0.0) for r in runs) for p in phases}
    cold = {
        "wall": statistics.median(r["wall"] for r in colds),
        "outside": statistics.median(r["wall"] - r["in_process"] for r in colds),
        "imports": statistics.median(r["in_process"] - r["cli"] for r in colds),
        "other": statistics.median(r["cli"] - sum(r["phases"].values()) for r in colds),
        "phases": {p: statistics.median(r["phases"].get(p, 0.0) for r in colds) for p in phases},
    }
    return {
        "cold": cold,
        "cold_runs": colds,
        "runs": runs,
        "bare_python": statistics.median(bare),
        "wall": statistics.median(r["wall"] for r in runs),
        "imports": statistics.median(r["imports"] for r in runs),
        "in_process": statistics.median(r["in_process"] for r in runs),
        "other": statistics.median(r["cli"] - sum(r["phases"].values()) for r in runs),
        "outside": statistics.median(r["wall"] - r["in_process"] for r in runs),
        "phases": median_phase,
        "calls": runs[-1]["calls"],
        "subprocesses": runs[-1]["subprocesses"],
        "modules": runs[-1]["modules_imported"],
        "packages": runs[-1]["packages"],
    }


def _phase_order(phase: str) -> int:
    order = [p for p, _ in PHASES]
    return order.index(phase) if phase in order else len(order)


def timed_wall(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _profile_rows(path: Path, perfguard: Path) -> list[dict[str, Any]]:
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = file.replace(str(perfguard) + "/", "")
        for marker in ("site-packages/", "/lib/python3."):
            if marker in short:
                short = (
                    short.split(marker, 1)[1].split("/", 1)[-1]
                    if marker[0] == "/"
                    else short.split(marker, 1)[1]
                )
        rows.append({"function": f"{short}:{line}({name})", "calls": nc, "own": tt, "cumulative": ct})
    return rows


def profiles(url: str, ctx: Setup) -> dict[str, Any]:
    """Where the time goes: ``-X importtime`` (imports), ``python -m cProfile`` (one whole run), and
    cProfile around the CLI alone after every module is imported (the work)."""
    out = ctx.work / "out-profile"
    whole = ctx.work / "check.prof"
    work_prof = ctx.work / "check-work.prof"
    result: dict[str, Any] = {"whole_profile": str(whole), "work_profile": str(work_prof)}

    _, _, proc = run_cli(
        [sys.executable, "-X", "importtime", "-m", "perfguard", *check_args(url, out)], ctx, out
    )
    top = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if not name.startswith("   ") and name.strip() and cumulative.strip().isdigit():  # depth 0
            top.append({"module": name.strip(), "seconds": int(cumulative) / 1e6})
    result["imports"] = sorted(top, key=lambda r: -r["seconds"])[:12]

    command = [sys.executable, "-m", "cProfile", "-o", str(whole), "-m", "perfguard", *check_args(url, out)]
    result["whole_wall"], _, _ = run_cli(command, ctx, out)
    result["whole_by_own"] = sorted(_profile_rows(whole, ctx.perfguard), key=lambda r: -r["own"])[:15]

    modules, phases = ctx.work / "modules.json", ctx.work / "phases.json"
    script = [sys.executable, str(Path(__file__).resolve()), "--child", "phases", str(modules), str(phases)]
    env = {**ctx.env, "CHECK_BENCH_CPROFILE": str(work_prof)}
    result["work_wall"], _, _ = run_cli([*script, *check_args(url, out)], replace(ctx, env=env), out)
    rows = _profile_rows(work_prof, ctx.perfguard)
    result["work_by_own"] = sorted(rows, key=lambda r: -r["own"])[:15]
    result["work_perfguard_by_cumulative"] = sorted(
        (r for r in rows if r["function"].startswith("perfguard/")), key=lambda r: -r["cumulative"]
    )[:25]
    return result


# --------------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------------


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure_backend(label: str, url: str, ctx: Setup, args: argparse.Namespace) -> dict[str, Any]:
    out = ctx.work / "out"
    walls, cpus, loads = [], [], []
    first_output = ""
    for i in range(args.repeat):
        loads.append(os.getloadavg()[0])
        wall, cpu, proc = run_cli([sys.executable, "-m", "perfguard", *check_args(url, out)], ctx, out)
        walls.append(wall)
        cpus.append(cpu)
        if i == 0:
            first_output = proc.stderr + proc.stdout
        print(f"  {label} check {i + 1}/{args.repeat}: {wall:.3f} s wall, {cpu:.3f} s CPU "
              f"(load {loads[-1]:.2f})", file=sys.stderr, flush=True)  # fmt: skip
    report = json.loads((out / "r.json").read_text())
    result: dict[str, Any] = {
        "label": label,
        "walls": walls,
        "cpus": cpus,
        "loads": loads,
        "output": first_output,
        "sizes": {p.name: p.stat().st_size for p in sorted(out.iterdir())},
        "report_counts": _counts(report),
    }
    print(f"  {label}: phase split ({args.phase_repeat} runs) ...", file=sys.stderr, flush=True)
    result["split"] = phase_split(url, ctx, args.phase_repeat)
    if not args.no_cprofile:
        result["profiles"] = profiles(url, ctx)
    return result


def _counts(report: dict[str, Any]) -> dict[str, int]:
    items = report["items"]
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[str(item.get("verdict"))] += 1
    return dict(counts)


def fmt(seconds: float) -> str:
    return f"{seconds:.3f}"


def table(result: dict[str, Any]) -> list[str]:
    split = result["split"]
    walls = result["walls"]
    lines = [
        f"| {result['label']}: the whole command, {len(walls)} runs | wall (s) | share |",
        "| --- | ---: | ---: |",
        f"| median (first {fmt(walls[0])}, min {fmt(min(walls))}, max {fmt(max(walls))}) "
        f"| **{fmt(statistics.median(walls))}** | |",
        f"| CPU time of the process (median) | {fmt(statistics.median(result['cpus']))} | |",
    ]
    cold = split["cold"]
    bare = fmt(split["bare_python"])
    modules = f"{split['modules']} modules: {', '.join(split['packages'])}, ..."
    rows = [
        (
            f"interpreter start and exit (a bare `python -c pass`: {bare} s)",
            cold["outside"],
            split["outside"],
        ),
        (
            f"imports (cold: before the command starts; warm: all {modules})",
            cold["imports"],
            split["imports"],
        ),
    ]
    rows += [(p, cold["phases"].get(p, 0.0), s) for p, s in split["phases"].items()]
    rest = "the rest (cold: with `open_bench`'s imports, the store package and SQLAlchemy among them)"
    rows.append((rest, cold["other"], split["other"]))
    n = len(split["runs"])
    lines += [
        "",
        f"{result['label']}: one run split into phases, medians of {n} runs each way. *Cold*: a plain run; "
        "each phase includes the imports it starts. *Warm*: every module the check imports is imported "
        "first (the imports row), so each phase is its own work. Exclusive times: a git call inside "
        "`_record` counts as git.",
        "",
        "| phase | cold (s) | share | warm (s) | share |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    calls = split["calls"]
    for phase, cold_s, warm_s in rows:
        k = calls.get(phase)
        label = f"{phase} ({k} calls)" if k and k > 1 else phase
        lines.append(
            f"| {label} | {fmt(cold_s)} | {100 * cold_s / cold['wall']:.0f}% "
            f"| {fmt(warm_s)} | {100 * warm_s / split['wall']:.0f}% |"
        )
    lines.append(
        f"| **total (child process wall)** | **{fmt(cold['wall'])}** | | **{fmt(split['wall'])}** | |"
    )
    return lines


def markdown(info: dict[str, Any], results: list[dict[str, Any]]) -> str:
    store = info["store"]
    lines = [
        BEGIN,
        "",
        f"- **Date**: {info['date']}; perfguard at {info['commit']}.",
        f"- **Machine**: {info['machine']}; Python {info['python']}; load average (1/5/15 min) "
        f"{info['load_before']} before, {info['load_after']} after"
        f" (1-min load during the runs: {info['load_range']}).",
        f"- **Store**: {store['results']:,} results in {store['runs']:,} runs of "
        f"{store['commits']:,} commits on {store['machines']} machine keys"
        + (f"; SQLite file {store['size_mb']:.0f} MB" if store.get("size_mb") else "")
        + f". The check compares {store['items']} items (this machine key `{store['machine_key']}`, profile "
        f"`{store['profile']}`): base and HEAD each {store['base_runs']} stored rounds.",
        f"- **Command** (in the repository the script builds): `perfguard {' '.join(info['args'])}`",
        f"- **Reproduce**: `{info['reproduce']}`",
        "",
    ]
    for result in results:
        lines += table(result)
        counts = ", ".join(f"{n} {v}" for v, n in sorted(result["report_counts"].items()))
        git_calls = sum(1 for s in result["split"]["subprocesses"] if s.endswith("git") or s == "git")
        lines += [
            "",
            f"Verdicts: {counts}. Processes started by the check: {len(result['split']['subprocesses'])} "
            f"({git_calls} git, no asv). Reports: "
            + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in result["sizes"].items())
            + ".",
            "",
        ]
        split = result["split"]
        gc_i = statistics.median(r["gc_imports"]["seconds"] for r in split["runs"])
        gc_c = statistics.median(r["gc_cli"]["seconds"] for r in split["runs"])
        gen2 = split["runs"][-1]["gc_cli"]["gen2"]
        lines += [
            f"Garbage collection inside these (median): {fmt(gc_i)} s during the imports, {fmt(gc_c)} s "
            f"during the check ({gen2} full collections over {split['runs'][-1]['objects']:,} objects).",
            "",
        ]
        if "profiles" in result:
            prof = result["profiles"]
            lines += [
                "Imports that the check's functions start (`python -X importtime`, one run, cumulative):",
                "",
                "| module | s |",
                "| --- | ---: |",
            ]
            lines += [f"| `{row['module']}` | {fmt(row['seconds'])} |" for row in prof["imports"][:8]]
            lines += [
                "",
                f"perfguard functions by cumulative time, the CLI alone after every import (cProfile, "
                f"{fmt(prof['work_wall'])} s run with the profiler's overhead):",
                "",
                "| function | calls | own (s) | cumulative (s) |",
                "| --- | ---: | ---: | ---: |",
            ]
            for row in prof["work_perfguard_by_cumulative"][:14]:
                name, calls = row["function"], row["calls"]
                lines.append(f"| `{name}` | {calls} | {fmt(row['own'])} | {fmt(row['cumulative'])} |")
            lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: Path, block: str) -> None:
    """Replace the generated block under HEADING (or add the section, or create the page)."""
    if path.exists():
        text = path.read_text()
    else:
        text = (
            "# perfguard check: what it costs\n\n"
            "Measurements of `perfguard check` itself. Sections per setting; each says how to reproduce it.\n"
        )
    if HEADING not in text:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{block}"
    elif BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + block.rstrip("\n") + tail
    else:
        head, _, rest = text.partition(HEADING)
        text = head + HEADING + "\n\n" + block + rest.lstrip("\n")
    path.write_text(text)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":  # perfguard from $PYTHONPATH
        mode, modules, result, *cli = sys.argv[2:]
        child(mode, Path(modules), Path(result), cli)
        return
    sys.path.insert(0, str(ROOT))  # the store is filled with this checkout's perfguard
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="directory for the repository and store (kept, reused)")
    parser.add_argument(
        "--pg", metavar="URL", help="also a PostgreSQL store (an empty database, or one this filled)"
    )
    parser.add_argument("--no-sqlite", action="store_true", help="only the --pg store")
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument(
        "--local-commits", type=int, default=40, help="main commits measured on this machine key"
    )
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of the command per store")
    parser.add_argument("--phase-repeat", type=int, default=3, help="runs of the phase split per store")
    parser.add_argument("--no-cprofile", action="store_true")
    parser.add_argument(
        "--write", type=Path, default=ROOT / "docs" / "perf" / "check.md", help="the page to write into"
    )
    parser.add_argument("--no-write", action="store_true", help="only print the results")
    parser.add_argument("--json", type=Path, help="write everything measured as JSON")
    parser.add_argument(
        "--perfguard", type=Path, default=ROOT, help="the checkout whose perfguard checks (default: this one)"
    )
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="perfguard-check-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    repo = work / "repo"
    if repo.exists():
        base, head = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "feature")
        print(f"reusing {repo}", file=sys.stderr)
    else:
        base, head = make_repo(repo)
    perfguard = args.perfguard.resolve()
    ctx = Setup(repo, base, head, child_env(work, perfguard), work, perfguard)
    backends = [] if args.no_sqlite else [("SQLite", f"sqlite:///{work / 'history.db'}")]
    if args.pg:
        backends.append(("PostgreSQL", args.pg))
    load_before = load()
    results, stores = [], {}
    for label, url in backends:
        stores[label] = prepare_store(url, repo, base, head, args)
        if stores[label].get("seconds"):
            print(f"  filled in {stores[label]['seconds']:.0f} s", file=sys.stderr)
        results.append(measure_backend(label, url, ctx, args))
    load_after = load()
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty=+uncommitted", "--abbrev=10"],
        cwd=args.perfguard,
        capture_output=True,
        text=True,
    )
    loads = [x for r in results for x in r["loads"]]
    reproduce = "python docs/perf/check_bench.py" + (" --pg URL" if args.pg else "")
    info = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": (commit.stdout.strip() or "?") + ("" if args.perfguard == ROOT else f" ({args.perfguard})"),
        "machine": f"{os.cpu_count()} x {cpu_model()}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": load_after,
        "load_range": f"{min(loads):.2f}-{max(loads):.2f}" if loads else "?",
        "store": next(iter(stores.values())),
        "args": check_args("URL", Path("out")),
        "reproduce": reproduce,
    }
    block = markdown(info, results)
    print()
    print(block)
    if args.no_write:
        pass
    elif args.results < 100_000 or args.perfguard.resolve() != ROOT:
        print(f"not writing {args.write}: not 100,000 results, or another perfguard", file=sys.stderr)
    else:
        write_section(args.write, block)
        print(f"wrote {args.write}", file=sys.stderr)
    if args.json:
        args.json.write_text(
            json.dumps({"info": info, "stores": stores, "results": results}, indent=2, default=str)
        )
    print(f"work directory: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
