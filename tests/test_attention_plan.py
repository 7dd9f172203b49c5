"""The segment engine's plan, its folding onto kernel calls, and the log-sum-exp merge.

The plan turns the dilated pattern into strided views of q, k and v (no gathers); these tests pin
that every (query, key) pair of the pattern is attended exactly as often as the pattern counts it,
that folding a piece onto ``(B, H, L, d)`` kernel calls covers its rows exactly once for any batch
stride, that every part of a real plan has the nested strides the Triton merge needs, and that the
merge equals one softmax over all parts, with rows no part covers left 0 (never NaN).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attention import RingDilatedAttention
from attention._engine import concurrent_streams
from attention._lse import merge_stacked
from attention._merge import merge_online, merge_torch, nested, sum_torch, triton_merge_enabled
from attention._part import Part
from attention._plan import build_pieces, chunk_bounds, fold, split_lengths
from attention._row_sums import RowSums
from attention.pattern import dilated_pattern
from tests.test_attention_numerics import check_against_reference

SEGS, RATES = (16, 32, 64), (1, 2, 4)


def _counts_from_pieces(seq_len: int, heads: int, ring_size: int, causal: bool, mode: str) -> torch.Tensor:
    """(H, n, n) count of how often each (head, query, key) is attended by the plan's pieces."""
    bounds = chunk_bounds(split_lengths(seq_len, ring_size))
    counts = torch.zeros(heads, seq_len, seq_len, dtype=torch.int32)
    for a in range(ring_size):
        for c in range(ring_size):
            for p in build_pieces(
                seq_len=seq_len,
                num_heads=heads,
                segment_lengths=SEGS,
                dilation_rates=RATES,
                mode=mode,
                bounds=bounds,
                q_chunk=a,
                k_chunk=c,
                is_causal=causal,
            ):
                for q_rows, k_rows in zip(p.rows("q"), p.rows("k"), strict=True):
                    for i, qr in enumerate(q_rows):
                        for j, kr in enumerate(k_rows):
                            if p.causal and j > i:
                                continue
                            qpos, qh = divmod(qr + bounds[a][0] * heads, heads)
                            kpos, kh = divmod(kr + bounds[c][0] * heads, heads)
                            assert qh == kh, "a piece attends within one head"
                            counts[qh, qpos, kpos] += 1
    return counts


@pytest.mark.parametrize("mode", ["longnet", "head_groups"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("ring_size", [1, 3, 8])
def test_pieces_attend_exactly_the_pattern(ring_size: int, causal: bool, mode: str) -> None:
    """Chunks of ~13 tokens against segments up to 64 (ring_size 8), and one chunk (improved)."""
    seq_len, heads = 101, 7
    got = _counts_from_pieces(seq_len, heads, ring_size, causal, mode)
    want = dilated_pattern(seq_len, heads, SEGS, RATES, mode, causal)
    assert torch.equal(got, want)


def _all_parts(seq_len: int, heads: int, ring_size: int, batch: int, mode: str = "longnet"):
    bounds = chunk_bounds(split_lengths(seq_len, ring_size))
    for a in range(ring_size):
        for c in range(ring_size):
            for p in build_pieces(
                seq_len=seq_len,
                num_heads=heads,
                segment_lengths=SEGS,
                dilation_rates=RATES,
                mode=mode,
                bounds=bounds,
                q_chunk=a,
                k_chunk=c,
                is_causal=False,
            ):
                qb = (bounds[a][1] - bounds[a][0]) * heads
                kb = (bounds[c][1] - bounds[c][0]) * heads
                yield p, qb, kb, fold(p, batch, qb, kb)


@pytest.mark.parametrize("mode", ["longnet", "head_groups"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(
    ("seq_len", "heads", "ring_size"), [(256, 12, 1), (256, 12, 4), (203, 7, 3), (203, 7, 8)]
)
def test_fold_covers_each_row_once_and_parts_are_nested(
    seq_len: int, heads: int, ring_size: int, batch: int, mode: str
) -> None:
    """Interior pieces, and chunks shorter than the segments (rectangles, cut segments)."""
    for piece, qb, _, calls in _all_parts(seq_len, heads, ring_size, batch, mode):
        want = sorted(bi * qb + r for bi in range(batch) for rows in piece.rows("q") for r in rows)
        got = []
        for call in calls:
            for i in range(call.sizes[0]):
                for j in range(call.sizes[1]):
                    start = call.q_offset + i * call.q_strides[0] + j * call.q_strides[1]
                    got += [start + t * piece.t_stride for t in range(piece.lq)]
            part = Part(
                torch.empty(0),
                None,
                call.q_offset,
                (*call.sizes, piece.lq),
                (*call.q_strides, piece.t_stride),
            )
            assert nested(part), (piece, call)
        assert sorted(got) == want


def test_one_chunk_plan_is_a_few_calls() -> None:
    """The benchmark shape (12 heads, segments n/4, n/2, n, rates 1, 2, 4): one call per branch and
    offset group at most, no matter the number of segments; 4 calls at 4K tokens."""
    calls = [c for *_, cs in _all_parts(seq_len=4096, heads=12, ring_size=1, batch=1) for c in cs]
    assert len(calls) <= 1 + 2 + 4
    n, segs = 4096, (1024, 2048, 4096)
    pieces = build_pieces(
        seq_len=n,
        num_heads=12,
        segment_lengths=segs,
        dilation_rates=RATES,
        mode="longnet",
        bounds=((0, n),),
        q_chunk=0,
        k_chunk=0,
        is_causal=False,
    )
    assert sum(len(fold(p, 1, n * 12, n * 12)) for p in pieces) == 4


def test_merge_torch_is_one_softmax_and_empty_rows_are_zero() -> None:
    """Two overlapping parts and one row covered by none, against merge_stacked."""
    gen = torch.Generator().manual_seed(0)
    b, n, h, d = 1, 6, 1, 4  # rows 0..5; part A covers rows 0..3, part B rows 2..4; row 5 none
    a_vals, b_vals = torch.randn(1, 1, 4, d, generator=gen), torch.randn(1, 1, 3, d, generator=gen)
    a_lse, b_lse = 3 * torch.randn(1, 1, 4, generator=gen), 3 * torch.randn(1, 1, 3, generator=gen)
    parts = [Part(a_vals, a_lse, 0, (1, 1, 4), (0, 0, 1)), Part(b_vals, b_lse, 2, (1, 1, 3), (0, 0, 1))]
    out, lse = torch.empty(b, n, h, d), torch.empty(b, n, h)
    merge_torch(parts, out, lse)
    outs = torch.zeros(2, n, d)
    lses = torch.full((2, n), -math.inf)
    outs[0, 0:4], lses[0, 0:4] = a_vals[0, 0], a_lse[0, 0]
    outs[1, 2:5], lses[1, 2:5] = b_vals[0, 0], b_lse[0, 0]
    want, want_lse = merge_stacked(outs, lses)
    torch.testing.assert_close(out.view(n, d), want)
    torch.testing.assert_close(lse.view(n), want_lse)
    assert out[0, 5].abs().sum() == 0 and lse[0, 5, 0] == -math.inf
    grads = torch.empty(b, n, h, d)
    sum_torch(
        [Part(a_vals, None, 0, (1, 1, 4), (0, 0, 1)), Part(b_vals, None, 2, (1, 1, 3), (0, 0, 1))], grads
    )
    torch.testing.assert_close(grads.view(n, d), outs.sum(0))


def test_merge_online_equals_the_one_pass_merge_in_any_order() -> None:
    """The distributed ring's running merge: parts merged one call at a time, in either order,
    give the one-pass merge (float32: to rounding; bfloat16: within a few bf16 ulps of it)."""
    gen = torch.Generator().manual_seed(1)
    b, n, h, d = 1, 6, 1, 4
    vals = [torch.randn(1, 1, 4, d, generator=gen), torch.randn(1, 1, 3, d, generator=gen)]
    lses = [3 * torch.randn(1, 1, 4, generator=gen), 3 * torch.randn(1, 1, 3, generator=gen)]
    geometry = [(0, (1, 1, 4), (0, 0, 1)), (2, (1, 1, 3), (0, 0, 1))]
    parts = [Part(v, lse, *g) for v, lse, g in zip(vals, lses, geometry, strict=True)]
    want, want_lse = torch.empty(b, n, h, d), torch.empty(b, n, h)
    merge_torch(parts, want, want_lse)
    for order in (parts, parts[::-1]):
        out, lse = torch.zeros(b, n, h, d), torch.full((b, n, h), -math.inf)
        for part in order:
            merge_online([part], out, lse)
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(lse, want_lse, rtol=1e-6, atol=1e-6)
        assert out[0, 5].abs().sum() == 0 and lse[0, 5, 0] == -math.inf  # untouched row
    half = [Part(p.values.bfloat16(), p.lse, p.offset, p.sizes, p.strides) for p in parts]
    out16, lse16 = torch.zeros(b, n, h, d, dtype=torch.bfloat16), torch.full((b, n, h), -math.inf)
    for part in half:
        merge_online([part], out16, lse16)
    # per part one rounding of the output and one of its weight to bf16: 4 x 2^-8 of the largest value
    assert (out16.float() - want).abs().max() <= 4 * 2**-8 * want.abs().max()


def test_row_sums_equal_zeroing_then_adding_every_part_bit_for_bit() -> None:
    """The sequence-parallel backward's float32 sums (one call's parts at a time, in any order:
    dense first, sparse first, overlapping, over sub-ranges of positions): bit for bit the zeroed
    tensor plus every part, rows no part reaches zero, and dense parts on fresh rows copied."""
    gen = torch.Generator().manual_seed(4)
    h, d, n = 3, 8, 40

    def part(lo: int, hi: int, step: int, start: int = 0) -> tuple[Part, int, int]:
        length = len(range(start, hi - lo, step))
        values = torch.randn(1, h, length, d, generator=gen).bfloat16()
        return Part(values, None, start * h, (1, h, length), (0, 1, step * h)), lo, hi

    cases = {
        "dense first": [part(0, 20, 1), part(0, 40, 2), part(20, 40, 1), part(0, 40, 4, 1)],
        "sparse first": [part(0, 40, 4), part(0, 20, 1), part(8, 16, 1), part(10, 30, 1)],
        "gaps stay zero": [part(0, 12, 1), part(16, 40, 3), part(30, 34, 1)],
    }
    for name, calls in cases.items():
        sums = RowSums((1, n, h, d), torch.float32, torch.device("cpu"))
        sums.values.fill_(math.nan)  # what torch.empty may hold: every row must be written or zeroed
        want = torch.zeros(1, n, h, d)
        for p, lo, hi in calls:
            sums.add([p], lo, hi)
            sum_torch([p], want[:, lo:hi], accumulate=True)
        assert torch.equal(sums.result(), want), name
    # batch 2: the rows of [lo, hi) are not contiguous; the plain sum, same numbers
    sums, want = RowSums((2, n, h, d), torch.float32, torch.device("cpu")), torch.zeros(2, n, h, d)
    values = torch.randn(2, h, 10, d, generator=gen)
    two = Part(values, None, 0, (2, h, 10), (20 * h, 1, 2 * h))  # every other position of [10, 30)
    sums.add([two], 10, 30)
    sum_torch([two], view := want[:, 10:30].contiguous(), accumulate=True)
    want[:, 10:30] = view
    assert torch.equal(sums.result(), want)


def test_ring_with_chunks_shorter_than_segments_matches_reference() -> None:
    """longnet mode (every head in every branch), 8 chunks of ~12 tokens against segments up to 32."""
    for causal in (False, True):
        check_against_reference(
            "ring", mode="longnet", causal=causal, overrides={"ring_size": 8, "single_shot_bytes": 0}
        )


def test_ring_runs_short_problems_in_one_piece() -> None:
    """Chunking bounds memory; below ``single_shot_bytes`` the ring is one chunk (few, large calls)."""
    ring = RingDilatedAttention(segment_lengths=[2048, 4096, 8192], dilation_rates=[1, 2, 4], ring_size=8)
    short = torch.empty(1, 16384, 12, 64, dtype=torch.bfloat16, device="meta")
    long = torch.empty(1, 131072, 12, 64, dtype=torch.bfloat16, device="meta")
    assert ring._chunk_lengths(short) == (16384,)
    assert ring._chunk_lengths(long) == (16384,) * 8
    forced = RingDilatedAttention(
        segment_lengths=[2048, 4096, 8192], dilation_rates=[1, 2, 4], ring_size=8, single_shot_bytes=0
    )
    assert len(forced._chunk_lengths(short)) == 8
    with pytest.raises(ValueError, match="single_shot_bytes"):
        RingDilatedAttention(segment_lengths=[4], dilation_rates=[1], single_shot_bytes=-1)


def test_the_merge_is_fused_only_on_cuda_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ATTENTION_MERGE``: ``auto`` (unset) fuses on CUDA only, ``torch`` never; a typo is an error
    that names the choices, not a silent fallback; float64 (exactness runs) is never fused."""
    cpu = torch.empty(1, 4, 2, 8)
    monkeypatch.delenv("ATTENTION_MERGE", raising=False)
    assert not triton_merge_enabled(cpu)
    monkeypatch.setenv("ATTENTION_MERGE", "torch")
    assert not triton_merge_enabled(cpu)
    monkeypatch.setenv("ATTENTION_MERGE", "triton")
    assert not triton_merge_enabled(cpu.double())
    monkeypatch.setenv("ATTENTION_MERGE", "fused")
    with pytest.raises(ValueError, match="auto, torch or triton"):
        triton_merge_enabled(cpu)


def test_kernel_calls_spread_over_streams_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ATTENTION_STREAMS`` (default 4) applies on CUDA; the CPU runs calls in order; a bad value
    is an error that says what is expected."""
    monkeypatch.delenv("ATTENTION_STREAMS", raising=False)
    assert concurrent_streams(torch.device("cpu")) == 1
    assert concurrent_streams(torch.device("cuda", 0)) == 4
    monkeypatch.setenv("ATTENTION_STREAMS", "2")
    assert concurrent_streams(torch.device("cuda", 0)) == 2
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("ATTENTION_STREAMS", bad)
        with pytest.raises(ValueError, match="positive integer"):
            concurrent_streams(torch.device("cpu"))


_TRITON_CHECK = r"""
import torch
from attention import ImprovedDilatedAttention, RingDilatedAttention
from attention._merge import merge_torch, sum_torch
import attention._merge_triton as mt
assert mt.AVAILABLE
import attention._merge as merge_mod
from attention._part import Part

TRITON = merge_mod.triton_merge_enabled


def run(module, q, k, v):
    out = module(q, k, v, is_causal=True)
    return (out, *torch.autograd.grad((out * out).sum(), (q, k, v)))

for module in (
    ImprovedDilatedAttention(segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4]),
    RingDilatedAttention(
        segment_lengths=[16, 32, 64], dilation_rates=[1, 2, 4], ring_size=3, single_shot_bytes=0
    ),
):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 91, 5, 8, generator=gen, requires_grad=True) for _ in range(3))
    assert TRITON(q, [])  # ATTENTION_MERGE=triton: the kernels run in the interpreter
    with_triton = run(module, q, k, v)
    merge_mod.triton_merge_enabled = lambda t, parts=(): False
    plain = run(module, q, k, v)
    merge_mod.triton_merge_enabled = TRITON
    for a, b in zip(with_triton, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
# more parts than one launch has slots: chained through the float32 accumulator
parts = []
gen = torch.Generator().manual_seed(2)
for i in range(19):
    vals = torch.randn(1, 1, 10, 8, generator=gen)
    parts.append(Part(vals, 4 * torch.randn(1, 1, 10, generator=gen), i, (1, 1, 10), (0, 0, 3)))
out_t, lse_t = torch.empty(1, 60, 1, 8), torch.empty(1, 60, 1)
out_p, lse_p = torch.empty(1, 60, 1, 8), torch.empty(1, 60, 1)
mt.merge(parts, out_t, lse_t)
merge_torch(parts, out_p, lse_p)
torch.testing.assert_close(out_t, out_p, rtol=1e-5, atol=1e-6)
torch.testing.assert_close(lse_t, lse_p, rtol=1e-5, atol=1e-6)
g_t, g_p = torch.empty(1, 60, 1, 8, dtype=torch.bfloat16), torch.empty(1, 60, 1, 8, dtype=torch.bfloat16)
grad_parts = [Part(p.values, None, p.offset, p.sizes, p.strides) for p in parts]
mt.sum_rows(grad_parts, g_t, accumulate=False)
sum_torch(grad_parts, g_p)
torch.testing.assert_close(g_t, g_p)
# on top of what the destination holds (the ring's dq, dk, dv), float32 and bfloat16
for dtype in (torch.float32, torch.bfloat16):
    held = torch.randn(1, 60, 1, 8, generator=gen).to(dtype)
    g_t, g_p = held.clone(), held.clone()
    mt.sum_rows(grad_parts, g_t, accumulate=True)
    sum_torch(grad_parts, g_p, accumulate=True)
    torch.testing.assert_close(g_t, g_p)
# an LSE laid out unlike its values' rows (FlashAttention-2 returns (B, H, L) under (B, L, H, d)
# values) and values with gaps between their rows
gen = torch.Generator().manual_seed(3)
store = torch.randn(2, 7, 3, 16, generator=gen)  # (B, L, H+1, d): one head of every row unused
vals = store[:, :, :2].transpose(1, 2)  # (B=2, H'=2, L=7, d=16), rows 1 and 4 apart, gaps between
lse = 3 * torch.randn(2, 2, 7, generator=gen)  # contiguous (B, H', L)
part = Part(vals, lse, 1, (2, 2, 7), (30, 1, 4))
other_vals, other_lse = torch.randn(1, 1, 15, 16, generator=gen), torch.randn(1, 1, 15, generator=gen)
other = Part(other_vals, other_lse, 0, (1, 1, 15), (0, 0, 4))
assert mt.supported([part, other], 16) and merge_mod.nested(part)
out_t, lse_t = torch.empty(1, 60, 1, 16), torch.empty(1, 60, 1)
out_p, lse_p = torch.empty(1, 60, 1, 16), torch.empty(1, 60, 1)
mt.merge([part, other], out_t, lse_t)
merge_torch([part, other], out_p, lse_p)
torch.testing.assert_close(out_t, out_p, rtol=1e-5, atol=1e-6)
torch.testing.assert_close(lse_t, lse_p, rtol=1e-5, atol=1e-6)
assert not mt.supported([Part(store[..., :12], None, 0, (1, 1, 1), (0, 0, 1))], 12)
# the running merge of one part on its own rows (the distributed forward), overlapping dilated
# parts in either order, against the torch running merge
every_4th = torch.randn(1, 3, 10, 16, generator=gen)  # positions 0, 4, 8, ... of 3 heads
every_2nd = torch.randn(1, 20, 4, 16, generator=gen)[:, :, :3].transpose(1, 2)  # 0, 2, 4, ...; gaps
dil = [
    Part(every_4th, 2 * torch.randn(1, 3, 10, generator=gen), 0, (1, 3, 10), (0, 1, 12)),
    Part(every_2nd, torch.randn(1, 3, 20, generator=gen), 0, (1, 3, 20), (0, 1, 6)),
]
for order in (dil, dil[::-1]):
    out_t, lse_t = torch.zeros(1, 40, 3, 16), torch.full((1, 40, 3), float("-inf"))
    out_p, lse_p = out_t.clone(), lse_t.clone()
    for one in order:
        mt.merge_into(one, out_t, lse_t)
        merge_mod._merge_one_torch(one, out_p, lse_p)
    torch.testing.assert_close(out_t, out_p, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse_t, lse_p, rtol=1e-6, atol=1e-6)
    assert out_t[0, 1].abs().sum() == 0 and lse_t[0, 1, 0] == float("-inf")  # a row neither covers
print("triton merge ok")
"""


def test_triton_merge_matches_the_torch_merge_in_the_interpreter() -> None:
    """The Triton kernels (run by Triton's CPU interpreter) against the plain-torch path."""
    pytest.importorskip("triton", reason="Triton is not installed: the CUDA merge kernel is not tested here")
    env = {**os.environ, "TRITON_INTERPRET": "1", "ATTENTION_MERGE": "triton"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", _TRITON_CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "triton merge ok" in done.stdout
