"""``BlockSparseRingDilatedAttention``: attention over its own block-sparse pattern.

The sequence is cut into ``nb = ceil(n / block_size)`` blocks (the last one may be short).  A
query block attends to a fixed set of key blocks; inside an active (query block, key block)
pair every token sees every token (causal: only keys at or before the query).  Each query row
gets **one exact softmax over the union of its active blocks** (never a sum of separately
normalised blocks, the bug of earlier implementations, research/dilated_attention.md §4.6).

**Budget.** ``sparsity`` is the fraction of the ``nb²`` block pairs that are skipped, so the
pattern has exactly ``K = round((1 − sparsity) · nb²)`` active pairs, chosen by ``pattern`` from a
fixed priority order (below).  Two rules win over the budget, both reported by
:meth:`BlockSparseRingDilatedAttention.active_blocks`: the diagonal is always active (every query
needs at least its own block), so ``K >= nb`` (short sequences are denser than asked), and with
``is_causal`` only pairs with ``key block <= query block`` are candidates, so ``K <= nb(nb+1)/2``
(low sparsities cannot be reached causally).  Otherwise the measured skipped fraction of
:meth:`attention_pattern` is ``sparsity`` up to the rounding of ``K`` (``<= 0.5 / nb²``).

**Patterns** (pairs are taken in this order until the budget is used up; "band d" is the pairs
at block distance d, taken query-block by query-block from the start of the sequence, the pair
below the diagonal before the one above it; causal keeps only the ones below):

- ``local_window``: the diagonal, then band 1, band 2, … — a sliding window of blocks.
- ``dilated_sparse``: the diagonal, then the bands on a *dilated ladder* of distances, then
  all other bands by distance.  The ladder comes from the dilation config, in block units:
  branch i covers distances ``[W_{i−1}, W_i)`` with ``W_i = max(1, w_i // block_size)`` and keeps
  every ``r_i``-th of them (``W_{i−1}, W_{i−1} + r_i, …``); past the largest segment the
  ranges keep doubling and so do the strides (``[W_G·2^{k−1}, W_G·2^k)`` with stride
  ``r_G·2^k``), so far blocks are sampled exponentially sparser — LongNet's geometry at block
  granularity.
- ``global_local``: the diagonal, then *global* blocks (the first ``G`` blocks: every query
  block attends to them and they attend to every block; causal: only the pairs below the
  diagonal), then the local window as in ``local_window``.  ``G = max(1, round(E / (4c)))``
  where ``E = K − nb`` is the off-diagonal budget and ``c`` the pairs of one global block
  (``2(nb−1)``, causal ``nb−1``); the global pairs take at most ``E // 2`` of the budget
  (block 0's column first, nearest the diagonal first), the window the rest.

``segment_lengths`` and ``dilation_rates`` are validated like every module's, shape only the
``dilated_sparse`` ladder, and ``mode`` does not apply (every head has the same pattern).

**Computation.** On CUDA the pattern becomes a FlexAttention block mask and runs on compiled
``flex_attention`` (fused, never materialises the scores, so ``ring_size`` does not matter there).
Elsewhere — CPU, dropout in training, or where flex cannot run — the *gather* path processes the
key blocks in ``ring_size`` contiguous chunks: per chunk, each query block's active key blocks are
gathered and attended with one masked softmax that returns its log-sum-exp, and the chunks are
merged by log-sum-exp, so the intermediates are O(n·K/nb / ring_size).  Plain autograd: exact
gradients.  Sequence lengths that are not multiples of ``block_size`` work (padded keys are
masked, padded queries dropped).  Single device only (no sequence-parallel ranks).

**When flex cannot run.**  A call whose flex raises runs the gather path, with a
``RuntimeWarning`` that says for how long: for that call only, or — after failing in two plain
calls in a row — for the rest of the process for that (device, dtype, head_dim).  A failure under
a dispatch mode (``FlopCounterMode``, a counting ``TorchDispatchMode``), graph capture, tracing or
a ``torch.func`` transform is never recorded (:mod:`attention._fallback`).  Under a dispatch mode
that ``torch.compile`` skips flex is not even tried: its eager reference would hold every score in
memory (and, in torch 2.13, leave the next plain call of eager flex failing in Dynamo).
``backend="flex"`` raises a plain call's failure instead of falling back.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import torch

from attention._base import DilatedAttentionBase
from attention._compiled import budgeted
from attention._fallback import ContextError, Fallback, calling_context, compile_blocked
from attention._lse import attention_with_lse, merge_stacked
from attention._plan import split_lengths

PATTERNS = ("local_window", "dilated_sparse", "global_local")
SPARSE_BACKENDS = ("auto", "flex", "gather")


# ------------------------------------------------------------------------------------------------
# the block pattern
# ------------------------------------------------------------------------------------------------
def block_budget(num_blocks: int, sparsity: float, is_causal: bool) -> int:
    """Active pairs: ``round((1 − sparsity)·nb²)``, at least ``nb``, causal at most ``nb(nb+1)/2``."""
    k = math.floor((1.0 - sparsity) * num_blocks * num_blocks + 0.5)
    k = max(k, num_blocks)
    if is_causal:
        k = min(k, num_blocks * (num_blocks + 1) // 2)
    return k


def _band(num_blocks: int, d: int, is_causal: bool) -> list[tuple[int, int]]:
    """Pairs at block distance d >= 1, from the start of the sequence, below before above."""
    out = []
    for t in range(num_blocks - d):
        out.append((t + d, t))
        if not is_causal:
            out.append((t, t + d))
    return out


def ladder_distances(
    num_blocks: int, segment_lengths: Sequence[int], dilation_rates: Sequence[int], block_size: int
) -> list[int]:
    """The dilated ladder of block distances (module docstring), ascending, below ``num_blocks``."""
    ladder: list[int] = []
    start = 1
    for w, r in zip(segment_lengths, dilation_rates, strict=True):
        end = max(1, w // block_size)
        ladder.extend(range(start, min(end, num_blocks), r))
        start = max(start, end)
    end, stride = start, dilation_rates[-1]
    while start < num_blocks:
        end, stride = max(end * 2, start + 1), stride * 2
        ladder.extend(range(start, min(end, num_blocks), stride))
        start = end
    return sorted(set(ladder))


def block_pattern(
    num_blocks: int,
    *,
    sparsity: float,
    pattern: str,
    is_causal: bool = False,
    segment_lengths: Sequence[int] = (1,),
    dilation_rates: Sequence[int] = (1,),
    block_size: int = 1,
) -> torch.Tensor:
    """Bool ``(nb, nb)``: active (query block, key block) pairs (module docstring)."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    nb = num_blocks
    budget = block_budget(nb, sparsity, is_causal)
    active = torch.eye(nb, dtype=torch.bool)
    left = budget - nb

    def take(pairs: list[tuple[int, int]], limit: int) -> int:
        used = 0
        for i, j in pairs:
            if used >= limit:
                break
            if not active[i, j]:
                active[i, j] = True
                used += 1
        return used

    if pattern == "global_local" and left > 0 and nb > 1:
        per_global = (nb - 1) if is_causal else 2 * (nb - 1)
        globals_ = min(nb, max(1, round(left / (4 * per_global))))
        cand: list[tuple[int, int, int, int]] = []
        for g in range(globals_):
            for i in range(nb):
                if i == g:
                    continue
                if not is_causal or i > g:
                    cand.append((g, abs(i - g), 0, i))  # column g: block i attends to global g
                if not is_causal or i < g:
                    cand.append((g, abs(i - g), 1, i))  # row g: global g attends to block i
        cand.sort()
        pairs = [(i, g) if side == 0 else (g, i) for g, _, side, i in cand]
        left -= take(pairs, left // 2)
    if pattern == "dilated_sparse":
        ladder = ladder_distances(nb, segment_lengths, dilation_rates, block_size)
        rest = [d for d in range(1, nb) if d not in set(ladder)]
        order = ladder + rest
    else:
        order = list(range(1, nb))
    for d in order:
        if left <= 0:
            break
        left -= take(_band(nb, d, is_causal), left)
    return active


def token_mask(
    active: torch.Tensor,
    seq_len: int,
    block_size: int,
    is_causal: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bool ``(n, n)`` on ``device`` (default: ``active``'s): query p sees key k (its blocks' pair
    is active; causal: k <= p).

    Each block pair is broadcast to its ``block_size × block_size`` tile (a view, then one copy),
    rather than gathered through an ``(n, n)`` index, and built where it will be used.
    """
    active = active.to(device if device is not None else active.device)
    nb = active.shape[0]
    tiles = active[:, None, :, None].expand(nb, block_size, nb, block_size)
    mask = tiles.reshape(nb * block_size, nb * block_size)[:seq_len, :seq_len]
    if is_causal:
        return mask.tril()
    return mask.contiguous()


def skipped_fraction(counts: torch.Tensor, block_size: int) -> float:
    """Measured fraction of (query block, key block) pairs with no attended token pair.

    ``counts``: a pattern ``(H, n, n)`` or ``(n, n)``; the last block may be short.
    """
    c = counts if counts.dim() == 2 else (counts > 0).any(dim=0)
    n = c.shape[-1]
    nb = -(-n // block_size)
    padded = torch.zeros(nb * block_size, nb * block_size, dtype=torch.bool)
    padded[:n, :n] = c > 0
    blocks = padded.view(nb, block_size, nb, block_size).any(dim=3).any(dim=1)
    return 1.0 - blocks.sum().item() / (nb * nb)


# ------------------------------------------------------------------------------------------------
# the module
# ------------------------------------------------------------------------------------------------
class BlockSparseRingDilatedAttention(DilatedAttentionBase):
    """Block-sparse attention with named patterns, one exact softmax per row (module docstring)."""

    def __init__(
        self,
        *,
        segment_lengths: Sequence[int],
        dilation_rates: Sequence[int],
        mode: str = "longnet",
        softmax_scale: float | None = None,
        dropout: float = 0.0,
        num_heads: int | None = None,
        sparsity: float = 0.9,
        block_size: int = 128,
        pattern: str = "local_window",
        ring_size: int | None = None,
        backend: str = "auto",
        kernel_options: dict | None = None,
    ) -> None:
        super().__init__(
            segment_lengths=segment_lengths,
            dilation_rates=dilation_rates,
            mode=mode,
            softmax_scale=softmax_scale,
            dropout=dropout,
            num_heads=num_heads,
        )
        if kernel_options is not None and not isinstance(kernel_options, dict):
            raise ValueError(
                f"kernel_options must be a dict of FlexAttention kernel options, got {kernel_options!r}"
            )
        self.kernel_options = dict(kernel_options or {})
        if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0.0 <= sparsity < 1.0:
            raise ValueError(
                f"sparsity (fraction of block pairs skipped) must be in [0, 1), got {sparsity!r}"
            )
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
        if ring_size is not None and (
            isinstance(ring_size, bool) or not isinstance(ring_size, int) or ring_size <= 0
        ):
            raise ValueError(f"ring_size must be a positive int or None, got {ring_size!r}")
        if backend not in SPARSE_BACKENDS:
            raise ValueError(f"backend must be one of {SPARSE_BACKENDS}, got {backend!r}")
        self.sparsity = float(sparsity)
        self.block_size = block_size
        self.pattern = pattern
        self.ring_size = ring_size
        self.backend = backend
        self._cache = _LRU()

    # -- pattern --------------------------------------------------------------------------------
    def active_blocks(self, seq_len: int, is_causal: bool = False) -> torch.Tensor:
        """Bool ``(nb, nb)`` of active (query block, key block) pairs for ``seq_len`` (CPU, cached)."""
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        key = ("active", seq_len, bool(is_causal))
        if key not in self._cache:
            self._cache[key] = block_pattern(
                -(-seq_len // self.block_size),
                sparsity=self.sparsity,
                pattern=self.pattern,
                is_causal=is_causal,
                segment_lengths=self.segment_lengths,
                dilation_rates=self.dilation_rates,
                block_size=self.block_size,
            )
        return self._cache[key]

    def attention_pattern(
        self,
        seq_len: int,
        is_causal: bool = False,
        *,
        num_heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Int32 ``(H, seq_len, seq_len)`` on ``device``: 1 where the token pair is attended, every
        head alike (``mode`` does not apply to the block pattern)."""
        h = self._resolve_heads(num_heads)
        mask = token_mask(self.active_blocks(seq_len, is_causal), seq_len, self.block_size, is_causal, device)
        return mask.to(torch.int32).expand(h, -1, -1).contiguous()

    def attended_pairs(self, seq_len: int, is_causal: bool = False, *, num_heads: int | None = None) -> int:
        """``attention_pattern(...).sum()`` from the active blocks alone (no ``(n, n)`` mask): each
        active (query block, key block) pair counts its size; a causal diagonal block its lower
        triangle."""
        active = self.active_blocks(seq_len, is_causal).to(torch.int64)
        nb, bs = active.shape[0], self.block_size
        sizes = torch.full((nb,), bs, dtype=torch.int64)
        sizes[-1] = seq_len - bs * (nb - 1)
        pairs = sizes[:, None] * sizes[None, :] * active
        if is_causal:
            diagonal = torch.diagonal(active) * sizes * (sizes + 1) // 2
            pairs = pairs - torch.diag(torch.diagonal(pairs)) + torch.diag(diagonal)
        return int(pairs.sum().item()) * self._resolve_heads(num_heads)

    # -- forward --------------------------------------------------------------------------------
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        d = self._check_inputs(q, k, v)[3]
        dropout_p = self._dropout_p()
        if self._use_flex(q, dropout_p):
            key = (q.device.type, q.dtype, d)
            try:
                out = self._forward_flex(q, k, v, is_causal)
            except Exception as exc:  # a compiler/kernel failure must not make the module unusable
                if self.backend == "flex" and calling_context() is None:
                    raise  # asked for by name: only a context that flex cannot run in falls back
                FLEX_FALLBACK.failed(
                    key,
                    exc,
                    what=f"flex_attention on {q.device.type} {q.dtype} head_dim {d}",
                    instead="block-sparse attention runs its gather path",
                )
            else:
                FLEX_FALLBACK.succeeded(key)
                return out
        return self._forward_gather(q, k, v, is_causal, dropout_p)

    def _use_flex(self, q: torch.Tensor, dropout_p: float) -> bool:
        if self.backend == "gather":
            return False
        if self.backend == "flex":
            if dropout_p > 0.0:
                raise ValueError("backend='flex' has no dropout; use backend='auto' or 'gather' in training")
            return True
        d = q.shape[-1]
        return (
            q.device.type == "cuda"
            and dropout_p == 0.0
            and d >= 16
            and d & (d - 1) == 0
            and (q.device.type, q.dtype, d) not in FLEX_FALLBACK.off
        )

    def _forward_flex(self, q, k, v, is_causal: bool) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        blocked = compile_blocked()  # module docstring, "When flex cannot run"
        if blocked:  # (before the block mask too: create_block_mask compiles for some block sizes)
            raise ContextError(f"{blocked}, and flex_attention runs only through it")
        n = q.shape[1]
        key = ("flex", n, bool(is_causal), q.device)
        if key not in self._cache:
            self._cache[key] = self._block_mask(n, is_causal, q.device)
        block_mask = self._cache[key]
        fn = _compiled_flex() if q.device.type == "cuda" else flex_attention
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # strided views: flex reads them as they are
        options = {"kernel_options": dict(self.kernel_options)} if self.kernel_options else {}
        out = fn(qt, kt, vt, block_mask=block_mask, scale=self._scale(q.shape[-1]), **options)
        return out.transpose(1, 2).contiguous()

    def _block_mask(self, n: int, is_causal: bool, device: torch.device):
        """The FlexAttention block mask of the pattern.

        With ``block_size`` a multiple of 128 (flex's tile) the mask is built directly from the
        active block pairs (``BlockMask.from_kv_blocks``): no ``mask_mod`` to trace and compile, and
        every active tile is marked *full*, so the kernel skips mask evaluation there; only causal
        diagonal tiles are partial.  Other block sizes go through ``create_block_mask``.
        """
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask

        active = self.active_blocks(n, is_causal)
        bs = self.block_size
        act = active.to(device)

        def mask_mod(b, h, q_idx, kv_idx):  # the pattern itself: flex's semantics (eager runs it densely)
            visible = act[q_idx // bs, kv_idx // bs]
            return visible & (kv_idx <= q_idx) if is_causal else visible

        if bs % _FLEX_TILE:
            compile_mask = device.type == "cuda"
            return create_block_mask(mask_mod, None, None, n, n, device=device, _compile=compile_mask)
        per = bs // _FLEX_TILE
        tiles = active.repeat_interleave(per, 0).repeat_interleave(per, 1)
        nt = -(-n // _FLEX_TILE)
        tiles = tiles[:nt, :nt]
        partial = torch.zeros_like(tiles)
        if is_causal:
            diagonal = torch.eye(nt, dtype=torch.bool)
            partial = tiles & diagonal
            tiles = tiles & ~diagonal & torch.ones(nt, nt, dtype=torch.bool).tril()

        def as_indices(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            counts = mask.sum(dim=1, dtype=torch.int32)
            order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True).to(torch.int32)
            return counts[None, None].to(device), order[None, None].contiguous().to(device)

        full_num, full_idx = as_indices(tiles)
        part_num, part_idx = as_indices(partial)

        def causal(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx

        # Compiled flex visits only the listed tiles and evaluates mask_mod only in partial ones
        # (the causal diagonal), so on CUDA the kernel gets the plain causal mask (or none): no
        # pattern lookup in the kernel, no captured tensor.  Eager flex (CPU) applies mask_mod to
        # every score, so there it must be the pattern itself.
        kernel_mask = (causal if is_causal else None) if device.type == "cuda" else mask_mod
        return BlockMask.from_kv_blocks(
            part_num,
            part_idx,
            full_num,
            full_idx,
            BLOCK_SIZE=_FLEX_TILE,
            mask_mod=kernel_mask,
            seq_lengths=(n, n),
        )

    def _gather_plan(self, n: int, is_causal: bool, device: torch.device):
        """Per key chunk: (cols (nb, kmax) key-block ids, valid (nb, kmax)) of the active blocks."""
        key = ("gather", n, bool(is_causal), device, self.ring_size)
        if key not in self._cache:
            active = self.active_blocks(n, is_causal)
            nb = active.shape[0]
            chunks = split_lengths(nb, min(self.ring_size or 1, nb))
            plan, start = [], 0
            for size in chunks:
                sub = active[:, start : start + size]
                counts = sub.sum(dim=1)
                kmax = int(counts.max())
                if kmax > 0:
                    order = torch.argsort((~sub).to(torch.int8), dim=1, stable=True)[:, :kmax]
                    valid = torch.arange(kmax)[None, :] < counts[:, None]
                    plan.append(((order + start).to(device), valid.to(device)))
                start += size
            self._cache[key] = plan
        return self._cache[key]

    def _forward_gather(self, q, k, v, is_causal: bool, dropout_p: float) -> torch.Tensor:
        b, n, h, d = q.shape
        bs = self.block_size
        nb = -(-n // bs)
        pad = nb * bs - n
        scale = self._scale(d)

        def blocks(x: torch.Tensor) -> torch.Tensor:  # (b, n, h, d) -> (b, h, nb, bs, d)
            x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)) if pad else x
            return x.view(b, nb, bs, h, d).permute(0, 3, 1, 2, 4)

        qb, kb, vb = blocks(q), blocks(k), blocks(v)
        pos = torch.arange(nb * bs, device=q.device).view(nb, bs)
        out = lse_acc = None
        for cols, valid in self._gather_plan(n, is_causal, q.device):
            kmax = cols.shape[1]
            kg = kb[:, :, cols].reshape(b, h, nb, kmax * bs, d)  # (b, h, nb, kmax*bs, d)
            vg = vb[:, :, cols].reshape(b, h, nb, kmax * bs, d)
            kpos = pos[cols].reshape(nb, kmax * bs)  # key positions of the gathered blocks
            visible = (valid[:, :, None].expand(nb, kmax, bs).reshape(nb, kmax * bs)) & (kpos < n)
            mask = visible[:, None, :]  # (nb, 1, K)
            if is_causal:
                mask = mask & (kpos[:, None, :] <= pos[:, :, None])  # (nb, bs, K)
            o, lse = attention_with_lse(qb, kg, vg, scale=scale, mask=mask, dropout_p=dropout_p)
            if out is None:
                out, lse_acc = o, lse
            else:  # online log-sum-exp merge of this key chunk (differentiable, NaN-free)
                out, lse_acc = merge_stacked(torch.stack([out, o]), torch.stack([lse_acc, lse]))
        out = out.permute(0, 2, 3, 1, 4).reshape(b, nb * bs, h, d)[:, :n]
        return out.to(q.dtype) if out.dtype != q.dtype else out

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, sparsity={self.sparsity}, block_size={self.block_size}, "
            f"pattern={self.pattern!r}, ring_size={self.ring_size}, backend={self.backend!r}"
        )


class _LRU(OrderedDict):
    """A small least-recently-used dict: patterns, gather plans and block masks per seq_len."""

    def __init__(self, size: int = 16) -> None:
        super().__init__()
        self.size = size

    def __getitem__(self, key):
        self.move_to_end(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


#: flex_attention switched off per (device type, dtype, head_dim): the gather path runs there
FLEX_FALLBACK = Fallback()
_FLEX_TILE = 128  # FlexAttention's block-mask granularity
_COMPILED = None


def _flex_block_sparse(*args, **kwargs):
    """Block-sparse's own function around ``flex_attention``: its own budget (:mod:`attention._compiled`)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(*args, **kwargs)


def _compiled_flex():
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = budgeted(_flex_block_sparse)
    return _COMPILED
