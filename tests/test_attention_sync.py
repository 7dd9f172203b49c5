"""No host synchronisation inside the segment engine's forward or backward.

On a GPU a forward that waits for the host cannot be queued behind other work (NVBench's blocking
kernel reported "deadlock detected" for the ring at 1K-16K tokens on an H100) and cannot be
captured in a CUDA graph.  On the CPU the same property is checked op by op: a
``TorchDispatchMode`` fails on every aten op that synchronises with the host on CUDA (reading a
value, data-dependent output shapes) and on tensors built from host data inside the call.  The plan
is built on the first call for a shape (pure Python), so the checked call is the second one.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention import HilbertRingDilatedAttention, ImprovedDilatedAttention, RingDilatedAttention

_aten = torch.ops.aten
# ops that make the host wait for the device on CUDA (values read, or output shape from data)
SYNCING = {
    _aten._local_scalar_dense,  # .item(), int(t), float(t), bool(t), tolist()
    _aten.is_nonzero,
    _aten.equal,
    _aten.allclose,
    _aten.nonzero,
    _aten.argwhere,
    _aten.masked_select,
    _aten.unique_dim,
    _aten._unique,
    _aten._unique2,
    _aten.unique_consecutive,
    _aten.bincount,
    _aten.histc,
    _aten.multinomial,
    _aten.lift_fresh,  # torch.tensor(python data) inside the call: a host-to-device copy on CUDA
    _aten.lift_fresh_copy,
}


class HostSyncError(AssertionError):
    pass


class NoHostSync(TorchDispatchMode):
    """Fails on any op that would synchronise a CUDA stream with the host (module docstring)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in SYNCING:
            raise HostSyncError(f"{func} synchronises with the host")
        if packet is _aten.repeat_interleave and kwargs.get("output_size") is None:
            raise HostSyncError("repeat_interleave without output_size synchronises with the host")
        if packet in (_aten.index, _aten.index_put, _aten.index_put_):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(i is not None and i.dtype == torch.bool for i in indices):
                raise HostSyncError(f"{func} with a boolean mask synchronises with the host")
        if (
            func is _aten._to_copy.default
            and args[0].device.type == "cpu"
            and kwargs.get("device") is not None
            and torch.device(kwargs["device"]).type != "cpu"
        ):
            raise HostSyncError("a CPU tensor copied to the device inside the call")
        return func(*args, **kwargs)


@pytest.mark.parametrize(
    "bad",
    [
        lambda x: x.sum().item(),
        lambda x: x.nonzero(),
        lambda x: x[x > 0],
        lambda x: torch.tensor([1.0, 2.0]) + x[:2, 0, 0, 0],
        lambda x: x.repeat_interleave(torch.tensor([2])),
        lambda x: torch.unique(x),
        lambda x: bool(x.sum() > 0),
    ],
    ids=["item", "nonzero", "bool-mask", "from-list", "repeat_interleave", "unique", "bool"],
)
def test_the_mode_catches_host_syncs(bad) -> None:
    x = torch.randn(4, 3, 2, 2)
    with pytest.raises(HostSyncError), NoHostSync():
        bad(x)


MODULES = {
    "improved": lambda: ImprovedDilatedAttention(segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4]),
    "ring-chunked": lambda: RingDilatedAttention(
        segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4], ring_size=4, single_shot_bytes=0
    ),
    "ring-one-piece": lambda: RingDilatedAttention(
        segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4], ring_size=8
    ),
    "hilbert_ring": lambda: HilbertRingDilatedAttention(
        segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4], ring_size=4, single_shot_bytes=0
    ),
}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_forward_and_backward_never_sync(name: str, batch: int, causal: bool) -> None:
    module = MODULES[name]()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, 91, 6, 8, generator=gen, requires_grad=True) for _ in range(3))
    module(q, k, v, is_causal=causal).sum().backward()  # first call: plan built and cached
    with NoHostSync():
        out = module(q, k, v, is_causal=causal)
        out.backward(torch.ones_like(out))
        with torch.no_grad():
            module(q, k, v, is_causal=causal)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(MODULES))
def test_cuda_side_stream_forward_and_backward_never_sync(name: str) -> None:
    """On a side stream behind queued work, with CUDA's sync debug mode set to raise."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    module = MODULES[name]().cuda()
    q, k, v = (
        torch.randn(1, 1024, 8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
    )
    module(q, k, v, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(10_000_000)  # keep the stream busy: a sync would wait for it
            out = module(q, k, v, is_causal=True)
            out.backward(torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
