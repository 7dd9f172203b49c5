"""The fallback watch of a round (engine.fallbacks): RuntimeWarnings fail the case, others pass.

Each check runs in a fresh interpreter with a time limit: a watch that re-shows a warning inside its
own ``catch_warnings`` block loops for ever (issue 26: a GPU worker spun on the first backward's
"no current CUDA context" UserWarning until its limit), and a test must fail, not hang, on that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, warnings
    from perfguard.engine.fallbacks import FallbackWatch

    watch = FallbackWatch()
    with watch.watch("dilated-1024") as caught:
        warnings.warn("no current CUDA context", UserWarning)
        warnings.warn("switched to the gather path", RuntimeWarning)
        warnings.warn("switched to the gather path", RuntimeWarning)
    with watch.watch("ring-1024") as clean:
        warnings.warn("a deprecation", DeprecationWarning)
    print(json.dumps({
        "messages": caught.messages,
        "tainted": watch.tainted("dilated-1024"),
        "clean": clean.messages,
        "clean_tainted": watch.tainted("ring-1024"),
    }))
    """
)


def _run() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_other_warnings_are_shown_once_and_do_not_taint_the_case() -> None:
    done = _run()
    assert done.stderr.count("UserWarning: no current CUDA context") == 1, done.stderr
    assert done.stderr.count("DeprecationWarning: a deprecation") == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["clean"] == []
    assert result["clean_tainted"] is None


def test_runtime_warnings_are_caught_every_time_and_taint_their_case() -> None:
    done = _run()
    result = json.loads(done.stdout)
    assert len(result["messages"]) == 2  # "always": the second switch is not swallowed
    assert all(m.startswith("switched to the gather path (") for m in result["messages"])
    assert result["tainted"] == result["messages"][0]
    assert "RuntimeWarning" not in done.stderr  # caught, not shown
