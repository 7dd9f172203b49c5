"""The semantics module against hand-derived cases (DESIGN.md, dilated attention semantics)."""

from __future__ import annotations

import random

import pytest
import torch

from attention.block_sparse import BlockSparseRingDilatedAttention, token_mask
from attention.dilated import DilatedAttention
from attention.multihead import MultiheadDilatedAttention
from attention.pattern import branch_heads, dilated_attended_pairs, dilated_pattern, head_group_sizes
from attention.reference import (
    multihead_reference,
    multihead_references,
    reference_attention,
    reference_attentions,
)


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


# ------------------------------------------------------------------------------------------------
# the vectorised builders against the definition written as loops (DESIGN.md, word for word)
# ------------------------------------------------------------------------------------------------
def _loop_pattern(
    n: int, heads: int, segs: list[int], rates: list[int], mode: str, causal: bool
) -> torch.Tensor:
    """The semantics one (head, branch, query, key) at a time, independent of attention.pattern."""
    counts = torch.zeros(heads, n, n, dtype=torch.int32)
    g = len(segs)
    sizes = [heads // g + (1 if i < heads % g else 0) for i in range(g)]
    for h in range(heads):
        for i, (w, r) in enumerate(zip(segs, rates, strict=True)):
            if mode == "longnet":
                offset = h // -(-heads // r)
            else:
                group = next(j for j in range(g) if h < sum(sizes[: j + 1]))
                if group != i:
                    continue
                offset = i % r
            for p in range(n):
                for k in range(n):
                    same_segment = p // w == k // w
                    kept = all((x % w) >= offset and (x % w - offset) % r == 0 for x in (p, k))
                    if same_segment and kept and (not causal or k <= p):
                        counts[h, p, k] += 1
    return counts


def _random_config(rng: random.Random) -> tuple[list[int], list[int]]:
    branches = rng.randint(1, 3)
    rates = [rng.choice([1, 2, 3, 4]) for _ in range(branches)]
    segs = [r * rng.randint(1, 6) for r in rates]
    return segs, rates


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_pattern_equals_the_loop_definition(seed: int) -> None:
    rng = random.Random(seed)
    segs, rates = _random_config(rng)
    heads = rng.randint(len(segs), 7)  # often not divisible by the number of branches
    n = rng.choice([1, 2 * rng.randint(1, 20) + 1, max(segs) * 3 - 5 if max(segs) > 2 else 3])
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            got = dilated_pattern(n, heads, segs, rates, mode, causal)
            want = _loop_pattern(n, heads, segs, rates, mode, causal)
            assert got.dtype == torch.int32
            assert torch.equal(got, want), (n, heads, segs, rates, mode, causal)


@pytest.mark.parametrize("seed", range(12))
def test_perfguards_own_definition_equals_the_packages(seed: int) -> None:
    """perfguard's writing of the semantics (what verify's reference and the FLOP counts use, without
    importing ``attention``) and ``attention.pattern`` agree, pattern and closed-form pair count."""
    from perfguard.engine import dilation

    rng = random.Random(1000 + seed)
    segs, rates = _random_config(rng)
    heads = rng.randint(len(segs), 7)
    n = rng.choice([1, 2 * rng.randint(1, 20) + 1, max(segs) * 3 - 5 if max(segs) > 2 else 3])
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            ours = dilation.dilated_pattern(n, heads, segs, rates, mode, causal)
            assert ours.dtype == torch.int32
            assert torch.equal(ours, _loop_pattern(n, heads, segs, rates, mode, causal)), (n, segs, rates)
            pairs = dilation.dilated_attended_pairs(n, heads, segs, rates, mode, causal)
            assert pairs == int(ours.sum()) == dilated_attended_pairs(n, heads, segs, rates, mode, causal)
    with pytest.raises(ValueError, match="head per branch"):
        dilation.dilated_pattern(8, 1, [4, 8], [1, 2], "head_groups")


def test_registry_cpu_config_pattern_equals_the_loop_definition() -> None:
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            got = dilated_pattern(91, 5, [8, 16, 32], [1, 2, 4], mode, causal)
            assert torch.equal(got, _loop_pattern(91, 5, [8, 16, 32], [1, 2, 4], mode, causal))


def _loop_token_mask(active: torch.Tensor, n: int, block: int, causal: bool) -> torch.Tensor:
    mask = torch.zeros(n, n, dtype=torch.bool)
    for p in range(n):
        for k in range(n):
            mask[p, k] = bool(active[p // block, k // block]) and (not causal or k <= p)
    return mask


@pytest.mark.parametrize("seed", range(6))
def test_block_token_mask_equals_the_loop_definition(seed: int) -> None:
    rng = random.Random(seed)
    block = rng.choice([1, 3, 4, 8])
    n = rng.randint(1, 40)
    nb = -(-n // block)
    active = torch.rand(nb, nb, generator=torch.Generator().manual_seed(seed)) < 0.4
    for causal in (False, True):
        assert torch.equal(token_mask(active, n, block, causal), _loop_token_mask(active, n, block, causal))


def test_block_sparse_pattern_is_its_token_mask_on_every_head() -> None:
    module = BlockSparseRingDilatedAttention(
        segment_lengths=[8, 16], dilation_rates=[1, 2], sparsity=0.7, block_size=4, num_heads=3
    )
    for causal in (False, True):
        counts = module.attention_pattern(37, causal)
        mask = _loop_token_mask(module.active_blocks(37, causal), 37, 4, causal)
        assert counts.dtype == torch.int32 and counts.shape == (3, 37, 37) and counts.is_contiguous()
        assert all(torch.equal(counts[h], mask.to(torch.int32)) for h in range(3))


def test_patterns_are_built_on_the_requested_device() -> None:
    cfg = {"segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4]}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    modules = [
        DilatedAttention(**cfg, num_heads=5),
        MultiheadDilatedAttention(20, 5, **cfg),
        BlockSparseRingDilatedAttention(**cfg, block_size=4, num_heads=5),
    ]
    for device in devices:
        for module in modules:
            counts = module.attention_pattern(45, True, device=device)
            assert counts.device.type == device and counts.shape == (5, 45, 45)
            assert torch.equal(counts.cpu(), module.attention_pattern(45, True))


def test_references_for_several_values_equal_one_reference_each() -> None:
    """One softmax for several v (verify's runs A and B) gives exactly the separate references."""
    g = torch.Generator().manual_seed(1)
    counts = dilated_pattern(37, 3, [8, 16], [1, 2], "head_groups", True)
    q, k, v1, v2 = (torch.randn(2, 37, 3, 4, generator=g, dtype=torch.float64) for _ in range(4))
    together = reference_attentions(q, k, [v1, v2], counts)
    assert torch.equal(together[0], reference_attention(q, k, v1, counts))
    assert torch.equal(together[1], reference_attention(q, k, v2, counts))

    module = MultiheadDilatedAttention(12, 3, segment_lengths=[8, 16], dilation_rates=[1, 2]).double()
    x, y1, y2 = (torch.randn(2, 37, 12, generator=g, dtype=torch.float64) for _ in range(3))
    both = multihead_references(module, x, x, [y1, y2], is_causal=True)
    assert torch.equal(both[0], multihead_reference(module, x, x, y1, is_causal=True))
    given = module.attention_pattern(37, True)
    assert torch.equal(both[1], multihead_reference(module, x, x, y2, is_causal=True, counts=given))


def test_segments_longer_than_the_sequence_cost_only_the_sequence() -> None:
    """A 1M-position segment on 10 tokens: the pair mask is (H, 10, 10), not (H, 1M, 1M)."""
    segs, rates = [4, 1 << 20], [2, 1 << 10]
    for causal in (False, True):
        got = dilated_pattern(10, 3, segs, rates, "longnet", causal)
        assert torch.equal(got, _loop_pattern(10, 3, segs, rates, "longnet", causal))


def test_every_registered_module_counts_its_attended_pairs_as_its_pattern_does() -> None:
    """``attended_pairs`` (what perfguard's FLOP counts read, docs/guarding-your-package.md) is the
    sum of ``attention_pattern``, for every implementation, causal or not, at lengths that cut a
    segment (and a block) short; perfguard counts a module without it from the pattern itself."""
    from attention.registry import REGISTRY
    from perfguard.engine.cases import attended_pairs

    for name, spec in REGISTRY.items():
        module = spec.build("cpu")
        for n in (91, 64, 37):
            for causal in (False, True):
                pattern = int(module.attention_pattern(n, causal, num_heads=5).sum())
                assert module.attended_pairs(n, causal, num_heads=5) == pattern, (name, n, causal)
        core = getattr(module, "attention", module)

        counted = attended_pairs(_PatternOnly(core), 91, 5, "pattern", {})
        assert counted == attended_pairs(module, 91, 5, "pattern", {}) == core.attended_pairs(91, num_heads=5)


class _PatternOnly(torch.nn.Module):
    """A module with a pattern and no ``attended_pairs`` (another package's)."""

    def __init__(self, core: torch.nn.Module) -> None:
        super().__init__()
        self.core = core

    def attention_pattern(self, *args: object, **kwargs: object) -> torch.Tensor:
        return self.core.attention_pattern(*args, **kwargs)
