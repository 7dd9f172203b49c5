"""The segment engine's plan and merge: fused pieces and the log-sum-exp update.

The ring is launch-bound on a GPU at short lengths, so its plan fuses the pieces of one branch
that share a shape, and the merge is a handful of kernels.  These tests pin what that must not
change: every (query row, key row) pair is attended exactly as before, the merge equals one
softmax over both parts, and empty parts never produce NaN.
"""

from __future__ import annotations

import math

import pytest
import torch

from attention import RingDilatedAttention
from attention._lse import merge_into, merge_stacked
from attention._plan import Piece, build_pieces, chunk_bounds, coalesce, split_lengths
from tests.test_attention_numerics import check_against_reference


def _pieces(seq_len: int, heads: int, ring_size: int, causal: bool, mode: str = "longnet"):
    """(a, c, fused pieces, unfused pieces) for every chunk pair."""
    bounds = chunk_bounds(split_lengths(seq_len, ring_size))
    for a in range(ring_size):
        for c in range(ring_size):
            args = dict(
                seq_len=seq_len,
                num_heads=heads,
                segment_lengths=(16, 32, 64),
                dilation_rates=(1, 2, 4),
                mode=mode,
                bounds=bounds,
                q_chunk=a,
                k_chunk=c,
                is_causal=causal,
                device=torch.device("cpu"),
            )
            yield a, c, build_pieces(**args), build_pieces(**args, fuse=False)


def _attended(pieces: list[Piece]) -> set[tuple[int, int, int]]:
    """(branch, query row, key row) triples a list of pieces attends (causal pieces: lower triangle)."""
    out = set()
    for p in pieces:
        q = p.q_index.reshape(-1, p.q_index.shape[2])
        k = p.k_index.reshape(-1, p.k_index.shape[2])
        for qi, ki in zip(q.tolist(), k.tolist(), strict=True):
            for i, row in enumerate(qi):
                for j, col in enumerate(ki):
                    if not p.causal or j <= i:
                        out.add((p.branch, row, col))
    return out


@pytest.mark.parametrize("mode", ["longnet", "head_groups"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_pieces_attend_the_same_pairs(causal: bool, mode: str) -> None:
    """Chunks (13 tokens) much shorter than the segments: many small pieces per pair, fused."""
    fused_total = split_total = 0
    for _, _, fused, split in _pieces(seq_len=101, heads=7, ring_size=8, causal=causal, mode=mode):
        assert _attended(fused) == _attended(split)
        for p in fused:  # rows of one piece are distinct: the merge's index_copy_ loses nothing
            rows = p.q_index.reshape(-1).tolist()
            assert len(rows) == len(set(rows))
        boundary = [p for p in fused if p.batch_groups == 1]  # interior pieces are never fused
        keys = {(p.branch, p.q_index.shape[2], p.k_index.shape[2], p.causal) for p in boundary}
        assert len(keys) == len(boundary), "one boundary piece per branch and shape"
        assert _attended(coalesce(split)) == _attended(fused)
        fused_total += len(fused)
        split_total += len(split)
    assert fused_total < split_total


def test_ring_with_chunks_shorter_than_segments_matches_reference() -> None:
    """longnet mode (every head in every branch), 8 chunks of ~12 tokens against segments up to 32."""
    for causal in (False, True):
        check_against_reference("ring", mode="longnet", causal=causal, overrides={"ring_size": 8})


def test_merge_into_equals_one_softmax_over_both_parts() -> None:
    gen = torch.Generator().manual_seed(0)
    acc_out, out = torch.randn(2, 50, 8, generator=gen), torch.randn(2, 50, 8, generator=gen)
    acc_lse, lse = 5 * torch.randn(2, 50, generator=gen), 5 * torch.randn(2, 50, generator=gen)
    merged, merged_lse = merge_into(acc_out, acc_lse, out, lse)
    want, want_lse = merge_stacked(torch.stack([acc_out, out]), torch.stack([acc_lse, lse]))
    torch.testing.assert_close(merged, want)
    torch.testing.assert_close(merged_lse, want_lse)


def test_merge_into_with_empty_parts_is_never_nan() -> None:
    inf = math.inf
    acc_lse = torch.tensor([[-inf, 1.0, -inf, 80.0]])
    lse = torch.tensor([[-inf, -inf, 2.0, -80.0]])
    acc_out = torch.tensor([[[0.0], [1.0], [0.0], [4.0]]])
    out = torch.tensor([[[0.0], [0.0], [2.0], [9.0]]])
    merged, merged_lse = merge_into(acc_out, acc_lse, out, lse)
    assert merged.flatten().tolist() == [0.0, 1.0, 2.0, 4.0]
    assert merged_lse[0, 0].item() == -inf and merged_lse[0, 1:].tolist() == pytest.approx([1.0, 2.0, 80.0])


def test_ring_plan_of_a_short_sequence_is_small() -> None:
    """The benchmark shape at 1K tokens (ring_size 8): one piece per branch and shape per pair."""
    ring = RingDilatedAttention(segment_lengths=[256, 512, 1024], dilation_rates=[1, 2, 4], ring_size=8)
    q = torch.zeros(1, 1024, 12, 8)
    plan = ring._plan(q, False, ring._chunk_lengths(1024))
    pieces = [p for a, c in plan.pairs for p in plan.pieces(a, c)]
    assert len(plan.pairs) == 64
    assert len(pieces) <= 3 * len(plan.pairs)  # 3 branches; 336 pieces before boundary pieces were fused
