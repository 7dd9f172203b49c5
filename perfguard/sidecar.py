"""The timing sidecar: per-call samples that a suite benchmark hands to perfguard beside asv's number.

asv stores one number per ``track_*`` benchmark and no samples, but perfguard's verdicts need the
per-call samples of every round (docs/verdicts.md).  So each suite benchmark, when
``PERFGUARD_RUN_DIR`` is set (perfguard sets it for every asv invocation), also writes what it
measured to ``$PERFGUARD_RUN_DIR/<sha1 of name and params>.json``::

    {"benchmark": "bench_attention.Forward.track_time",
     "params": {"impl": "dilated", "seq_len": 512, "dtype": "float32"},
     "unit": "seconds", "value": 0.00123, "samples": [0.00121, 0.00124, ...],
     "method": "cpu-time", "info": {...}}

and asvrun reads it back after the run, checking that asv's number and the sidecar's agree (a
sidecar left over from another run would not).  Standard library only: both the benchmark
processes and perfguard's own process use it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfguard.files import write_atomic

RUN_DIR_ENV = "PERFGUARD_RUN_DIR"


def file_name(benchmark: str, params: Mapping[str, Any]) -> str:
    """The sidecar file name of one benchmark x params."""
    digest = hashlib.sha1((benchmark + json.dumps(dict(params), sort_keys=True)).encode()).hexdigest()
    return f"{digest}.json"


def _clean(value: Any) -> Any:
    """JSON-able copy with non-finite floats as None (sidecars are strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write(
    benchmark: str,
    params: Mapping[str, Any],
    *,
    unit: str,
    value: float,
    samples: Sequence[float],
    method: str,
    info: Mapping[str, Any],
    run_dir: str | os.PathLike[str] | None = None,
) -> Path | None:
    """Write one sidecar atomically (temp file + rename); None when no run directory is set."""
    directory = run_dir if run_dir is not None else os.environ.get(RUN_DIR_ENV)
    if not directory:
        return None
    target = Path(directory) / file_name(benchmark, params)
    document = {
        "benchmark": benchmark,
        "params": dict(params),
        "unit": unit,
        "value": value,
        "samples": list(samples),
        "method": method,
        "info": _clean(dict(info)),
    }
    return write_atomic(target, json.dumps(_clean(document)))


def read(run_dir: Path, benchmark: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sidecar of one benchmark x params, or None when there is none.

    Raises ``ValueError`` when the file exists but is not a sidecar of that benchmark (truncated,
    not JSON, or written for other parameters).
    """
    path = run_dir / file_name(benchmark, params)
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"timing sidecar {path} is unreadable: {exc}") from None
    if not isinstance(document, dict) or document.get("benchmark") != benchmark:
        raise ValueError(f"timing sidecar {path} does not belong to {benchmark}")
    samples = document.get("samples")
    if not isinstance(samples, list) or not all(isinstance(s, (int, float)) for s in samples):
        raise ValueError(f"timing sidecar {path} has no list of numeric samples")
    return document
