"""The PR gate as a library: compare HEAD with its baseline on this machine (``perfguard check``).

1. Every stored round that can serve as the baseline (the merge-base of REF and HEAD, on this
   machine key, from trusted runs) is read **before any code under review runs**: an untrusted
   check's later steps execute HEAD's code, which must not be able to change what HEAD is compared
   against (docs/ci.md, "Trust model").
2. HEAD (plus uncommitted changes, said so) is verified against the float64 reference
   (``perfguard verify`` in a fresh process, only the implementations and dtypes this check will
   measure), or the report ``verify_report`` names: an implementation that fails is ``broken``.
3. Whatever is not stored yet for either side is measured now (a commit in a temporary git
   worktree, HEAD in the work tree), both sides interleaved A B B A …, and stored (one transaction
   per side; an untrusted check stores in its own results store).  Each side's files are compared
   with their recorded state after every round (a change: exit 2, nothing stored); a check whose
   HEAD is not on the baseline branch stores every round untrusted (docs/ci.md, "Trust model").
4. A gated baseline benchmark that failed in a stored round (a killed or crashed round) is
   re-measured; if it still fails the check fails closed (exit 2 naming it): a broken baseline
   never ungates a benchmark.  A reported one (the per-kernel times) gates nothing: it stays
   failed in the baseline and the report says so.
5. Stage 1 compares every benchmark x params (:func:`perfguard.compare.compare_suite`); stage 2
   re-measures the timing suspects, baseline and HEAD interleaved in fresh processes, with a
   profiler breakdown of their cases, and decides them on that alone.
6. What changed underneath every regression (per aten op / per CUDA kernel, counts and, where the
   re-measurement profiled it, times) goes into the check's summary for the reports.
7. The check and its items are stored.

``run_check(bench, ...)`` returns a :class:`CheckOutcome`; the CLI (``perfguard.cli.check``) only
parses options, prints and exits with ``outcome.exit_code`` (0 no regression, 1 regression, broken
or failed benchmark, 2 usage or environment error raised as :class:`perfguard.errors.PerfguardError`).

The package, in the order of the pipeline: :mod:`~perfguard.gate.pipeline` (:func:`run_check`:
the steps above, wired), :mod:`~perfguard.gate.verification` (step 2), :mod:`~perfguard.gate.sides`
(steps 3-5: both sides' rounds, the failed baseline measured again, stage 1 and 2),
:mod:`~perfguard.gate.underneath` (step 6) and :mod:`~perfguard.gate.recording` (step 7, the
check's summary and its reports).
"""

from perfguard.gate.pipeline import CheckOutcome, run_check
from perfguard.gate.recording import write_reports
from perfguard.gate.sides import CheckRounds, CheckSides, Retried
from perfguard.gate.underneath import MAX_UNDERNEATH, MAX_UNDERNEATH_ROWS, underneath_tables

__all__ = [
    "MAX_UNDERNEATH",
    "MAX_UNDERNEATH_ROWS",
    "CheckOutcome",
    "CheckRounds",
    "CheckSides",
    "Retried",
    "run_check",
    "underneath_tables",
    "write_reports",
]
