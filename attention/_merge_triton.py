"""The fused log-sum-exp merge and gradient sum as Triton kernels (see :mod:`attention._merge`).

One program handles ``BLOCK_R`` destination rows ``rid`` (one row = the ``head_dim`` values of one
(position, head)).  For each part it inverts the part's strided geometry — the row strides of a
piece's three axes are nested (each larger than the span of the smaller ones, checked on the
host by :func:`nested`), so ``row − offset`` decomposes by successive division — loads the part's
row where there is one, and merges online (running max, rescaled sum) in float32 registers.
Every part is read once and the destination written once; rows no part covers get 0 and −inf.

Parts come in :data:`attention._merge.SLOTS` argument slots per launch (Triton kernels have a
fixed signature); longer lists are chained through a float32 accumulator.  Integer arguments
other than ``head_dim`` are not specialised on their values, so one compiled kernel serves every
shape of a dtype and head_dim.

``AVAILABLE`` is False when Triton cannot be imported; the caller then uses the plain-torch path.
"""

from __future__ import annotations

import torch

from attention._merge import SLOTS, Part

try:
    import triton
    import triton.language as tl

    AVAILABLE = True
except ImportError:  # no Triton (CPU-only installs): attention._merge uses the torch path
    AVAILABLE = False

_WIDE_ROWS = 1 << 30  # from this many destination rows on, the row arithmetic is 64-bit
_VEC = 8  # elements a thread may load as one vector when every row starts at a multiple of it
_SLOT_ARGS = ("v", "l", "off", "s1", "n1", "vs1", "ls1", "s2", "n2", "vs2", "ls2", "s3", "n3", "vs3", "ls3")
# not specialised on their values: one compiled kernel serves every shape.  ``D`` (head_dim) is:
# knowing it is a multiple of 16 lets the column mask hold per vector, so rows load as 16-byte
# vectors (docs/perf/merge_compile_time.py shows the loads each variant compiles to).
_INT_ARGS = ["rows"] + [f"{a}{i}" for i in range(SLOTS) for a in _SLOT_ARGS if a not in ("v", "l")]


def _slot(part: Part | None, dummy: torch.Tensor, big: int) -> list:
    """The 15 slot arguments of one part: pointers, offset, and per axis (row stride, size,
    value stride, lse stride), axes sorted by row stride, size-1 axes at the end with stride
    ``big`` (larger than any row: every row divides to index 0 there)."""
    if part is None:
        return [dummy, dummy, 0] + [big, 1, 0, 0] * 3
    vs = part.values.stride()[:3]
    ls = part.lse.stride()[:3] if part.lse is not None else (0, 0, 0)
    axes = sorted(
        zip(part.strides, part.sizes, vs, ls, strict=True), key=lambda a: (a[1] > 1, a[0]), reverse=True
    )
    args: list = [part.values, part.lse if part.lse is not None else dummy, part.offset]
    for stride, size, v, lse in axes:
        args += [stride if size > 1 else big, size, v, lse]
    return args


def _geometry(parts: list[Part], rows: int, d: int) -> dict:
    """The kernels' compile-time switches for these parts: 64-bit row arithmetic only for huge
    destinations (32-bit division is several times cheaper), and vector loads and stores when
    every row of every part and of the destination starts at a multiple of :data:`_VEC` elements
    (without that hint Triton loads one element at a time and gives each thread 16 rows to
    locate instead of 2: 9.4 ms instead of ~0.06 ms for a 32K-token merge on an H100)."""
    aligned = d % _VEC == 0 and all(s % _VEC == 0 for p in parts for s in p.values.stride()[:3])
    return {"WIDE": rows >= _WIDE_ROWS, "VEC": _VEC if aligned else 1}


if AVAILABLE:

    @triton.jit
    def _locate(rid, ok, off, s1, n1, s2, n2, s3, n3):
        x = rid - off
        ok = ok & (x >= 0)
        x = tl.where(ok, x, 0)
        i1 = x // s1
        x = x - i1 * s1
        i2 = x // s2
        x = x - i2 * s2
        i3 = x // s3
        x = x - i3 * s3
        ok = ok & (i1 < n1) & (i2 < n2) & (i3 < n3) & (x == 0)
        return ok, tl.where(ok, i1, 0), tl.where(ok, i2, 0), tl.where(ok, i3, 0)

    @triton.jit
    def _source(i1, i2, i3, vs1, vs2, vs3, VEC: tl.constexpr):
        """First element of each located row in a part's values (64-bit: values can be large)."""
        src = i1.to(tl.int64) * vs1 + i2.to(tl.int64) * vs2 + i3.to(tl.int64) * vs3
        return tl.multiple_of(src, VEC)

    @triton.jit
    def _load_part(
        rid,
        ok_r,
        cols,
        ok_d,
        v,
        lp,
        off,
        s1,
        n1,
        vs1,
        ls1,
        s2,
        n2,
        vs2,
        ls2,
        s3,
        n3,
        vs3,
        ls3,
        VEC: tl.constexpr,
    ):
        ok, i1, i2, i3 = _locate(rid, ok_r, off, s1, n1, s2, n2, s3, n3)
        src = _source(i1, i2, i3, vs1, vs2, vs3, VEC)
        vals = tl.load(v + src[:, None] + cols[None, :], mask=ok[:, None] & ok_d[None, :], other=0.0)
        lse = tl.load(lp + (i1 * ls1 + i2 * ls2 + i3 * ls3), mask=ok, other=float("-inf"))
        return vals.to(tl.float32), lse.to(tl.float32)

    @triton.jit
    def _rows(BLOCK_R: tl.constexpr, WIDE: tl.constexpr):
        """This program's destination rows: 32-bit unless the problem needs 64."""
        if WIDE:
            return tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        return tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)

    @triton.jit
    def _online(m, s, acc, vals, lse):
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        beta = tl.exp(lse - m_safe)
        return m_new, s * alpha + beta, acc * alpha[:, None] + vals * beta[:, None]

    # fmt: off
    @triton.jit(do_not_specialize=_INT_ARGS)
    def _merge_kernel(
        out, lse_out, prior_o, prior_l, rows, D,
        v0, l0, off0, s10, n10, vs10, ls10, s20, n20, vs20, ls20, s30, n30, vs30, ls30,
        v1, l1, off1, s11, n11, vs11, ls11, s21, n21, vs21, ls21, s31, n31, vs31, ls31,
        v2, l2, off2, s12, n12, vs12, ls12, s22, n22, vs22, ls22, s32, n32, vs32, ls32,
        v3, l3, off3, s13, n13, vs13, ls13, s23, n23, vs23, ls23, s33, n33, vs33, ls33,
        v4, l4, off4, s14, n14, vs14, ls14, s24, n24, vs24, ls24, s34, n34, vs34, ls34,
        v5, l5, off5, s15, n15, vs15, ls15, s25, n25, vs25, ls25, s35, n35, vs35, ls35,
        v6, l6, off6, s16, n16, vs16, ls16, s26, n26, vs26, ls26, s36, n36, vs36, ls36,
        v7, l7, off7, s17, n17, vs17, ls17, s27, n27, vs27, ls27, s37, n37, vs37, ls37,
        NUM: tl.constexpr, HAS_PRIOR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
        WIDE: tl.constexpr, VEC: tl.constexpr,
    ):
        rid = _rows(BLOCK_R, WIDE)
        ok_r = rid < rows
        cols = tl.arange(0, BLOCK_D)
        ok_d = cols < D
        m = tl.full([BLOCK_R], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        dst = tl.multiple_of(rid.to(tl.int64) * D, VEC)[:, None] + cols[None, :]
        ok2 = ok_r[:, None] & ok_d[None, :]
        if HAS_PRIOR:
            pv = tl.load(prior_o + dst, mask=ok2, other=0.0).to(tl.float32)
            pl = tl.load(prior_l + rid, mask=ok_r, other=float("-inf")).to(tl.float32)
            m, s, acc = _online(m, s, acc, pv, pl)
        if NUM > 0:
            x, y = _load_part(rid, ok_r, cols, ok_d, v0, l0, off0, s10, n10, vs10, ls10, s20, n20, vs20, ls20, s30, n30, vs30, ls30, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 1:
            x, y = _load_part(rid, ok_r, cols, ok_d, v1, l1, off1, s11, n11, vs11, ls11, s21, n21, vs21, ls21, s31, n31, vs31, ls31, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 2:
            x, y = _load_part(rid, ok_r, cols, ok_d, v2, l2, off2, s12, n12, vs12, ls12, s22, n22, vs22, ls22, s32, n32, vs32, ls32, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 3:
            x, y = _load_part(rid, ok_r, cols, ok_d, v3, l3, off3, s13, n13, vs13, ls13, s23, n23, vs23, ls23, s33, n33, vs33, ls33, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 4:
            x, y = _load_part(rid, ok_r, cols, ok_d, v4, l4, off4, s14, n14, vs14, ls14, s24, n24, vs24, ls24, s34, n34, vs34, ls34, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 5:
            x, y = _load_part(rid, ok_r, cols, ok_d, v5, l5, off5, s15, n15, vs15, ls15, s25, n25, vs25, ls25, s35, n35, vs35, ls35, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 6:
            x, y = _load_part(rid, ok_r, cols, ok_d, v6, l6, off6, s16, n16, vs16, ls16, s26, n26, vs26, ls26, s36, n36, vs36, ls36, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        if NUM > 7:
            x, y = _load_part(rid, ok_r, cols, ok_d, v7, l7, off7, s17, n17, vs17, ls17, s27, n27, vs27, ls27, s37, n37, vs37, ls37, VEC)  # noqa: E501
            m, s, acc = _online(m, s, acc, x, y)
        has = s > 0
        res = acc / tl.where(has, s, 1.0)[:, None]
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        tl.store(out + dst, res.to(out.dtype.element_ty), mask=ok2)
        lse = tl.where(has, m_safe + tl.log(tl.where(has, s, 1.0)), float("-inf"))
        tl.store(lse_out + rid, lse, mask=ok_r)

    @triton.jit
    def _add_part(
        rid, ok_r, cols, ok_d, acc, v, off, s1, n1, vs1, s2, n2, vs2, s3, n3, vs3, VEC: tl.constexpr
    ):
        ok, i1, i2, i3 = _locate(rid, ok_r, off, s1, n1, s2, n2, s3, n3)
        src = _source(i1, i2, i3, vs1, vs2, vs3, VEC)
        vals = tl.load(v + src[:, None] + cols[None, :], mask=ok[:, None] & ok_d[None, :], other=0.0)
        return acc + vals.to(tl.float32)

    @triton.jit(do_not_specialize=_INT_ARGS)
    def _sum_kernel(
        dest, rows, D,
        v0, l0, off0, s10, n10, vs10, ls10, s20, n20, vs20, ls20, s30, n30, vs30, ls30,
        v1, l1, off1, s11, n11, vs11, ls11, s21, n21, vs21, ls21, s31, n31, vs31, ls31,
        v2, l2, off2, s12, n12, vs12, ls12, s22, n22, vs22, ls22, s32, n32, vs32, ls32,
        v3, l3, off3, s13, n13, vs13, ls13, s23, n23, vs23, ls23, s33, n33, vs33, ls33,
        v4, l4, off4, s14, n14, vs14, ls14, s24, n24, vs24, ls24, s34, n34, vs34, ls34,
        v5, l5, off5, s15, n15, vs15, ls15, s25, n25, vs25, ls25, s35, n35, vs35, ls35,
        v6, l6, off6, s16, n16, vs16, ls16, s26, n26, vs26, ls26, s36, n36, vs36, ls36,
        v7, l7, off7, s17, n17, vs17, ls17, s27, n27, vs27, ls27, s37, n37, vs37, ls37,
        NUM: tl.constexpr, ACCUMULATE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
        WIDE: tl.constexpr, VEC: tl.constexpr,
    ):
        rid = _rows(BLOCK_R, WIDE)
        ok_r = rid < rows
        cols = tl.arange(0, BLOCK_D)
        ok_d = cols < D
        dst = tl.multiple_of(rid.to(tl.int64) * D, VEC)[:, None] + cols[None, :]
        ok2 = ok_r[:, None] & ok_d[None, :]
        if ACCUMULATE:
            acc = tl.load(dest + dst, mask=ok2, other=0.0).to(tl.float32)
        else:
            acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        if NUM > 0:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v0, off0, s10, n10, vs10, s20, n20, vs20, s30, n30, vs30, VEC)  # noqa: E501
        if NUM > 1:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v1, off1, s11, n11, vs11, s21, n21, vs21, s31, n31, vs31, VEC)  # noqa: E501
        if NUM > 2:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v2, off2, s12, n12, vs12, s22, n22, vs22, s32, n32, vs32, VEC)  # noqa: E501
        if NUM > 3:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v3, off3, s13, n13, vs13, s23, n23, vs23, s33, n33, vs33, VEC)  # noqa: E501
        if NUM > 4:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v4, off4, s14, n14, vs14, s24, n24, vs24, s34, n34, vs34, VEC)  # noqa: E501
        if NUM > 5:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v5, off5, s15, n15, vs15, s25, n25, vs25, s35, n35, vs35, VEC)  # noqa: E501
        if NUM > 6:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v6, off6, s16, n16, vs16, s26, n26, vs26, s36, n36, vs36, VEC)  # noqa: E501
        if NUM > 7:
            acc = _add_part(rid, ok_r, cols, ok_d, acc, v7, off7, s17, n17, vs17, s27, n27, vs27, s37, n37, vs37, VEC)  # noqa: E501
        tl.store(dest + dst, acc.to(dest.dtype.element_ty), mask=ok2)
    # fmt: on


def _block_d(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def _block_r(block_d: int) -> int:
    """Rows per program: 2K values (32 rows at head_dim 64).  The kernel's code grows with the
    values a thread holds times the parts it inverts (integer divisions, unrolled); with 8K values a
    program ptxas took 16 s for 4 parts and 54 s for 8 (sm_90, busy 2-core VM), with 2K 2.2 s and
    10.5 s (docs/perf/attention.md, "The Triton merge's compile time")."""
    return max(16, 2048 // block_d)


def _launch_args(parts: list[Part | None], dummy: torch.Tensor, wide: bool) -> list:
    big = (1 << 62) if wide else (1 << 31) - 1
    args: list = []
    for p in (*parts, *([None] * (SLOTS - len(parts)))):
        args += _slot(p, dummy, big)
    return args


def merge(parts: list[Part], out: torch.Tensor, lse: torch.Tensor) -> None:
    """Triton merge of ``parts`` into contiguous ``out (b, L, H, d)`` and float32 ``lse (b, L, H)``."""
    d = out.shape[-1]
    rows = lse.numel()
    bd = _block_d(d)
    br = _block_r(bd)
    grid = (triton.cdiv(rows, br),)
    batches = [parts[i : i + SLOTS] for i in range(0, len(parts), SLOTS)] or [[]]
    switches = _geometry(parts, rows, d)
    prior_o = prior_l = None
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        dest_o = (
            out if last else (prior_o if prior_o is not None else torch.empty_like(out, dtype=torch.float32))
        )
        dest_l = (
            lse if last else (prior_l if prior_l is not None else torch.empty_like(lse, dtype=torch.float32))
        )
        _merge_kernel[grid](
            dest_o,
            dest_l,
            prior_o if prior_o is not None else dest_o,
            prior_l if prior_l is not None else dest_l,
            rows,
            d,
            *_launch_args(batch, dest_o, switches["WIDE"]),
            NUM=len(batch),
            HAS_PRIOR=prior_o is not None,
            BLOCK_R=br,
            BLOCK_D=bd,
            **switches,
        )
        prior_o, prior_l = dest_o, dest_l


def sum_rows(parts: list[Part], dest: torch.Tensor, *, accumulate: bool) -> None:
    """Triton ``dest = (dest if accumulate else 0) + Σ parts`` (float32 sums, one write per row)."""
    d = dest.shape[-1]
    rows = dest.numel() // d
    bd = _block_d(d)
    br = _block_r(bd)
    grid = (triton.cdiv(rows, br),)
    batches = [parts[i : i + SLOTS] for i in range(0, len(parts), SLOTS)] or [[]]
    switches = _geometry(parts, rows, d)
    target = dest
    if len(batches) > 1 and dest.dtype != torch.float32:
        target = dest.float() if accumulate else torch.empty_like(dest, dtype=torch.float32)
    for i, batch in enumerate(batches):
        _sum_kernel[grid](
            target,
            rows,
            d,
            *_launch_args(batch, target, switches["WIDE"]),
            NUM=len(batch),
            ACCUMULATE=accumulate or i > 0,
            BLOCK_R=br,
            BLOCK_D=bd,
            **switches,
        )
    if target is not dest:
        dest.copy_(target)
