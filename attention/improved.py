"""``ImprovedDilatedAttention``: the same function as ``dilated``, built to be fast.

In the ``(batch, seq, heads, head_dim)`` layout the positions a head keeps inside one segment are
equally spaced rows, so every branch is computed on **strided views** of q, k and v that the
fused kernels read in place (:mod:`attention._plan`): per branch, all segments and all heads of an
offset group in one call (cuDNN / FlashAttention-2 / memory-efficient on CUDA, the CPU flash
kernel on CPU, exact math elsewhere; see :mod:`attention._kernel_selection`), no gather and no copy.  The
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

from attention._engine_base import SegmentEngineAttention


class ImprovedDilatedAttention(SegmentEngineAttention):
    """Dilated attention on fused kernels: one chunk, every branch read in place as strided views."""
