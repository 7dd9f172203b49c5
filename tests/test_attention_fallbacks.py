"""Fallbacks last as long as their cause (attention._fallback, issue 26).

A failure under a dispatch mode (``FlopCounterMode``, a counting ``TorchDispatchMode`` such as
perfguard's work counter), a ``torch.func`` transform or graph capture falls back for that call
only, and the next plain call runs the fast path again; a plain failure is switched off for the
process only after failing twice in a row.  The CPU tests provoke real context failures: flex
(eager on the CPU) under a dispatch mode or vmap, the Triton merge (Triton's interpreter) under
fake tensors.  The CUDA test runs every registered implementation once under each mode and then
reads the kernel names of a plain call.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from attention import _kernel_selection, _merge, block_sparse
from attention._fallback import Fallback, calling_context, compile_blocked
from attention.block_sparse import FLEX_FALLBACK, BlockSparseRingDilatedAttention
from attention.improved import ImprovedDilatedAttention


class OpCounter(TorchDispatchMode):
    """A plain counting mode, as perfguard.engine.work's: counts aten ops, supports no higher-order op."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[f"aten::{func.overloadpacket.__name__}"] += 1
        return func(*args, **(kwargs or {}))


class CompiledOpCounter(OpCounter):
    """A counting mode that lets torch.compile compile under it (``ignore_compile_internals``):
    the compiled code runs with the mode on, so flex is really called, and raises there."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


MODES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "OpCounter": OpCounter,
    "FlopCounterMode": lambda: FlopCounterMode(display=False),
}
# why flex cannot run under each mode: attention refuses to call it where torch.compile would not
# compile it; under a mode that lets torch.compile in, flex's own higher-order op raises
_NOT_COMPILED = (
    r"ContextError: torch.compile does not compile under a dispatch mode \({mode}\), "
    r"and flex_attention runs only through it"
)
_FLEX_REFUSES = {
    "OpCounter": _NOT_COMPILED.format(mode="OpCounter"),
    "FlopCounterMode": _NOT_COMPILED.format(mode="FlopCounterMode"),
    "CompiledOpCounter": r"NotImplementedError: There was no rule registered for HigherOrderOperator "
    r"flex_attention .*",
}


@pytest.fixture(autouse=True)
def _no_switch_left_behind() -> Iterator[None]:
    """Each test starts from a process where nothing is switched off and must leave nothing
    switched off (what it switched off would change what later tests run)."""
    switches = (
        _kernel_selection.KERNEL_FALLBACK,
        _kernel_selection.STRIDES_FALLBACK,
        block_sparse.FLEX_FALLBACK,
        _merge.TRITON_FALLBACK,
    )

    def clear() -> set[str]:
        left = {repr(key) for s in switches for key in s.off}
        for s in switches:
            s.off.clear()
            s.reasons.clear()
        return left

    clear()
    yield
    left = clear()
    assert not left, f"switched off for the rest of the process: {left}"


def _ran(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, set[str], set[str]]:
    """``fn()`` under the profiler (not a dispatch mode): its result, the names of the host-side
    events (aten ops, autograd functions, compiled regions) and of the CUDA kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        out = fn()
        if out.is_cuda:
            torch.cuda.synchronize()
    events = prof.events()
    host = {e.name for e in events if e.device_type == DeviceType.CPU}
    return out, host, {e.name for e in events if e.device_type == DeviceType.CUDA}


def _ran_flex(names: set[str]) -> bool:
    return any("FlexAttention" in n for n in names)


@contextmanager
def _no_runtime_warning() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)  # eager flex says it is not compiled
        yield


# --------------------------------------------------------------------------------------------
# what counts as a special context
# --------------------------------------------------------------------------------------------
def test_calling_context_names_the_contexts_that_can_make_a_kernel_fail() -> None:
    assert calling_context() is None
    with torch.device("cpu"), torch.no_grad():  # plain: a default device is not a special context
        assert calling_context() is None
    with OpCounter():
        assert calling_context() == "under OpCounter"
        assert compile_blocked() == "torch.compile does not compile under a dispatch mode (OpCounter)"
    with FlopCounterMode(display=False):
        assert calling_context() == "under FlopCounterMode"
        assert compile_blocked() is not None
    seen: list[str | None] = []

    def inside(x: torch.Tensor) -> torch.Tensor:
        seen.append(calling_context())
        return x

    torch.func.vmap(inside)(torch.ones(2, 3))
    assert seen == ["inside a torch.func transform (vmap, grad, ...)"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert calling_context() == "under autocast"
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert calling_context() == "under FakeTensorMode"
        assert compile_blocked() is None  # an infra mode: torch.compile traces under it
    assert calling_context() is None and compile_blocked() is None


# --------------------------------------------------------------------------------------------
# the rule, on one fallback's memory
# --------------------------------------------------------------------------------------------
def _fail(memory: Fallback, message: str = "no kernel image") -> bool:
    return memory.failed("k", RuntimeError(message), what="kernel 'k'", instead="falling back to 'slow'")


def test_a_plain_one_off_failure_is_for_that_call_and_two_in_a_row_for_the_process() -> None:
    memory = Fallback()
    first = r"kernel 'k' failed in a plain call \(RuntimeError: no kernel image\); falling back to 'slow' "
    with pytest.warns(
        RuntimeWarning, match=first + re.escape("for this call only (a second failure in a row")
    ):
        assert not _fail(memory)
    memory.succeeded("k")  # the one-off: the next call ran, the count starts again
    with pytest.warns(RuntimeWarning, match="for this call only"):
        assert not _fail(memory)
    assert "k" not in memory.off
    with pytest.warns(
        RuntimeWarning,
        match=r"kernel 'k' failed in a plain call, 2 times in a row \(RuntimeError: no kernel image\); "
        "falling back to 'slow' for the rest of the process$",
    ):
        assert _fail(memory)
    assert memory.off == {"k"} and "for the rest of the process" in memory.reasons["k"]


def test_failures_under_a_mode_never_count_and_out_of_memory_is_no_kernel_failure() -> None:
    memory = Fallback()
    for _ in range(3):
        with (
            OpCounter(),
            pytest.warns(RuntimeWarning, match=r"failed under OpCounter .* for this call only$"),
        ):
            assert not _fail(memory)
    with pytest.warns(RuntimeWarning, match=r"in a plain call .*for this call only \(a second"):
        assert not _fail(memory)  # the first plain failure: the mode's did not count
    with pytest.raises(torch.OutOfMemoryError):
        memory.failed("k", torch.OutOfMemoryError("CUDA out of memory"), what="kernel 'k'", instead="-")
    assert not memory.off


# --------------------------------------------------------------------------------------------
# block-sparse: flex -> gather (backend="flex": eager flex on the CPU)
# --------------------------------------------------------------------------------------------
def _block_sparse() -> tuple[BlockSparseRingDilatedAttention, tuple[torch.Tensor, ...]]:
    module = BlockSparseRingDilatedAttention(
        segment_lengths=[128, 256], dilation_rates=[1, 2], sparsity=0.5, block_size=128, backend="flex"
    )
    gen = torch.Generator().manual_seed(0)
    qkv = tuple(torch.randn(1, 512, 2, 32, generator=gen) for _ in range(3))
    return module, qkv


def _gather(module: BlockSparseRingDilatedAttention, qkv: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The same call on the gather path (a second module: the first keeps its flex backend)."""
    gather = BlockSparseRingDilatedAttention(
        segment_lengths=module.segment_lengths,
        dilation_rates=module.dilation_rates,
        sparsity=module.sparsity,
        block_size=module.block_size,
        backend="gather",
    )
    return gather(*qkv)


@pytest.mark.parametrize("mode", list(_FLEX_REFUSES))
def test_block_sparse_under_a_dispatch_mode_falls_back_for_that_call_only(mode: str) -> None:
    """Flex cannot run under a dispatch mode: that call runs the gather path (and is counted),
    with a warning that says so, and the next plain call runs flex again (before the fix,
    ``backend="flex"`` raised; ``auto`` on CUDA switched flex off for the process)."""
    module, qkv = _block_sparse()
    with _no_runtime_warning():
        flex_out, names, _ = _ran(lambda: module(*qkv))
    assert _ran_flex(names)
    expected = (
        rf"^flex_attention on cpu torch.float32 head_dim 32 failed under {mode} \({_FLEX_REFUSES[mode]}\); "
        r"block-sparse attention runs its gather path for this call only$"
    )
    make = CompiledOpCounter if mode == "CompiledOpCounter" else MODES[mode]
    with make() as ctx, pytest.warns(RuntimeWarning, match=expected):
        counted = module(*qkv)
    torch.testing.assert_close(counted, _gather(module, qkv), rtol=0, atol=0)  # it ran the gather path
    torch.testing.assert_close(counted, flex_out, rtol=1e-5, atol=1e-6)
    if isinstance(ctx, FlopCounterMode):
        assert ctx.get_total_flops() > 0  # the call it ran is counted
    else:
        assert ctx.ops["aten::index"] > 0  # the gather path's block gathers
    assert not FLEX_FALLBACK.off
    with _no_runtime_warning():
        again, names, _ = _ran(lambda: module(*qkv))
    assert _ran_flex(names), sorted(names)
    assert torch.equal(again, flex_out)


class TransparentOpCounter(OpCounter):
    """A counting mode that declares itself infrastructure (as perfguard.engine.work's does) and takes
    higher-order ops: torch.compile runs compiled code under it, and flex reaches it as one op."""

    supports_higher_order_operators = True

    @classmethod
    def is_infra_mode(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if isinstance(func, torch._ops.HigherOrderOperator):
            self.ops[f"higher_order::{func.name()}"] += 1
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def test_block_sparse_runs_flex_under_a_mode_transparent_to_torch_compile() -> None:
    """Where torch.compile does compile (the mode says it is infrastructure) flex runs and is
    counted: no fallback, no warning."""
    module, qkv = _block_sparse()
    with _no_runtime_warning():
        flex_out = module(*qkv)
        with TransparentOpCounter() as counter:
            counted = module(*qkv)
    assert counter.ops["higher_order::flex_attention"] == 1 and counter.ops["aten::index"] == 0
    assert torch.equal(counted, flex_out)


def test_block_sparse_under_vmap_falls_back_for_that_call_only() -> None:
    """A real failure of flex itself (vmap has no rule for it): the gather path for that call only,
    exact, and flex again on the next plain call."""
    module, qkv = _block_sparse()
    with _no_runtime_warning():
        flex_out = module(*qkv)
    batch = tuple(torch.stack([t[0], t[0].flip(0)]) for t in qkv)  # two sequences, vmapped
    with pytest.warns(
        RuntimeWarning,
        match=r"flex_attention on cpu torch.float32 head_dim 32 failed inside a torch.func transform "
        r"\(vmap, grad, \.\.\.\) \(.*\); block-sparse attention runs its gather path for this call only$",
    ):
        out = torch.func.vmap(lambda q, k, v: module(q[None], k[None], v[None])[0])(*batch)
    torch.testing.assert_close(out[0], flex_out[0], rtol=1e-5, atol=1e-6)
    assert not FLEX_FALLBACK.off
    with _no_runtime_warning():
        again, names, _ = _ran(lambda: module(*qkv))
    assert _ran_flex(names) and torch.equal(again, flex_out)


def test_block_sparse_backend_flex_still_raises_a_plain_failure() -> None:
    """Asked for by name, flex falls back only for a context it cannot run in."""
    module, qkv = _block_sparse()
    q = qkv[0].clone().requires_grad_()
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        module(q, qkv[1], qkv[2])
    assert not FLEX_FALLBACK.off


# --------------------------------------------------------------------------------------------
# the segment engine's kernels: flex -> math
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
def test_engine_kernel_under_a_dispatch_mode_falls_back_for_that_call_only(mode: str) -> None:
    """``improved`` on the flex kernel: under a mode each piece runs math for that call only, the
    call is counted, and the next plain call runs flex (the KernelSet still names it)."""
    module = ImprovedDilatedAttention(segment_lengths=[32, 64], dilation_rates=[1, 2], backend="flex")
    gen = torch.Generator().manual_seed(1)
    qkv = tuple(torch.randn(1, 128, 2, 16, generator=gen) for _ in range(3))
    with _no_runtime_warning():
        flex_out, names, _ = _ran(lambda: module(*qkv))
    assert _ran_flex(names)
    expected = (
        rf"attention kernel 'flex' on cpu torch.float32 head_dim 16 failed under {mode} \(ContextError: "
        r".*\); falling back to 'math' for this call only$"
    )
    with MODES[mode]() as ctx, pytest.warns(RuntimeWarning, match=expected):
        counted = module(*qkv)
    torch.testing.assert_close(counted, flex_out, rtol=1e-5, atol=1e-6)
    if isinstance(ctx, OpCounter):
        assert ctx.ops["aten::logsumexp"] > 0  # the math kernel ran, and was counted
    assert not _kernel_selection.KERNEL_FALLBACK.off
    assert _kernel_selection.KernelSet(torch.device("cpu"), torch.float32, 16, "flex").name == "flex"
    with _no_runtime_warning():
        again, names, _ = _ran(lambda: module(*qkv))
    assert _ran_flex(names) and torch.equal(again, flex_out)


# --------------------------------------------------------------------------------------------
# CUDA: every implementation, once under each mode, then a plain call's kernels
# --------------------------------------------------------------------------------------------
_ENGINE = {"improved", "ring", "hilbert_ring", "multihead_improved", "multihead_ring"}
_BLOCK_SPARSE = {"block_sparse_ring", "multihead_block_sparse_ring"}
_FUSED_OPS = {"aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention"}
_GATHER_OPS = {"aten::index", "aten::isfinite"}  # block_sparse._forward_gather and attention._lse


@pytest.mark.cuda
def test_cuda_every_implementation_runs_its_fast_path_after_a_call_under_each_mode() -> None:
    """block_sparse_ring bf16, 4K tokens, 12 heads, head_dim 64 (the bench configuration): a call
    under FlopCounterMode and one under a counting mode (forward and backward), then a plain
    forward must run flex (Triton kernels, none of the gather path's ops); the segment engine
    must run cuDNN or flash with the Triton merge and never the math kernel."""
    from attention.registry import REGISTRY

    seen: dict[str, list[str]] = {}
    for name, spec in REGISTRY.items():
        if spec.needs_distributed:
            continue
        shape = spec.config("bench").with_seq_len(4096).shape
        module = spec.build("bench", device="cuda", dtype=torch.bfloat16)

        def call(*qkv: torch.Tensor, module: torch.nn.Module = module) -> torch.Tensor:
            out = module(*qkv)
            return out[0] if isinstance(out, tuple) else out  # multihead: (output, None)

        for mode in MODES.values():
            qkv = spec.make_inputs(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", RuntimeWarning)
                with mode():
                    call(*qkv).float().sum().backward()
            said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            assert all(m.endswith("for this call only") for m in said if " failed " in m), (name, said)
        qkv = spec.make_inputs(shape, device="cuda", dtype=torch.bfloat16)
        with _no_runtime_warning(), torch.no_grad():
            call(*qkv)  # the first plain call compiles what the modes kept from compiling
            _, host, kernels = _ran(lambda qkv=qkv: call(*qkv))
        seen[name] = sorted(kernels)
        print(f"{name}: ops {sorted(n for n in host if n.startswith('aten::'))}\n  kernels {sorted(kernels)}")
        assert kernels, name
        if name in _BLOCK_SPARSE:
            assert any("triton" in k.lower() for k in kernels), (name, sorted(kernels))  # compiled flex
            assert not host & _GATHER_OPS, (name, sorted(host & _GATHER_OPS))
        if name in _ENGINE:
            assert host & _FUSED_OPS, (name, sorted(n for n in host if n.startswith("aten::")))
            fused = ("cudnn", "flash", "fmha", "sdpa")
            assert any(f in k.lower() for k in kernels for f in fused), (name, sorted(kernels))
            assert "aten::logsumexp" not in host, name  # attention._kernels' math forward
            assert any("_combine_kernel" in k for k in kernels), (name, sorted(kernels))  # the Triton merge
    assert set(seen) >= _ENGINE | _BLOCK_SPARSE


# --------------------------------------------------------------------------------------------
# the Triton merge -> the torch merge (Triton's interpreter on the CPU, in a fresh process)
# --------------------------------------------------------------------------------------------
_TRITON_UNDER_FAKE = r"""
import warnings
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.profiler import ProfilerActivity, profile
from attention import ImprovedDilatedAttention, _merge

module = ImprovedDilatedAttention(segment_lengths=[16, 32], dilation_rates=[1, 2])
q, k, v = (torch.randn(1, 64, 2, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", RuntimeWarning)
    expected = module(q, k, v)  # the Triton merge, plainly
    with FakeTensorMode() as fake:  # e.g. a memory estimate: the kernel cannot read fake tensors
        module(*(fake.from_tensor(t) for t in (q, k, v)))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        again = module(q, k, v)
said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
print("WARNINGS", said)
assert len(said) == 1, said
assert said[0].startswith("the Triton merge kernel on cpu failed under FakeTensorMode ("), said
assert said[0].endswith("); merging with plain torch ops for this call only"), said
assert not _merge.TRITON_FALLBACK.off
ops = {e.name for e in prof.events()}
assert "aten::logaddexp" not in ops, sorted(ops)  # merge_torch's op: the plain call ran Triton's merge
assert torch.equal(again, expected)
print("fallback for that call only")
"""


def test_triton_merge_under_fake_tensors_falls_back_for_that_call_only() -> None:
    """A real failure of the Triton merge (it reads data pointers; fake tensors have none): the
    torch merge for that call, and the Triton merge again on the next plain call."""
    pytest.importorskip("triton", reason="Triton is not installed: the merge kernel is not tested here")
    env = {**os.environ, "TRITON_INTERPRET": "1", "ATTENTION_MERGE": "triton"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", _TRITON_UNDER_FAKE], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fallback for that call only" in done.stdout


def test_each_flex_site_has_its_own_compile_budget_and_never_runs_flex_eagerly(monkeypatch: Any) -> None:
    """The engine's flex kernel and block-sparse compile functions of their own (attention._compiled):
    shapes compiled at one site do not use up the other's Dynamo budget (one shared ``flex_attention``
    made block-sparse run eager flex on an H200), and past its budget a site raises instead of
    running the unfused eager reference.  On the CPU with tiny shapes and a budget of 2."""
    from attention import _compiled, _kernels

    monkeypatch.setattr(_compiled, "RECOMPILE_LIMIT", 2)
    engine = _compiled.budgeted(_kernels._flex_engine)
    sparse = _compiled.budgeted(block_sparse._flex_block_sparse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (128, 256):
            q = torch.randn(1, 1, n, 16)
            engine(q, q, q)
        q = torch.randn(1, 1, 384, 16)
        sparse(q, q, q)  # the third shape of the process, the first of this site: compiled
        with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
            engine(q, q, q)  # the engine site's third shape: over its budget
    eager = [str(w.message) for w in caught if "without torch.compile" in str(w.message)]
    assert not eager, eager
