"""The semantics module against hand-derived cases (DESIGN.md, dilated attention semantics)."""

from __future__ import annotations

import torch

from attention.pattern import branch_heads, dilated_attended_pairs, dilated_pattern, head_group_sizes
from attention.reference import reference_attention


def test_longnet_offsets_split_heads_into_rate_groups() -> None:
    bh = branch_heads(5, [8, 16, 32], [1, 2, 4], "longnet")
    assert [b.offsets for b in bh] == [(0, 0, 0, 0, 0), (0, 0, 0, 1, 1), (0, 0, 1, 1, 2)]


def test_head_groups_give_extra_heads_to_first_groups() -> None:
    assert head_group_sizes(5, 3) == [2, 2, 1]
    bh = branch_heads(5, [8, 16, 32], [1, 2, 4], "head_groups")
    assert [b.heads for b in bh] == [(0, 1), (2, 3), (4,)]
    assert [b.offsets for b in bh] == [(0, 0), (1, 1), (2,)]


def test_single_branch_rate_one_is_block_diagonal() -> None:
    p = dilated_pattern(10, 1, [4], [1])
    expected = torch.zeros(10, 10, dtype=torch.int32)
    for start in (0, 4, 8):
        end = min(start + 4, 10)
        expected[start:end, start:end] = 1
    assert torch.equal(p[0], expected)


def test_dilated_positions_and_padding_tail() -> None:
    # w=4, r=2, offset 1 (head 1 of 2): keeps 1,3 | 5,7 | 9 (seq_len 10 cuts the last segment)
    p = dilated_pattern(10, 2, [4], [2])
    kept_h1 = sorted({int(i) for i in torch.nonzero(p[1].sum(1)).flatten()})
    assert kept_h1 == [1, 3, 5, 7, 9]
    assert p[1][9, 9] == 1 and p[1][9].sum() == 1


def test_overlapping_branches_count_twice() -> None:
    p = dilated_pattern(8, 1, [4, 8], [1, 2])
    assert p[0][0, 2] == 2  # same segment of branch 0 and both kept by branch 1
    assert p[0][0, 1] == 1


def test_causal_is_lower_triangular_and_closed_form_pairs_match() -> None:
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            p = dilated_pattern(91, 5, [8, 16, 32], [1, 2, 4], mode, causal)
            if causal:
                assert torch.equal(p, torch.tril(p))
            assert int(p.sum()) == dilated_attended_pairs(91, 5, [8, 16, 32], [1, 2, 4], mode, causal)


def test_reference_with_full_pattern_is_sdpa() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 17, 3, 8, generator=g, dtype=torch.float64) for _ in range(3))
    ref = reference_attention(q, k, v, torch.ones(3, 17, 17, dtype=torch.int32))
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    ).transpose(1, 2)
    assert torch.allclose(ref, sdpa, atol=1e-12)


def test_reference_row_without_keys_is_zero_not_nan() -> None:
    q, k, v = (torch.randn(1, 4, 1, 2, dtype=torch.float64, requires_grad=True) for _ in range(3))
    counts = torch.ones(1, 4, 4, dtype=torch.int32)
    counts[0, 2] = 0
    out = reference_attention(q, k, v, counts)
    assert torch.all(out[0, 2] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
