"""A real SQLite history store for the report tests, written through ``perfguard.store.Store``.

The history: 12 commits of ``main`` measured on two machines (an H100 and a CPU), three
implementations over three sequence lengths, time on both machines and peak memory on the GPU,
plus a benchmark whose *name* is ``<script>alert(1)</script>``.  Planted facts the tests check:

* ``ring`` Forward time at seq_len 1024 on the H100 is 50% slower from commit 8 on, and a stored
  check (head = commit 8, base = commit 7) calls it a regression;
* ``dilated`` is fastest at short sequences, ``ring`` at long ones (a crossover between 1024 and
  4096 on both machines);
* peak memory of ``dilated`` grows as n², of ``ring`` and ``improved`` as n;
* a PR head run and a dirty work tree are stored but are not history;
* one CPU result failed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, ResultRecord, Store

XSS = "<script>alert(1)</script>"
FORWARD = "bench_attention.Forward.track_time"
MEMORY = "bench_attention.PeakMemory.track_forward"
IMPLS = ("dilated", "improved", "ring")
SEQ_LENS = (256, 1024, 4096)
N_COMMITS = 12
REGRESSED_AT = 8  # commit index where ring/1024 on the GPU gets 50% slower
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def params_key(params: dict[str, Any]) -> str:
    """The store's canonical key (``perfguard.store.params_key``)."""
    from perfguard.store import params_key as key

    return key(params)


def forward_time(impl: str, n: int, gpu: bool) -> float:
    """dilated ~ n², cheap constant; ring ~ n, expensive constant: they cross between 1024 and 4096."""
    scale = 1e-3 if gpu else 1.0
    if impl == "dilated":
        return scale * 2e-8 * n * n + scale * 1e-4
    if impl == "improved":
        return scale * 1.5e-8 * n * n + scale * 2e-4
    return scale * 5e-5 * n + scale * 1e-3


def peak_memory(impl: str, n: int) -> float:
    return float(64 * n * n) if impl == "dilated" else float(8192 * n)


@dataclass
class HistoryFacts:
    """What was written, so tests compare pages against the store rather than against constants."""

    path: Path
    url: str
    shas: list[str] = field(default_factory=list)
    gpu_key: str = "nvidia-h100-80gb-hbm3-x1"
    cpu_key: str = "amd-epyc-7b13"
    gpu_label: str = "NVIDIA H100 80GB HBM3 ×1"
    cpu_label: str = "AMD EPYC 7B13 (2 cores)"
    check_id: int = 0
    pr_sha: str = ""
    dirty_sha: str = ""


def _samples(rng: random.Random, value: float, n: int = 10) -> list[float]:
    return [value * (1 + rng.uniform(-0.01, 0.01)) for _ in range(n)]


def _result(
    benchmark: str,
    impl: str,
    n: int,
    value: float | None,
    unit: str,
    rng: random.Random,
    *,
    gpu: bool,
    status: str = "ok",
    metric: str = "time",
) -> ResultRecord:
    return ResultRecord(
        benchmark=benchmark,
        impl=impl,
        params={"impl": impl, "seq_len": n, "dtype": "float32"},
        metric=metric,
        unit=unit,
        direction="lower",
        gated=True,
        status=status,
        samples=_samples(rng, value) if value is not None else None,
        method="cuda-graph" if gpu else "cpu-wall",
        error=None if status == "ok" else "RuntimeError: out of memory",
    )


def build_history_store(path: Path) -> HistoryFacts:
    """Write the store described in the module docstring into a new SQLite file at ``path``."""
    url = f"sqlite:///{path}"
    facts = HistoryFacts(path=path, url=url)
    rng = random.Random(1234)
    gpu = MachineRecord(key=facts.gpu_key, kind="cuda", label=facts.gpu_label, attributes={"count": 1})
    cpu = MachineRecord(key=facts.cpu_key, kind="cpu", label=facts.cpu_label, attributes={})
    commits = []
    for i in range(N_COMMITS):
        sha = f"{i + 1:02x}" + "c0ffee" * 6 + f"{i:02x}"
        commits.append(
            CommitRecord(
                sha=sha,
                base_sha=sha,
                branch="main",
                parents=[commits[-1].sha] if commits else [],
                subject=f"commit {i}" if i != 5 else 'tidy <img src=x onerror="alert(2)"> & friends',
                author="dev",
                committed_at=T0 + timedelta(days=i),
            )
        )
        facts.shas.append(sha)
    with Store.open(url) as store:
        for i, commit in enumerate(commits):
            for machine in (gpu, cpu):
                is_gpu = machine is gpu
                results = []
                for impl in IMPLS:
                    for n in SEQ_LENS:
                        value = forward_time(impl, n, is_gpu)
                        if is_gpu and impl == "ring" and n == 1024 and i >= REGRESSED_AT:
                            value *= 1.5
                        failed = (not is_gpu) and impl == "improved" and n == 4096 and i == 3
                        results.append(
                            _result(
                                FORWARD,
                                impl,
                                n,
                                None if failed else value,
                                "seconds",
                                rng,
                                gpu=is_gpu,
                                status="failed" if failed else "ok",
                            )
                        )
                        if is_gpu:
                            results.append(
                                _result(
                                    MEMORY,
                                    impl,
                                    n,
                                    peak_memory(impl, n),
                                    "bytes",
                                    rng,
                                    gpu=True,
                                    metric="memory",
                                )
                            )
                results.append(
                    _result(XSS, "dilated", 1024, 0.002 if is_gpu else 0.2, "seconds", rng, gpu=is_gpu)
                )
                store.record_run(
                    machine,
                    commit,
                    profile="quick",
                    purpose="run",
                    software={
                        "torch": "2.13.0" if i < 10 else "2.13.1",
                        "cuda": "12.8" if is_gpu else None,
                        "driver": "570.86" if is_gpu else None,
                        "python": "3.11.9",
                    },
                    fingerprint={"hostname": f"runner-{i % 3}"},
                    settings={"tf32": False},
                    command="perfguard run",
                    started_at=T0 + timedelta(days=i, hours=1),
                    finished_at=T0 + timedelta(days=i, hours=2),
                    results=results,
                    trusted=True,  # the baseline workflow's runs: the published history (docs/ci.md)
                )
        # A PR head and a dirty work tree: stored, never history.
        pr = CommitRecord(
            sha="ffff" + "0" * 36,
            base_sha="ffff" + "0" * 36,
            branch="feature",
            parents=[commits[-1].sha],
            subject="PR head",
            author="dev",
            committed_at=T0 + timedelta(days=N_COMMITS),
        )
        dirty = CommitRecord(
            sha=commits[-1].sha + "+dirty.0123456789ab",
            base_sha=commits[-1].sha,
            dirty=True,
            branch="main",
            parents=[commits[-1].sha],
            subject="wip",
            author="dev",
            committed_at=T0 + timedelta(days=N_COMMITS, hours=3),
        )
        facts.pr_sha, facts.dirty_sha = pr.sha, dirty.sha
        for commit, purpose in ((pr, "head"), (dirty, "run")):
            store.record_run(
                gpu,
                commit,
                profile="quick",
                purpose=purpose,
                software={"torch": "2.13.1"},
                fingerprint={},
                settings={},
                started_at=T0 + timedelta(days=N_COMMITS, hours=4),
                finished_at=T0 + timedelta(days=N_COMMITS, hours=5),
                results=[_result(FORWARD, "ring", 1024, 9.99, "seconds", rng, gpu=True)],
            )
        # The stored check that caught the planted regression.
        items = []
        for impl in IMPLS:
            for n in SEQ_LENS:
                regressed = impl == "ring" and n == 1024
                base = forward_time(impl, n, True)
                items.append(
                    CheckItemRecord(
                        benchmark=FORWARD,
                        impl=impl,
                        params={"impl": impl, "seq_len": n, "dtype": "float32"},
                        metric="time",
                        unit="seconds",
                        direction="lower",
                        gated=True,
                        verdict="regression" if regressed else "unchanged",
                        threshold=0.2,
                        base_value=base,
                        head_value=base * (1.5 if regressed else 1.0),
                        ratio=1.5 if regressed else 1.0,
                        ci_low=1.46 if regressed else 0.99,
                        ci_high=1.54 if regressed else 1.01,
                        p_value=1e-5 if regressed else 0.6,
                        noise=0.01,
                        method="cuda-graph",
                        base_n=10,
                        head_n=10,
                    )
                )
        facts.check_id = store.record_check(
            gpu,
            commits[REGRESSED_AT],
            commits[REGRESSED_AT - 1],
            baseline_ref="main",
            profile="quick",
            threshold=0.2,
            verdict="regression",
            exit_code=1,
            summary={},
            environment={},
            config={"threshold": 0.2},
            command="perfguard check --baseline main",
            created_at=T0 + timedelta(days=REGRESSED_AT, hours=3),
            items=items,
        )
    return facts


@dataclass
class CheckFacts:
    """Ids of the checks written by :func:`build_check_store`."""

    url: str
    mixed_id: int = 0  # every verdict, an XSS benchmark name, different software on the two sides
    quiet_id: int = 0  # every item unchanged
    big_id: int = 0  # thousands of unstable items: the Markdown must be cut to GitHub's limit
    big_items: int = 0


def _item(
    benchmark: str, impl: str, n: int, verdict: str, ratio: float | None, **extra: Any
) -> CheckItemRecord:
    base = extra.pop("base_value", 1e-3 * n / 1024)
    fields: dict[str, Any] = {
        "benchmark": benchmark,
        "impl": impl,
        "params": {"impl": impl, "seq_len": n, "dtype": "float16"},
        "metric": "time",
        "unit": "seconds",
        "direction": "lower",
        "gated": True,
        "verdict": verdict,
        "base_value": base,
        "head_value": base * ratio if ratio is not None else None,
        "ratio": ratio,
        "ci_low": ratio * 0.97 if ratio is not None else None,
        "ci_high": ratio * 1.03 if ratio is not None else None,
        "p_value": 0.001 if verdict in ("regression", "improvement") else 0.4,
        "noise": 0.02,
        "threshold": 0.2,
        "method": "cuda-graph",
        "base_n": 20,
        "head_n": 20,
    }
    fields.update(extra)
    return CheckItemRecord(**fields)


def build_check_store(path: Path) -> CheckFacts:
    """Checks for the report tests (not history): see :class:`CheckFacts`."""
    url = f"sqlite:///{path}"
    facts = CheckFacts(url=url)
    gpu = MachineRecord(key="nvidia-h100-80gb-hbm3-x1", kind="cuda", label="NVIDIA H100 80GB HBM3 ×1")
    base = CommitRecord(
        sha="b" * 40, base_sha="b" * 40, branch="main", subject="base commit", author="dev", committed_at=T0
    )
    head = CommitRecord(
        sha="a" * 40,
        base_sha="a" * 40,
        branch="feature",
        parents=["b" * 40],
        subject="speed up | ring <b>attention</b>",
        author="dev",
        committed_at=T0 + timedelta(hours=5),
    )
    with Store.open(url) as store:
        for commit, purpose, torch_version, driver in (
            (base, "baseline", "2.13.0", "570.86"),
            (head, "head", "2.13.1", "575.51"),
        ):
            store.record_run(
                gpu,
                commit,
                profile="production",
                purpose=purpose,
                software={"torch": torch_version, "driver": driver, "cuda": "12.8", "python": "3.11.9"},
                fingerprint={
                    "gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{purpose}"},
                    "hostname": purpose,
                },
                settings={"sdpa_backend": "flash"},
                command="perfguard check --baseline main",
                started_at=T0 + timedelta(hours=6),
                finished_at=T0 + timedelta(hours=7),
                results=[
                    ResultRecord(
                        benchmark=FORWARD,
                        impl="dilated",
                        params={"impl": "dilated", "seq_len": 1024, "dtype": "float16"},
                        metric="time",
                        unit="seconds",
                        direction="lower",
                        gated=True,
                        samples=[1e-3] * 5,
                        method="cuda-graph",
                    )
                ],
            )

        def check(verdict: str, exit_code: int, items: list[CheckItemRecord]) -> int:
            return store.record_check(
                gpu,
                head,
                base,
                baseline_ref="main",
                profile="production",
                threshold=0.2,
                verdict=verdict,
                exit_code=exit_code,
                summary={},
                environment={},
                config={"threshold": 0.2},
                command="perfguard check --baseline main --profile production",
                created_at=T0 + timedelta(hours=8),
                items=items,
            )

        fwd = FORWARD
        facts.mixed_id = check(
            "regression",
            1,
            [
                _item(fwd, "ring", 4096, "regression", 1.31),
                _item(fwd, "dilated", 8192, "regression", 1.87),
                _item(fwd, "improved", 4096, "improvement", 0.71),
                _item(fwd, "hilbert_ring", 2048, "unstable", 1.25, noise=0.18, retried=True),
                _item(
                    XSS, "block|sparse", 1024, "new", None, base_value=None, base_n=0, reason="new in head"
                ),
                _item(fwd, "multihead_ring", 1024, "missing", None, head_n=0, reason="not in head"),
                _item(
                    fwd, "block_sparse_ring", 1024, "broken", None, reason="RuntimeError: CUDA error: <oops>"
                ),
                _item(fwd, "ring", 16384, "skipped", None, reason="needs 2 GPUs"),
                *[_item(fwd, "dilated", n, "unchanged", 1.0 + n / 1e6) for n in (1024, 2048, 4096)],
            ],
        )
        facts.quiet_id = check(
            "pass", 0, [_item(fwd, impl, n, "unchanged", 1.01) for impl in IMPLS for n in SEQ_LENS]
        )
        many = [  # all of them news: the Markdown cannot fold them into one line
            _item(fwd, f"impl_{k:04d}_with_a_rather_long_name", 1024 * (1 + k % 8), "unstable", 1.1)
            for k in range(1500)
        ]
        many[7] = _item(fwd, "ring", 4096, "regression", 1.5)
        facts.big_id = check("regression", 1, many)
        facts.big_items = len(many)
    return facts
