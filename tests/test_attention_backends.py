"""``attention.backends``: every kernel listed with why it cannot run, and each one that can run
here computing the same function (against the float64 reference, outputs and gradients)."""

from __future__ import annotations

import pytest
import torch

from attention import ImprovedDilatedAttention, backends, registry
from attention._kernel_selection import BACKENDS
from tests.test_attention_numerics import check_against_reference


def test_available_lists_every_kernel_with_a_reason_for_the_missing_ones() -> None:
    rows = backends.available("cpu", torch.float32, 64)
    assert [name for name, _ in rows] == [b for b in BACKENDS if b != "auto"]
    why = dict(rows)
    assert why["math"] is None and why["cpu_flash"] is None and why["flex"] is None
    for name in ("cudnn", "flash", "efficient", "flash_attn", "xformers"):
        assert why[name] == "CUDA only"
    assert dict(backends.available("cpu", torch.float32, 24))["flex"].startswith("FlexAttention needs")
    assert dict(backends.available("cpu", torch.float16, 64))["cpu_flash"] == "no torch.float16 path"
    if not torch.cuda.is_available():
        assert all(reason == "no CUDA device" for _, reason in backends.available("cuda"))


def test_a_backend_that_cannot_run_is_refused_with_the_reason() -> None:
    module = ImprovedDilatedAttention(segment_lengths=[4], dilation_rates=[1], backend="cudnn")
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match=r"cannot run cpu .*\(CUDA only\)"):
        module(q, q, q)
    with pytest.raises(ValueError, match="backend must be one of"):
        ImprovedDilatedAttention(segment_lengths=[4], dilation_rates=[1], backend="nope")


@pytest.mark.parametrize("backend", backends.names("cpu", torch.float32, 16))
@pytest.mark.parametrize("name", ["improved", "ring"])
@pytest.mark.filterwarnings("error::RuntimeWarning")  # no silent fallback to another kernel
def test_each_cpu_backend_matches_reference(name: str, backend: str) -> None:
    shape = registry.ShapeConfig(batch=2, seq_len=91, num_heads=5, head_dim=16)
    for causal in (False, True):
        check_against_reference(
            name, mode="longnet", causal=causal, shape=shape, overrides={"backend": backend}
        )
