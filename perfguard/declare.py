"""Entries of a guarded package's registry, for packages that perfguard did not write.

A registry (the object ``[tool.perfguard] registry`` names, :mod:`perfguard.declaration`) is a
mapping ``name -> entry`` or an iterable of entries.  :class:`Implementation` is an entry for any
``nn.Module`` class or factory; this repository's ``attention.registry.ImplSpec`` is another one
(``attention`` stays importable without perfguard, so it keeps its own class with the same
attributes).  What perfguard reads from an entry: :data:`perfguard.engine.guarded.ENTRY_ATTRIBUTES`.

What an entry must compute (``computes``) is what ``perfguard verify``'s float64 reference is:

- ``"dense"``: softmax attention over every key (with ``is_causal``, every key at or before the query);
- ``"longnet"`` / ``"head_groups"``: dilated attention in that mode (DESIGN.md, "Dilated attention
  semantics", written by perfguard in :mod:`perfguard.engine.dilation`), with the
  ``segment_lengths`` and ``dilation_rates`` the module was built with;
- ``"dilated"``: dilated attention in the mode each case is built with (the entry's ``modes``,
  ``longnet`` and ``head_groups``); the module's own ``attention_pattern`` is the reference and
  must equal perfguard's definition (verify's ``same_fn``), and entries that name it in
  ``same_function_as`` are held to that definition too;
- ``"pattern"``: the module's own ``attention_pattern(seq_len, is_causal=, num_heads=)`` counts.

How one is built: ``factory`` (``"module:attribute"`` or a callable) is called with the entry's
``kwargs`` for the target (``cpu`` / ``gpu`` verification, ``bench``), and with the arguments
perfguard gives for a benchmark shape (``segment_lengths`` and ``dilation_rates`` for the length,
``num_heads``, ``embed_dim`` for a multihead module, ``mode``, ``device``, ``dtype``): each one only
when the factory's signature names it (``**kwargs`` names none) or the entry's config has it
(``mode`` too when the entry declares ``modes``, ``backend`` when it declares ``kernels``, the
keywords of its ``sequence_parallel``), so a class that has no ``num_heads`` is built without one.
A factory without ``device`` / ``dtype`` gets ``.to(device, dtype)``.

Two optional parts of an entry give it two more suites; an entry without them is simply not in
those (docs/guarding-your-package.md):

- ``kernels``: the ``module`` (inside the guarded package) that says which attention kernels the
  factory can be asked for with ``backend=``: the history-only kernel comparison
  (``Backends.track_time``) times the entry on each (:data:`KERNEL_MODULE_NAMES`);
- ``sequence_parallel``: a :class:`SequenceParallel`, the keywords that make a module spread one
  sequence over the ranks of the default process group: the distributed suite measures the entry.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import torch

from perfguard.declaration import COMPUTES, KERNEL_MODULE_NAMES

__all__ = [
    "COMPUTES",
    "KERNEL_MODULE_NAMES",
    "ImplConfig",
    "Implementation",
    "SequenceParallel",
    "ShapeConfig",
    "Target",
    "config",
]

Target = Literal["cpu", "gpu", "bench"]


@dataclass(frozen=True)
class ShapeConfig:
    """Input shape of one run: single-head layout ``(batch, seq_len, num_heads, head_dim)``;
    a multihead module takes ``(batch, seq_len, embed_dim)``."""

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


def config(batch: int, seq_len: int, num_heads: int, head_dim: int, **kwargs: Any) -> ImplConfig:
    """An :class:`ImplConfig` in one call: ``config(2, 64, 4, 8, segment_lengths=[16, 32, 64], ...)``."""
    return ImplConfig(ShapeConfig(batch, seq_len, num_heads, head_dim), MappingProxyType(dict(kwargs)))


@dataclass(frozen=True)
class SequenceParallel:
    """How an entry's module spreads one sequence over the ranks of the default process group.

    In the distributed suite rank ``r`` of ``N`` holds the contiguous positions
    ``perfguard.engine.sequence_group.shard_lengths(n, N)[r]`` of q, k and v (as even as possible, the first
    ranks one longer) and calls the module on them; the module computes the attention of the whole
    sequence for its own queries.  ``ranks`` are the constructor keywords for ``N > 1`` ranks,
    ``one_rank`` those for a group of one (the single-device point of the scaling view).
    """

    ranks: Mapping[str, Any]
    one_rank: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Implementation:
    """One implementation of a guarded package (see the module docstring)."""

    name: str
    factory: str | Callable[..., torch.nn.Module]
    cpu: ImplConfig
    gpu: ImplConfig | None = None  # default: cpu's
    bench: ImplConfig | None = None  # default: gpu's (the benchmark shape comes from the profile)
    multihead: bool = False
    computes: str = "dense"
    supports_causal: bool = True
    cpu_dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    cuda_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    modes: tuple[str, ...] = ()  # values given as `mode=`, one verification each; () = none
    same_function_as: str | None = None
    needs_distributed: bool = False
    description: str = ""
    guarded: bool = True
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    kernels: str | None = None  # "module" with KERNEL_MODULE_NAMES: the kernel comparison
    sequence_parallel: SequenceParallel | None = None  # the distributed suite

    def __post_init__(self) -> None:
        if self.computes not in COMPUTES:
            raise ValueError(f"{self.name}: computes={self.computes!r} is not one of {', '.join(COMPUTES)}")

    @property
    def cls(self) -> Callable[..., torch.nn.Module]:
        """The factory, imported on first use."""
        if callable(self.factory):
            return self.factory
        module_name, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def config(self, target: Target) -> ImplConfig:
        gpu = self.gpu or self.cpu
        return {"cpu": self.cpu, "gpu": gpu, "bench": self.bench or gpu}[target]

    def build(
        self,
        target: Target = "cpu",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **overrides: Any,
    ) -> torch.nn.Module:
        """The ``target`` configuration with ``overrides``, each given only where the factory takes it."""
        cfg = self.config(target)
        offered: dict[str, Any] = {"num_heads": cfg.shape.num_heads}
        if self.multihead:
            offered["embed_dim"] = cfg.shape.embed_dim
        offered.update(cfg.kwargs)
        offered.update(overrides)
        factory = self.cls
        takes = _parameters(factory)
        placed = {"device": device, "dtype": dtype}
        # the entry's own keywords always (its config's, `mode`, `backend`, its sequence-parallel
        # ones: module docstring); the others where the factory names them
        own = {*cfg.kwargs, *(("mode",) if self.modes else ()), *(("backend",) if self.kernels else ())}
        if self.sequence_parallel is not None:
            own.update(self.sequence_parallel.ranks, self.sequence_parallel.one_rank)
        kwargs = {k: v for k, v in offered.items() if k in takes or k in own}
        kwargs.update({k: v for k, v in placed.items() if v is not None and k in takes})
        module = factory(**kwargs)
        rest = {k: v for k, v in placed.items() if v is not None and k not in takes}
        return (module.to(**rest) if rest else module).eval()

    def make_inputs(
        self,
        shape: ShapeConfig,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        requires_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh random q, k, v in the entry's layout (never zeros: zeros hide unwritten outputs)."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        if self.multihead:
            dims: tuple[int, ...] = (shape.batch, shape.seq_len, shape.embed_dim)
        else:
            dims = (shape.batch, shape.seq_len, shape.num_heads, shape.head_dim)
        out = []
        for _ in range(3):
            t = torch.randn(dims, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
            out.append(t.requires_grad_(requires_grad))
        return out[0], out[1], out[2]


def _parameters(factory: Callable[..., Any]) -> frozenset[str]:
    """The keyword names ``factory``'s signature names (``**kwargs`` names none of them)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in params if p.kind in named)
