"""The README flow as a store: what a new user's two checks and ``perfguard report`` leave behind.

Written through the real ``perfguard.store.Store`` API, the verdicts computed by the real
``perfguard.compare`` from seeded samples (so they are deterministic and consistent with each
other: derived items follow their timing, suspects are re-measured), on a 2-core CPU machine:

* ``commits`` commits of ``main``, the last one measured as a check's baseline (3 rounds), the
  earlier ones by ``perfguard run``; with two commits one series moves by +21% between them
  though no attention code changed (CPU noise between two sessions);
* **check A/A** (``aa_id``): the last commit of main against a fresh measurement of itself, with
  the noisy block-sparse timings ``unstable``; its head side's environment recorded without
  settings (what ``perfguard check`` records for a freshly measured side);
* **check planted** (``planted_id``): a branch whose ``improved`` forward pass does 2x the work
  (100 extra ``aten::add`` per call): its forward and forward+backward times regress, are
  re-measured and confirmed, and ``summary["underneath"]`` holds the op-count difference.
* with ``acceptances=True``, the same pull request once more with its commit message's
  ``Perfguard-Accept:`` trailers read and applied by the real :mod:`perfguard.accept` (after stage
  2, as the gate applies them, the work metrics compared by :func:`perfguard.compare.compare_suite`):
  **accepted** (``accepted["approved"]``: a maintainer approved ``improved * <=2.8``: every
  regression accepted, the check passes; a second trailer without a ceiling is ignored, with why),
  **over the ceiling** (``accepted["over"]``: ``<=2.1`` approved; the forward aten ops, x2.72, stay
  regressions) and **unapproved** (``accepted["unapproved"]``: nobody approved the trailers; all
  ignored, the check fails).

Every implementation x (512, 1024) x float32 has the quick profile's benchmarks: forward and
forward+backward time (process CPU time), peak memory (skipped: no CUDA), tokens/s and TFLOP/s
(derived from the forward samples), and the work metrics of issue 12 (FLOPs, aten ops, bytes
allocated; CUDA kernels skipped).  Work metrics are new to the store: until issue 12 adds their
metric names to ``perfguard.store.records.METRICS`` they are allowed for the writes here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from perfguard.accept import Applied, Approval, CommitMessage, apply_acceptances, trailer_acceptances
from perfguard.compare import Measurement, SuiteComparison, apply_retry, compare_suite
from perfguard.config import Config
from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, ResultRecord, RunRecord, Store
from perfguard.store import records as store_records

MODULE = "bench_attention"
FORWARD = f"{MODULE}.Forward.track_time"
BACKWARD = f"{MODULE}.ForwardBackward.track_time"
TOKENS = f"{MODULE}.Throughput.track_tokens_per_second"
TFLOPS = f"{MODULE}.Throughput.track_tflops"
MEMORY = (f"{MODULE}.PeakMemory.track_forward", f"{MODULE}.PeakMemory.track_forward_backward")
#: Work metrics (issue 12): benchmark -> (metric, unit).
WORK = {
    f"{MODULE}.Work.track_forward_flops": ("flops", "FLOP"),
    f"{MODULE}.Work.track_forward_backward_flops": ("flops", "FLOP"),
    f"{MODULE}.Work.track_forward_ops": ("ops", "aten ops"),
    f"{MODULE}.Work.track_forward_backward_ops": ("ops", "aten ops"),
    f"{MODULE}.Work.track_forward_allocated": ("allocated", "bytes"),
    f"{MODULE}.Work.track_forward_backward_allocated": ("allocated", "bytes"),
}
KERNELS = (f"{MODULE}.Work.track_forward_kernels", f"{MODULE}.Work.track_forward_backward_kernels")
WORK_METRICS = ("flops", "ops", "kernels", "allocated")

IMPLS = (
    "dilated",
    "improved",
    "ring",
    "hilbert_ring",
    "block_sparse_ring",
    "multihead_dilated",
    "multihead_improved",
    "multihead_ring",
    "multihead_block_sparse_ring",
)
SEQ_LENS = (512, 1024)
PLANTED = "improved"
EXTRA_ADDS = 100  # aten::add calls the planted commit adds to each forward call
T0 = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)
MACHINE = MachineRecord(
    key="cpu:intel-r-xeon-r-processor x2",
    kind="cpu",
    label="Intel(R) Xeon(R) Processor ×2",
    attributes={"cores": 2},
)
SOFTWARE = {"torch": "2.13.0+cpu", "python": "3.11.7", "asv": "0.6.6", "perfguard": "0.1.0", "numpy": "2.1.3"}
FINGERPRINT = {"cpu": {"model": "Intel(R) Xeon(R) Processor", "cores": 2}, "hostname": "vm-1"}
SETTINGS = {
    "suite_version": "3",
    "bench": None,
    "device": "cpu",
    "timer": {"threads": 1, "tf32": False, "matmul_precision": "highest"},
}


#: The planted pull request's author and its commit message's acceptances (docs/living-with-regressions.md).
PR_AUTHOR = "Pat Author <pat@example.invalid>"
ACCEPT_REASON = "the exact reference pass runs twice, on purpose"
#: scenario -> (the commit message's trailers, the maintainer who approved them or None)
ACCEPT_SCENARIOS: dict[str, tuple[str, str | None]] = {
    "approved": (
        f'Perfguard-Accept: improved * <=2.8 "{ACCEPT_REASON}"\n'
        'Perfguard-Accept: improved Forward.track_time "forgot the ceiling"\n',
        "maint",
    ),
    "over": (f'Perfguard-Accept: improved * <=2.1 "{ACCEPT_REASON}"\n', "maint"),
    "unapproved": (f'Perfguard-Accept: improved * <=2.8 "{ACCEPT_REASON}"\n', None),
}


@dataclass
class ReadmeFacts:
    url: str
    main_shas: list[str] = field(default_factory=list)
    feature_sha: str = ""
    aa_id: int = 0
    planted_id: int = 0
    aa: SuiteComparison | None = None
    planted: SuiteComparison | None = None
    step_impl: str = "multihead_dilated"  # the series that moves +21% between two main commits
    accepted: dict[str, int] = field(default_factory=dict)  # scenario -> check id (acceptances=True)
    applied: dict[str, Applied] = field(default_factory=dict)  # scenario -> what perfguard.accept did


def _params(impl: str, n: int) -> dict[str, Any]:
    return {"impl": impl, "seq_len": n, "dtype": "float32"}


def _seconds(impl: str, n: int, backward: bool) -> float:
    """Typical CPU process time of one call (quick profile, 1 x n x 4 x 32)."""
    base = {"dilated": 1.0, "improved": 0.8, "ring": 1.6, "hilbert_ring": 1.9, "block_sparse_ring": 2.4}
    scale = base.get(impl.removeprefix("multihead_"), 1.0) * (1.3 if impl.startswith("multihead") else 1.0)
    return 1e-3 * scale * (n / 512) ** 1.6 * (2.7 if backward else 1.0)


def _noise(impl: str) -> tuple[float, float]:
    """(per-call sigma, per-round sigma): block-sparse's process CPU time is the noisy one here."""
    return (0.12, 0.12) if "block_sparse" in impl else (0.02, 0.015)


def _flops(n: int, backward: bool) -> float:
    return 4.0 * n * n * 4 * 32 * (3.0 if backward else 1.0)


def _ops(impl: str, backward: bool) -> int:
    base = {"dilated": 96, "improved": 58, "ring": 212, "hilbert_ring": 240, "block_sparse_ring": 180}
    n = base.get(impl.removeprefix("multihead_"), 100) + (14 if impl.startswith("multihead") else 0)
    return n * (3 if backward else 1)


def _allocated(impl: str, n: int, backward: bool) -> float:
    return float(n * 4 * 32 * 4 * (12 if "block_sparse" in impl else 9) * (2.5 if backward else 1.0))


def _time_rounds(
    impl: str, n: int, backward: bool, factor: float, rng: np.random.Generator, rounds: int
) -> list[list[float]]:
    call, round_ = _noise(impl)
    value = _seconds(impl, n, backward) * factor
    return [list(value * rng.lognormal(rng.normal(0.0, round_), call, 15)) for _ in range(rounds)]


def measure(
    *,
    planted: bool,
    rng: np.random.Generator,
    rounds: int,
    shift: dict[str, float] | None = None,
    impls: tuple[str, ...] = IMPLS,
) -> list[list[ResultRecord]]:
    """``rounds`` rounds of results (one list per round), as asvrun would parse them."""
    shift = shift or {}
    per_round: list[list[ResultRecord]] = [[] for _ in range(rounds)]
    for impl in impls:
        for n in SEQ_LENS:
            params = _params(impl, n)
            factor = (2.0 if planted and impl == PLANTED else 1.0) * shift.get(impl, 1.0)
            fwd = _time_rounds(impl, n, False, factor, rng, rounds)
            bwd = _time_rounds(impl, n, True, factor, rng, rounds)
            for k in range(rounds):
                out = per_round[k]

                def rec(
                    benchmark: str, metric: str, unit: str, direction: str, gated: bool, **kw: Any
                ) -> None:
                    out.append(  # noqa: B023 - called at once, in this iteration
                        ResultRecord(
                            benchmark=benchmark,
                            impl=impl,  # noqa: B023
                            params=params,  # noqa: B023
                            metric=metric,
                            unit=unit,
                            direction=direction,
                            gated=gated,
                            **kw,
                        )
                    )

                rec(FORWARD, "time", "seconds", "lower", True, samples=fwd[k], method="cpu-time")
                rec(BACKWARD, "time", "seconds", "lower", True, samples=bwd[k], method="cpu-time")
                for bench in MEMORY:
                    rec(bench, "memory", "bytes", "lower", True, status="skipped", error="needs CUDA")
                rec(
                    TOKENS,
                    "throughput",
                    "tokens/s",
                    "higher",
                    False,
                    samples=[n / s for s in fwd[k]],
                    method="cpu-time",
                )
                rec(
                    TFLOPS,
                    "efficiency",
                    "TFLOP/s",
                    "higher",
                    False,
                    samples=[_flops(n, False) / 1e12 / s for s in fwd[k]],
                    method="cpu-time",
                )
                for bench, (metric, unit) in WORK.items():
                    backward = "forward_backward" in bench
                    if metric == "flops":
                        value = _flops(n, backward)
                    elif metric == "ops":
                        value = _ops(impl, backward) + (EXTRA_ADDS if planted and impl == PLANTED else 0)
                    else:
                        value = _allocated(impl, n, backward)
                    rec(bench, metric, unit, "lower", True, samples=[float(value)], method="count")
                for bench in KERNELS:
                    rec(bench, "kernels", "kernels", "lower", True, status="skipped", error="needs CUDA")
    return per_round


def _measurements(rounds: list[list[ResultRecord]], *, work: bool) -> list[Measurement]:
    """What compare sees (``compare.measurements_from_rounds`` on stored rounds); work metrics apart."""
    by_key: dict[tuple[str, str], list[ResultRecord]] = {}
    for results in rounds:
        for r in results:
            if (r.metric in WORK_METRICS) == work:
                by_key.setdefault((r.benchmark, r.params_key), []).append(r)
    return [Measurement.from_results(group) for group in by_key.values()]  # type: ignore[arg-type]


def _work_items(base: list[list[ResultRecord]], head: list[list[ResultRecord]], config: Config) -> list[Any]:
    """Work metrics are gated like memory: exact counts, a rise over the threshold is a regression."""
    out = []
    head_by = {(r.benchmark, r.params_key): r for r in head[0]}
    for b in base[0]:
        if b.metric not in WORK_METRICS:
            continue
        h = head_by[(b.benchmark, b.params_key)]
        fields: dict[str, Any] = {
            "benchmark": b.benchmark,
            "impl": b.impl,
            "params": dict(b.params),
            "metric": b.metric,
            "unit": b.unit,
            "direction": "lower",
            "threshold": config.threshold,
        }
        if b.status != "ok" or h.status != "ok":
            out.append(
                CheckItemRecord(
                    **fields, gated=False, verdict="skipped", reason=f"skipped in head: {h.error}"
                )
            )
            continue
        ratio = h.value / b.value  # type: ignore[operator]
        verdict = "regression" if ratio > 1 + config.threshold else "unchanged"
        out.append(
            CheckItemRecord(
                **fields,
                gated=True,
                verdict=verdict,
                base_value=b.value,
                head_value=h.value,
                ratio=ratio,
                method="count",
                base_n=1,
                head_n=1,
                reason=f"{b.value:,.0f} → {h.value:,.0f} {b.unit} ({ratio:.3f}×)",
            )
        )
    return out


def _run_records(
    rounds: list[list[ResultRecord]],
    purpose: str,
    start: datetime,
    *,
    software: dict[str, str] | None = None,
    trusted: bool = True,
) -> list[RunRecord]:
    """Rounds as the README flow stores them: trusted on main (run, A/A check), not for a branch."""
    return [
        RunRecord(
            trusted=trusted,
            profile="quick",
            purpose=purpose,
            round=k,
            software={**SOFTWARE, **(software or {})},
            fingerprint=FINGERPRINT,
            settings=SETTINGS,
            command="perfguard check --baseline main",
            started_at=start + timedelta(minutes=3 * k),
            finished_at=start + timedelta(minutes=3 * k + 2),
            results=results,
        )
        for k, results in enumerate(rounds)
    ]


def _check(
    store: Store,
    config: Config,
    head: CommitRecord,
    base: CommitRecord,
    base_rounds: list[list[ResultRecord]],
    head_rounds: list[list[ResultRecord]],
    *,
    rng: np.random.Generator,
    when: datetime,
    planted: bool,
    software: dict[str, str] | None = None,
) -> tuple[int, SuiteComparison]:
    """Stage 1, the re-measurement of suspects (stored as retry runs), the work items; record it."""
    first = compare_suite(
        _measurements(base_rounds, work=False), _measurements(head_rounds, work=False), config
    )
    result, retried = first, 0
    if first.suspects:
        suspects = {s.impl for s in first.suspects}
        retry_base = measure(
            planted=False, rng=rng, rounds=config.retry.rounds, impls=tuple(sorted(suspects))
        )
        retry_head = measure(
            planted=planted, rng=rng, rounds=config.retry.rounds, impls=tuple(sorted(suspects))
        )
        trusted = head.sha == base.sha  # an A/A check on main; a branch's check stores nothing trusted
        store.record_runs(
            MACHINE, base, _run_records(retry_base, "retry", when - timedelta(minutes=20), trusted=trusted)
        )
        store.record_runs(
            MACHINE,
            head,
            _run_records(
                retry_head, "retry", when - timedelta(minutes=19), software=software, trusted=trusted
            ),
        )
        result = apply_retry(
            first, _measurements(retry_base, work=False), _measurements(retry_head, work=False), config
        )
        retried = len(first.suspects)
    items = [CheckItemRecord(**item.as_row()) for item in result.items]
    items += _work_items(base_rounds, head_rounds, config)
    summary: dict[str, Any] = {
        "retried": retried,
        "rounds": {"base": len(base_rounds), "head": len(head_rounds)},
    }
    check_id = _store_check(store, config, head, base, items, when=when, software=software, summary=summary)
    return check_id, result


def _underneath() -> list[dict[str, Any]]:
    """What changed underneath the planted implementation's forward time (its extra adds)."""
    return [
        {
            "impl": PLANTED,
            "benchmark": FORWARD,
            "params_key": store_records.params_key(_params(PLANTED, n)),
            "kind": "aten ops",
            "source": "dispatch counts, one call",
            "rows": [
                {
                    "name": "aten::add",
                    "base_count": 0,
                    "head_count": EXTRA_ADDS,
                    "base_ms": None,
                    "head_ms": None,
                },
                {
                    "name": "aten::empty_like",
                    "base_count": 4,
                    "head_count": 6,
                    "base_ms": None,
                    "head_ms": None,
                },
            ],
        }
        for n in SEQ_LENS
    ]


def _store_check(
    store: Store,
    config: Config,
    head: CommitRecord,
    base: CommitRecord,
    items: list[CheckItemRecord],
    *,
    when: datetime,
    software: dict[str, str] | None,
    summary: dict[str, Any],
    regressed: bool = False,
) -> int:
    """Record a check as ``perfguard check`` does (``regressed``: something regressed before any
    acceptance applied, so the summary holds what changed underneath, as the gate's does)."""
    failing = [i for i in items if i.gated and i.verdict in ("regression", "broken", "failed")]
    counts: dict[str, int] = {}
    for i in items:
        counts[i.verdict] = counts.get(i.verdict, 0) + 1
    summary = {"counts": counts, **summary, "dirty": False, "bench": [], "seconds": 512.3}
    if failing or regressed:
        summary["underneath"] = _underneath()
    return store.record_check(
        MACHINE,
        head,
        base,
        baseline_ref="main",
        profile="quick",
        threshold=config.threshold,
        verdict="regression" if failing else "pass",
        exit_code=1 if failing else 0,
        summary=summary,
        environment={
            # What perfguard check records: the stored base run's software, settings and
            # fingerprint, but for a side it just measured, its software and fingerprint only.
            "base": {**SOFTWARE, "settings": SETTINGS, "fingerprint": FINGERPRINT},
            "head": {**SOFTWARE, **(software or {}), "fingerprint": FINGERPRINT},
        },
        config=config.to_dict(),
        command="perfguard check --baseline main",
        created_at=when,
        items=items,
    )


def _accepted_checks(
    store: Store,
    config: Config,
    facts: ReadmeFacts,
    head: CommitRecord,
    base: CommitRecord,
    base_rounds: list[list[ResultRecord]],
    head_rounds: list[list[ResultRecord]],
    *,
    when: datetime,
) -> None:
    """The planted check again for each of :data:`ACCEPT_SCENARIOS`, acceptances applied as the gate does."""
    assert facts.planted is not None
    work = compare_suite(_measurements(base_rounds, work=True), _measurements(head_rounds, work=True), config)
    final = SuiteComparison(items=(*facts.planted.items, *work.items))
    for k, (name, (trailers, approved_by)) in enumerate(ACCEPT_SCENARIOS.items()):
        message = CommitMessage(head.sha, PR_AUTHOR, f"{head.subject}\n\n{trailers}")
        approval = Approval(approved_by, frozenset([head.sha])) if approved_by else None
        found, ignored = trailer_acceptances([message], approval=approval)
        applied = apply_acceptances(final, found, ignored=ignored)
        items = [CheckItemRecord(**item.as_row()) for item in applied.result.items]
        summary = {
            "retried": sum(1 for i in facts.planted.items if i.retried and i.gated),
            "rounds": {"base": len(base_rounds), "head": len(head_rounds)},
            "acceptances": applied.summary().to_json(),
        }
        facts.accepted[name] = _store_check(
            store,
            config,
            head,
            base,
            items,
            when=when + timedelta(minutes=10 * (k + 1)),
            software=None,
            summary=summary,
            regressed=True,
        )
        facts.applied[name] = applied


def build_readme_store(
    path: Any, *, commits: int = 1, software: dict[str, str] | None = None, acceptances: bool = False
) -> ReadmeFacts:
    """The store described in the module docstring, in a new SQLite file at ``path``.

    ``software``: the planted check's head ran this software instead (a real difference).
    ``acceptances``: also the checks of the planted pull request with its acceptances applied.
    """
    url = f"sqlite:///{path}"
    facts = ReadmeFacts(url=url)
    rng = np.random.default_rng(14)
    config = Config()
    main: list[CommitRecord] = []
    for i in range(commits):
        sha = f"{0xA0 + i:02x}" + "5eed" * 9 + f"{i:02x}"
        main.append(
            CommitRecord(
                sha=sha,
                base_sha=sha,
                branch="main",
                parents=[main[-1].sha] if main else [],
                subject="README: how long each command takes" if i else "perfguard: first commit",
                author="dev",
                committed_at=T0 + timedelta(hours=3 * i),
            )
        )
        facts.main_shas.append(sha)
    feature = CommitRecord(
        sha="f" * 8 + "1ab" * 10 + "ff",
        base_sha="f" * 8 + "1ab" * 10 + "ff",
        branch="slow-improved",
        parents=[main[-1].sha],
        subject="improved: 100 extra adds per call (planted)",
        author="dev",
        committed_at=T0 + timedelta(hours=3 * commits + 1),
    )
    facts.feature_sha = feature.sha
    last = main[-1]
    with Store.open(url) as store:
        for i, commit in enumerate(main[:-1]):
            rounds = measure(planted=False, rng=rng, rounds=3)
            store.record_runs(
                MACHINE, commit, _run_records(rounds, "run", T0 + timedelta(hours=3 * i, minutes=10))
            )
        # The baseline of both checks: the last main commit, measured by the A/A check (3 rounds);
        # with two commits one series lands +21% higher in this session (no code changed).
        shift = {facts.step_impl: 1.21} if commits > 1 else None
        base_rounds = measure(planted=False, rng=rng, rounds=3, shift=shift)
        when = last.committed_at + timedelta(minutes=30)
        store.record_runs(MACHINE, last, _run_records(base_rounds, "baseline", when))
        aa_head = measure(planted=False, rng=rng, rounds=3, shift=shift)
        store.record_runs(MACHINE, last, _run_records(aa_head, "head", when + timedelta(minutes=10)))
        facts.aa_id, facts.aa = _check(
            store,
            config,
            last,
            last,
            base_rounds,
            aa_head,
            rng=rng,
            when=when + timedelta(minutes=40),
            planted=False,
        )
        head_rounds = measure(planted=True, rng=rng, rounds=3, shift=shift)
        when = feature.committed_at + timedelta(minutes=5)
        head_runs = _run_records(head_rounds, "head", when, software=software, trusted=False)
        store.record_runs(MACHINE, feature, head_runs)
        facts.planted_id, facts.planted = _check(
            store,
            config,
            feature,
            last,
            base_rounds,
            head_rounds,
            rng=rng,
            when=when + timedelta(minutes=30),
            planted=True,
            software=software,
        )
        if acceptances:
            _accepted_checks(
                store,
                config,
                facts,
                feature,
                last,
                base_rounds,
                head_rounds,
                when=when + timedelta(minutes=30),
            )
    return facts
