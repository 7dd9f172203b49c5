"""What one call *does*, counted: FLOPs, dispatched aten ops, bytes allocated, CUDA kernels launched.

Timing verdicts are only as good as the machine is quiet; the work a call does is not.  These
counts are exact and repeat exactly (same code, same software, same shapes), so perfguard gates
them like memory, with no statistics (docs/verdicts.md, "Work metrics"), and they are what the CPU
CI relies on.  They also show what CUDA-graph replay hides: a change that launches ten times more
kernels is paid by every eager user of the module even when the replayed time hardly moves.

- :func:`dispatch_counts`: one call under a ``TorchDispatchMode`` that counts every aten op by
  name, sums ``torch.utils.flop_counter``'s FLOP formulas (the library's registry, used directly:
  ``FlopCounterMode`` tracks modules with backward hooks that ``torch.autograd.grad`` refuses) and
  the bytes of every tensor an op returns in new storage (views and in-place results excluded).
  The CPU's fused attention ops (``_scaled_dot_product_flash_attention_for_cpu`` and its backward)
  are not in that registry; they get the registry's own SDPA formulas here.
- :func:`graph_kernels`: the kernel nodes of a captured CUDA graph (``cuda.bindings``), by kernel
  name: exactly the kernels one call launches, at no extra cost when the timer captured the graph.
- :func:`profile_breakdown`: one call under ``torch.profiler``: per CUDA kernel (or, on the CPU,
  per aten op) the count and the time, for the report's "what changed underneath" table of a
  regression.  Used in the re-measurement stage, not in every round.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

#: How many names a breakdown keeps (the rest are summed into "(other)"): enough for any
#: implementation here (ring forward: ~30 distinct kernels), bounded for the store.
BREAKDOWN_LIMIT = 60


@dataclass
class Counts:
    """The deterministic counts of one call, with the per-op breakdown they came from."""

    ops: int
    flops: int
    allocated_bytes: int
    op_counts: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# dispatch counting (every device)
# --------------------------------------------------------------------------------------------


@functools.cache
def _flop_formulas() -> dict[Any, Callable[..., int]]:
    """``torch.utils.flop_counter``'s registry plus the CPU fused-attention ops it lacks."""
    from torch.utils import flop_counter as fc

    formulas: dict[Any, Callable[..., int]] = dict(fc.flop_registry)
    aten = torch.ops.aten
    shapes = fc.shape_wrapper

    @shapes
    def cpu_flash(query, key, value, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return fc.sdpa_flop_count(query, key, value)

    @shapes
    def cpu_flash_backward(grad_out, query, key, value, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        return fc.sdpa_backward_flop_count(grad_out, query, key, value)

    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu] = cpu_flash
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = cpu_flash_backward
    return formulas


def _skip_dynamo_import(mode: type) -> None:
    """Call ``mode``'s ``__torch_dispatch__`` directly while ``torch._dynamo`` is not imported.

    ``TorchDispatchMode`` wraps a subclass's ``__torch_dispatch__`` in ``torch._disable_dynamo``,
    which imports ``torch._dynamo`` on the first dispatch (``torch/_compile.py``): 1.6-1.9 CPU s,
    more than the rest of a CPU round's work count and as much as ``import torch`` itself
    (docs/perf/test_suite.md).  The wrapper only matters while Dynamo's frame hook can run, which
    needs ``torch.compile`` and so ``torch._dynamo`` loaded; the dispatch below takes the wrapper
    from the moment it is (also when a compile starts inside the counted call).
    """
    import sys

    wrapped = mode.__dict__["__torch_dispatch__"]
    raw = getattr(wrapped, "__wrapped__", None)
    if raw is None:  # a torch without the wrapper: nothing to skip
        return

    @functools.wraps(raw)
    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return wrapped(self, *args, **kwargs)
        return raw(self, *args, **kwargs)

    mode.__torch_dispatch__ = dispatch  # type: ignore[attr-defined]


def dispatch_counts(fn: Callable[[], Any]) -> Counts:
    """Run ``fn()`` once and count its aten ops, FLOPs and newly allocated bytes (see module doc)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    formulas = _flop_formulas()

    class _Counter(TorchDispatchMode):
        # A higher-order operator that reaches the mode eagerly (e.g. FlexAttention on the CPU) is
        # counted as one op under its own name, with the registry's formula, and run as it is.
        supports_higher_order_operators = True

        @classmethod
        def is_infra_mode(cls) -> bool:
            """Transparent to ``torch.compile``: compiled regions run their compiled code here.

            Under a user-visible dispatch mode Dynamo refuses to run compiled code, and
            ``torch.compile(flex_attention)`` then raises; the guarded module used to answer with a
            fallback to another path (issue 26).  Counting must not change the path it counts, so
            this mode declares itself infrastructure, like the modes ``torch.compile`` itself uses:
            the compiled region runs the kernels a plain call runs; its inside is not dispatched
            and so not counted (its CUDA kernels are, by :func:`graph_kernels`).
            """
            return True

        def __init__(self) -> None:
            super().__init__()
            self.ops: Counter[str] = Counter()
            self.flops = 0
            self.bytes = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            hop = isinstance(func, torch._ops.HigherOrderOperator)
            packet = func if hop else func.overloadpacket
            self.ops[f"higher_order::{func.name()}" if hop else f"aten::{packet.__name__}"] += 1
            formula = formulas.get(packet)
            if formula is not None:
                self.flops += int(formula(*args, **kwargs, out_val=out))
            inputs = {
                a.untyped_storage().data_ptr()
                for a in tree_leaves((args, kwargs))
                if isinstance(a, torch.Tensor) and a.layout == torch.strided
            }
            for o in tree_leaves(out):
                if isinstance(o, torch.Tensor) and o.layout == torch.strided:
                    storage = o.untyped_storage()
                    if storage.data_ptr() not in inputs:
                        self.bytes += storage.nbytes()
            return out

    _skip_dynamo_import(_Counter)
    counter = _Counter()
    with counter:
        fn()
    return Counts(
        ops=sum(counter.ops.values()),
        flops=counter.flops,
        allocated_bytes=counter.bytes,
        op_counts=_limited(counter.ops),
    )


def digest(parts: Iterable[str]) -> str:
    """A short stable hash of a path's parts (kernel names, or aten ops with their counts)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "replace") + b"\n")
    return h.hexdigest()[:16]


def _limited(counts: Counter[str]) -> dict[str, int]:
    """The :data:`BREAKDOWN_LIMIT` largest entries, the rest summed as "(other)"."""
    top = counts.most_common(BREAKDOWN_LIMIT)
    out = dict(top)
    rest = sum(counts.values()) - sum(out.values())
    if rest:
        out["(other)"] = rest
    return out


# --------------------------------------------------------------------------------------------
# CUDA kernels of a captured graph
# --------------------------------------------------------------------------------------------


@functools.cache
def _cxa_demangle() -> Any:
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        fn = lib.__cxa_demangle
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn, ctypes.CDLL(None).free
    except (OSError, AttributeError):
        return None


def demangle(name: str) -> str:
    """A C++ kernel name as the profiler shows it (``void at::native::…``), or unchanged."""
    found = _cxa_demangle()
    if found is None or not name.startswith("_Z"):
        return name
    fn, free = found
    status = ctypes.c_int()
    pointer = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not pointer:
        return name
    try:
        return ctypes.string_at(pointer).decode(errors="replace")
    finally:
        free(ctypes.c_void_p(pointer))


def short_kernel_name(name: str, limit: int = 120) -> str:
    """Demangled and cut to ``limit`` characters (template arguments make names very long)."""
    text = demangle(name)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def graph_kernels(graph: torch.cuda.CUDAGraph) -> dict[str, int] | None:
    """Kernel launches of a graph captured with ``keep_graph=True``, by kernel name; None if unknown.

    Walks the graph's nodes (child graphs included) through ``cuda.bindings``; memset and memcpy
    nodes are not kernels and are not counted.  Returns None when the bindings or the raw graph are
    not available (the caller then falls back to a profiler pass).
    """
    try:
        from cuda.bindings import driver, runtime

        handle = int(graph.raw_cuda_graph())
    except Exception:  # no cuda.bindings, or a torch without keep_graph
        return None
    kernel = runtime.cudaGraphNodeType.cudaGraphNodeTypeKernel
    child = runtime.cudaGraphNodeType.cudaGraphNodeTypeGraph
    names: Counter[str] = Counter()

    def walk(g: Any) -> None:
        _, _, count = runtime.cudaGraphGetNodes(g, 0)
        _, nodes, count = runtime.cudaGraphGetNodes(g, count)
        for node in nodes[:count]:
            _, kind = runtime.cudaGraphNodeGetType(node)
            if kind == kernel:
                names[_kernel_name(driver, node)] += 1
            elif kind == child:
                _, sub = runtime.cudaGraphChildGraphNodeGetGraph(node)
                walk(sub)

    try:
        walk(runtime.cudaGraph_t(init_value=handle))
    except Exception:
        return None
    return _limited(names)


def _kernel_name(driver: Any, node: Any) -> str:
    try:
        _, params = driver.cuGraphKernelNodeGetParams(driver.CUgraphNode(int(node)))
        _, name = driver.cuFuncGetName(params.func)
        text = name.decode() if isinstance(name, bytes) else str(name)
        return short_kernel_name(text)
    except Exception:  # a library kernel without a queryable function: still one kernel
        return "(unnamed kernel)"


# --------------------------------------------------------------------------------------------
# the profiler's breakdown (re-measurement stage)
# --------------------------------------------------------------------------------------------


def profile_breakdown(fn: Callable[[], Any], device: str) -> dict[str, Any]:
    """Per kernel (CUDA) or per aten op (CPU): ``{"kind", "source", "rows": {name: [count, ms]}}``.

    One call of ``fn`` under ``torch.profiler``; on CUDA the device time of each kernel (memsets
    and copies included, as the profiler lists them), on the CPU the self CPU time of each op.
    """
    # torch.autograd.profiler.profile with Kineto is the profiler torch.profiler.profile builds, minus
    # its ``hasattr(torch, "_inductor")`` check, which imports Inductor and Dynamo (~2 CPU s) into a
    # round that compiles nothing (on the CPU; a GPU round's FlexAttention compile loaded them already)
    from torch.autograd.profiler import profile

    cuda = device == "cuda"
    with profile(use_cpu=not cuda, use_device="cuda" if cuda else None, use_kineto=True) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    rows: dict[str, list[float]] = {}
    for event in prof.key_averages():
        if device == "cuda":
            if "cuda" not in str(getattr(event, "device_type", "")).lower():
                continue
            name = short_kernel_name(event.key)
            time_us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        else:
            if not event.key.startswith("aten::"):
                continue
            name = event.key
            time_us = float(getattr(event, "self_cpu_time_total", 0.0) or 0.0)
        entry = rows.setdefault(name, [0, 0.0])
        entry[0] += int(event.count)
        entry[1] += time_us / 1000.0
    top = sorted(rows.items(), key=lambda kv: -kv[1][1])[:BREAKDOWN_LIMIT]
    return {
        "kind": "CUDA kernels" if device == "cuda" else "aten ops",
        "source": "torch.profiler, one eager call",
        "rows": {name: [int(c), round(ms, 6)] for name, (c, ms) in top},
    }
