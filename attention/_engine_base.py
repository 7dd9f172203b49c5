"""``SegmentEngineAttention``: the module base of everything that runs on the segment engine.

``improved`` (one chunk), ``ring`` (``ring_size`` chunks, or one shard per rank) and
``hilbert_ring`` (the ring in another order) are one module that differs only in how the sequence
is cut into chunks (:meth:`SegmentEngineAttention._chunk_lengths`) and in which order (query chunk,
key chunk) pairs are visited (:meth:`SegmentEngineAttention._pairs`).  This base turns that into a
cached :class:`attention._engine.SegmentPlan` (pure Python integers, one per shape) and runs it:
:class:`attention._engine.SegmentAttentionFunction` (fused kernels on strided views, one log-sum-exp
merge, exact custom backward), or the differentiable path when dropout is on in training.

It lives apart from the implementations so that each of them imports only this base, never
another implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attention._base import DilatedAttentionBase
from attention._engine import PlanCache, SegmentAttentionFunction, SegmentPlan, differentiable_forward
from attention._kernel_selection import BACKENDS, KernelSet
from attention._plan import chunk_bounds, chunks_connected


class SegmentEngineAttention(DilatedAttentionBase):
    """Base of the modules that run on the segment engine (``improved``, ``ring``, ``hilbert_ring``).

    ``backend`` picks the kernel: ``"auto"`` (fastest available, with run-time fallback) or one of
    ``cudnn``, ``flash``, ``efficient``, ``cpu_flash``, ``math``.
    """

    def __init__(
        self,
        *,
        segment_lengths: Sequence[int],
        dilation_rates: Sequence[int],
        mode: str = "longnet",
        softmax_scale: float | None = None,
        dropout: float = 0.0,
        num_heads: int | None = None,
        backend: str = "auto",
    ) -> None:
        super().__init__(
            segment_lengths=segment_lengths,
            dilation_rates=dilation_rates,
            mode=mode,
            softmax_scale=softmax_scale,
            dropout=dropout,
            num_heads=num_heads,
        )
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self._plans = PlanCache()

    # subclasses define how the sequence is cut and in which order chunk pairs are visited
    def _chunk_lengths(self, q: torch.Tensor) -> tuple[int, ...]:
        return (q.shape[1],)

    def _pairs(self, chunks: int) -> tuple[tuple[int, int], ...]:
        return ((0, 0),)

    def _plan(self, q: torch.Tensor, is_causal: bool, lengths: tuple[int, ...]) -> SegmentPlan:
        _, n, h, d = q.shape
        scale = self._scale(d)
        key = (n, h, d, q.dtype, q.device, bool(is_causal), lengths, scale, self.backend)

        def build() -> SegmentPlan:
            bounds = chunk_bounds(lengths)
            # only chunk pairs that some segment connects (and, causal, not in the future)
            pairs = tuple(
                (a, c)
                for a, c in self._pairs(len(lengths))
                if chunks_connected(bounds, a, c, self.segment_lengths, is_causal)
            )
            return SegmentPlan(
                seq_len=n,
                num_heads=h,
                segment_lengths=self.segment_lengths,
                dilation_rates=self.dilation_rates,
                mode=self.mode,
                bounds=bounds,
                pairs=pairs,
                is_causal=bool(is_causal),
                scale=scale,
                kernels=KernelSet(q.device, q.dtype, d, self.backend),
            )

        return self._plans.get(key, build)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        self._check_inputs(q, k, v)
        plan = self._plan(q, is_causal, self._chunk_lengths(q))
        dropout_p = self._dropout_p()
        if dropout_p > 0.0:
            return differentiable_forward(plan, q, k, v, dropout_p)
        return SegmentAttentionFunction.apply(q, k, v, plan)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backend={self.backend!r}"
