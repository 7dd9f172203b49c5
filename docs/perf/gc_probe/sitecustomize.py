"""Issue 26 probe: is the stall of a case alone (docs/perf/fidelity.md) inside Python's garbage collector?

Imported by every Python process started with this directory on ``PYTHONPATH`` (perfguard passes its
environment to the round worker).  Does nothing unless ``GC_PROBE`` is set:

- ``GC_PROBE=off``: ``gc.disable()`` in every process (does the stall go away without collections?);
- ``GC_PROBE=log``: one line per collection start and stop (pid, generation, time, objects collected)
  appended to ``$GC_PROBE_LOG``, flushed at once, so a collection that never returns is the last
  ``start`` line of its pid.  Used by docs/perf/stall_gpu.sh.
"""

import gc
import os
import time

_MODE = os.environ.get("GC_PROBE", "")
if _MODE == "off":
    gc.disable()
elif _MODE == "log":
    _log = open(os.environ.get("GC_PROBE_LOG", "/tmp/gc_probe.log"), "a", buffering=1)  # noqa: SIM115
    _pid = os.getpid()
    _t0 = [0.0]

    def _record(phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            _t0[0] = now
            _log.write(f"{_pid} start gen={info['generation']} t={time.time():.3f}\n")
        else:
            _log.write(
                f"{_pid} stop gen={info['generation']} took={now - _t0[0]:.4f}s "
                f"collected={info['collected']} uncollectable={info['uncollectable']}\n"
            )

    gc.callbacks.append(_record)
