"""The work one benchmark times: an implementation from the registry at a profile's shape.

A :class:`Case` is built once per benchmark process (in asv's ``setup``) and hands the timer two
callables that do the same work on every call and need nothing from the host between calls:
:meth:`Case.forward` (inference: ``no_grad``) and :meth:`Case.forward_backward` (forward, then the
gradients of every input and parameter through ``torch.autograd.grad``, which returns fresh
tensors instead of accumulating into ``.grad``, so a CUDA-graph replay repeats exactly one
step).  It also knows the work it stands for: tokens per call and the attended-pair FLOPs of the
forward pass (``research/gpu_timing.md`` §3: 4·d FLOPs per attended (head, query, key) pair,
counting multiplicity; backward 2.5× forward), from which perfguard derives tokens/s and TFLOP/s.

A case may name the attention kernel its module runs (``backend``: an implementation that declares
a ``kernels`` module, on cuDNN, flash, math, ... for the kernel comparison,
:func:`kernel_comparison`); the kernel is then part of the case.

A case that cannot run here raises :class:`Unsupported` (a ``NotImplementedError``, which asv
reports as *skipped*, never as failed): CUDA asked for but absent, a dtype the implementation does
not support, a size that does not fit the GPU, a CPU run of a length beyond
:data:`CPU_MAX_SEQ_LEN`, or a kernel that cannot run this device, dtype and head size (with
the package's own reason), or that failed at its first call and left the work to another kernel.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from perfguard import profiles
from perfguard.engine import guarded
from perfguard.engine.dilation import dilated_attended_pairs
from perfguard.engine.held_memory import held
from perfguard.profiles import SUITE_VERSION

#: Longest sequence benchmarked on the CPU: beyond it, one call of the straightforward
#: implementation takes minutes and the suite would never finish on a CI machine.
CPU_MAX_SEQ_LEN = 16384

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


__all__ = [
    "SUITE_VERSION",
    "Case",
    "Unsupported",
    "attended_pairs",
    "build",
    "device_from_environment",
    "first_call",
    "first_call_of",
    "kernel_comparison",
]


class Unsupported(NotImplementedError):
    """This case cannot run on this machine; asv records it as skipped."""


def device_from_environment() -> str:
    """``$PERFGUARD_DEVICE`` (cpu / cuda), else cuda when NVML sees a GPU; never initialises CUDA."""
    wanted = os.environ.get(profiles.DEVICE_ENV, "").strip().lower()
    if wanted in ("cpu", "cuda"):
        return wanted
    from perfguard.engine.machine import cuda_visible

    return "cuda" if cuda_visible() else "cpu"


@dataclass
class Case:
    """One implementation, built and fed, ready to be timed."""

    impl: str
    seq_len: int
    dtype: str
    device: str
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    multihead: bool
    config: dict[str, Any]
    tokens: int
    forward_flops: float
    backend: str | None = None  # the attention kernel asked for by name (None: the module's default)
    _grad_inputs: tuple[torch.Tensor, ...] = field(default=(), repr=False)
    _grad_out: torch.Tensor | None = field(default=None, repr=False)

    def _call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = self.module(q, k, v)
        return out[0] if self.multihead else out

    def forward(self) -> Callable[[], torch.Tensor]:
        """One inference forward pass (no autograd graph is built)."""
        q, k, v = self.inputs

        def run() -> torch.Tensor:
            with torch.no_grad():
                return self._call(q, k, v)

        return run

    def forward_backward(self) -> Callable[[], tuple[torch.Tensor, ...]]:
        """Forward, then the gradients of q, k, v and every parameter for a fixed output gradient."""
        if not self._grad_inputs:
            leaves = tuple(t.detach().requires_grad_(True) for t in self.inputs)
            params = tuple(p for p in self.module.parameters() if p.requires_grad)
            self._grad_inputs = leaves + params
            shape, dtype = tuple(leaves[0].shape), leaves[0].dtype
            self._grad_out = seeded_grad_out(shape, dtype, self.device, GRAD_OUT_SEED)
        leaves3 = self._grad_inputs[:3]
        wrt = self._grad_inputs
        grad_out = self._grad_out

        def run() -> tuple[torch.Tensor, ...]:
            out = self._call(*leaves3)
            return torch.autograd.grad(out, wrt, grad_out)

        return run

    @property
    def info(self) -> dict[str, Any]:
        """What the results store beside the numbers: the configuration and the work per call."""
        return {
            "config": self.config,
            "tokens": self.tokens,
            "forward_flops": self.forward_flops,
            "device_name": torch.cuda.get_device_name() if self.device == "cuda" else "cpu",
        }


def attended_pairs(
    module: torch.nn.Module, seq_len: int, num_heads: int, what: str, kwargs: dict[str, Any]
) -> int:
    """(head, query, key) pairs one forward computes, counting multiplicity, without an (H, n, n) tensor.

    ``what``: the function the entry declares (:func:`perfguard.engine.guarded.computes`); a dilated
    one is counted by perfguard's definition (:mod:`perfguard.engine.dilation`) with the segments
    and rates it was built with (``kwargs``).  A module that computes its own pattern (``pattern``,
    ``dilated``) is counted by its own ``attended_pairs(seq_len, is_causal=, num_heads=)`` where it
    has one (the sum of its pattern, in closed form: docs/guarding-your-package.md), else by summing
    its ``attention_pattern``.
    """
    if what == "dense":
        return num_heads * seq_len * seq_len
    if what in ("longnet", "head_groups"):
        segments, rates = kwargs["segment_lengths"], kwargs["dilation_rates"]
        return dilated_attended_pairs(seq_len, num_heads, segments, rates, what)
    core = getattr(module, "attention", module)
    counter = getattr(core, "attended_pairs", None)
    if counter is not None:
        return int(counter(seq_len, is_causal=False, num_heads=num_heads))
    counts = core.attention_pattern(seq_len, is_causal=False, num_heads=num_heads)  # its own pattern
    return int(counts.sum().item())


def kernel_comparison() -> dict[str, tuple[str, ...]]:
    """The kernel comparison of the measured commit's package: implementation -> the kernels its
    declared ``kernels`` module lists (docs/guarding-your-package.md), for every entry that has one.

    Empty for a package whose entries declare none (another package, or a commit of ``attention``
    from before the declaration had them): its suite then has no comparison, not an import error.
    """
    package = guarded.current()
    return {name: tuple(package.kernels(name).KERNELS) for name in package.with_kernels()}


def _unavailable(impl: str, backend: str, device: str, dtype: str, head_dim: int) -> str | None:
    """The declared kernels module's reason why ``impl`` cannot run ``backend`` here (None: it can)."""
    package = guarded.current()
    if impl not in package.with_kernels():
        return f"{impl} declares no kernels module: it has no kernel comparison"
    reasons = dict(package.kernels(impl).available(device, DTYPES[dtype], head_dim))
    if backend not in reasons:
        return f"this commit's {impl} has no kernel {backend!r}"
    return reasons[backend]


#: The seed of the fixed output gradient of every forward+backward (timed, counted, and the accuracy
#: pass's: perfguard.engine.accuracy).
GRAD_OUT_SEED = 1
_GRAD_OUT: dict[tuple, torch.Tensor] = {}


def seeded_grad_out(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    """The seeded output gradient of this shape, drawn once per process on the CPU generator (the
    same numbers on every device; ~0.1 s for 16K x 12 x 64 on a GPU host) and shared read-only by
    every pass that needs it."""
    key = (tuple(shape), dtype, str(device), seed)
    if key not in _GRAD_OUT:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        drawn = torch.randn(shape, generator=gen).to(dtype=dtype)
        with held(device):  # kept between cases: out of the pool the code under test allocates from
            _GRAD_OUT[key] = drawn.to(device)
    return _GRAD_OUT[key]


def build(
    impl: str, seq_len: int, dtype: str, device: str, profile: profiles.Profile, *, backend: str | None = None
) -> Case:
    """Build the case for one benchmark x params, or raise :class:`Unsupported`."""
    if device == "cuda" and not torch.cuda.is_available():
        raise Unsupported("CUDA is not available here")
    if device == "cpu" and seq_len > CPU_MAX_SEQ_LEN:
        raise Unsupported(f"seq_len {seq_len} > {CPU_MAX_SEQ_LEN} is not benchmarked on the CPU")
    try:
        spec = guarded.current().get(impl)
    except KeyError as exc:
        raise Unsupported(str(exc)) from None
    torch_dtype = DTYPES[dtype]
    supported = spec.cuda_dtypes if device == "cuda" else spec.cpu_dtypes
    if torch_dtype not in supported:
        raise Unsupported(f"{impl} does not support {dtype} on {device}")

    shape = profile.shape(device)
    overrides: dict[str, Any] = dict(profiles.dilation_for(seq_len))
    if backend is not None:
        why = _unavailable(impl, backend, device, dtype, shape.head_dim)
        if why is not None:
            raise Unsupported(why)
        overrides["backend"] = backend
    overrides.update(head_overrides(spec.multihead, shape))
    # the module's initial parameters must not depend on what ran before in this process: the
    # accuracy of a multihead module depends on its weights (perfguard.engine.accuracy)
    torch.manual_seed(0)
    try:
        module = spec.build("bench", device=device, dtype=torch_dtype, **overrides)
        bench_shape = type(spec.config("bench").shape)(shape.batch, seq_len, shape.num_heads, shape.head_dim)
        inputs = spec.make_inputs(bench_shape, device=device, dtype=torch_dtype, seed=0)
    except torch.cuda.OutOfMemoryError as exc:
        raise Unsupported(f"does not fit the GPU: {str(exc).splitlines()[0]}") from None
    config = {**{k: v for k, v in spec.config("bench").kwargs.items()}, **overrides}
    config.update(batch=shape.batch, seq_len=seq_len, num_heads=shape.num_heads, head_dim=shape.head_dim)
    pairs = attended_pairs(module, seq_len, shape.num_heads, guarded.computes(spec), config)
    return Case(
        impl=impl,
        seq_len=seq_len,
        dtype=dtype,
        device=device,
        module=module,
        inputs=inputs,
        multihead=spec.multihead,
        config=_jsonable(config),
        tokens=shape.batch * seq_len,
        forward_flops=4.0 * shape.batch * pairs * shape.head_dim,
        backend=backend,
    )


def head_overrides(multihead: bool, shape: Any) -> dict[str, int]:
    """The constructor arguments a profile's head shape gives a module: a multihead module takes its
    embedding size and heads, a core module its heads (the distributed suite builds its ring the same way)."""
    if multihead:
        return {"embed_dim": shape.num_heads * shape.head_dim, "num_heads": shape.num_heads}
    return {"num_heads": shape.num_heads}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def first_call(fn: Callable[[], Any], device: str) -> None:
    """Run ``fn`` once; a GPU out-of-memory becomes :class:`Unsupported` (too big for this GPU)."""
    try:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        raise Unsupported(f"does not fit the GPU: {str(exc).splitlines()[0]}") from None


def first_call_of(case: Case, fn: Callable[[], Any]) -> None:
    """:func:`first_call`; for a case on a named kernel, also that the kernel is the one that ran.

    A kernel that passes the package's capability checks can still fail at run time; the package
    may then run another one with a ``RuntimeWarning`` (``attention`` does, for that call or for the
    rest of the process once the failure repeats: docs/attention.md, "Fallbacks"), and its declared
    kernels module's ``running`` says which kernel a call runs now.  A time taken after that could be
    another kernel's under this one's name, so the case is skipped instead, with the engine's
    message as the reason, whether the fallback lasts one call or the process.
    """
    if case.backend is None:
        first_call(fn, case.device)
        return
    declared = guarded.current().kernels(case.impl)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        first_call(fn, case.device)
    said = ""
    for w in caught:  # the engine's fallback message is the reason; anything else is shown as usual
        if not said and issubclass(w.category, RuntimeWarning) and repr(case.backend) in str(w.message):
            said = str(w.message)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    head_dim = int(case.config.get("head_dim", 0))
    running = declared.running(case.device, DTYPES[case.dtype], head_dim, case.backend)
    if said or running != case.backend:
        raise Unsupported(
            f"the {case.backend} kernel failed here at run time and {case.impl} fell back"
            + (f" to {running}" if running != case.backend else "")
            + (f": {said}" if said else "")
        )
