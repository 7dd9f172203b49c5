"""Bad input and a broken environment exit 2 with a clear error; a bug exits 70; nothing exits 1.

Exit 1 means "regression" to CI (docs/ci.md), so a crash that exits 1 reads as a verdict.  This is
the attack corpus of issue 27 item 7, kept as tests: ``--db`` paths no file call can take, values
tampered in a real store (SQLite, and PostgreSQL where its types allow the value), values the
writer used to accept that overflow the statistics, ``pyproject.toml`` files that cannot be read or
hold absurd settings, report and site paths through a file or onto a full disk.  Every case runs
the real CLI (click's CliRunner in this process, or a subprocess for ``check``) against a real
store written through ``perfguard.store.Store``, and asserts exit 2, perfguard's own ``Error:``
message naming what is wrong, and no traceback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from perfguard.cli import main
from perfguard.errors import StoreError
from perfguard.store import CheckItemRecord, CommitRecord, MachineRecord, ResultRecord, Store
from tests.helpers.project import append_commit, git, project_repo

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
FORWARD = "bench_attention.Forward.track_time"
MACHINE = MachineRecord(key="cpu:Test CPU x2", kind="cpu", label="Test CPU (2 cores)")
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def cli(*args: str, cwd: Path | None = None) -> Result:
    """The real command line in this process (fast: no interpreter start, imports shared)."""
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        return CliRunner().invoke(main, list(args))


def assert_error(result: Result, *needles: str) -> None:
    """Exit 2 with perfguard's own message (every needle in it), never a traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Error: " in result.output and "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.fixture
def plain_repo(tmp_path: Path) -> Path:
    """A git repository with one commit on main (the commands fail before they need the suite)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base")
    return repo


# --- --db paths that no file call can take ---------------------------------------------------------

DB_PATHS = {
    "name-over-255-bytes": ("{tmp}/" + "a" * 300 + ".db", "at most 255"),
    "nul-byte": ("{tmp}/x%00y.db", "NUL byte"),
}
DB_COMMANDS = {
    "history": ["history"],
    "report-out": ["report", "--out", "{tmp}/site"],
    "db-current": ["db", "current"],
    "db-upgrade": ["db", "upgrade"],
    "accept-list": ["accept", "--list"],
    "changes-list": ["changes", "--list"],
    "run": ["run", "--bench", "nothing"],
    "check": ["check", "--baseline", "main", "--bench", "nothing"],
    "bisect": ["bisect", "--good", "main", "--bad", "main", "--bench", "nothing"],
}


@pytest.mark.parametrize("command", DB_COMMANDS.values(), ids=DB_COMMANDS.keys())
@pytest.mark.parametrize("db_path", DB_PATHS.values(), ids=DB_PATHS.keys())
def test_a_db_path_no_file_call_can_take_exits_2(
    plain_repo: Path, tmp_path: Path, db_path: tuple[str, str], command: list[str]
) -> None:
    path, message = db_path
    args = [part.format(tmp=tmp_path) for part in command]
    result = cli(*args, "--db", "sqlite:///" + path.format(tmp=tmp_path), cwd=plain_repo)
    assert_error(result, message, "--db")


# --- a store with values changed behind perfguard's back ----------------------------------------------


def _result(impl: str, samples: list[float], *, benchmark: str = FORWARD) -> ResultRecord:
    return ResultRecord(
        benchmark=benchmark,
        impl=impl,
        params={"impl": impl, "seq_len": 512, "dtype": "float32"},
        metric="time",
        unit="seconds",
        direction="lower",
        gated=True,
        samples=samples,
        method="cpu-wall",
    )


def write_small_store(url: str) -> None:
    """Two commits of main measured once each, and the check of the second against the first (id 1)."""
    first = CommitRecord(sha="1" * 40, base_sha="1" * 40, branch="main", subject="one", committed_at=T0)
    second = CommitRecord(
        sha="2" * 40,
        base_sha="2" * 40,
        branch="main",
        parents=["1" * 40],
        subject="two",
        committed_at=T0 + timedelta(days=1),
    )
    with Store.open(url) as store:
        for i, commit in enumerate((first, second)):
            slow = 1.5 if i else 1.0
            store.record_run(
                MACHINE,
                commit,
                profile="quick",
                purpose="run",
                software={"torch": "2.13.0"},
                fingerprint={},
                settings={},
                started_at=T0 + timedelta(days=i, hours=1),
                finished_at=T0 + timedelta(days=i, hours=2),
                trusted=True,
                results=[_result("dilated", [1e-3 * slow] * 5), _result("ring", [2e-3, 2.1e-3, 1.9e-3])],
            )
        store.record_check(
            MACHINE,
            second,
            first,
            baseline_ref="main",
            profile="quick",
            threshold=0.2,
            verdict="regression",
            exit_code=1,
            summary={"counts": {"regression": 1, "unchanged": 1}},
            environment={},
            config={"threshold": 0.2},
            created_at=T0 + timedelta(days=1, hours=3),
            items=[
                CheckItemRecord(
                    benchmark=FORWARD,
                    impl=impl,
                    params={"impl": impl, "seq_len": 512, "dtype": "float32"},
                    metric="time",
                    unit="seconds",
                    direction="lower",
                    gated=True,
                    verdict=verdict,
                    base_value=1e-3,
                    head_value=1e-3 * ratio,
                    ratio=ratio,
                    ci_low=ratio * 0.97,
                    ci_high=ratio * 1.03,
                    p_value=0.001,
                    noise=0.01,
                    threshold=0.2,
                    base_n=5,
                    head_n=5,
                )
                for impl, verdict, ratio in (("dilated", "regression", 1.5), ("ring", "unchanged", 1.0))
            ],
        )


def tamper(url: str, sql: str) -> None:
    """Run ``sql`` on the store behind perfguard's back (sqlite3 on a file, SQLAlchemy on PostgreSQL)."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            connection.execute(sql)
            connection.commit()
        return
    from sqlalchemy import create_engine, text

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as connection:
            connection.execute(text(sql))
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def small_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'history.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    write_small_store(url)
    return url


READERS = {
    "history": lambda url, tmp: ["history", "--db", url],
    "report": lambda url, tmp: ["report", "--check", "1", "--markdown", "-", "--db", url],
    "site": lambda url, tmp: ["report", "--out", str(tmp / "site"), "--db", url],
}

#: (sql, the column the error names, the commands that read it, on PostgreSQL too).  PostgreSQL's
#: types refuse text in a number, malformed JSON and dates; they allow NaN, 1e308 and a JSON array
#: where an object belongs.
TAMPERED: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "value-text": ("UPDATE results SET value = 'abc'", "results.value", ("history", "site"), False),
    "value-1e308": ("UPDATE results SET value = 1e308", "results.value", ("history", "site"), True),
    "value-nan": ("UPDATE results SET value = 'NaN'", "results.value", ("history", "site"), True),
    "value-negative": ("UPDATE results SET value = -1", "results.value", ("history", "site"), True),
    "q25-text": ("UPDATE results SET q25 = 'abc'", "results.q25", ("history", "site"), False),
    "n-samples-text": ("UPDATE results SET n_samples = 'x'", "results.n_samples", ("history", "site"), False),
    "params-not-json": ("UPDATE results SET params = '{'", "results.params", ("history", "site"), False),
    "params-array": ("UPDATE results SET params = '[1]'", "results.params", ("history", "site"), True),
    "direction-unknown": (
        "UPDATE results SET direction = 'sideways'",
        "results.direction",
        ("history", "site"),
        True,
    ),
    "run-started-not-a-date": (
        "UPDATE runs SET started_at = 'not a date'",
        "runs.started_at",
        ("report",),
        False,
    ),
    "run-finished-bad-month": (
        "UPDATE runs SET finished_at = '2026-13-45 99:00:00'",
        "runs.finished_at",
        ("report",),
        False,
    ),
    "run-software-not-json": ("UPDATE runs SET software = '{'", "runs.software", ("report",), False),
    "commit-date-not-a-date": (
        "UPDATE commits SET committed_at = 'yesterday'",
        "commits.committed_at",
        ("history", "report", "site"),
        False,
    ),
    "commit-parents-number": (
        "UPDATE commits SET parents = '5'",
        "commits.parents",
        ("report",),
        True,
    ),
    "machine-attributes-not-json": (
        "UPDATE machines SET attributes = '{'",
        "machines.attributes",
        ("report", "site"),
        False,
    ),
    "check-summary-not-json": ("UPDATE checks SET summary = '{'", "checks.summary", ("report",), False),
    "check-summary-array": ("UPDATE checks SET summary = '[1, 2]'", "checks.summary", ("report",), True),
    "check-environment-array": (
        "UPDATE checks SET environment = '[1]'",
        "checks.environment",
        ("report",),
        True,
    ),
    "check-config-array": ("UPDATE checks SET config = '[1]'", "checks.config", ("report",), True),
    "check-created-not-a-date": (
        "UPDATE checks SET created_at = 'x'",
        "checks.created_at",
        ("report",),
        False,
    ),
    "check-threshold-text": ("UPDATE checks SET threshold = 'x'", "checks.threshold", ("report",), False),
    "item-ratio-text": ("UPDATE check_items SET ratio = 'x'", "check_items.ratio", ("report", "site"), False),
    "item-base-value-text": (
        "UPDATE check_items SET base_value = 'x'",
        "check_items.base_value",
        ("report",),
        False,
    ),
    "item-params-not-json": ("UPDATE check_items SET params = '{'", "check_items.params", ("report",), False),
}


def _tampered_cases() -> Iterator[Any]:
    for name, (sql, column, readers, on_postgres) in TAMPERED.items():
        for reader in readers:
            backends = BACKENDS if on_postgres else ["sqlite"]
            for backend in backends:
                value = backend.values[0] if not isinstance(backend, str) else backend
                marks = backend.marks if not isinstance(backend, str) else ()
                yield pytest.param(value, sql, column, reader, id=f"{name}-{reader}-{value}", marks=marks)


@pytest.mark.parametrize(("backend", "sql", "column", "reader"), list(_tampered_cases()))
def test_a_tampered_store_value_exits_2_naming_its_column(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, sql: str, column: str, reader: str
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'history.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    write_small_store(url)
    args = READERS[reader](url, tmp_path)
    assert cli(*args).exit_code == 0  # the store as written reads fine
    shutil.rmtree(tmp_path / "site", ignore_errors=True)
    tamper(url, sql)
    assert_error(cli(*args), "cannot use", column, "restore it from a backup")


# --- values the writer used to accept ------------------------------------------------------------


@pytest.mark.parametrize(
    "samples",
    [[5e-324] * 5, [1e308, float("inf")], [1e-13] * 3, [2e18]],
    ids=["5e-324", "1e308-inf", "1e-13", "2e18"],
)
def test_the_writer_refuses_amounts_no_measurement_gives(small_store: str, samples: list[float]) -> None:
    commit = CommitRecord(sha="3" * 40, base_sha="3" * 40, committed_at=T0 + timedelta(days=2))
    with Store.open(small_store) as store:
        before = store.runs_for(MACHINE.key, "3" * 40, "quick")
        with pytest.raises(StoreError, match="outside the range of a measured amount") as info:
            store.record_run(
                MACHINE,
                commit,
                profile="quick",
                software={},
                fingerprint={},
                settings={},
                started_at=T0,
                finished_at=T0,
                results=[_result("dilated", samples)],
            )
        assert "nothing was written" in str(info.value)
        assert store.runs_for(MACHINE.key, "3" * 40, "quick") == before == []


# --- check against a store that holds such values -------------------------------------------------

BENCH = r"Work\.track_forward_flops\('dilated', 512,"


@pytest.fixture(scope="module")
def check_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The project with a docs-only commit on ``feature``: (repo, merge-base sha, HEAD sha)."""
    repo = project_repo(tmp_path_factory.mktemp("check") / "repo")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    head = append_commit(repo, "README.md", "\nA docs change.\n", "docs")
    return repo, base, head


def write_check_store(url: str, base: str, head: str) -> None:
    """Both sides of a check of ``head`` already measured on this machine: `check` measures nothing."""
    from perfguard.engine.machine import fingerprint
    from perfguard.profiles import SUITE_VERSION, resolve

    machine = fingerprint()
    profile = resolve("auto", cuda=machine.has_cuda)
    if profile.distributed:
        pytest.skip("the auto profile is distributed here: a check would measure")
    record = MachineRecord(key=machine.key, kind=machine.kind, label=machine.label, attributes={})
    with Store.open(url) as store:
        for sha, purpose in ((base, "run"), (head, "head")):
            store.record_run(
                record,
                CommitRecord(sha=sha, base_sha=sha, committed_at=T0),
                profile=profile.name,
                purpose=purpose,
                software={},
                fingerprint={},
                settings={"suite_version": SUITE_VERSION, "bench": [BENCH]},
                started_at=T0,
                finished_at=T0,
                trusted=True,
                results=[
                    ResultRecord(
                        benchmark="bench_attention.Work.track_forward_flops",
                        impl="dilated",
                        params={"impl": "dilated", "seq_len": 512, "dtype": "float32"},
                        metric="flops",
                        unit="FLOP",
                        direction="lower",
                        gated=True,
                        samples=[58720256.0] * 3,
                        method="dispatch counts",
                        info={"param_names": ["impl", "seq_len", "dtype"]},
                    )
                ],
            )


def run_check(repo: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    from tests.helpers.project import perfguard

    return perfguard(
        repo,
        "check",
        "--baseline",
        "main",
        "--bench",
        BENCH,
        "--no-verify",
        "--rounds",
        "1",
        *extra,
        db=url,
        timeout=300,
    )


@pytest.fixture(params=BACKENDS)
def check_store(request: pytest.FixtureRequest, tmp_path: Path, check_repo: tuple[Path, str, str]) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'history.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    write_check_store(url, *check_repo[1:])
    return url


def test_the_check_fixture_measures_nothing_and_passes(
    check_repo: tuple[Path, str, str], check_store: str
) -> None:
    result = run_check(check_repo[0], check_store)
    assert result.returncode == 0, result.stderr
    assert "round 1/" not in result.stderr and "using 1 stored round(s)" in result.stderr


STORED_SAMPLES = {
    "not-json": ("'not json'", ["sqlite"]),  # PostgreSQL's json type refuses it
    "5e-324": ("'[5e-324, 5e-324, 5e-324, 5e-324, 5e-324]'", BACKENDS),
    "1e308": ("'[1e308, 1e308]'", BACKENDS),
    "text": ("'[1, \"x\"]'", BACKENDS),
}


def _stored_samples_cases() -> Iterator[Any]:
    for name, (value, backends) in STORED_SAMPLES.items():
        for backend in backends:
            plain = backend if isinstance(backend, str) else backend.values[0]
            marks = () if isinstance(backend, str) else backend.marks
            yield pytest.param(plain, value, id=f"{name}-{plain}", marks=marks)


@pytest.mark.parametrize(("check_store", "value"), list(_stored_samples_cases()), indirect=["check_store"])
def test_check_on_stored_samples_it_cannot_use_exits_2(
    check_repo: tuple[Path, str, str], check_store: str, value: str
) -> None:
    tamper(check_store, f"UPDATE result_data SET samples = {value}")
    result = run_check(check_repo[0], check_store)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "result_data.samples" in result.stderr and "cannot use" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_with_a_report_path_through_a_file_exits_2_before_measuring(
    check_repo: tuple[Path, str, str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    write_check_store(url, *check_repo[1:])
    (tmp_path / "file").write_text("not a directory\n")
    result = run_check(check_repo[0], url, "--html", str(tmp_path / "file" / "report.html"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{tmp_path / 'file'} is a file, not a directory" in result.stderr
    assert "using 1 stored round(s)" not in result.stderr  # refused before anything was read or run
    with Store.open(url) as store:
        assert store.get_check(1) is None


# --- pyproject.toml ------------------------------------------------------------------------------

PYPROJECTS = {
    "invalid-utf8": (b'[tool.perfguard]\nthreshold = 0.2\nname = "\xff\xfe"\n', "not valid UTF-8"),
    "deep-arrays": (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests arrays or tables too deeply"),
    "deep-tables": (
        b"x = " + b"{a=" * 5_000 + b"1" + b"}" * 5_000 + b"\n",
        "nests arrays or tables too deeply",
    ),
    "resamples-1e11": (b"[tool.perfguard]\nbootstrap_resamples = 100000000000\n", "bootstrap_resamples"),
    "rounds-1e17": (b"[tool.perfguard]\nrounds = 100000000000000000\n", "rounds = 100000000000000000"),
    "retry-rounds-1e17": (b"[tool.perfguard.retry]\nrounds = 100000000000000000\n", "retry.rounds"),
    "seed-45-digits": (b"[tool.perfguard]\nseed = " + b"9" * 45 + b"\n", "seed"),
    "memory-floor-inf": (
        b'[tool.perfguard]\nmemory_floor_bytes = "' + b"9" * 400 + b' MiB"\n',
        "memory_floor_bytes",
    ),
}


@pytest.mark.parametrize(("text", "message"), PYPROJECTS.values(), ids=PYPROJECTS.keys())
@pytest.mark.parametrize(
    "command", [["check", "--baseline", "main", "--no-verify"], ["run"]], ids=["check", "run"]
)
def test_a_pyproject_that_cannot_be_used_exits_2_before_anything_runs(
    plain_repo: Path, tmp_path: Path, text: bytes, message: str, command: list[str]
) -> None:
    (plain_repo / "pyproject.toml").write_bytes(text)
    result = cli(*command, "--db", f"sqlite:///{tmp_path / 'h.db'}", cwd=plain_repo)
    assert_error(result, "pyproject.toml", message)
    assert not (tmp_path / "h.db").exists()  # refused before the store was opened


# --- report, JSON and site paths that cannot be written -------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    write_small_store(url)
    return url


WRITERS = {
    "report-html": lambda url, path: ["report", "--check", "1", "--html", str(path / "r.html"), "--db", url],
    "report-markdown": lambda url, path: [
        "report",
        "--check",
        "1",
        "--markdown",
        str(path / "r.md"),
        "--db",
        url,
    ],
    "report-json": lambda url, path: ["report", "--check", "1", "--json", str(path / "r.json"), "--db", url],
    "history-json": lambda url, path: ["history", "--json", str(path / "h.json"), "--db", url],
    "site": lambda url, path: ["report", "--out", str(path / "site"), "--db", url],
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_an_output_under_a_path_component_that_is_a_file_exits_2(
    sqlite_store: str, tmp_path: Path, writer: Any
) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    assert_error(
        cli(*writer(sqlite_store, tmp_path / "file")), f"{tmp_path / 'file'} is a file, not a directory"
    )
    assert (tmp_path / "file").read_text() == "not a directory\n"


@contextlib.contextmanager
def full_filesystem(path: Path) -> Iterator[Path]:
    """A real tmpfs at ``path``, filled to the last byte (needs the right to mount: root, CI)."""
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip()}); /dev/full covers files")
    try:
        with (path / "ballast").open("wb", buffering=0) as ballast, contextlib.suppress(OSError):
            while True:
                ballast.write(b"\0" * 4096)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_an_output_on_a_full_disk_exits_2(sqlite_store: str, tmp_path: Path, writer: Any) -> None:
    with full_filesystem(tmp_path / "full") as full:
        result = cli(*writer(sqlite_store, full))
        assert_error(result, "No space left on device", "free space")
        assert sorted(p.name for p in full.iterdir() if not p.name.startswith("site")) == ["ballast"]


@pytest.mark.parametrize(
    "writer", [w for k, w in WRITERS.items() if k != "site"], ids=[k for k in WRITERS if k != "site"]
)
def test_an_output_file_that_is_dev_full_exits_2_and_the_device_stays(
    sqlite_store: str, tmp_path: Path, writer: Any
) -> None:
    """A link to /dev/full: the write goes to the device (disk full), never a rename over the link."""
    args = writer(sqlite_store, tmp_path)
    target = Path(next(a for a in args if a.startswith(str(tmp_path)) and not a.endswith(".db")))
    target.symlink_to("/dev/full")
    assert_error(cli(*args), "No space left on device")
    assert target.is_symlink() and os.readlink(target) == "/dev/full"


# --- an unexpected exception: exit 70 and where the traceback went ----------------------------------

CRASHING_CLI = """
import click, sys
from perfguard.cli import main

@main.command()
def boom():
    raise ZeroDivisionError("a planted bug")

@main.command()
def click_default():
    raise click.ClickException("an error with click's default exit code")

main()
"""


def _crashing(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "PYTHONPATH": str(root), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", CRASHING_CLI, *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unexpected_exception_exits_70_with_a_short_message_and_the_traceback_in_a_file(
    tmp_path: Path,
) -> None:
    result = _crashing("boom", env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 70  # perfguard.errors.EXIT_INTERNAL, documented in docs/ci.md
    assert "Traceback" not in result.stderr
    assert "internal error (a bug in perfguard, exit 70): ZeroDivisionError: a planted bug" in result.stderr
    [crash] = tmp_path.glob("perfguard-crash-*.txt")
    assert f"the traceback is in {crash}" in result.stderr
    text = crash.read_text()
    assert (
        text.startswith("Traceback")
        and "in boom" in text
        and text.endswith("ZeroDivisionError: a planted bug\n")
    )


def test_a_click_error_with_its_default_code_exits_2_not_1() -> None:
    result = _crashing("click-default")
    assert result.returncode == 2, result.stderr
    assert "Error: an error with click's default exit code" in result.stderr


def test_help_lists_the_exit_codes() -> None:
    output = cli("--help").output
    assert "2 usage or environment error" in output and "70 internal error" in output


def test_the_ci_step_annotates_exit_70_as_an_internal_error_with_perfguards_message(tmp_path: Path) -> None:
    from perfguard.github.commands import describe_exit

    result = _crashing("boom", env={"TMPDIR": str(tmp_path)})
    annotation = describe_exit("check", result.returncode, result.stderr)
    assert annotation is not None
    title, message = annotation
    assert title == "perfguard check crashed on an internal error (exit 70)"
    assert message.startswith(
        "internal error (a bug in perfguard, exit 70): ZeroDivisionError: a planted bug"
    )


def test_a_stored_traceback_is_summarised_to_where_it_came_from_and_its_exception() -> None:
    """A failed item's reason (terminal, Markdown, HTML) shows one line, not a rank's traceback."""
    from perfguard.errors import error_summary

    stored = (
        'rank 0 of 2: Traceback (most recent call last):\n  File "x.py", line 3, in run\n    fn()\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    assert error_summary(stored) == (
        "rank 0 of 2: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert error_summary("rank 0: killed by SIGTERM, rank 1: killed by SIGSEGV") == (
        "rank 0: killed by SIGTERM, rank 1: killed by SIGSEGV"
    )
    assert error_summary(None) == "no error message"
    assert len(error_summary("x" * 1000)) == 300
