"""Dilated (LongNet), ring and block-sparse attention: the implementations perfguard guards.

Importable without perfguard.  Names are resolved lazily so ``import attention`` (done by asv
at discovery, in a process that must not initialise CUDA) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DilatedAttention": "attention.dilated",
    "ImprovedDilatedAttention": "attention.improved",
    "RingDilatedAttention": "attention.ring",
    "HilbertRingDilatedAttention": "attention.hilbert",
    "BlockSparseRingDilatedAttention": "attention.block_sparse",
    "MultiheadDilatedAttention": "attention.multihead",
    "ImprovedMultiheadDilatedAttention": "attention.multihead",
    "RingMultiheadDilatedAttention": "attention.multihead",
    "BlockSparseRingMultiheadDilatedAttention": "attention.multihead",
    "HilbertRingMultiheadDilatedAttention": "attention.multihead",
    "create_dilated_attention": "attention.factory",
    "create_multihead_dilated_attention": "attention.factory",
    "dilated_pattern": "attention.pattern",
    "reference_attention": "attention.reference",
    "registry": "attention.registry",
    "backends": "attention.backends",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'attention' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
