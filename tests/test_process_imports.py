"""What a measuring process imports: every round of every check is a fresh process, so an import it
does not need is paid again in each one (docs/perf/test_suite.md, "Where the CPU goes").

Each test runs in a fresh interpreter: the test session itself has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_records_a_round_worker_builds_import_no_sqlalchemy() -> None:
    """perfguard.store's records are plain values; the package's SQLAlchemy side loads on first use."""
    out = _fresh(
        "import sys, perfguard.engine.round_worker, perfguard.engine.suite; "
        "from perfguard.store import ResultRecord; "
        "print(ResultRecord.__module__, sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))"
    )
    assert out == "perfguard.store.records []"
    # the store itself is one attribute away, as before
    assert _fresh("import perfguard.store as s; print(s.Store.__module__)") == "perfguard.store.store"


def test_the_profiler_breakdown_imports_no_dynamo() -> None:
    """torch.profiler.profile's start asks ``hasattr(torch, "_inductor")``, which imports Inductor and
    Dynamo (~2 CPU s); the breakdown of an eager call needs neither and counts the same aten ops."""
    out = _fresh(
        "import sys, torch; from perfguard.engine.work import profile_breakdown; "
        "x = torch.ones(8); b = profile_breakdown(lambda: torch.mm(x.view(2, 4), x.view(4, 2)) + 1, 'cpu'); "
        "rows = b['rows']; "
        "print(b['kind'], rows['aten::mm'][0], rows['aten::add'][0], 'torch._dynamo' in sys.modules)"
    )
    assert out == "aten ops 1 1 False"


def test_a_round_worker_ends_with_its_code_after_its_exit_handlers() -> None:
    """The worker skips the interpreter's teardown (~0.5 CPU s with torch loaded), not its exit
    handlers nor what it printed: a handler registered before it runs still runs, last."""
    code = (
        "import atexit, runpy, sys; atexit.register(lambda: print('handler ran')); "
        "sys.argv = ['round_worker', 'no-such-spec.json']; "
        "runpy.run_module('perfguard.engine.round_worker', run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr  # main's code for a spec it cannot read
    assert "not a round spec" in proc.stderr and proc.stdout == "handler ran\n"


def test_a_check_loads_students_t_from_scipy_special_when_a_test_needs_it() -> None:
    """Every ``perfguard check`` imports the verdict code; ``scipy.stats`` cost ~0.6 CPU s more than
    the two functions of ``scipy.special`` its t distribution calls, and those load only when a
    comparison has a spread to test (exact work counts do not).  The p is Welch's t-test of the log
    round medians (``scipy.stats.ttest_ind(..., equal_var=False)`` gives 0.0010709692232421615)."""
    out = _fresh(
        "import sys, perfguard.compare, perfguard.gate.pipeline, perfguard.report; "
        "from perfguard.stats.rounds_test import rounds_test; "
        "loaded = lambda: [m for m in ('scipy.stats', 'scipy.special') if m in sys.modules]; "
        "print(loaded(), rounds_test([5.0, 5.0], [5.0, 5.0]).p, loaded()); "
        "t = rounds_test([1.0, 1.1, 0.9], [2.0, 2.2, 1.8]); "
        "print(loaded(), round(t.p, 6), [round(x, 6) for x in t.interval(0.95)])"
    )
    assert out.splitlines() == ["[] 1.0 []", "['scipy.special'] 0.001071 [1.592963, 2.511043]"]
