"""``perfguard history`` through the real CLI on real SQLite files (and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from perfguard.store import CommitRecord, MachineRecord, ResultRecord, Store

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 4, 1, 9, 30, tzinfo=timezone.utc)
GPU = MachineRecord(key="NVIDIA H100 80GB HBM3 x1", kind="cuda", label="H100")
CPU = MachineRecord(key="cpu:AMD EPYC 7B13", kind="cpu", label="EPYC")
FORWARD = "bench_attention.Forward.track_time"


def sha(n: int) -> str:
    return hashlib.sha1(str(n).encode()).hexdigest()


MEMORY = "bench_attention.PeakMemory.track_forward"


def perfguard(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "PERFGUARD_DB"}
    environment["PYTHONPATH"] = str(ROOT)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def fill(url: str) -> None:
    """Three commits on the GPU (ring gets 50% slower at the third), one on the CPU."""
    with Store.open(url) as store:
        for n, ring_factor in ((1, 1.0), (2, 1.0), (3, 1.5)):
            results = []
            for impl, base in (("dilated", 2e-3), ("ring", 1e-3)):
                factor = ring_factor if impl == "ring" else 1.0
                params = {"impl": impl, "seq_len": 1024, "dtype": "bfloat16"}
                results.append(
                    ResultRecord(
                        benchmark=FORWARD,
                        impl=impl,
                        params=params,
                        metric="time",
                        unit="seconds",
                        direction="lower",
                        gated=True,
                        samples=[base * factor * (1 + 0.001 * i) for i in range(30)],
                    )
                )
                results.append(
                    ResultRecord(
                        benchmark=MEMORY,
                        impl=impl,
                        params=params,
                        metric="memory",
                        unit="bytes",
                        direction="lower",
                        gated=True,
                        samples=[3 * 2**30 * factor],
                    )
                )
            store.record_run(
                GPU,
                CommitRecord(
                    sha=sha(n),
                    base_sha=sha(n),
                    committed_at=T0 + timedelta(days=n),
                    branch="main",
                    subject=f"change {n}",
                ),
                profile="production",
                software={},
                fingerprint={},
                settings={},
                started_at=T0,
                finished_at=T0,
                results=results,
            )
        cpu_params = {"impl": "dilated", "seq_len": 256, "dtype": "float32"}
        store.record_run(
            CPU,
            CommitRecord(sha=sha(3), base_sha=sha(3), committed_at=T0 + timedelta(days=3)),
            profile="quick",
            software={},
            fingerprint={},
            settings={},
            started_at=T0,
            finished_at=T0,
            results=[
                ResultRecord(
                    benchmark=FORWARD,
                    impl="dilated",
                    params=cpu_params,
                    metric="time",
                    unit="seconds",
                    direction="lower",
                    gated=True,
                    samples=[0.25, 0.26, 0.27],
                )
            ],
        )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


@pytest.fixture
def filled(repo: Path) -> Path:
    """A repository whose default store (.perfguard/history.db) holds a small history."""
    (repo / ".perfguard").mkdir()
    fill(f"sqlite:///{repo / '.perfguard' / 'history.db'}")
    return repo


def test_history_table_shows_the_series(filled: Path) -> None:
    result = perfguard("history", cwd=filled)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "5 series, 13 points" in out
    assert "NVIDIA H100 80GB HBM3 x1" in out and "cpu:AMD EPYC 7B13" in out
    assert "Forward.track_time" in out and "PeakMemory.track_forward" in out
    assert "dtype=bfloat16,impl=ring,seq_len=1024" in out
    assert sha(3)[:10] in out
    assert "2026-04-04 09:30" in out
    assert "1.01 ms" in out  # ring's median before the slowdown, in readable units (perfguard.units)
    assert "1.52 ms" in out and "+50.0%" in out  # and after
    assert "4.50 GiB" in out  # memory in bytes shown as GiB
    assert "260 ms" in out  # the CPU series


def test_history_filters(filled: Path) -> None:
    ring = perfguard("history", "--impl", "ring", cwd=filled)
    assert ring.returncode == 0
    assert "impl=ring" in ring.stdout and "impl=dilated" not in ring.stdout
    cpu = perfguard("history", "--machine", "epyc", "--benchmark", "forward", cwd=filled)
    assert "1 series, 1 points" in cpu.stdout and "H100" not in cpu.stdout
    none = perfguard("history", "--impl", "nonexistent", cwd=filled)
    assert none.returncode == 0
    assert "no stored series match impl='nonexistent'" in none.stderr
    assert "stored impl values: dilated, ring" in none.stderr


def test_history_json(filled: Path, tmp_path: Path) -> None:
    result = perfguard("history", "--json", "-", "--limit", "2", "--impl", "ring", cwd=filled)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["store"].endswith(".perfguard/history.db")
    series = {(s["benchmark"], s["machine_key"]): s for s in document["series"]}
    forward = series[(FORWARD, GPU.key)]
    assert forward["params"] == {"impl": "ring", "seq_len": 1024, "dtype": "bfloat16"}
    assert [p["sha"] for p in forward["points"]] == [sha(2), sha(3)]  # the newest two, oldest first
    assert forward["points"][1]["value"] == pytest.approx(1.5e-3 * 1.0145)
    assert forward["points"][1]["n_samples"] == 30
    assert forward["points"][1]["committed_at"] == "2026-04-04T09:30:00+00:00"
    out_file = tmp_path / "history.json"
    assert perfguard("history", "--json", str(out_file), cwd=filled).returncode == 0
    assert len(json.loads(out_file.read_text())["series"]) == 5


def test_history_without_a_store_creates_nothing(repo: Path) -> None:
    result = perfguard("history", cwd=repo)
    assert result.returncode == 0
    assert "no history store here yet" in result.stderr
    assert not (repo / ".perfguard").exists()


def test_history_on_a_missing_or_unreachable_database_exits_2(repo: Path, tmp_path: Path) -> None:
    missing = perfguard("history", "--db", f"sqlite:///{tmp_path / 'typo.db'}", cwd=repo)
    assert missing.returncode == 2
    assert "there is no history store at" in missing.stderr and "hint:" in missing.stderr
    assert not (tmp_path / "typo.db").exists()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = perfguard(
        "history", cwd=repo, env={"PERFGUARD_DB": f"postgresql://bob:hunter2@127.0.0.1:{port}/perf"}
    )
    assert unreachable.returncode == 2
    assert f"postgresql+psycopg://bob:***@127.0.0.1:{port}/perf" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr
    unknown = perfguard("history", "--db", "oracle://scott:tiger@db/orcl", cwd=repo)
    assert unknown.returncode == 2 and "unsupported database 'oracle'" in unknown.stderr


@pytest.mark.postgres
def test_history_on_postgresql(repo: Path, postgres_url: str) -> None:
    fill(postgres_url)
    result = perfguard("history", "--json", "-", "--db", postgres_url, cwd=repo)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert len(document["series"]) == 5
    assert "perfguard-test-secret" not in result.stdout
    table = perfguard(
        "history", "--impl", "ring", "--machine", "H100", cwd=repo, env={"PERFGUARD_DB": postgres_url}
    )
    assert table.returncode == 0 and "+50.0%" in table.stdout


HOSTILE = (
    "[/oops]",
    "ring[fp8]",
    "[bold red]not bold[/]",
    "<script>alert('x')</script>",
    "x'); DROP TABLE runs; --",
    '=HYPERLINK("http://evil.example","click")',
    "注意力 😀 ∑",
    "../../etc/passwd",
)


def fill_hostile(url: str) -> None:
    """One series per hostile name: as the machine key and the implementation (so the params)."""
    with Store.open(url) as store:
        for n, name in enumerate((*HOSTILE, "evil\x1b[2J\u202egnp.exe"), start=1):
            store.record_run(
                MachineRecord(key=name, kind="cpu", label=name),
                CommitRecord(sha=sha(n), base_sha=sha(n), committed_at=T0 + timedelta(days=n), subject=name),
                profile="quick",
                software={},
                fingerprint={},
                settings={},
                started_at=T0,
                finished_at=T0,
                results=[
                    ResultRecord(
                        benchmark=FORWARD,
                        impl=name,
                        params={"impl": name, "seq_len": 512},
                        metric="time",
                        unit="seconds",
                        direction="lower",
                        gated=True,
                        samples=[1e-3, 2e-3, 3e-3],
                    )
                ],
            )


def test_history_shows_hostile_names_as_written(repo: Path, tmp_path: Path) -> None:
    """D2: rich markup in a name crashed `perfguard history` ([/oops]) or was eaten (ring[fp8])."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    fill_hostile(url)
    table = perfguard("history", "--db", url, cwd=repo, env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    for name in HOSTILE:
        assert f" {name} " in table.stdout, name  # the machine column, verbatim
        assert f"impl={name},seq_len=512" in table.stdout, name
    # Control characters and bidi overrides are spelled out, never sent to the terminal.
    assert "evil\\x1b[2J\\u202egnp.exe" in table.stdout
    assert "\x1b" not in table.stdout and "\u202e" not in table.stdout
    document = json.loads(perfguard("history", "--db", url, "--json", "-", cwd=repo).stdout)
    assert {s["impl"] for s in document["series"]} == {*HOSTILE, "evil\x1b[2J\u202egnp.exe"}
    # The "did you mean" message lists stored names as written too.
    none = perfguard("history", "--db", url, "--impl", "[nope]", cwd=repo)
    assert none.returncode == 0 and "no stored series match impl='[nope]'" in none.stderr
    assert "ring[fp8]" in none.stderr and "\x1b" not in none.stderr


def test_history_opens_the_store_read_only(repo: Path, tmp_path: Path) -> None:
    """history never writes: a snapshot (read-only, rollback journal) stays as it is."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    fill(url)
    with Store.open(url) as store:
        snapshot = store.snapshot(tmp_path / "snapshot.db")
    before = snapshot.read_bytes()
    result = perfguard("history", "--db", f"sqlite:///{snapshot}", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert "5 series" in result.stdout
    assert snapshot.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db", "project", "snapshot.db"]
