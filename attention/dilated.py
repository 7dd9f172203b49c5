"""``DilatedAttention``: the straightforward implementation of the semantics.

Plain PyTorch, autograd end to end, written to be read next to DESIGN.md rather than to be fast:

1. for every branch ``(w, r)`` and every group of heads sharing an offset ``o``
   (:func:`attention.pattern.branch_heads`), gather the kept positions ``j*w + o + t*r`` of
   every segment ``j`` (the sequence behaves as if right-padded to a multiple of ``w``; padded
   keys are masked, padded queries dropped);
2. run dense softmax attention inside each gathered segment (causal inside the segment, which
   is the true causal mask because gathering keeps the order), keeping its log-sum-exp;
3. scatter each branch back to ``(batch, seq, heads, dim)`` with LSE −inf where the branch did
   not keep a (position, head);
4. merge the branches by log-sum-exp: one softmax over the multiset of all their keys.

The other implementations are checked against the float64 reference, not against this one, so a
bug here cannot hide a bug there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from attention._base import DilatedAttentionBase
from attention._lse import attention_with_lse, compute_dtype, merge_stacked
from attention.pattern import branch_heads


class _GroupIndex(NamedTuple):
    """Where one head group of one branch reads and writes, for one sequence length and device."""

    gather_pos: torch.Tensor  # (S, m) long: kept positions per segment (clamped into the sequence)
    head_idx: torch.Tensor  # (hg,) long: the group's heads
    key_visible: torch.Tensor  # (S, 1, 1, m) bool: False for the right padding
    valid_flat: torch.Tensor  # (V,) long: indices into the flattened (S * m) kept positions that exist
    rows: torch.Tensor  # (V, 1) long: their positions in the sequence


class DilatedAttention(DilatedAttentionBase):
    """Dilated attention (LongNet) on ``(batch, seq_len, num_heads, head_dim)`` tensors.

    The index tensors of each (sequence length, heads, device) are built once and kept, so a
    forward pass makes no host-to-device copy and no data-dependent shape: it can be captured in
    a CUDA graph (perfguard times graph replays, which are ~1% stable where eager launch-bound
    timing is not).
    """

    def _indices(self, n: int, h: int, device: torch.device) -> list[tuple[int, list[_GroupIndex]]]:
        cache: dict[tuple[int, int, torch.device], list[tuple[int, list[_GroupIndex]]]]
        cache = self.__dict__.setdefault("_index_cache", {})
        key = (n, h, device)
        if key not in cache:
            branches = []
            for bh in branch_heads(h, self.segment_lengths, self.dilation_rates, self.mode):
                w, r = bh.segment_length, bh.dilation_rate
                num_segments = math.ceil(n / w)
                groups = []
                for offset, heads in bh.groups().items():
                    within = torch.arange(offset, w, r)  # kept offsets inside a segment
                    pos = torch.arange(num_segments)[:, None] * w + within  # (S, m)
                    valid = pos < n  # positions past the end are the padding
                    groups.append(
                        _GroupIndex(
                            gather_pos=pos.clamp(max=n - 1).to(device),
                            head_idx=torch.tensor(heads).to(device),
                            key_visible=valid[:, None, None, :].to(device),
                            valid_flat=valid.reshape(-1).nonzero().reshape(-1).to(device),
                            rows=pos[valid][:, None].to(device),
                        )
                    )
                branches.append((w, groups))
            if len(cache) >= 8:  # a few lengths at most; never grow without bound
                cache.pop(next(iter(cache)))
            cache[key] = branches
        return cache[key]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False
    ) -> torch.Tensor:
        b, n, h, d = self._check_inputs(q, k, v)
        scale = self._scale(d)
        dropout_p = self._dropout_p()
        cd = compute_dtype(q.dtype)
        device = q.device

        branch_outs: list[torch.Tensor] = []
        branch_lses: list[torch.Tensor] = []
        for _w, groups in self._indices(n, h, device):
            out_b = torch.zeros(b, n, h, d, dtype=cd, device=device)
            lse_b = torch.full((b, n, h), -math.inf, dtype=cd, device=device)
            for g in groups:

                def take(x: torch.Tensor, gp: torch.Tensor = g.gather_pos, hi: torch.Tensor = g.head_idx):
                    # (b, n, h, d) -> (b, S, m, hg, d) -> (b, S, hg, m, d)
                    return x[:, gp][:, :, :, hi].permute(0, 1, 3, 2, 4)

                out_g, lse_g = attention_with_lse(
                    take(q),
                    take(k),
                    take(v),
                    scale=scale,
                    mask=g.key_visible,  # padded keys are never attended
                    causal=is_causal,
                    dropout_p=dropout_p,
                )
                # back to positions: (b, S, hg, m, ...) -> (b, S*m, hg, ...) -> rows that exist
                hg = g.head_idx.shape[0]
                out_g = out_g.permute(0, 1, 3, 2, 4).reshape(b, -1, hg, d).index_select(1, g.valid_flat)
                lse_g = lse_g.permute(0, 1, 3, 2).reshape(b, -1, hg).index_select(1, g.valid_flat)
                out_b[:, g.rows, g.head_idx] = out_g
                lse_b[:, g.rows, g.head_idx] = lse_g
            branch_outs.append(out_b)
            branch_lses.append(lse_b)

        out, _ = merge_stacked(torch.stack(branch_outs), torch.stack(branch_lses))
        return out.to(q.dtype)
