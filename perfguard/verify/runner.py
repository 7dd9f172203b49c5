"""Run every check over a registry: the rows (impl × device × dtype) and the cases inside them.

A *row* builds the implementation once per mode (``longnet``, ``head_groups``) and runs one *case*
per mode × causal flag.  Per case it does, in this order:

1. the declared pattern (``attention_pattern(..., device=)``, built on the row's device): sane,
   and for "same function" implementations equal to the semantics
   (:func:`attention.pattern.dilated_pattern`, built once per run: :mod:`perfguard.verify.shared`);
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
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch

from attention.pattern import dilated_pattern
from attention.registry import ImplConfig, ImplSpec, ShapeConfig
from perfguard import __version__
from perfguard.errors import UsageError
from perfguard.verify import probes
from perfguard.verify.numerics import (
    DTYPES,
    dtype_name,
    numerics_settings,
    pin_numerics,
    pinned_numerics,
    restored_global_settings,
    tolerance,
)
from perfguard.verify.results import CHECKS, RowResult, VerifyReport
from perfguard.verify.shared import RunCache

#: implementations whose pattern *is* the semantics of attention.pattern (the roots of "same function")
SEMANTICS_ROOTS = frozenset({"dilated", "multihead_dilated"})

#: input gradients are compared relative to max(‖ref‖, GRAD_FLOOR × the largest reference gradient)
GRAD_FLOOR = 1e-3

DEFAULT_DTYPES: dict[str, tuple[str, ...]] = {"cpu": ("float32",), "cuda": ("bfloat16", "float32")}
TARGET_OF_DEVICE = {"cpu": "cpu", "cuda": "gpu"}

_AFTER_BUILD = [c for c in CHECKS if c != "build"]
_AFTER_FORWARD = ["backward", "shape", "return", "written", "finite", "reference", "grad", "deterministic"]


@dataclass(frozen=True)
class Case:
    mode: str
    causal: bool

    @property
    def label(self) -> str:
        return f"{self.mode}, {'causal' if self.causal else 'non-causal'}"


@dataclass(frozen=True)
class PlannedRow:
    spec: ImplSpec
    device: str
    dtype: torch.dtype
    skip: str | None = None


#: called before each row: (row, index, number of rows)
ProgressCallback = Callable[[PlannedRow, int, int], None]
#: called after each row: (its result, index, number of rows)
RowDoneCallback = Callable[[RowResult, int, int], None]


# --------------------------------------------------------------------------- planning


def plan(
    registry: Mapping[str, ImplSpec],
    *,
    impls: Sequence[str] = (),
    device: str = "auto",
    dtypes: Sequence[str] = (),
) -> list[PlannedRow]:
    """The rows to run, or a :class:`UsageError` for an unknown name, missing CUDA or a bad dtype."""
    unknown = [name for name in impls if name not in registry]
    if unknown:
        raise UsageError(
            f"unknown implementation(s): {', '.join(unknown)}",
            hint=f"known implementations: {', '.join(registry)}",
        )
    specs = [registry[name] for name in dict.fromkeys(impls)] if impls else list(registry.values())
    bad_dtypes = [d for d in dtypes if d not in DTYPES]
    if bad_dtypes:
        raise UsageError(f"unknown dtype(s): {', '.join(bad_dtypes)}", hint=f"use one of {', '.join(DTYPES)}")

    cuda = torch.cuda.is_available()
    if device == "auto":
        devices = ["cpu", "cuda"] if cuda else ["cpu"]
    elif device in ("cpu", "cuda"):
        devices = [device]
    else:
        raise UsageError(f"unknown device {device!r}", hint="use auto, cpu or cuda")
    if "cuda" in devices and not cuda:
        raise UsageError(
            "--device cuda was asked for, but torch.cuda.is_available() is False",
            hint="run on a machine with a CUDA GPU and a CUDA build of torch, or use --device cpu",
        )

    def supported(dev: str, spec: ImplSpec) -> tuple[torch.dtype, ...]:
        return spec.cpu_dtypes if dev == "cpu" else spec.cuda_dtypes

    per_device: dict[str, list[torch.dtype]] = {}
    for dev in devices:
        anywhere = {dt for spec in specs for dt in supported(dev, spec)}
        wanted = [DTYPES[d] for d in (dtypes or DEFAULT_DTYPES[dev])]
        per_device[dev] = [dt for dt in wanted if dt in anywhere]
        missing = [dt for dt in wanted if dt not in anywhere]
        if missing and dtypes and device != "auto":  # asked for explicitly: say so, never drop silently
            names = ", ".join(dtype_name(d) for d in missing)
            known = ", ".join(dtype_name(d) for d in DTYPES.values() if d in anywhere) or "none"
            raise UsageError(
                f"{names} is not verified on {dev} by the selected implementations (supported: {known})",
                hint=f"pick --dtype from: {known}" + (", or use --device cuda" if dev == "cpu" else ""),
            )
    if dtypes and not any(per_device.values()):
        raise UsageError(
            f"none of the dtypes {', '.join(dtypes)} is verified on {', '.join(devices)}",
            hint="CPU rows run in float32; bfloat16 and float16 need --device cuda",
        )

    rows: list[PlannedRow] = []
    for dev in devices:
        for dt in per_device[dev]:
            for spec in specs:
                skip = None
                if dt not in supported(dev, spec):
                    skip = f"{dtype_name(dt)} is not among {spec.name}'s {dev} dtypes"
                elif spec.needs_distributed and not _distributed_ready():
                    skip = "needs an initialised torch.distributed process group"
                rows.append(PlannedRow(spec, dev, dt, skip))
    return rows


def _distributed_ready() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


# --------------------------------------------------------------------------- running


def run_verify(
    registry: Mapping[str, ImplSpec],
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
    registry: Mapping[str, ImplSpec],
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
        for mode in spec.modes:
            try:
                torch.manual_seed(seed)
                module = spec.build(target, device=device, dtype=dtype, mode=mode)
                _randomize_affine(module, seed)
            except Exception as exc:
                row.record("build", mode, "fail", probes.describe(exc))
                for causal in causals:
                    row.block(_AFTER_BUILD, Case(mode, causal).label, "build failed")
                continue
            row.record("build", mode, "pass")
            for causal in causals:
                _CaseRun(
                    row, spec, module, cfg, Case(mode, causal), device, dtype, seed, root, registry, cache
                ).run()
            del module
    if cuda:
        torch.cuda.synchronize()
        row.peak_memory_bytes = torch.cuda.max_memory_allocated()
    row.seconds = time.perf_counter() - started
    return row


def _same_function_root(registry: Mapping[str, ImplSpec], spec: ImplSpec) -> str | None:
    """The implementation whose pattern this one must reproduce (following same_function_as)."""
    name, seen = spec.name, set()
    while True:
        current = registry.get(name)
        nxt = current.same_function_as if current is not None else None
        if nxt is None or nxt in seen:
            break
        seen.add(name)
        name = nxt
    if name != spec.name or spec.name in SEMANTICS_ROOTS:
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


class _CaseRun:
    """One mode × causal case of one row (see the module docstring for the steps)."""

    def __init__(
        self,
        row: RowResult,
        spec: ImplSpec,
        module: torch.nn.Module,
        cfg: ImplConfig,
        case: Case,
        device: str,
        dtype: torch.dtype,
        seed: int,
        root: str | None,
        registry: Mapping[str, ImplSpec],
        cache: RunCache,
    ) -> None:
        self.row, self.spec, self.module, self.cfg, self.case = row, spec, module, cfg, case
        self.device, self.dtype, self.seed, self.root, self.registry = device, dtype, seed, root, registry
        self.cache = cache
        self.label = case.label
        self.tol = row.tolerance
        shape = cfg.shape
        self.n, self.heads = shape.seq_len, shape.num_heads
        self.row_dims = ("batch", "position") if spec.multihead else ("batch", "position", "head")
        self.ref_out: torch.Tensor | None = None
        self.ref_out_b: torch.Tensor | None = None

    def record(self, check: str, problem: str | None, value: float | None = None, detail: str = "") -> None:
        if problem is None:
            self.row.record(check, self.label, "pass", detail, value)
        else:
            self.row.record(check, self.label, "fail", problem, value)

    def block(self, checks: list[str], reason: str) -> None:
        self.row.block(checks, self.label, reason)

    # -- steps

    def run(self) -> None:
        pattern = self.check_pattern()
        has_pattern = pattern is not None
        inputs, value_b, grad_out = self.inputs()
        run_a = self.run_once(inputs, grad_out)
        if run_a is None:
            return
        out_a, grads_a = run_a
        if pattern is None:
            self.block(["reference", "grad", "written"], "no usable declared pattern")
        else:
            self.check_reference(inputs, value_b, pattern, grad_out, out_a, grads_a)
        del pattern  # the references are computed: free the pattern before the module runs again
        self.check_determinism(inputs, grad_out, out_a, grads_a)
        if self.ref_out is not None and self.ref_out_b is not None:
            self.check_written(inputs, value_b, out_a)
        elif has_pattern:
            self.block(["written"], "no reference")

    def inputs(self) -> tuple[probes.Inputs, torch.Tensor, torch.Tensor]:
        """Run A's inputs (fresh leaves), run B's ``v``, the output gradient: drawn once per run.

        They depend only on the shape, dtype, device and seed (and the spec's ``make_inputs``), so
        every case and every row with the same ones shares a single draw; each case gets clones.
        """
        shape = self.cfg.shape
        key = (type(self.spec).make_inputs, self.spec.multihead, shape, self.device, self.dtype, self.seed)
        q, k, v, value_b, grad_out = self.cache.inputs.get(key, lambda: self._draw_inputs(shape))
        q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
        return (q, k, v), value_b, grad_out.clone()

    def _draw_inputs(self, shape: ShapeConfig) -> tuple[torch.Tensor, ...]:
        make = self.spec.make_inputs
        a = make(shape, device=self.device, dtype=self.dtype, seed=self.seed, requires_grad=False)
        b = make(shape, device=self.device, dtype=self.dtype, seed=self.seed + 1, requires_grad=False)
        grad_out = self._random_like(a[0], self.seed + 2)
        return (*(t.detach() for t in a), b[2].detach(), grad_out)

    def check_pattern(self) -> torch.Tensor | None:
        causal = self.case.causal
        try:
            pattern = probes.declared_pattern(
                self.module, self.spec.multihead, self.n, self.heads, causal, device=self.device
            )
            problem = probes.pattern_problem(pattern, self.heads, self.n, causal)
        except Exception as exc:
            pattern, problem = None, f"attention_pattern raised {probes.describe(exc)}"
        if problem is not None:
            self.record("pattern", problem)
            if self.root is not None:
                self.block(["same_fn"], "no usable declared pattern")
            return None
        assert isinstance(pattern, torch.Tensor)
        # a pattern that ignores the declared sparsity fails the check but is still a usable count
        # tensor: the reference of what the module says it computes can still be compared
        budget = (
            None
            if causal
            else probes.sparsity_problem(probes.core_of(self.module, self.spec.multihead), pattern)
        )
        self.record("pattern", budget, detail=f"density {probes.pattern_density(pattern):.3f}")
        if self.root is not None:
            try:
                expected, what = self._expected_pattern(pattern.device)
                difference = probes.pattern_difference(pattern, expected, what)
                self.record("same_fn", difference)
                if difference is None and expected.dtype == pattern.dtype:
                    pattern = expected  # equal element for element: keep one copy on the device
            except Exception as exc:
                self.record("same_fn", f"could not build the expected pattern: {probes.describe(exc)}")
        return pattern

    def _expected_pattern(self, device: torch.device) -> tuple[torch.Tensor, str]:
        """The pattern "same function" must reproduce, built once per run (:mod:`.shared`)."""
        causal, mode = self.case.causal, self.case.mode
        if self.root in SEMANTICS_ROOTS:
            kwargs = self.cfg.kwargs
            segs, rates = tuple(kwargs["segment_lengths"]), tuple(kwargs["dilation_rates"])
            key = ("semantics", segs, rates, self.n, self.heads, mode, causal, str(device))
            expected = self.cache.patterns.get(
                key,
                lambda: dilated_pattern(
                    self.n, self.heads, segs, rates, mode=mode, is_causal=causal, device=device
                ),
            )
            return expected, "attention.pattern.dilated_pattern (the semantics)"
        assert self.root is not None
        root_spec = self.registry[self.root]
        target = TARGET_OF_DEVICE[self.device]

        def build() -> torch.Tensor:
            root_module = root_spec.build(target, mode=mode)
            return probes.declared_pattern(
                root_module, root_spec.multihead, self.n, self.heads, causal, device=device
            )

        key = ("declared", self.root, target, self.n, self.heads, mode, causal, str(device))
        return self.cache.patterns.get(key, build), f"{self.root}'s pattern"

    def run_once(
        self, inputs: probes.Inputs, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor | None, ...] | None] | None:
        """Run A: forward + backward, with every check that needs only this one run."""
        probes.poison_allocator(inputs[0])
        try:
            raw = probes.forward(self.module, inputs, self.case.causal)
        except Exception as exc:
            self.record("forward", probes.describe(exc))
            self.block(_AFTER_FORWARD, "forward failed")
            return None
        self.record("forward", None)
        out, return_problem = probes.unwrap(raw, self.spec.multihead)
        self.record("return", return_problem)
        if out is None:
            self.block([c for c in _AFTER_FORWARD if c != "return"], "no output tensor to check")
            return None
        problem = probes.shape_problem(out, inputs[0])
        self.record("shape", problem)
        if problem is not None and out.shape != inputs[0].shape:
            self.block(["backward", "written", "finite", "reference", "grad", "deterministic"], "wrong shape")
            return None
        try:
            grads = probes.input_grads(out, inputs, grad_out.to(out.dtype))
            names = ("query", "key", "value") if self.spec.multihead else ("q", "k", "v")
            missing = [name for name, g in zip(names, grads, strict=True) if g is None]
            self.record("backward", f"no gradient reaches {', '.join(missing)}" if missing else None)
        except Exception as exc:
            self.record("backward", probes.describe(exc))
            grads = None
        nonfinite = probes.nonfinite_problem("output", out)
        if nonfinite is None and grads is not None:
            names = ("query", "key", "value") if self.spec.multihead else ("q", "k", "v")
            for name, g in zip(names, grads, strict=True):
                nonfinite = nonfinite or (
                    probes.nonfinite_problem(f"grad of {name}", g) if g is not None else None
                )
        self.record("finite", nonfinite)
        return out.detach(), grads

    def check_reference(
        self,
        inputs: probes.Inputs,
        value_b: torch.Tensor,
        pattern: torch.Tensor,
        grad_out: torch.Tensor,
        out: torch.Tensor,
        grads: tuple[torch.Tensor | None, ...] | None,
    ) -> None:
        """Output and input gradients against the float64 reference of the declared pattern.

        Run B's reference (``v`` replaced by ``value_b``, for the ``written`` check) comes out of
        the same softmax: only ``v`` differs, so the probabilities are computed once.
        """
        try:
            ref, ref_grads, ref_b = probes.reference(
                self.module, self.spec.multihead, inputs, pattern, self.case.causal, grad_out, value_b
            )
        except Exception as exc:
            self.record("reference", f"the float64 reference failed: {probes.describe(exc)}")
            self.block(["grad"], "no reference")
            return
        self.ref_out, self.ref_out_b = ref, ref_b
        err = probes.rel_err(out, ref)
        self.record("reference", probes.fmt_err(err, self.tol) if not err <= self.tol else None, err)
        if grads is None or ref_grads is None:
            self.block(["grad"], "backward failed")
            return
        names = ("query", "key", "value") if self.spec.multihead else ("q", "k", "v")
        floor = GRAD_FLOOR * max(float(torch.linalg.vector_norm(rg).item()) for rg in ref_grads)
        worst, worst_name = -1.0, ""
        for name, g, rg in zip(names, grads, ref_grads, strict=True):
            if g is None:
                continue
            e = probes.rel_err(g, rg, floor)
            if not e <= worst:
                worst, worst_name = e, name
        if worst < 0:
            self.block(["grad"], "no gradient to compare")
            return
        problem = (
            f"grad of {worst_name}: {probes.fmt_err(worst, self.tol)}" if not worst <= self.tol else None
        )
        self.record("grad", problem, worst)

    def check_determinism(
        self,
        inputs: probes.Inputs,
        grad_out: torch.Tensor,
        out_a: torch.Tensor,
        grads_a: tuple[torch.Tensor | None, ...] | None,
    ) -> None:
        copies = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
        try:
            raw = probes.forward(self.module, copies, self.case.causal)
            out, _ = probes.unwrap(raw, self.spec.multihead)
            if out is None:
                raise TypeError("second run returned no output tensor")
            grads = probes.input_grads(out, copies, grad_out.to(out.dtype)) if grads_a is not None else None
        except Exception as exc:
            self.record("deterministic", f"second identical run raised {probes.describe(exc)}")
            return
        first = [out_a, *(grads_a or ())]
        second = [out.detach(), *(grads or ())]
        identical, diff = probes.run_difference(first, second)
        if identical:
            self.record("deterministic", None, 0.0, "bit-identical")
        elif diff <= self.tol:
            self.record("deterministic", None, diff, f"runs differ by rel {diff:.3g} (within tolerance)")
        else:
            self.record("deterministic", f"two identical runs differ: {probes.fmt_err(diff, self.tol)}", diff)

    def check_written(self, inputs: probes.Inputs, value_b: torch.Tensor, out_a: torch.Tensor) -> None:
        """Run B (only ``v`` differs from run A) must change every row whose reference changes."""
        assert self.ref_out is not None and self.ref_out_b is not None
        inputs_b = tuple(t.detach().clone().requires_grad_(True) for t in (inputs[0], inputs[1], value_b))
        probes.poison_allocator(inputs[0])
        try:
            raw = probes.forward(self.module, inputs_b, self.case.causal)
            out_b, _ = probes.unwrap(raw, self.spec.multihead)
            if out_b is None:
                raise TypeError("run with a different v returned no output tensor")
            out_b = out_b.detach()
        except Exception as exc:
            self.record("written", f"run with a different v raised {probes.describe(exc)}")
            return
        self.record(
            "written", probes.unwritten_rows(out_a, out_b, self.ref_out, self.ref_out_b, self.row_dims)
        )

    def _random_like(self, like: torch.Tensor, seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(like.shape, generator=gen, dtype=torch.float32).to(
            device=like.device, dtype=like.dtype
        )


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
