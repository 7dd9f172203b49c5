"""The one table of implementations, and the registry of those under guard.

:data:`IMPLEMENTATIONS` is the only place that names the classes of ``attention/``: each row is a
registry name, its ``module:Class``, whether it is a multihead module and, if so, the core it wraps,
its configurations and its capabilities.  Everything else that knows implementations by name is
derived from it: :data:`REGISTRY` (the rows under guard: perfguard's ``verify`` and the asv suites
iterate over it), the factory's names (:mod:`attention.factory`), the multihead modules' cores
(:mod:`attention.multihead`) and the package's exports (``attention/__init__.py``).  Adding an
implementation is one row here.

Each row carries a small CPU configuration (fast enough for a 2-core CI machine, with an odd
sequence length and a head count not divisible by the number of branches, which is where earlier
implementations broke), a GPU configuration for verification, a benchmark configuration for the
GPU suites, and its capabilities.

Classes are resolved lazily (``module:Class`` strings) so that importing the registry is cheap
and never touches CUDA: asv imports the suites, and with them this module, in a process that must
not initialise CUDA (``launch_method = forkserver``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import torch

Target = Literal["cpu", "gpu", "bench"]


@dataclass(frozen=True)
class ShapeConfig:
    """Input shape of one run: core modules take (batch, seq_len, num_heads, head_dim)."""

    batch: int
    seq_len: int
    num_heads: int
    head_dim: int

    @property
    def embed_dim(self) -> int:
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class ImplConfig:
    """A shape and the constructor keyword arguments that go with it."""

    shape: ShapeConfig
    kwargs: Mapping[str, Any]

    def with_seq_len(self, seq_len: int) -> ImplConfig:
        return replace(self, shape=replace(self.shape, seq_len=seq_len))


@dataclass(frozen=True)
class SequenceParallel:
    """The constructor keywords that spread one sequence over the ranks of the default process group
    (``ranks``), and those for a group of one (``one_rank``): what perfguard's distributed suite
    builds a module with (its ``perfguard.declare.SequenceParallel``, mirrored so that ``attention``
    stays importable without perfguard)."""

    ranks: Mapping[str, Any]
    one_rank: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ImplSpec:
    """Everything perfguard needs to build, check and benchmark one implementation.

    ``core`` is, for a multihead module of the table, the name of the core module it wraps.
    ``guarded=False`` marks a class of ``attention/`` that perfguard neither verifies nor
    benchmarks (not in :data:`REGISTRY`, not a factory name); the factory still builds it as the
    multihead module of its core.
    """

    name: str
    class_path: str
    multihead: bool
    cpu: ImplConfig
    gpu: ImplConfig
    bench: ImplConfig
    same_function_as: str | None = None
    supports_causal: bool = True
    modes: tuple[str, ...] = ("longnet", "head_groups")
    cpu_dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    cuda_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    needs_distributed: bool = False
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    core: str | None = None
    guarded: bool = True
    # what perfguard verify's reference is (perfguard.declare): this module's own attention_pattern,
    # or ("dilated") that pattern held to the dilated semantics of the mode it is built with
    computes: str = "pattern"
    # the module listing the kernels `backend=` takes (perfguard's kernel comparison times each)
    kernels: str | None = None
    # how the module spreads one sequence over a process group (perfguard's distributed suite)
    sequence_parallel: SequenceParallel | None = None

    @property
    def cls(self) -> type[torch.nn.Module]:
        """The class, imported on first use (the table itself never imports an implementation)."""
        module_name, _, attr = self.class_path.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def create(self, **config: Any) -> torch.nn.Module:
        """An instance built with ``config`` as given (what the factory builds for this name).

        A multihead module takes ``device``/``dtype`` in its constructor; a core module has no
        parameters, so they are accepted and applied with ``.to()``: one call shape for every name.
        """
        if self.multihead:
            return self.cls(**config)
        device = config.pop("device", None)
        dtype = config.pop("dtype", None)
        module = self.cls(**config)
        return module.to(device=device, dtype=dtype) if (device is not None or dtype is not None) else module

    def config(self, target: Target) -> ImplConfig:
        return {"cpu": self.cpu, "gpu": self.gpu, "bench": self.bench}[target]

    def build(
        self,
        target: Target = "cpu",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **overrides: Any,
    ) -> torch.nn.Module:
        """Build the ``target`` configuration (as the factory does: :meth:`create`), in eval mode."""
        cfg = self.config(target)
        kwargs = {**cfg.kwargs, **overrides}
        if self.multihead:
            kwargs.setdefault("embed_dim", cfg.shape.embed_dim)
        # a core's num_heads only feeds attention_pattern's default; the config's head count is natural
        kwargs.setdefault("num_heads", cfg.shape.num_heads)
        return self.create(device=device, dtype=dtype, **kwargs).eval()

    def make_inputs(
        self,
        shape: ShapeConfig,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        requires_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh random q, k, v (never zeros: zeros hide unwritten outputs and wrong indexing)."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        if self.multihead:
            dims: tuple[int, ...] = (shape.batch, shape.seq_len, shape.embed_dim)
        else:
            dims = (shape.batch, shape.seq_len, shape.num_heads, shape.head_dim)
        tensors = []
        for _ in range(3):
            t = torch.randn(dims, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
            tensors.append(t.requires_grad_(requires_grad))
        return tensors[0], tensors[1], tensors[2]


def _cfg(batch: int, seq_len: int, heads: int, head_dim: int, **kwargs: Any) -> ImplConfig:
    return ImplConfig(ShapeConfig(batch, seq_len, heads, head_dim), MappingProxyType(dict(kwargs)))


# CPU: 5 heads over 3 branches (not divisible), seq_len = 3 * max_segment - 5 (not a multiple).
_CPU_DILATION = {"segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4]}
# GPU verification: the same structure at a size where the kernels differ from the toy case.
_GPU_DILATION = {"segment_lengths": [512, 1024, 2048], "dilation_rates": [1, 2, 4]}
# GPU benchmarks: the configuration of gpu_timing.md §11 (1 x n x 12 x 64).
_BENCH_DILATION = {"segment_lengths": [2048, 4096, 8192], "dilation_rates": [1, 2, 4]}

_CPU_SHAPE = (2, 3 * 32 - 5, 5, 8)
_GPU_SHAPE = (1, 3 * 2048 - 5, 8, 64)
_BENCH_SHAPE = (1, 16384, 12, 64)


def _family(
    name: str,
    core_path: str,
    multihead_path: str,
    *,
    multihead_guarded: bool = True,
    extra_cpu: Mapping[str, Any] | None = None,
    extra_gpu: Mapping[str, Any] | None = None,
    extra_bench: Mapping[str, Any] | None = None,
    same_function_as: str | None = None,
    computes: str = "pattern",
    core_kernels: str | None = None,
    sequence_parallel: SequenceParallel | None = None,
    description: str = "",
) -> list[ImplSpec]:
    """A core module ``name`` and the multihead module around it (``multihead_<name>``), with the
    same configurations (the multihead module's head count and embedding come from the shape).
    ``core_kernels``: the kernels module of the core alone (the comparison times one module)."""
    cpu = _cfg(*_CPU_SHAPE, **_CPU_DILATION, **(extra_cpu or {}))
    gpu = _cfg(*_GPU_SHAPE, **_GPU_DILATION, **(extra_gpu or {}))
    bench = _cfg(*_BENCH_SHAPE, **_BENCH_DILATION, **(extra_bench or {}))
    return [
        ImplSpec(
            name,
            core_path,
            False,
            cpu,
            gpu,
            bench,
            same_function_as,
            description=description,
            computes=computes,
            kernels=core_kernels,
            sequence_parallel=sequence_parallel,
        ),
        ImplSpec(
            f"multihead_{name}",
            multihead_path,
            True,
            cpu,
            gpu,
            bench,
            same_function_as=("multihead_dilated" if same_function_as else None),
            description=f"nn.MultiheadAttention-style module around `{name}`",
            core=name,
            guarded=multihead_guarded,
            computes=computes,
            sequence_parallel=sequence_parallel,
        ),
    ]


#: The ring's sequence-parallel path (attention._distributed): a group of ranks passes the ring
#: through every rank (ring_size comes from the group); a group of one keeps the single-device ring.
_RING_PARALLEL = SequenceParallel(
    ranks=MappingProxyType({"ring_size": None, "sequence_parallel": True}),
    one_rank=MappingProxyType({"sequence_parallel": False}),
)


#: Every implementation class of ``attention/``, in a stable order: the one table (module docstring).
IMPLEMENTATIONS: tuple[ImplSpec, ...] = (
    *_family(
        "dilated",
        "attention.dilated:DilatedAttention",
        "attention.multihead:MultiheadDilatedAttention",
        computes="dilated",  # its pattern is the semantics; perfguard verify holds it to its own
        description="the straightforward implementation of the semantics",
    ),
    *_family(
        "improved",
        "attention.improved:ImprovedDilatedAttention",
        "attention.multihead:ImprovedMultiheadDilatedAttention",
        same_function_as="dilated",
        core_kernels="attention.backends",
        description="the same function, fast: fewer copies, SDPA/flash kernels, CUDA-graph friendly",
    ),
    *_family(
        "ring",
        "attention.ring:RingDilatedAttention",
        "attention.multihead:RingMultiheadDilatedAttention",
        extra_cpu={"ring_size": 4, "single_shot_bytes": 0},
        # Verified chunked on both devices (single_shot_bytes=0): the path the ring exists for.
        # Its backward once crashed inside cuDNN on an H100 (tiny boundary pieces; now kept off
        # cuDNN by attention._kernel_selection.CUDNN_MIN_LEN, docs/perf/attention.md).
        extra_gpu={"ring_size": 4, "single_shot_bytes": 0},
        extra_bench={"ring_size": 8},
        same_function_as="dilated",
        sequence_parallel=_RING_PARALLEL,
        description="K/V in ring_size chunks merged by log-sum-exp: O(n / ring_size) intermediates",
    ),
    *_family(
        "hilbert_ring",
        "attention.hilbert:HilbertRingDilatedAttention",
        "attention.multihead:HilbertRingMultiheadDilatedAttention",
        # the ring's multihead module with another core class: not verified or benchmarked itself
        multihead_guarded=False,
        extra_cpu={"ring_size": 4, "single_shot_bytes": 0},
        # Verified chunked on both devices (single_shot_bytes=0): the path the ring exists for.
        # Its backward once crashed inside cuDNN on an H100 (tiny boundary pieces; now kept off
        # cuDNN by attention._kernel_selection.CUDNN_MIN_LEN, docs/perf/attention.md).
        extra_gpu={"ring_size": 4, "single_shot_bytes": 0},
        extra_bench={"ring_size": 8},
        same_function_as="dilated",
        sequence_parallel=_RING_PARALLEL,
        description="the ring, visiting chunks in Hilbert-curve order; same function",
    ),
    *_family(
        "block_sparse_ring",
        "attention.block_sparse:BlockSparseRingDilatedAttention",
        "attention.multihead:BlockSparseRingMultiheadDilatedAttention",
        extra_cpu={"sparsity": 0.9, "block_size": 4, "pattern": "local_window", "ring_size": 2},
        extra_gpu={"sparsity": 0.9, "block_size": 128, "pattern": "local_window", "ring_size": 2},
        extra_bench={"sparsity": 0.9, "block_size": 128, "pattern": "local_window", "ring_size": 1},
        description="one exact softmax over the active blocks of its own block-sparse pattern",
    ),
)

#: name -> spec of the implementations under guard, in a stable order (core modules first, then
#: their multihead modules).  The names the factory builds, verify checks and asv benchmarks.
REGISTRY: Mapping[str, ImplSpec] = MappingProxyType(
    {
        s.name: s
        for s in sorted(IMPLEMENTATIONS, key=lambda s: (s.multihead, IMPLEMENTATIONS.index(s)))
        if s.guarded
    }
)

#: implementations that must compute exactly the function of another one (same pattern, same numbers)
SAME_FUNCTION: Mapping[str, str] = MappingProxyType(
    {n: s.same_function_as for n, s in REGISTRY.items() if s.same_function_as}
)


def get(name: str) -> ImplSpec:
    """Look an implementation up by name; the error lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r}; known: {', '.join(REGISTRY)}") from None


def names(*, multihead: bool | None = None) -> list[str]:
    return [n for n, s in REGISTRY.items() if multihead is None or s.multihead == multihead]


def multihead_for(core: str) -> ImplSpec | None:
    """The table's multihead module around the core module ``core`` (guarded or not), or None."""
    return next((s for s in IMPLEMENTATIONS if s.core == core), None)


def core_class(multihead: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """The core class the multihead class ``multihead`` wraps: its table row's ``core`` (a subclass
    outside the table wraps what its nearest base in the table wraps)."""
    rows = {s.class_path: s for s in IMPLEMENTATIONS}
    for klass in multihead.__mro__:
        row = rows.get(f"{klass.__module__}:{klass.__qualname__}")
        if row is not None and row.core is not None:
            return next(s for s in IMPLEMENTATIONS if s.name == row.core).cls
    raise TypeError(f"{multihead.__qualname__} is no multihead module of attention.registry.IMPLEMENTATIONS")
