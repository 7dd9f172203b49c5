"""``perfguard verify``: catch wrong attention before anyone times it.

Every implementation of the guarded package's registry (``[tool.perfguard] registry``,
:mod:`perfguard.engine.guarded`) is built through its entry, run forward and backward on
fresh random inputs with a fixed seed, and compared with the float64 reference of the pattern it
declares (``attention_pattern``), in every mode × causal case.  The checks (columns of the table,
keys of the JSON) are listed in :data:`perfguard.verify.results.CHECKS`; the tolerances in
:mod:`perfguard.verify.numerics`; the order of the steps in :mod:`perfguard.verify.runner`
(rows planned by :mod:`~perfguard.verify.planning`, each case run by :mod:`~perfguard.verify.case`).

Why so many checks: earlier "verify" scripts for these classes only checked shapes, and let
through attention computed across heads instead of the sequence, block softmaxes summed instead
of merged, rings that never merged their chunks, swapped constructor arguments, a tensor returned
where ``(output, None)`` was promised and NaN for fully masked rows
(``research/dilated_attention.md`` §4–§8).  Each of those fails at least one check here, and the
tests register one deliberately broken implementation per bug class to keep it that way.

JSON (``--json PATH``), schema ``perfguard.verify/1``::

    {
      "schema": "perfguard.verify/1",
      "created": "2025-01-01T12:00:00+00:00",      # UTC
      "passed": false,                               # every row passed
      "seed": 0, "seconds": 12.3,                  # the verification: first row to last
      "setup_seconds": {"imports": 2.1, "cuda_init": 1.4},  # before the first row (CLI adds imports)
      "environment": {"perfguard", "torch", "python", "platform", "cpu", "cpu_threads",
                      "devices": ["cpu", "cuda"], "gpu", "cuda_runtime", "cudnn"},  # gpu... with CUDA
      "settings": {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": false, ...},
      "checks": {"build": "what it checks", ...},  # column order
      "results": [{
        "impl": "ring", "device": "cpu", "dtype": "float32",
        "multihead": false, "same_function_as": "dilated",
        "config": {"batch", "seq_len", "num_heads", "head_dim", "kwargs": {...}},
        "tolerance": 1e-05,
        "passed": false,
        "skipped": null,                             # or why the row did not run
        "worst_rel_err": 0.41,                       # max over reference and grad, or null
        "failures": ["reference: rel err 0.41 > 1e-05 (longnet, causal)"],
        "checks": {
          "reference": {
            "status": "fail",                        # pass | fail | not run | n/a
            "detail": "rel err 0.41 > 1e-05 (longnet, causal)",
            "value": 0.41,                           # worst number of the check, or null
            "cases": [{"case": "longnet, causal", "status": "fail",
                       "detail": "rel err 0.41 > 1e-05", "value": 0.41}, ...]
          }, ...
        },
        "notes": ["..."], "seconds": 0.8,
        "peak_memory_bytes": 21474836480             # CUDA rows (peak allocated); null on the CPU
      }, ...]
    }

Non-finite numbers are written as the strings ``"inf"``/``"nan"`` so the file is strict JSON.
"""

from __future__ import annotations

from perfguard.verify.planning import plan, scope
from perfguard.verify.results import CHECKS, SCHEMA, CheckResult, RowResult, VerifyReport
from perfguard.verify.runner import preload, run_verify, verify_row

__all__ = [
    "CHECKS",
    "SCHEMA",
    "CheckResult",
    "RowResult",
    "VerifyReport",
    "plan",
    "preload",
    "run_verify",
    "scope",
    "verify_row",
]
