"""Run every check over a registry: the rows (impl × device × dtype) and the cases inside them.

A *row* builds the implementation once per mode (``longnet``, ``head_groups``) and runs one *case*
per mode × causal flag.  Per case it does, in this order:

1. the declared pattern (``attention_pattern(..., device=)``, built on the row's device): sane,
   and for "same function" implementations equal to the semantics
   (:func:`perfguard.engine.dilation.dilated_pattern`, built once per run: :mod:`perfguard.verify.shared`);
2. run A: forward + backward on fresh random inputs (fixed seed, never zeros), after poisoning the
   allocator; return contract, shape/dtype/device, finiteness, backward;
3. the float64 reference of the *declared* pattern (output and input gradients) against run A,
   and from the same softmax the reference of run B (only ``v`` differs);
4. run A again on copies of the same inputs: determinism;
5. run B, which differs from A only in ``v``/``value``: together with A it finds unwritten rows.

Every call into the implementation is wrapped: an exception fails the check it belongs to
(``build``, ``forward``, ``backward``, ...) with its message, marks the checks that depended on it
as "not run", and the other cases and implementations carry on.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import torch

from perfguard import __version__
from perfguard.declare import ImplConfig, Implementation
from perfguard.engine.guarded import computes
from perfguard.errors import UsageError
from perfguard.verify import probes
from perfguard.verify.case import TARGET_OF_DEVICE, CaseRun
from perfguard.verify.numerics import (
    dtype_name,
    numerics_settings,
    pin_numerics,
    pinned_numerics,
    restored_global_settings,
    tolerance,
)
from perfguard.verify.planning import PlannedRow, Scenario, plan
from perfguard.verify.results import CHECKS, RowResult, VerifyReport
from perfguard.verify.shared import RunCache

_AFTER_BUILD = [c for c in CHECKS if c != "build"]


#: called before each row: (row, index, number of rows)
ProgressCallback = Callable[[PlannedRow, int, int], None]
#: called after each row: (its result, index, number of rows)
RowDoneCallback = Callable[[RowResult, int, int], None]


# --------------------------------------------------------------------------- running


def run_verify(
    registry: Mapping[str, Implementation],
    *,
    impls: Sequence[str] = (),
    device: str = "auto",
    dtypes: Sequence[str] = (),
    seq_len: int | None = None,
    seed: int = 0,
    progress: ProgressCallback | None = None,
    row_done: RowDoneCallback | None = None,
    cache: RunCache | None = None,
) -> VerifyReport:
    """Verify the selected implementations of ``registry`` (name -> spec); never raises for a bad impl.

    ``report.seconds`` is the verification itself; CUDA initialisation (context, first allocation,
    cuBLAS handles) happens before the first row and is reported apart in ``report.setup_seconds``.
    What rows share lives in ``cache`` (a fresh :class:`RunCache` by default), emptied at the end.
    """
    if seq_len is not None and seq_len < 1:
        raise UsageError(f"--seq-len must be a positive integer, got {seq_len}")
    rows = plan(registry, impls=impls, device=device, dtypes=dtypes)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    devices = sorted({r.device for r in rows})
    setup: dict[str, float] = {}
    if "cuda" in devices:
        setup["cuda_init"] = _init_cuda()
    started = time.perf_counter()
    results = []
    cache = cache if cache is not None else RunCache()
    try:
        with restored_global_settings():
            pin_numerics()
            settings = numerics_settings()
            for i, planned in enumerate(rows):
                if progress is not None:
                    progress(planned, i, len(rows))
                result = verify_row(registry, planned, seq_len=seq_len, seed=seed, cache=cache)
                results.append(result)
                if row_done is not None:
                    row_done(result, i, len(rows))
    finally:
        cache.clear()
    return VerifyReport(
        rows=results,
        seed=seed,
        settings=settings,
        environment=_environment(devices),
        created=created,
        seconds=time.perf_counter() - started,
        setup_seconds=setup,
    )


def preload(registry: Mapping[str, Implementation], impls: tuple[str, ...]) -> None:
    """Import the implementations' modules now, so their import time counts as setup, not as the
    first row's verification.  A module that fails to import is left for the ``build`` check to
    report (with the row it belongs to)."""
    import torch

    # the first autograd.grad with grad_outputs imports torch.fx's symbolic shapes (sympy): ~1 s
    x = torch.ones(1, requires_grad=True)
    torch.autograd.grad(x * 2, x, torch.ones(1))

    for name in impls or registry:
        spec = registry.get(name)
        if spec is None:
            continue  # an unknown name: run_verify says so, as a usage error
        try:
            getattr(spec, "cls", None)  # resolves module:Class, importing the module
        except Exception:
            continue


def _init_cuda() -> float:
    """Start CUDA (context, allocator, cuBLAS in both float dtypes) and say how long it took."""
    started = time.perf_counter()
    torch.cuda.init()
    x = torch.ones(8, 8, device="cuda")
    for dtype in (torch.float32, torch.float64):
        y = x.to(dtype)
        y @ y
    torch.cuda.synchronize()
    return time.perf_counter() - started


def verify_row(
    registry: Mapping[str, Implementation],
    planned: PlannedRow,
    *,
    seq_len: int | None = None,
    seed: int = 0,
    cache: RunCache | None = None,
) -> RowResult:
    """Every check of one implementation on one device in one dtype.

    ``cache`` holds what rows share (expected patterns, inputs: :mod:`perfguard.verify.shared`);
    without one the row uses its own.
    """
    spec, device, dtype = planned.spec, planned.device, planned.dtype
    target = TARGET_OF_DEVICE[device]
    cfg = spec.config(target)
    if seq_len is not None:
        cfg = cfg.with_seq_len(seq_len)
    row = RowResult(
        impl=spec.name,
        device=device,
        dtype=dtype_name(dtype),
        multihead=spec.multihead,
        same_function_as=spec.same_function_as,
        tolerance=tolerance(device, dtype),
        config=_config_json(cfg),
    )
    root = _same_function_root(registry, spec)
    if root is None:
        row.checks["same_fn"].not_applicable = f"{spec.name} has its own pattern (no same_function_as)"
    elif root not in registry:  # a registry trimmed to some entries: nothing to compare with
        left_out = f"same_function_as names {root}, which this registry leaves out"
        row.checks["same_fn"].not_applicable = left_out
        root = None
    if planned.skip:
        row.skipped = planned.skip
        for check in row.checks.values():
            check.not_applicable = planned.skip
        return row

    cache = cache if cache is not None else RunCache()
    started = time.perf_counter()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    causals = (False, True) if spec.supports_causal else (False,)
    if not spec.supports_causal:
        row.notes.append("causal cases not run: the registry says this implementation has no causal mode")
    with restored_global_settings(), pinned_numerics(row.notes):
        # an entry without modes is built once, without `mode=`: its case is named after what it computes
        for mode in spec.modes or (computes(spec),):
            try:
                torch.manual_seed(seed)
                given = {"mode": mode} if spec.modes else {}
                module = spec.build(target, device=device, dtype=dtype, **given)
                _randomize_affine(module, seed)
            except Exception as exc:
                row.record("build", mode, "fail", probes.describe(exc))
                for causal in causals:
                    row.block(_AFTER_BUILD, Scenario(mode, causal).label, "build failed")
                continue
            row.record("build", mode, "pass")
            for causal in causals:
                CaseRun(
                    row, spec, module, cfg, Scenario(mode, causal), device, dtype, seed, root, registry, cache
                ).run()
            del module
    if cuda:
        torch.cuda.synchronize()
        row.peak_memory_bytes = torch.cuda.max_memory_allocated()
    row.seconds = time.perf_counter() - started
    return row


def _same_function_root(registry: Mapping[str, Implementation], spec: Implementation) -> str | None:
    """The implementation whose pattern this one must reproduce (following same_function_as)."""
    name, seen = spec.name, set()
    while True:
        current = registry.get(name)
        nxt = current.same_function_as if current is not None else None
        if nxt is None or nxt in seen:
            break
        seen.add(name)
        name = nxt
    if name != spec.name or computes(spec) == "dilated":  # a "dilated" entry is its own root
        return name
    return None


def _randomize_affine(module: torch.nn.Module, seed: int) -> None:
    """Give biases and LayerNorm parameters random values (MAGNETO inits them to 0 and 1).

    With the default init a module that forgets a bias or the norm's affine part computes the
    same numbers as a correct one; random values make those parameters visible to the reference.
    """
    gen = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, param in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
            is_norm = isinstance(owner, torch.nn.LayerNorm)
            if leaf == "bias" or (is_norm and leaf == "weight"):
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                base = 1.0 if leaf == "weight" else 0.0
                param.copy_((base + 0.5 * noise).to(param.dtype))


def _config_json(cfg: ImplConfig) -> dict[str, Any]:
    shape = cfg.shape
    return {
        "batch": shape.batch,
        "seq_len": shape.seq_len,
        "num_heads": shape.num_heads,
        "head_dim": shape.head_dim,
        "kwargs": {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in cfg.kwargs.items()},
    }


def _environment(devices: list[str]) -> dict[str, Any]:
    env: dict[str, Any] = {
        "perfguard": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "devices": devices,
    }
    if "cuda" in devices:
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda_runtime"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
