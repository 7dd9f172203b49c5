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

import torch

from attention._base import DilatedAttentionBase
from attention._lse import attention_with_lse, compute_dtype, merge_stacked
from attention.pattern import branch_heads


class DilatedAttention(DilatedAttentionBase):
    """Dilated attention (LongNet) on ``(batch, seq_len, num_heads, head_dim)`` tensors."""

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
        for bh in branch_heads(h, self.segment_lengths, self.dilation_rates, self.mode):
            w, r = bh.segment_length, bh.dilation_rate
            num_segments = math.ceil(n / w)
            out_b = torch.zeros(b, n, h, d, dtype=cd, device=device)
            lse_b = torch.full((b, n, h), -math.inf, dtype=cd, device=device)
            for offset, heads in bh.groups().items():
                within = torch.arange(offset, w, r, device=device)  # kept offsets inside a segment
                pos = torch.arange(num_segments, device=device)[:, None] * w + within  # (S, m)
                valid = pos < n  # positions past the end are the padding
                gather_pos = pos.clamp(max=n - 1)
                head_idx = torch.tensor(heads, device=device)

                def take(x: torch.Tensor, gp: torch.Tensor = gather_pos, hi: torch.Tensor = head_idx):
                    # (b, n, h, d) -> (b, S, m, hg, d) -> (b, S, hg, m, d)
                    return x[:, gp][:, :, :, hi].permute(0, 1, 3, 2, 4)

                key_visible = valid[:, None, None, :]  # (S, 1, 1, m): padded keys never attended
                out_g, lse_g = attention_with_lse(
                    take(q),
                    take(k),
                    take(v),
                    scale=scale,
                    mask=key_visible,
                    causal=is_causal,
                    dropout_p=dropout_p,
                )
                # back to positions: (b, S, hg, m, ...) -> rows of valid positions only
                out_g = out_g.permute(0, 1, 3, 2, 4)[:, valid]  # (b, V, hg, d)
                lse_g = lse_g.permute(0, 1, 3, 2)[:, valid]  # (b, V, hg)
                rows = pos[valid][:, None]
                out_b[:, rows, head_idx] = out_g
                lse_b[:, rows, head_idx] = lse_g
            branch_outs.append(out_b)
            branch_lses.append(lse_b)

        out, _ = merge_stacked(torch.stack(branch_outs), torch.stack(branch_lses))
        return out.to(q.dtype)
