"""``ImprovedDilatedAttention``: the same function as ``dilated``, built to be fast.

In the ``(batch, seq, heads, head_dim)`` layout the positions a head keeps inside one segment are
equally spaced rows, so every branch is computed on **strided views** of q, k and v that the
fused kernels read in place (:mod:`attention._plan`): per branch, all segments and all heads of an
offset group in one call (cuDNN / FlashAttention-2 / memory-efficient on CUDA, the CPU flash
kernel on CPU, exact math elsewhere; see :mod:`attention._kernels`), no gather and no copy.  The
pieces' outputs are merged by log-sum-exp in one pass (:mod:`attention._merge`: on CUDA two Triton
kernels, which read every branch output once and write the result once), and on CUDA the calls
run on several streams at once (:func:`attention._engine.concurrent_streams`).  A segment cut by the
end of the sequence is one extra small call per run of offset groups, with exactly its kept
positions (no padding, no mask).

The call sequence depends only on shapes, never on data: no ``.item()``, no host
synchronisation, no tensor built from host data, so the forward and backward can be captured in
a CUDA graph (the plan is pure Python integers, built on the first call for a shape and cached).

Backward is a custom autograd function that replays each piece's kernel backward on views of the
merged output and LSE, so gradients are exact including through the branch mixture weights
(torchscale computes those weights under ``no_grad``; that is wrong for this function); the
pieces' dq, dk, dv are summed into the sequence layout by the same kind of kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attention._base import DilatedAttentionBase
from attention._engine import PlanCache, SegmentAttentionFunction, SegmentPlan, differentiable_forward
from attention._kernels import BACKENDS, KernelSet


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
        from attention._distributed import chunks_connected
        from attention._plan import chunk_bounds

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


class ImprovedDilatedAttention(SegmentEngineAttention):
    """Dilated attention on fused kernels: one chunk, every branch read in place as strided views."""
