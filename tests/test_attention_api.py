"""The attention package's API contract: patterns, multihead modules, factories, errors, dropout."""

from __future__ import annotations

import logging
import re

import pytest
import torch

import attention
import attention.multihead as multihead_module
from attention import factory, registry
from attention.pattern import dilated_pattern
from attention.reference import reference_attention, relative_error

CFG = {"segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4]}
BUILT = registry.names()


# ------------------------------------------------------------------------------------------------
# patterns
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["improved", "ring", "hilbert_ring"])
def test_same_function_patterns_equal_dilated(name: str) -> None:
    assert registry.SAME_FUNCTION[name] == "dilated"
    dilated = registry.get("dilated").build("cpu")
    other = registry.get(name).build("cpu")
    for mode in ("longnet", "head_groups"):
        for causal in (False, True):
            for n in (1, 45, 91):
                d = registry.get("dilated").build("cpu", mode=mode).attention_pattern(n, causal, num_heads=5)
                o = registry.get(name).build("cpu", mode=mode).attention_pattern(n, causal, num_heads=5)
                assert torch.equal(d, o), (name, mode, causal, n)
    assert dilated.attention_pattern(91, num_heads=5).dtype in (torch.int32, torch.int64)
    assert other.attention_pattern(91, num_heads=5).shape == (5, 91, 91)


def test_pattern_needs_num_heads_and_multihead_delegates() -> None:
    core = attention.DilatedAttention(**CFG)
    with pytest.raises(ValueError, match="num_heads"):
        core.attention_pattern(10)
    assert attention.DilatedAttention(**CFG, num_heads=3).attention_pattern(10).shape == (3, 10, 10)
    mh = attention.MultiheadDilatedAttention(20, 5, **CFG)
    assert torch.equal(mh.attention_pattern(91, True), dilated_pattern(91, 5, **CFG, is_causal=True))


# ------------------------------------------------------------------------------------------------
# multihead modules
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in BUILT if n.startswith("multihead_")])
def test_multihead_contract(name: str) -> None:
    spec = registry.get(name)
    module = spec.build("cpu")
    e = spec.cpu.shape.embed_dim
    for attr in ("q_proj", "k_proj", "v_proj", "out_proj"):
        assert isinstance(getattr(module, attr), torch.nn.Linear)
    assert isinstance(module.norm, torch.nn.LayerNorm) and module.norm.normalized_shape == (e,)
    assert module.num_heads == spec.cpu.shape.num_heads and module.embed_dim == e
    assert module.attention.num_heads == module.num_heads
    x = torch.randn(2, 19, e)
    for need_weights in (False, True):
        result = module(x, x, x, need_weights=need_weights)
        assert isinstance(result, tuple) and len(result) == 2
        assert result[0].shape == x.shape and result[1] is None
    # MAGNETO init: zero biases, v/out scaled by gamma_init relative to q/k
    assert all(float(p.detach().abs().max()) == 0 for p in (module.q_proj.bias, module.out_proj.bias))
    big = spec.cls(e, spec.cpu.shape.num_heads, **CFG, gamma_init=10.0)
    ratio = big.v_proj.weight.std() / big.q_proj.weight.std()
    assert 5 < ratio < 20


def test_multihead_without_layer_norm_and_bias() -> None:
    mh = attention.MultiheadDilatedAttention(20, 5, **CFG, layer_norm=False, bias=False)
    assert mh.norm is None and mh.q_proj.bias is None
    x = torch.randn(1, 30, 20, dtype=torch.float64)
    mh = mh.double()
    out, _ = mh(x, x, x, is_causal=True)
    from attention.reference import multihead_reference

    assert relative_error(out, multihead_reference(mh, x, x, x, is_causal=True)) < 1e-12


def test_multihead_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        attention.MultiheadDilatedAttention(20, 5, [8, 16], [1, 2])  # the swapped-order trap


# ------------------------------------------------------------------------------------------------
# factories
# ------------------------------------------------------------------------------------------------
def test_every_class_of_the_table_is_exported_and_importable() -> None:
    """``attention/__init__.py`` exports what the one table lists, and each path names a module class."""
    for spec in registry.IMPLEMENTATIONS:
        name = spec.class_path.partition(":")[2]
        assert name in attention.__all__ and name in dir(attention)
        assert getattr(attention, name) is spec.cls, spec.name
        assert issubclass(spec.cls, torch.nn.Module) and spec.cls.__name__ == name
    assert len({s.name for s in registry.IMPLEMENTATIONS}) == len(registry.IMPLEMENTATIONS)
    assert len({s.class_path for s in registry.IMPLEMENTATIONS}) == len(registry.IMPLEMENTATIONS)


def test_every_multihead_module_wraps_a_core_of_the_table() -> None:
    """Each multihead row names a core row, every core has one, and the module builds that core."""
    table = {s.name: s for s in registry.IMPLEMENTATIONS}
    multihead = [s for s in registry.IMPLEMENTATIONS if s.multihead]
    assert all(s.core in table and not table[s.core].multihead for s in multihead)
    assert {s.core for s in multihead} == {n for n, s in table.items() if not s.multihead}
    classes = [
        c
        for c in vars(multihead_module).values()
        if isinstance(c, type) and c.__module__ == "attention.multihead"
    ]
    assert {s.cls for s in multihead} == {c for c in classes if not c.__name__.startswith("_")}
    for spec in multihead:
        module = spec.build("cpu")
        assert type(module.attention) is table[spec.core].cls
        assert registry.multihead_for(spec.core) is spec

    class Subclassed(attention.RingMultiheadDilatedAttention):
        """A user's subclass wraps what its base in the table wraps."""

    assert type(Subclassed(20, 5, **CFG).attention) is attention.RingDilatedAttention


def test_registry_is_the_guarded_rows_of_the_table() -> None:
    """The nine names, cores first; the Hilbert ring's multihead module is built, never verified itself."""
    cores = ["dilated", "improved", "ring", "hilbert_ring", "block_sparse_ring"]
    assert list(registry.REGISTRY) == [*cores, *(f"multihead_{n}" for n in cores if n != "hilbert_ring")]
    assert [s.name for s in registry.IMPLEMENTATIONS if not s.guarded] == ["multihead_hilbert_ring"]
    with pytest.raises(ValueError, match="unknown attention kind 'multihead_hilbert_ring'"):
        factory.create_dilated_attention("multihead_hilbert_ring", embed_dim=20, num_heads=5, **CFG)


@pytest.mark.parametrize("name", BUILT)
def test_every_name_works_in_both_factories(name: str) -> None:
    spec = registry.get(name)
    kwargs = dict(spec.cpu.kwargs)
    shape = spec.cpu.shape
    if spec.multihead:
        built = factory.create_dilated_attention(
            name, embed_dim=shape.embed_dim, num_heads=shape.num_heads, **kwargs
        )
    else:
        built = factory.create_dilated_attention(name, **kwargs)
    assert type(built) is spec.cls
    mh = factory.create_multihead_dilated_attention(
        name, embed_dim=shape.embed_dim, num_heads=shape.num_heads, **kwargs
    )
    expected = spec if spec.multihead else registry.multihead_for(name)
    assert type(mh) is expected.cls
    assert type(mh.attention) is type(built.attention if spec.multihead else built)
    x = torch.randn(1, 20, shape.embed_dim)
    out, weights = mh(x, x, x)
    assert out.shape == x.shape and weights is None


def test_hilbert_ring_has_a_multihead_module() -> None:
    mh = factory.create_multihead_dilated_attention(
        "hilbert_ring", embed_dim=20, num_heads=5, ring_size=3, **CFG
    )
    assert isinstance(mh.attention, attention.HilbertRingDilatedAttention)
    assert mh.attention.ring_size == 3


def test_unknown_kind_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown attention kind 'nope'.*dilated.*multihead_ring"):
        factory.create_dilated_attention("nope", **CFG)
    with pytest.raises(ValueError, match=r"unknown attention kind 'standard'.*auto.*hilbert_ring"):
        factory.create_multihead_dilated_attention("standard", embed_dim=20, num_heads=5, **CFG)


def test_auto_says_what_and_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="attention.factory"):
        mh = factory.create_multihead_dilated_attention(embed_dim=20, num_heads=5, seq_len=91, **CFG)
    assert isinstance(mh, attention.ImprovedMultiheadDilatedAttention)
    assert mh.selection.kind == "improved"
    assert "auto picked 'improved'" in mh.selection_reason and "device cpu" in mh.selection_reason
    assert mh.selection_reason in caplog.text


def test_auto_rule() -> None:
    distributed = factory.choose_auto(device="cpu", seq_len=1024, world_size=4)
    assert distributed.kind == "ring" and distributed.ring_size == 4 and "4 ranks" in distributed.reason
    gib = 2**30
    fits = factory.choose_auto(device="cuda", seq_len=32768, embed_dim=768, free_bytes=80 * gib, world_size=1)
    assert fits.kind == "improved" and "fits" in fits.reason
    huge = factory.choose_auto(
        device="cuda",
        seq_len=1 << 22,
        embed_dim=4096,
        free_bytes=80 * gib,
        world_size=1,
        dtype=torch.bfloat16,
    )
    need = factory.estimate_improved_bytes(1 << 22, 4096, 1, 2)
    assert huge.kind == "ring" and huge.ring_size is not None
    assert need / huge.ring_size <= 0.5 * 80 * gib < need / (huge.ring_size // 2)
    assert factory.choose_auto(device="cpu", world_size=1).kind == "improved"


# ------------------------------------------------------------------------------------------------
# bad configurations
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"segment_lengths": [1, 2, 4], "dilation_rates": [8, 16, 32]}, r"segment 1 with rate 8.*swap"),
        ({"segment_lengths": [8, 16], "dilation_rates": [1, 2, 4]}, r"2 segment lengths \[8, 16\] and 3"),
        ({"segment_lengths": [8, 0], "dilation_rates": [1, 1]}, r"positive ints, got \[8, 0\]"),
        ({"segment_lengths": [8, 16], "dilation_rates": [1, -2]}, r"positive ints, got \[1, -2\]"),
        ({"segment_lengths": [], "dilation_rates": []}, r"must not be empty"),
        ({**CFG, "mode": "paper"}, r"mode must be one of .*'paper'"),
        ({**CFG, "dropout": 1.5}, r"dropout must be in \[0, 1\), got 1.5"),
        ({**CFG, "softmax_scale": -1.0}, r"softmax_scale must be positive or None, got -1.0"),
        ({**CFG, "mode": "head_groups", "num_heads": 2}, r"num_heads=2 is fewer than the 3 branches"),
    ],
)
@pytest.mark.parametrize("name", [n for n in BUILT if not n.startswith("multihead_")])
def test_bad_core_configuration(name: str, kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        factory.create_dilated_attention(name, **kwargs)


def test_bad_ring_size() -> None:
    for bad in (0, -2, 1.5):
        with pytest.raises(
            ValueError, match=re.escape(f"ring_size must be a positive int or None, got {bad!r}")
        ):
            attention.RingDilatedAttention(**CFG, ring_size=bad)


def test_bad_multihead_configuration() -> None:
    with pytest.raises(ValueError, match=r"embed_dim=30, num_heads=4 \(remainder 2\)"):
        attention.MultiheadDilatedAttention(30, 4, **CFG)
    with pytest.raises(ValueError, match="segment 8 with rate 3"):
        attention.RingMultiheadDilatedAttention(20, 5, segment_lengths=[8], dilation_rates=[3])
    mh = attention.MultiheadDilatedAttention(20, 5, **CFG)
    with pytest.raises(
        ValueError, match=r"key must be \(batch, seq_len, embed_dim=20\), got shape \(1, 9, 16\)"
    ):
        mh(torch.randn(1, 9, 20), torch.randn(1, 9, 16), torch.randn(1, 9, 20))


@pytest.mark.parametrize("name", [n for n in BUILT if not n.startswith("multihead_")])
def test_bad_inputs(name: str) -> None:
    module = factory.create_dilated_attention(name, **CFG)
    q = torch.randn(1, 20, 5, 8)
    with pytest.raises(ValueError, match=r"same shape, got \(1, 20, 5, 8\), \(1, 21, 5, 8\)"):
        module(q, torch.randn(1, 21, 5, 8), q)
    with pytest.raises(ValueError, match=r"one dtype, got torch\.float32, torch\.float64"):
        module(q, q.double(), q)
    with pytest.raises(ValueError, match=r"must be 4-D .* got shape \(20, 5, 8\)"):
        module(q[0], q[0], q[0])
    hg = factory.create_dilated_attention(name, **CFG, mode="head_groups")
    small = torch.randn(1, 20, 2, 8)
    with pytest.raises(ValueError, match="num_heads=2 is fewer than the 3 branches"):
        hg(small, small, small)


# ------------------------------------------------------------------------------------------------
# dropout: only in training, on the probabilities, unbiased
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in BUILT if not n.startswith("multihead_")])
def test_dropout_only_in_training(name: str) -> None:
    cfg = {"segment_lengths": [4, 8], "dilation_rates": [1, 2]}
    if "block_sparse" in name:
        cfg.update(block_size=4, sparsity=0.5)
    module = factory.create_dilated_attention(name, **cfg, dropout=0.3)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 13, 3, 8, generator=g) for _ in range(3))
    ref = reference_attention(q, k, v, module.attention_pattern(13, True, num_heads=3))
    module.eval()
    assert relative_error(module(q, k, v, is_causal=True), ref) < 1e-5  # eval: no dropout at all
    module.train()
    torch.manual_seed(0)
    copies = 800  # 800 independent dropout draws of the same 2 sequences, in one call
    rep = [t.repeat(copies, 1, 1, 1) for t in (q, k, v)]
    samples = module(*rep, is_causal=True).view(copies, *q.shape)
    assert torch.isfinite(samples).all()
    assert relative_error(samples[0], ref) > 0.05  # dropout is really applied in training
    # inverted dropout on the normalised probabilities is unbiased, so the mean converges to the
    # reference; dropout before normalisation or without the 1/(1-p) rescale would not
    assert relative_error(samples.mean(0), ref) < 0.05  # noise ~0.02 here; a bias gives >= 0.1
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    module(qg, kg, vg, is_causal=True).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (qg, kg, vg))
