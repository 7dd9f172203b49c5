"""One registry naming every implementation under guard.

perfguard's ``verify`` and the asv suites iterate over :data:`REGISTRY`; nothing else in the tool
knows the classes by name.  Each entry carries a small CPU configuration (fast enough for a
2-core CI machine, with an odd sequence length and a head count not divisible by the number of
branches, which is where earlier implementations broke), a GPU configuration for verification, a
benchmark configuration for the GPU suites, and its capabilities.

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
class ImplSpec:
    """Everything perfguard needs to build, check and benchmark one implementation."""

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

    @property
    def cls(self) -> type[torch.nn.Module]:
        module_name, _, attr = self.class_path.partition(":")
        return getattr(importlib.import_module(module_name), attr)

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
        """Build through the public factory (so the factory is exercised too), in eval mode."""
        from attention.factory import create_dilated_attention

        cfg = self.config(target)
        kwargs = {**cfg.kwargs, **overrides}
        if self.multihead:
            kwargs.setdefault("embed_dim", cfg.shape.embed_dim)
            kwargs.setdefault("num_heads", cfg.shape.num_heads)
            module = create_dilated_attention(self.name, device=device, dtype=dtype, **kwargs)
        else:
            # num_heads only feeds attention_pattern's default; the config's head count is the natural one
            kwargs.setdefault("num_heads", cfg.shape.num_heads)
            module = create_dilated_attention(self.name, **kwargs)
            module = module.to(device=device, dtype=dtype) if (device or dtype) else module
        return module.eval()

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


def _core_and_multihead(
    name: str,
    core_path: str,
    mh_name: str | None,
    mh_path: str | None,
    *,
    extra_cpu: Mapping[str, Any] | None = None,
    extra_gpu: Mapping[str, Any] | None = None,
    extra_bench: Mapping[str, Any] | None = None,
    same_function_as: str | None = None,
    description: str = "",
) -> list[ImplSpec]:
    cpu = _cfg(*_CPU_SHAPE, **_CPU_DILATION, **(extra_cpu or {}))
    gpu = _cfg(*_GPU_SHAPE, **_GPU_DILATION, **(extra_gpu or {}))
    bench = _cfg(*_BENCH_SHAPE, **_BENCH_DILATION, **(extra_bench or {}))
    specs = [ImplSpec(name, core_path, False, cpu, gpu, bench, same_function_as, description=description)]
    if mh_name and mh_path:
        specs.append(
            ImplSpec(
                mh_name,
                mh_path,
                True,
                cpu,
                gpu,
                bench,
                same_function_as=("multihead_dilated" if same_function_as else None),
                description=f"nn.MultiheadAttention-style module around `{name}`",
            )
        )
    return specs


_SPECS: list[ImplSpec] = [
    *_core_and_multihead(
        "dilated",
        "attention.dilated:DilatedAttention",
        "multihead_dilated",
        "attention.multihead:MultiheadDilatedAttention",
        description="the straightforward implementation of the semantics",
    ),
    *_core_and_multihead(
        "improved",
        "attention.improved:ImprovedDilatedAttention",
        "multihead_improved",
        "attention.multihead:ImprovedMultiheadDilatedAttention",
        same_function_as="dilated",
        description="the same function, fast: fewer copies, SDPA/flash kernels, CUDA-graph friendly",
    ),
    *_core_and_multihead(
        "ring",
        "attention.ring:RingDilatedAttention",
        "multihead_ring",
        "attention.multihead:RingMultiheadDilatedAttention",
        extra_cpu={"ring_size": 4, "single_shot_bytes": 0},
        # Verified chunked on both devices (single_shot_bytes=0): the path the ring exists for.
        # Its backward once crashed inside cuDNN on an H100 (tiny boundary pieces; now kept off
        # cuDNN by attention._kernels.CUDNN_MIN_LEN, docs/perf/attention.md).
        extra_gpu={"ring_size": 4, "single_shot_bytes": 0},
        extra_bench={"ring_size": 8},
        same_function_as="dilated",
        description="K/V in ring_size chunks merged by log-sum-exp: O(n / ring_size) intermediates",
    ),
    *_core_and_multihead(
        "hilbert_ring",
        "attention.hilbert:HilbertRingDilatedAttention",
        None,
        None,
        extra_cpu={"ring_size": 4, "single_shot_bytes": 0},
        # Verified chunked on both devices (single_shot_bytes=0): the path the ring exists for.
        # Its backward once crashed inside cuDNN on an H100 (tiny boundary pieces; now kept off
        # cuDNN by attention._kernels.CUDNN_MIN_LEN, docs/perf/attention.md).
        extra_gpu={"ring_size": 4, "single_shot_bytes": 0},
        extra_bench={"ring_size": 8},
        same_function_as="dilated",
        description="the ring, visiting chunks in Hilbert-curve order; same function",
    ),
    *_core_and_multihead(
        "block_sparse_ring",
        "attention.block_sparse:BlockSparseRingDilatedAttention",
        "multihead_block_sparse_ring",
        "attention.multihead:BlockSparseRingMultiheadDilatedAttention",
        extra_cpu={"sparsity": 0.9, "block_size": 4, "pattern": "local_window", "ring_size": 2},
        extra_gpu={"sparsity": 0.9, "block_size": 128, "pattern": "local_window", "ring_size": 2},
        extra_bench={"sparsity": 0.9, "block_size": 128, "pattern": "local_window", "ring_size": 1},
        description="one exact softmax over the active blocks of its own block-sparse pattern",
    ),
]

#: name -> spec, in a stable order (core modules first, then their multihead modules).
REGISTRY: Mapping[str, ImplSpec] = MappingProxyType(
    {s.name: s for s in sorted(_SPECS, key=lambda s: (s.multihead, _SPECS.index(s)))}
)

#: implementations that must compute exactly the function of another one (same pattern, same numbers)
SAME_FUNCTION: Mapping[str, str] = MappingProxyType(
    {s.name: s.same_function_as for s in _SPECS if s.same_function_as}
)


def get(name: str) -> ImplSpec:
    """Look an implementation up by name; the error lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r}; known: {', '.join(REGISTRY)}") from None


def names(*, multihead: bool | None = None) -> list[str]:
    return [n for n, s in REGISTRY.items() if multihead is None or s.multihead == multihead]
