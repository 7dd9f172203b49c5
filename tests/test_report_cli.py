"""``perfguard report`` and ``perfguard history`` through the real CLI (a subprocess)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from report_store import XSS, HistoryFacts, build_check_store, build_history_store

ROOT = Path(__file__).resolve().parents[1]


def perfguard(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfguard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        timeout=120,
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> HistoryFacts:
    return build_history_store(tmp_path_factory.mktemp("cli") / "history.db")


def test_report_out_writes_the_site(history: HistoryFacts, tmp_path: Path) -> None:
    out = tmp_path / "site"
    result = perfguard("report", "--out", str(out), "--db", history.url)
    assert result.returncode == 0, result.stderr
    assert "29 series over 12 commits on 2 machines" in result.stderr
    for name in ("index.html", "compare.html", "memory.html", "regressions.html", "data/history.csv"):
        assert (out / name).is_file(), name
    # A second run replaces its own site...
    again = perfguard("report", "--out", str(out), "--db", history.url)
    assert again.returncode == 0, again.stderr
    # ...but never a directory that holds something else.
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    refused = perfguard("report", "--out", str(other), "--db", history.url)
    assert refused.returncode == 2
    assert "holds no perfguard site" in refused.stderr
    assert (other / "precious.txt").read_text() == "keep me"


def test_report_check_writes_all_three_forms(tmp_path: Path) -> None:
    checks = build_check_store(tmp_path / "checks.db")
    html, js = tmp_path / "r" / "check.html", tmp_path / "r" / "check.json"
    result = perfguard(
        "report",
        "--check",
        str(checks.mixed_id),
        "--markdown",
        "-",
        "--html",
        str(html),
        "--json",
        str(js),
        "--db",
        checks.url,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("<!-- perfguard-report -->\n### ❌ perfguard: 2 regressions")
    assert "<script>" not in html.read_text() or html.read_text().count("<script>") == 1
    doc = json.loads(js.read_text())
    assert doc["check_id"] == checks.mixed_id and doc["verdict"] == "regression"
    assert any(i["benchmark"] == XSS for i in doc["items"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to render"),
        (("--markdown", "x.md"), "add --check ID"),
        (("--check", "999", "--json", "-"), "no check with id 999"),
        (
            ("--out", "site", "--db", "sqlite:////nonexistent/history.db"),
            "no history store at /nonexistent/history.db",
        ),
        (("--out", "site", "--db", "nosuch://x"), "unsupported database"),
    ],
)
def test_report_usage_errors_exit_2_with_a_hint(
    history: HistoryFacts, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    if "--db" not in args:
        args = (*args, "--db", history.url)
    result = perfguard("report", *args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "site").exists()


def test_missing_default_store_is_an_error_not_a_new_file(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = perfguard("report", "--out", str(tmp_path / "site"), cwd=tmp_path)
    assert result.returncode == 2
    assert ".perfguard/history.db" in result.stderr and "hint:" in result.stderr
    assert not (tmp_path / ".perfguard").exists()


def test_a_damaged_sqlite_file_gets_a_hint_that_says_so(tmp_path: Path) -> None:
    """ "database disk image is malformed" is a damaged file, not a wrong URL (issue 14)."""
    path = tmp_path / "history.db"
    build_check_store(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")  # the page size, from the SQLite header
    for offset in range(2 * page, len(data), page):  # keep the schema page, break every b-tree page
        data[offset : offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    for args in (("--out", str(tmp_path / "site")), ("--check", "1", "--json", "-")):
        result = perfguard("report", *args, "--db", f"sqlite:///{path}")
        assert result.returncode == 2, result.stderr
        assert "database disk image is malformed" in result.stderr
        hint = result.stderr.split("hint:", 1)[1]
        assert f"the SQLite file {path} is damaged" in hint and "backup" in hint and ".recover" in hint
        assert "check the URL" not in hint
        assert "Traceback" not in result.stderr


def test_missing_postgres_driver_names_the_extra(tmp_path: Path) -> None:
    """Without psycopg, the hint is the install line of perfguard's own extra."""
    code = (
        "import runpy, sys; sys.modules['psycopg'] = None; "  # what an import of a missing package does
        "sys.argv = ['perfguard', 'report', '--out', 'site', '--db', 'postgresql://u:secret@127.0.0.1:1/x']; "
        "runpy.run_module('perfguard', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "no database driver 'psycopg'" in result.stderr
    assert "pip install 'perfguard[postgres]'" in result.stderr
    assert "secret" not in result.stderr


def test_reports_are_readable_by_others(tmp_path: Path) -> None:
    """Issue 14: pr.html / pr.md were written 0600; an artifact or web server must serve them."""
    checks = build_check_store(tmp_path / "checks.db")
    out = tmp_path / "r"
    outputs = [
        "--markdown",
        str(out / "pr.md"),
        "--html",
        str(out / "pr.html"),
        "--json",
        str(out / "pr.json"),
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfguard",
            "report",
            "--check",
            str(checks.mixed_id),
            "--db",
            checks.url,
            *outputs,
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert result.returncode == 0, result.stderr
    for name in ("pr.md", "pr.html", "pr.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    site = tmp_path / "site"
    assert perfguard("report", "--out", str(site), "--db", checks.url).returncode == 0
    modes = {stat.S_IMODE(p.stat().st_mode) for p in site.rglob("*") if p.is_file()}
    assert modes == {0o644}
