"""Issue 13 at the command line, on real git repositories and real stores.

- Hole 1: a PR job (``perfguard check --untrusted``) can write fake, 8x slower runs of the baseline's
  commit only where the check never reads a baseline (its own results store), and the history store
  it reads is opened read-only: the planted 4x slowdown still fails (exit 1) on SQLite and
  PostgreSQL.
- W3: the compilation caches of an untrusted check's benchmark processes are the ``untrusted``
  domain's, never the directory a trusted (baseline) run loads kernels from.
- D6: an interruption after a side was stored says so, instead of "nothing was stored".
- Hostile names (rich markup, HTML, SQL, a formula, ``../``, unicode), one implementation each, go
  through ``run``, ``check``, ``history``, ``report --check`` and the site without a crash and are
  shown as written, in the terminal and in a real browser (no script of one runs).

The verdicts asserted come from the work metrics (exact on a busy CI machine).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from browser_support import open_page
from test_check_cli import (
    BENCH,
    build_origin,
    fresh_clone,
    git,
    perfguard,
    recorded_main_postgres,
    recorded_main_sqlite,
    report,
    sqlite_url,
    table_counts,
    work_items,
)

from perfguard.profiles import SUITE_VERSION
from perfguard.store import ResultRecord, RunRecord, Store
from tests.helpers.project import planted
from tests.helpers.recordings import PostgresRecordings, Recordings

MACHINE_KEY_CMD = [
    sys.executable,
    "-c",
    "from perfguard.engine.machine import fingerprint; print(fingerprint().key)",
]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_check_cli's trimmed project with its branches (``quadruple``: dilated does 4x)."""
    return build_origin(tmp_path_factory.mktemp("origin") / "project")


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    return fresh_clone(origin, tmp_path)


def untrusted_flow(repo: Path, db: str, tmp_path: Path) -> None:
    """``db`` holds main's 3 rounds, recorded by ``perfguard run`` (main's workflow: trusted)."""
    main_sha = git(repo, "rev-parse", "main")
    results_db = f"sqlite:///{tmp_path / 'pr-results.db'}"
    # the PR job: its code can write only its own results store, never the history store
    _plant_into(results_db, db, repo, main_sha)
    git(repo, "checkout", "-q", "quadruple")
    before = table_counts(db)
    result = perfguard(repo, "check", "--baseline", "main", "--bench", BENCH, "--untrusted", "--results-db",
                       results_db, "--json", str(tmp_path / "r.json"), db=db)  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "read-only" in result.stderr and "come from the merge-base" in result.stderr
    dilated = work_items(report(tmp_path / "r.json"), "dilated")
    assert dilated and all(i["verdict"] == "regression" and i["ratio"] == pytest.approx(4.0) for i in dilated)
    assert table_counts(db) == before  # the history store was not written by the untrusted check
    with Store.open(results_db) as results:
        assert results.get_check(1) is not None  # the check went to the results store


def _plant_into(results_db: str, history_db: str, repo: Path, sha: str) -> None:
    """Ten 8x-slower runs of main's commit where the PR job can write them: its results store."""
    from perfguard.measuring import commit_record
    from perfguard.store import MachineRecord

    key = subprocess.run(MACHINE_KEY_CMD, capture_output=True, text=True, check=True, cwd=repo).stdout.strip()
    with Store.open(history_db, read_only=True) as history:
        stored = history.results_for(key, sha, "quick", trusted_only=True)
    assert stored
    with Store.open(results_db) as results:
        runs = []
        for i in range(10):
            records = [
                ResultRecord(
                    benchmark=r.benchmark,
                    impl=r.impl,
                    params=dict(r.params),
                    metric=r.metric,
                    unit=r.unit,
                    direction=r.direction,
                    gated=r.gated,
                    method=r.method,
                    info=dict(r.info),
                    samples=[s * 8.0 for s in (r.samples or [r.value])],
                )
                for r in (rounds[0] for rounds in stored.values())
                if r.status == "ok"
            ]
            now = datetime.now(timezone.utc)
            runs.append(RunRecord(profile="quick", purpose="run", round=i, trusted=True, results=records,
                                  settings={"suite_version": SUITE_VERSION, "bench": None},
                                  started_at=now, finished_at=now))  # fmt: skip
        # even marked trusted, they are in a store the check never reads baselines from
        results.record_runs(MachineRecord(key=key, kind="cpu", label=key), commit_record(repo, sha), runs)
    with pytest.raises(Exception, match="read-only"), Store.open(history_db, read_only=True) as history:
        history.record_runs(MachineRecord(key=key, kind="cpu", label=key), commit_record(repo, sha), runs)


@pytest.mark.slow
def test_pr_code_cannot_move_the_baseline_on_sqlite(
    repo: Path, tmp_path: Path, recordings: Recordings
) -> None:
    untrusted_flow(repo, recorded_main_sqlite(recordings, repo, tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_pr_code_cannot_move_the_baseline_on_postgresql(
    repo: Path, tmp_path: Path, postgres_recordings: PostgresRecordings
) -> None:
    untrusted_flow(repo, recorded_main_postgres(postgres_recordings, repo), tmp_path)


CACHE_SPY = """

# --- tests/test_trust_cli.py: where this benchmark process would write compiled kernels ---
import os as _spy_os

_spy_path = _spy_os.environ.get("PERFGUARD_TEST_CACHE_SPY")
if _spy_path and _spy_os.environ.get("PERFGUARD_PROFILE"):
    with open(_spy_path, "a") as _spy_file:
        _spy_file.write(_spy_os.environ.get("TORCHINDUCTOR_CACHE_DIR", "") + "\\n")
        _spy_file.write(_spy_os.environ.get("TRITON_CACHE_DIR", "") + "\\n")
"""


def test_untrusted_benchmark_processes_compile_into_their_own_cache(repo: Path, tmp_path: Path) -> None:
    db = sqlite_url(tmp_path)
    spy = tmp_path / "caches.txt"
    caches = tmp_path / "caches"
    env = {"PERFGUARD_CACHE_DIR": str(caches), "PERFGUARD_TEST_CACHE_SPY": str(spy)}
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(CACHE_SPY)
    git(repo, "commit", "-qam", "spy on main")
    trusted = perfguard(repo, "run", "--bench", BENCH, "--rounds", "1", db=db, env=env)  # main's workflow
    assert trusted.returncode == 0, trusted.stderr
    trusted_dirs = set(spy.read_text().split())
    assert trusted_dirs and all(d.startswith(str(caches / "trusted")) for d in trusted_dirs)
    spy.unlink()
    git(repo, "checkout", "-q", "-b", "pr")
    with (repo / "attention" / "dilated.py").open("a") as fh:
        fh.write("\n# a pull request\n")
    git(repo, "commit", "-qam", "pr")
    results_db = f"sqlite:///{tmp_path / 'r.db'}"
    result = perfguard(repo, "check", "--baseline", "main", "--bench", BENCH, "--rounds", "1", "--untrusted",
                       "--results-db", results_db, "--no-verify", db=db, env=env)  # fmt: skip
    assert result.returncode in (0, 1), result.stdout + result.stderr
    untrusted_dirs = set(spy.read_text().split())
    assert untrusted_dirs and all(d.startswith(str(caches / "untrusted")) for d in untrusted_dirs)


@pytest.mark.slow
def test_an_interruption_after_a_side_was_stored_says_so(repo: Path, tmp_path: Path) -> None:
    """D6: SIGTERM during the re-measurement; every finished round is stored and the message says so."""
    db = sqlite_url(tmp_path)
    git(repo, "checkout", "-q", "quadruple")
    env = {**os.environ, "PERFGUARD_DB": db, "PYTHONUNBUFFERED": "1"}
    bench = r"Forward\.track_time\('dilated', 512,"  # a 4x forward time is a suspect: re-measured
    command = [
        sys.executable,
        "-m",
        "perfguard",
        "check",
        "--baseline",
        "main",
        "--bench",
        bench,
        "--no-verify",
    ]
    proc = subprocess.Popen(command, cwd=repo, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "re-measuring" in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=300) == 143, "".join(seen) + rest  # 128 + SIGTERM (issue 27, item 8)
    kept = re.search(
        r"interrupted \(SIGTERM\): kept the finished rounds \((.*)\); the round in progress", rest
    )
    assert kept, rest
    assert "nothing of this measurement was stored" not in rest
    # 3 + 3 stage-1 rounds, and each re-measurement round that ended before the signal: all listed
    said = sum(len(part.rsplit(" round(s) ", 1)[1].split(", ")) for part in kept.group(1).split("; "))
    assert table_counts(db)["runs"] == said >= 6


HOSTILE = "evil[/oops]<script>alert(1)</script>'; DROP TABLE runs;--=1+1../ß"
#: One implementation per hostile kind (issue 13's done-when), plus all of them in one name.
HOSTILE_NAMES = (
    HOSTILE,
    "<script>alert(1)</script>",
    "x'; DROP TABLE results; --",
    "[/oops]",
    "ring[fp8]",
    '=HYPERLINK("http://x")',
    "注意-ñ-🚀",
    "../../etc/passwd",
)
HOSTILE_IMPL = f"""

# --- tests/test_trust_cli.py: implementations with hostile names (dilated's code under each) ---
import dataclasses as _hostile_dc

REGISTRY = _fixture_types.MappingProxyType(
    {{**REGISTRY, **{{n: _hostile_dc.replace(REGISTRY["dilated"], name=n) for n in {HOSTILE_NAMES!r}}}}}
)
"""
HOSTILE_DOUBLE = planted(2, "hostile", impls=tuple(HOSTILE_NAMES))
#: The work metrics of every hostile implementation at the smallest length: exact, and seconds a round.
HOSTILE_BENCH = r"Work\.track_forward_(flops|ops|allocated)\((?!'(dilated|improved)').*, 512,"
#: A spreadsheet reads a cell that starts with one of these as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
WIDE = {"COLUMNS": "400"}  # no cell of a terminal table is cut or wrapped


@pytest.mark.slow
def test_hostile_names_go_through_every_command_and_page_as_written(repo: Path, tmp_path: Path) -> None:
    """run, check (terminal, Markdown, HTML, JSON), history, report --check and the site.

    Every name is shown as written (rich markup not applied, HTML not parsed, Markdown not
    interpreted), no script of one runs in a browser, no file lands where a name points (``../``)
    and no CSV cell starts a formula.  The hostile implementations regress (twice the work), so
    every view lists them: the check's table, its reports and the site's marks.
    """
    db = sqlite_url(tmp_path)
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(HOSTILE_IMPL)
    git(repo, "commit", "-qam", "hostile")
    base = git(repo, "rev-parse", "HEAD")
    run = perfguard(repo, "run", "--bench", HOSTILE_BENCH, "--rounds", "1", db=db, env=WIDE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    _assert_all_shown(run.stdout)
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(HOSTILE_DOUBLE)
    git(repo, "commit", "-qam", "hostile implementations do twice the work")
    out = tmp_path / "c.json"
    check = perfguard(repo, "check", "--baseline", base, "--bench", HOSTILE_BENCH, "--rounds", "1",
                      "--no-verify", "--json", str(out), "--markdown", str(tmp_path / "c.md"),
                      "--html", str(tmp_path / "c.html"), db=db, env=WIDE)  # fmt: skip
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stderr
    _assert_all_shown(check.stdout)  # the verdict table
    document = json.loads(out.read_text())
    assert {i["impl"] for i in document["items"]} == set(HOSTILE_NAMES)
    assert all(i["verdict"] == "regression" and i["ratio"] == pytest.approx(2.0) for i in document["items"])
    assert "<script>alert(1)</script>" not in (tmp_path / "c.html").read_text()

    history = perfguard(repo, "history", db=db, env=WIDE)
    assert history.returncode == 0, history.stderr
    for name in HOSTILE_NAMES:
        assert f"impl={name}," in history.stdout, name
    series = json.loads(perfguard(repo, "history", "--json", "-", db=db).stdout)["series"]
    assert {s["impl"] for s in series} == set(HOSTILE_NAMES)

    stored = tmp_path / "stored"
    stored.mkdir()
    rendered = perfguard(repo, "report", "--check", str(document["check_id"]), "--json",
                         str(stored / "c.json"), "--markdown", str(stored / "c.md"), "--html",
                         str(stored / "c.html"), db=db)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert json.loads((stored / "c.json").read_text())["items"] == document["items"]

    before = _files(tmp_path)
    site = perfguard(repo, "report", "--out", str(tmp_path / "site"), db=db)
    assert site.returncode == 0, site.stderr
    written = _files(tmp_path) - before
    assert written and all(p.startswith("site/") for p in written), written  # nothing where a ../ points
    assert not (tmp_path / "etc").exists() and not (tmp_path.parent / "etc").exists()
    _assert_csv_inert(tmp_path / "site" / "data" / "history.csv")

    # Last, in the real browser (skipped where there is none): what a reader sees.
    for markdown in (tmp_path / "c.md", stored / "c.md"):
        html = markdown.with_suffix(".md.html")
        html.write_text(_rendered_markdown(markdown.read_text()), encoding="utf-8")
        _assert_all_shown(*_browse([html]))
    for shown in _browse([tmp_path / "c.html", stored / "c.html"], inline_scripts=1):  # the report's own
        _assert_all_shown(shown)
    _assert_all_shown(*_browse([tmp_path / "site" / "index.html"]))
    _assert_all_shown("".join(_browse(sorted((tmp_path / "site" / "bench").glob("*.html")))))
    _browse(sorted((tmp_path / "site").glob("*.html")))  # compare, memory, work, ranks, regressions


def _assert_all_shown(text: str) -> None:
    """Every hostile name is in ``text`` exactly as written."""
    for name in HOSTILE_NAMES:
        assert name in text, f"{name!r} not shown as written in:\n{text}"


def _files(root: Path) -> set[str]:
    """Every file under ``root``: what a command wrote is the difference of two of these."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _assert_csv_inert(path: Path) -> None:
    """No text cell starts a formula; a name that would is written as text (a leading ')."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["impl"].removeprefix("'") for r in rows} >= set(HOSTILE_NAMES)
    for row in rows:
        for cell in row.values():
            assert not cell.startswith(FORMULA_STARTS) or _number(cell), row
    assert "'" + '=HYPERLINK("http://x")' in {r["impl"] for r in rows}


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _rendered_markdown(markdown: str) -> str:
    """The Markdown as a CommonMark renderer with raw HTML allowed (GitHub's job summary) makes it."""
    from markdown_it import MarkdownIt  # rich's Markdown parser

    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    return f'<!doctype html><html><head><meta charset="utf-8"></head><body>{body}</body></html>'


def _browse(pages: list[Path], *, inline_scripts: int = 0) -> list[str]:
    """Open ``pages`` in Chromium and return their text, asserting that nothing a name holds ran.

    No dialog (``alert``), console or page error (an inline script the policy blocks is a console
    error) or request; no script element but the page's own: the site's file, its JSON data blocks
    and ``inline_scripts`` inline ones.
    """
    assert pages
    visit = open_page(pages[0].as_uri())
    texts = []
    try:
        for page in pages:
            visit.goto(page.as_uri())
            visit.assert_clean()
            scripts = visit.page.eval_on_selector_all(
                "script", "els => els.map(e => e.getAttribute('src') || e.getAttribute('type') || '')"
            )
            others = [s for s in scripts if not s.endswith("static/perfguard.js") and s != "application/json"]
            assert others == [""] * inline_scripts, (page, scripts)
            visit.page.eval_on_selector_all("details", "els => els.forEach(e => { e.open = true; })")
            texts.append(visit.page.inner_text("body"))  # what a reader sees, every section opened
    finally:
        visit.close()
    return texts
