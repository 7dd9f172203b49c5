"""Block-sparse attention: its pattern keeps its sparsity promise, and it computes that pattern."""

from __future__ import annotations

import warnings

import pytest
import torch

from attention.block_sparse import (
    PATTERNS,
    BlockSparseRingDilatedAttention,
    block_budget,
    block_pattern,
    ladder_distances,
    skipped_fraction,
)
from attention.reference import reference_attention, relative_error

CFG = {"segment_lengths": [64, 128, 256], "dilation_rates": [1, 2, 4]}


def _measured_skipped(counts: torch.Tensor, block_size: int) -> float:
    """Independent of the module's helper: reduce the token pattern to blocks by hand."""
    n = counts.shape[-1]
    nb = -(-n // block_size)
    seen = torch.zeros(nb, nb, dtype=torch.bool)
    nz = torch.nonzero(counts[0])
    seen[nz[:, 0] // block_size, nz[:, 1] // block_size] = True
    return 1.0 - seen.sum().item() / nb**2


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_measured_sparsity_matches_requested(pattern: str, causal: bool) -> None:
    for seq_len, block_size in ((160, 16), (333, 16), (1000, 16), (517, 8)):
        for sparsity in (0.9, 0.75, 0.6):
            module = BlockSparseRingDilatedAttention(
                **CFG, sparsity=sparsity, block_size=block_size, pattern=pattern
            )
            counts = module.attention_pattern(seq_len, causal, num_heads=1)
            measured = _measured_skipped(counts, block_size)
            assert abs(measured - sparsity) <= 0.02, (pattern, causal, seq_len, sparsity, measured)
            assert measured == pytest.approx(skipped_fraction(counts, block_size))
            if causal:
                assert torch.equal(counts[0], torch.tril(counts[0]))


def test_budget_is_exact_and_the_diagonal_always_kept() -> None:
    for nb in (10, 37, 64):
        for pattern in PATTERNS:
            for causal in (False, True):
                active = block_pattern(
                    nb, sparsity=0.85, pattern=pattern, is_causal=causal, **CFG, block_size=16
                )
                assert int(active.sum()) == block_budget(nb, 0.85, causal) == round(0.15 * nb * nb)
                assert bool(active.diagonal().all())
    # fewer pairs than blocks: the diagonal wins (every query keeps its own block)
    assert int(block_pattern(4, sparsity=0.9, pattern="local_window").sum()) == 4
    # causally at most the lower triangle
    assert int(block_pattern(8, sparsity=0.1, pattern="local_window", is_causal=True).sum()) == 36


def test_patterns_differ_and_follow_their_definitions() -> None:
    nb, kw = (
        32,
        {"sparsity": 0.85, "segment_lengths": [64, 128, 256], "dilation_rates": [1, 2, 4], "block_size": 16},
    )
    local = block_pattern(nb, pattern="local_window", is_causal=True, **kw)
    dilated = block_pattern(nb, pattern="dilated_sparse", is_causal=True, **kw)
    global_ = block_pattern(nb, pattern="global_local", is_causal=True, **kw)
    assert not torch.equal(local, dilated) and not torch.equal(local, global_)
    # local window: a query block's active keys are contiguous and end at the diagonal
    for i in range(nb):
        cols = torch.nonzero(local[i]).flatten().tolist()
        assert cols == list(range(cols[0], i + 1))
    # dilated: ladder [1,2,3 | 4,6 | 8,12 | 16,...] (W = 4, 8, 16 blocks; strides 1, 2, 4, 8)
    assert ladder_distances(nb, [64, 128, 256], [1, 2, 4], 16) == [1, 2, 3, 4, 6, 8, 12, 16, 24]
    dilated = block_pattern(nb, pattern="dilated_sparse", is_causal=True, **{**kw, "sparsity": 0.8})
    # budget 205 = diagonal 32 + bands 1,2,3,4,6,8 (31+30+29+28+26+24) + 5 pairs of band 12
    assert {i - j for i, j in torch.nonzero(dilated).tolist()} == {0, 1, 2, 3, 4, 6, 8, 12}
    # global: every query block sees block 0
    assert bool(global_[:, 0].all())


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("ring_size", [None, 3])
def test_output_and_gradients_match_own_pattern_reference(pattern: str, ring_size: int | None) -> None:
    for causal in (False, True):
        module = BlockSparseRingDilatedAttention(
            segment_lengths=[8, 16, 32],
            dilation_rates=[1, 2, 4],
            sparsity=0.8,
            block_size=4,
            pattern=pattern,
            ring_size=ring_size,
        )
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(2, 61, 3, 24, generator=g, requires_grad=True) for _ in range(3))
        out = module(q, k, v, is_causal=causal)
        ref = reference_attention(q, k, v, module.attention_pattern(61, causal, num_heads=3))
        assert relative_error(out, ref) <= 1e-5
        go = torch.randn(out.shape, generator=g)
        for got, want in zip(
            torch.autograd.grad(out, (q, k, v), go),
            torch.autograd.grad(ref, (q, k, v), go.double()),
            strict=True,
        ):
            assert relative_error(got, want) <= 1e-5


def test_flex_block_mask_path_matches_reference_on_cpu() -> None:
    """The GPU path's block mask, run by eager flex_attention on CPU (forward only there)."""
    for pattern, causal in zip(PATTERNS, (False, True, True), strict=True):
        module = BlockSparseRingDilatedAttention(
            **CFG, sparsity=0.85, block_size=16, pattern=pattern, backend="flex"
        )
        g = torch.Generator().manual_seed(2)
        q, k, v = (torch.randn(1, 203, 2, 16, generator=g) for _ in range(3))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
            out = module(q, k, v, is_causal=causal)
        ref = reference_attention(q, k, v, module.attention_pattern(203, causal, num_heads=2))
        assert relative_error(out, ref) <= 1e-5


def test_sum_of_separately_normalised_blocks_would_be_caught() -> None:
    """Guard the test itself: the classic wrong normalisation is far outside the tolerance."""
    module = BlockSparseRingDilatedAttention(**CFG, sparsity=0.5, block_size=16, pattern="local_window")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 64, 1, 8, generator=g, dtype=torch.float64) for _ in range(3))
    counts = module.attention_pattern(64, num_heads=1)
    ref = reference_attention(q, k, v, counts)
    wrong = torch.zeros_like(ref)
    active = module.active_blocks(64)
    for i, j in torch.nonzero(active).tolist():
        one = torch.zeros_like(counts)
        one[:, i * 16 : (i + 1) * 16, j * 16 : (j + 1) * 16] = 1
        wrong += reference_attention(q, k, v, one)
    assert relative_error(wrong, ref) > 0.3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sparsity": 1.0}, r"sparsity \(fraction of block pairs skipped\) must be in \[0, 1\), got 1.0"),
        ({"sparsity": -0.1}, r"got -0.1"),
        ({"block_size": 0}, r"block_size must be a positive int, got 0"),
        ({"pattern": "random"}, r"pattern must be one of .*'random'"),
        ({"ring_size": 0}, r"ring_size must be a positive int or None, got 0"),
        ({"backend": "triton"}, r"backend must be one of .*'triton'"),
    ],
)
def test_bad_block_sparse_configuration(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BlockSparseRingDilatedAttention(**CFG, **kwargs)


@pytest.mark.parametrize("block_size", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flex_block_mask_from_active_pairs(block_size: int, causal: bool) -> None:
    """Block sizes that are multiples of flex's 128 tile: the mask is built from the active pairs
    (no mask_mod compile); every active tile is *full* (no mask evaluated) except causal diagonal
    tiles; the tiles it visits are exactly the pattern's, and the result matches the reference."""
    n = 3 * block_size + 77  # a short last block
    module = BlockSparseRingDilatedAttention(
        **CFG, sparsity=0.6, block_size=block_size, pattern="local_window", backend="flex"
    )
    mask = module._block_mask(n, causal, torch.device("cpu"))
    tiles = -(-n // 128)

    def visited(num: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(tiles, tiles, dtype=torch.bool)
        for row in range(tiles):
            out[row, idx[0, 0, row, : int(num[0, 0, row])].long()] = True
        return out

    full = visited(mask.full_kv_num_blocks, mask.full_kv_indices)
    partial = visited(mask.kv_num_blocks, mask.kv_indices)
    per = block_size // 128
    want = module.active_blocks(n, causal).repeat_interleave(per, 0).repeat_interleave(per, 1)[:tiles, :tiles]
    if causal:
        want = want & torch.ones(tiles, tiles, dtype=torch.bool).tril()
    assert not (full & partial).any()
    assert torch.equal(full | partial, want)
    assert torch.equal(partial, want & torch.eye(tiles, dtype=torch.bool)) if causal else not partial.any()
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, n, 2, 16, generator=g) for _ in range(3))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        out = module(q, k, v, is_causal=causal)
    ref = reference_attention(q, k, v, module.attention_pattern(n, causal, num_heads=2))
    assert relative_error(out, ref) <= 1e-5
