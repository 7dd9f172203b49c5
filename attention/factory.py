"""Build any implementation by its registry name.

The names and classes are those of :mod:`attention.registry` (its one table of implementations);
nothing here lists them.

``create_dilated_attention(kind, **config)`` builds exactly the class the name stands for: a core
name builds the core module (``(batch, seq, heads, head_dim)`` tensors), a ``multihead_*`` name
builds the multihead module (``embed_dim`` and ``num_heads`` required).

``create_multihead_dilated_attention(kind="auto", **config)`` always builds a multihead module:
a core name is mapped to the multihead module around that core (the table's row whose ``core``
it is, :func:`attention.registry.multihead_for`: ``ring`` → ``RingMultiheadDilatedAttention``, and
``hilbert_ring`` → ``HilbertRingMultiheadDilatedAttention``, a module that is not itself a registry
name), a ``multihead_*`` name builds that module, and ``"auto"`` picks (see :func:`choose_auto`)
and records why in ``module.selection_reason`` and a ``logging`` INFO message.

``"auto"`` only ever chooses between implementations of the *same function* (``improved`` and
``ring``): it never switches to block-sparse, whose pattern is different.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attention import registry

logger = logging.getLogger(__name__)

#: fraction of free device memory ``auto`` lets ``improved`` plan to use before switching to ``ring``
AUTO_MEMORY_FRACTION = 0.5


def _unknown(kind: str, known: list[str]) -> ValueError:
    return ValueError(f"unknown attention kind {kind!r}; known: {', '.join(known)}")


def create_dilated_attention(kind: str, **config: Any) -> nn.Module:
    """Build the implementation called ``kind`` (any registry name) with ``config`` keywords.

    Core modules have no parameters; ``device``/``dtype`` given for one are accepted and applied
    with ``.to()`` so that one call shape works for every name (:meth:`ImplSpec.create`).
    """
    spec = registry.REGISTRY.get(kind)
    if spec is None:
        raise _unknown(kind, list(registry.REGISTRY))
    return spec.create(**config)


@dataclass(frozen=True)
class AutoChoice:
    """What ``"auto"`` picked, with the facts it used (kept on the module as ``selection``)."""

    kind: str
    reason: str
    ring_size: int | None = None


def _distributed_world() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def estimate_improved_bytes(seq_len: int, embed_dim: int, batch: int, element_size: int) -> int:
    """Rough working set of ``improved`` beyond its inputs: the pieces' outputs (one per branch and
    kept row: at most ~3 rows per token with the usual rates), the merged LSE, and the projections
    of a multihead module (an upper bound for the usual configurations, not an exact count)."""
    tokens = batch * seq_len * embed_dim
    return tokens * (4 * element_size + 4 + 3 * element_size) + batch * seq_len * 4 * 2


def choose_auto(
    *,
    device: torch.device | str | None = None,
    seq_len: int | None = None,
    embed_dim: int | None = None,
    batch: int = 1,
    dtype: torch.dtype | None = None,
    world_size: int | None = None,
    free_bytes: int | None = None,
) -> AutoChoice:
    """The ``"auto"`` rule (pure: every fact can be passed in, so the rule is testable).

    1. ``torch.distributed`` initialised with world size > 1 → ``ring`` with one chunk per rank
       (sequence parallel: each rank holds its shard).
    2. On CUDA, when ``seq_len`` is known and ``improved``'s estimated working set exceeds
       ``AUTO_MEMORY_FRACTION`` of the free memory → ``ring`` with the smallest power-of-two
       ``ring_size`` that brings the per-chunk working set under it.
    3. Otherwise → ``improved`` (fused SDPA-family kernels with log-sum-exp on CUDA and CPU).
    """
    world = _distributed_world() if world_size is None else world_size
    dev = torch.device(device) if device is not None else None
    if dev is None:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    where = f"device {dev.type}" + (f", seq_len {seq_len}" if seq_len is not None else ", seq_len unknown")
    if world > 1:
        return AutoChoice(
            "ring", f"{where}: torch.distributed has {world} ranks, so the ring runs sequence-parallel", world
        )
    if dev.type == "cuda" and seq_len is not None and embed_dim is not None:
        if free_bytes is None:
            free_bytes, _ = torch.cuda.mem_get_info(dev)
        element_size = torch.empty((), dtype=dtype or torch.bfloat16).element_size()
        need = estimate_improved_bytes(seq_len, embed_dim, batch, element_size)
        budget = int(AUTO_MEMORY_FRACTION * free_bytes)
        if need > budget:
            ring_size = 2
            while need // ring_size > budget and ring_size < seq_len:
                ring_size *= 2
            return AutoChoice(
                "ring",
                f"{where}: improved would need ~{need / 2**30:.1f} GiB of {free_bytes / 2**30:.1f} GiB free; "
                f"ring_size {ring_size} keeps the chunk working set under {AUTO_MEMORY_FRACTION:.0%}",
                ring_size,
            )
        return AutoChoice(
            "improved",
            f"{where}: improved fits (~{need / 2**30:.2f} GiB of {free_bytes / 2**30:.1f} GiB free) and is "
            "the fastest single-device implementation",
        )
    return AutoChoice("improved", f"{where}: improved is the fastest single-device implementation")


def create_multihead_dilated_attention(kind: str = "auto", **config: Any) -> nn.Module:
    """Build a multihead module by name (core names map to their multihead module; see module doc).

    ``"auto"`` accepts the hints ``seq_len=`` and ``batch=`` (not passed to the module) and stores
    its choice on the module as ``selection_reason`` (text) and ``selection`` (:class:`AutoChoice`).
    """
    names = registry.REGISTRY
    around_core = {n: mh for n, s in names.items() if not s.multihead and (mh := registry.multihead_for(n))}
    multihead = {n: s for n, s in names.items() if s.multihead}
    known = ["auto", *around_core, *multihead]
    seq_len = config.pop("seq_len", None)
    batch = config.pop("batch", 1)
    choice: AutoChoice | None = None
    if kind == "auto":
        choice = choose_auto(
            device=config.get("device"),
            seq_len=seq_len,
            embed_dim=config.get("embed_dim"),
            batch=batch,
            dtype=config.get("dtype"),
        )
        if choice.kind == "ring" and choice.ring_size is not None:
            config.setdefault("ring_size", choice.ring_size)
        kind = choice.kind
    spec = around_core.get(kind) or multihead.get(kind)
    if spec is None:
        raise _unknown(kind, known)
    module = spec.create(**config)
    if choice is not None:
        module.selection = choice
        module.selection_reason = f"auto picked {choice.kind!r}: {choice.reason}"
        logger.info("create_multihead_dilated_attention: %s", module.selection_reason)
    return module
