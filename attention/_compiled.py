"""Compiled FlexAttention with a recompilation budget of its own for each place that calls it.

Dynamo keeps a function's compiled entries, and counts its recompilations, per *code object*.
``torch.compile(flex_attention)`` made twice — by the engine's ``flex`` kernel
(:mod:`attention._kernels`) and by block-sparse (:mod:`attention.block_sparse`) — is one code
object with one limit (8 shapes by default): in one process the engine's flex shapes used it up,
and block-sparse's next shape ran ``flex_attention`` *eagerly*, the unfused reference that
materialises the whole score matrix, with nothing but torch's one-time warning (found on an H200,
2026-11-28: a full ``perfguard run`` round failed ``multihead_block_sparse_ring`` at 4K after the
backends comparison had run flex; docs/perf/accuracy.md).

So each site compiles a function of its own (:func:`budgeted` takes the site's own ``def``: two
closures of one ``def`` would share a code object again), allowed :data:`RECOMPILE_LIMIT` shapes,
and past that Dynamo *raises* instead of running flex eagerly: the site's fallback rule then takes
over (:mod:`attention._fallback`: the exact slower path, with a RuntimeWarning that says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: Shapes (and dtypes, masks, grad modes) one call site may compile in a process.  The engine's
#: flex kernel compiles one entry per distinct segment shape and length; block-sparse one per
#: length and mask.  Sized for a training run's handful of lengths and a benchmark round's dozens.
RECOMPILE_LIMIT = 64


def budgeted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile(fn, dynamic=False)`` that compiles at most :data:`RECOMPILE_LIMIT` variants and
    raises (``torch._dynamo.exc.FailOnRecompileLimitHit``) beyond them instead of running eagerly.

    ``fn`` must be the site's own function (its own ``def``): Dynamo's budget is per code object.
    """
    compiled = torch.compile(fn, dynamic=False)

    def call(*args: Any, **kwargs: Any) -> Any:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True):
            return compiled(*args, **kwargs)

    return call
