"""One case of a row (one mode x causal flag of one implementation on one device and dtype), in the
order of :mod:`perfguard.verify.runner`'s docstring: the declared pattern, run A, the reference,
determinism, run B.  Every call into the implementation is wrapped: an exception fails the check
it belongs to and marks the checks that depended on it as "not run".
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from perfguard.declare import ImplConfig, Implementation, ShapeConfig
from perfguard.engine.accuracy import GRAD_FLOOR, relative_error
from perfguard.engine.dilation import dilated_pattern, function_counts
from perfguard.engine.guarded import computes
from perfguard.verify import probes
from perfguard.verify.planning import Scenario
from perfguard.verify.results import RowResult
from perfguard.verify.shared import RunCache

#: what a root declared ``computes="dilated"`` is compared with (its pattern must be the semantics)
SEMANTICS = "perfguard.engine.dilation.dilated_pattern (the semantics)"

TARGET_OF_DEVICE = {"cpu": "cpu", "cuda": "gpu"}

AFTER_FORWARD = ["backward", "shape", "return", "written", "finite", "reference", "grad", "deterministic"]


class CaseRun:
    """One mode × causal case of one row (see the module docstring for the steps)."""

    def __init__(
        self,
        row: RowResult,
        spec: Implementation,
        module: torch.nn.Module,
        cfg: ImplConfig,
        case: Scenario,
        device: str,
        dtype: torch.dtype,
        seed: int,
        root: str | None,
        registry: Mapping[str, Implementation],
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
        if computes(self.spec) not in ("pattern", "dilated"):
            return self.declared_function()
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

    def declared_function(self) -> torch.Tensor | None:
        """The counts of what the entry declares it computes (``dense``, ``longnet``, ``head_groups``).

        The module is not asked for a pattern: the reference is perfguard's own definition of the
        declared function, with the segments and rates of the configuration the module was built with.
        """
        what, causal = computes(self.spec), self.case.causal
        try:
            expected = self._function_counts(what, causal)
        except Exception as exc:
            self.record("pattern", f"cannot build the declared {what} attention: {probes.describe(exc)}")
            self.block(["same_fn"], "no usable declared function")
            return None
        self.record(
            "pattern", None, detail=f"declared {what} (density {probes.pattern_density(expected):.3f})"
        )
        if self.root is not None:  # the counts are the root's own: same_fn compares patterns it has not
            self.row.checks["same_fn"].not_applicable = f"{self.spec.name} declares computes={what!r}"
        return expected

    def _function_counts(self, what: str, causal: bool) -> torch.Tensor:
        n, heads, device, kwargs = self.n, self.heads, self.device, self.cfg.kwargs
        key = ("function", what, repr(sorted(kwargs.items())), n, heads, causal, str(device))
        return self.cache.patterns.get(
            key, lambda: function_counts(what, n, heads, dict(kwargs), is_causal=causal, device=device)
        )

    def _expected_pattern(self, device: torch.device) -> tuple[torch.Tensor, str]:
        """The pattern "same function" must reproduce, built once per run (:mod:`.shared`)."""
        causal, mode = self.case.causal, self.case.mode
        assert self.root is not None
        root_spec = self.registry[self.root]
        if computes(root_spec) == "dilated":
            kwargs = self.cfg.kwargs
            segs, rates = tuple(kwargs["segment_lengths"]), tuple(kwargs["dilation_rates"])
            key = ("semantics", segs, rates, self.n, self.heads, mode, causal, str(device))
            expected = self.cache.patterns.get(
                key,
                lambda: dilated_pattern(
                    self.n, self.heads, segs, rates, mode=mode, is_causal=causal, device=device
                ),
            )
            return expected, SEMANTICS
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
            self.block(AFTER_FORWARD, "forward failed")
            return None
        self.record("forward", None)
        out, return_problem = probes.unwrap(raw, self.spec.multihead)
        self.record("return", return_problem)
        if out is None:
            self.block([c for c in AFTER_FORWARD if c != "return"], "no output tensor to check")
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
        err = relative_error(out, ref)
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
            e = relative_error(g, rg, floor)
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
