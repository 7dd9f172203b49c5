"""CPU seconds of what every round worker pays before it measures (docs/perf/test_suite.md).

PYTHONPATH=. python docs/perf/process_import_cost.py
"""

import resource


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


c0 = cpu()
import torch  # noqa: E402, F401

c1 = cpu()
from perfguard import profiles  # noqa: E402
from perfguard.engine import cases, work  # noqa: E402

case = cases.build("dilated", 512, "float32", "cpu", profiles.PROFILES["quick"])
fwd = case.forward()
fwd()
c2 = cpu()
work.dispatch_counts(fwd)
c3 = cpu()
work.dispatch_counts(fwd)
c4 = cpu()
print(f"CPU s: import torch {c1 - c0:.2f}, build + first call {c2 - c1:.2f}")
print(f"CPU s: first work count {c3 - c2:.2f} (imported torch._dynamo before 3e15ba6), second {c4 - c3:.2f}")
