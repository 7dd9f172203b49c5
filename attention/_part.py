"""What the merges take: one piece's result and the rows of the destination it belongs to.

A leaf of its own because both merges read it, the plain-torch one (:mod:`attention._merge`) and
the Triton kernels (:mod:`attention._merge_triton`), and the merge dispatches to the kernels:
with :class:`Part` in either of them the two would import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Part:
    """A piece's result and where its rows go: ``offset + i·strides[0] + j·strides[1] + t·strides[2]``
    (rows of the destination, batch included), for ``(i, j, t)`` in ``sizes``."""

    values: torch.Tensor  # (B, H', L, d)
    lse: torch.Tensor | None  # (B, H', L); None for gradients
    offset: int
    sizes: tuple[int, int, int]
    strides: tuple[int, int, int]
