"""The fused log-sum-exp merge and gradient sum as Triton kernels (see :mod:`attention._merge`).

Two kernels per launch group of at most :data:`SLOTS` parts:

1. ``_locate_kernel`` (one thread per destination row; a row is the ``head_dim`` values of one
   (position, head)): for each part it inverts the part's strided geometry — the row strides of
   a piece's three axes are nested (each larger than the span of the smaller ones, checked on the
   host by :func:`attention._merge.nested`), so ``row − offset`` decomposes by successive
   division — and writes the part's *value row* covering it (−1 where none) into an int32 map.
   For the merge it also reads each covering part's LSE (with the LSE's own strides), writes the
   merged LSE ``L = log Σ_p exp(lse_p)`` and each part's weight ``exp(lse_p − L)`` (float32 map).
2. ``_combine_kernel`` (a block of rows × head_dim): for each part, reads the maps and the part's
   row, accumulates in float32 registers and writes every destination row once.  Rows no part
   covers get 0 (and −inf as LSE).

Why two: the division chain is ~60 instructions per row and part.  Done inside the 2-D kernel,
every one of the 8 threads that share a row (16-byte vectors of a 64-value row) repeated it, and
the kernel was instruction-bound at ~0.9 TB/s (H100, 2026-11-27, 156 µs for a 32K-token merge
of 7 parts: docs/perf/attention.md); here it is done once per row, and the maps cost 8 bytes per
row and part against 128 bytes of values.

Longer part lists are chained through a float32 accumulator; maps are built for at most
:data:`_MAP_ENTRIES` (row, part) pairs at a time.  Integer arguments other than ``head_dim`` are not
specialised on their values, so one compiled kernel serves every shape of a dtype and head_dim.

``AVAILABLE`` is False when Triton cannot be imported; the caller then uses the plain-torch path.
"""

from __future__ import annotations

import torch

from attention._part import Part

try:
    import triton
    import triton.language as tl

    AVAILABLE = True
except ImportError:  # no Triton (CPU-only installs): attention._merge uses the torch path
    AVAILABLE = False

SLOTS = 8  # parts per launch (the kernel signature has this many part slots)
_WIDE_ROWS = 1 << 30  # from this many destination rows on, the row arithmetic is 64-bit
_VEC = 8  # elements a thread may load as one vector when every row starts at a multiple of it
_MAP_ENTRIES = 1 << 24  # (row, part) entries of the maps: 2 x 64 MiB at most
_LOCATE_ROWS = 128  # rows per program of the locate kernel (one per thread at 4 warps)
_SLOT_ARGS = ("l", "off", "s1", "n1", "r1", "q1", "s2", "n2", "r2", "q2", "s3", "n3", "r3", "q3")
# not specialised on their values: one compiled kernel serves every shape.  ``D`` (head_dim) is:
# knowing it is a multiple of 16 lets the column mask hold per vector, so rows load as 16-byte
# vectors (docs/perf/merge_compile_time.py shows the loads each variant compiles to).
_COMBINE_INTS = ["row0", "rows", "chunk"]
_LOCATE_INTS = _COMBINE_INTS + [f"{a}{i}" for i in range(SLOTS) for a in _SLOT_ARGS if a != "l"]
_INTO_INTS = ["rows", "n1", "n2", "off", "ds0", "ds1", "ds2", "vs0", "vs1", "vs2", "ls0", "ls1", "ls2"]


def supported(parts: list[Part], d: int) -> bool:
    """Whether the kernels can read these parts: every row's ``d`` values contiguous, and the
    rows of each part's values a whole number of rows apart (value row = element offset / d)."""
    return all(p.values.stride(-1) == 1 and all(s % d == 0 for s in p.values.stride()[:3]) for p in parts)


def _slot(part: Part | None, dummy: torch.Tensor, big: int, d: int) -> list:
    """The 14 locate arguments of one part: its LSE (merge) and offset and, per axis sorted by row
    stride (size-1 axes last, with stride ``big``: every row divides to index 0 there), the row
    stride, the size, the stride in value rows and the LSE's stride."""
    if part is None:
        return [dummy, 0] + [big, 1, 0, 0] * 3
    lse_strides = part.lse.stride()[:3] if part.lse is not None else (0, 0, 0)
    value_rows = (s // d for s in part.values.stride()[:3])
    axes = sorted(
        zip(part.strides, part.sizes, value_rows, lse_strides, strict=True),
        key=lambda a: (a[1] > 1, a[0]),
        reverse=True,
    )
    args: list = [part.lse if part.lse is not None else dummy, part.offset]
    for stride, size, r, q in axes:
        args += [stride if size > 1 else big, size, r, q]
    return args


if AVAILABLE:

    @triton.jit
    def _locate_row(rid, ok, off, s1, n1, r1, q1, s2, n2, r2, q2, s3, n3, r3, q3):
        """The part's value row holding destination row ``rid`` (−1 where none) and its LSE offset."""
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
        return tl.where(ok, i1 * r1 + i2 * r2 + i3 * r3, -1).to(tl.int32), i1 * q1 + i2 * q2 + i3 * q3

    @triton.jit
    def _map_part(
        rid,
        ok_r,
        local,
        dest,
        m,
        lp,
        off,
        s1,
        n1,
        r1,
        q1,
        s2,
        n2,
        r2,
        q2,
        s3,
        n3,
        r3,
        q3,
        WITH_LSE: tl.constexpr,
    ):
        """Write one part's map entries; with the LSE, return it (−inf where not covered) and the
        running maximum."""
        vr, lo = _locate_row(rid, ok_r, off, s1, n1, r1, q1, s2, n2, r2, q2, s3, n3, r3, q3)
        tl.store(dest + local, vr, mask=ok_r)
        y = tl.full(rid.shape, float("-inf"), tl.float32)
        if WITH_LSE:
            y = tl.load(lp + lo, mask=vr >= 0, other=float("-inf"))
            m = tl.maximum(m, y)
        return y, m

    @triton.jit
    def _local_rows(BLOCK: tl.constexpr, WIDE: tl.constexpr):
        """This program's rows of the current chunk: 32-bit unless the destination needs 64."""
        if WIDE:
            return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        return tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)

    @triton.jit
    def _weight(total, y, m_safe):
        return total + tl.exp(y - m_safe)

    @triton.jit
    def _store_weight(dest, local, ok_r, y, m_safe, total):
        """The part's mixture weight ``exp(lse_p − L)`` (0 where it covers nothing)."""
        tl.store(dest + local, tl.exp(y - m_safe) / total, mask=ok_r)

    # fmt: off
    @triton.jit(do_not_specialize=_LOCATE_INTS)
    def _locate_kernel(
        idx, wmap, lse_out, prior_l, row0, rows, chunk,
        l0, off0, s10, n10, r10, q10, s20, n20, r20, q20, s30, n30, r30, q30,
        l1, off1, s11, n11, r11, q11, s21, n21, r21, q21, s31, n31, r31, q31,
        l2, off2, s12, n12, r12, q12, s22, n22, r22, q22, s32, n32, r32, q32,
        l3, off3, s13, n13, r13, q13, s23, n23, r23, q23, s33, n33, r33, q33,
        l4, off4, s14, n14, r14, q14, s24, n24, r24, q24, s34, n34, r34, q34,
        l5, off5, s15, n15, r15, q15, s25, n25, r25, q25, s35, n35, r35, q35,
        l6, off6, s16, n16, r16, q16, s26, n26, r26, q26, s36, n36, r36, q36,
        l7, off7, s17, n17, r17, q17, s27, n27, r27, q27, s37, n37, r37, q37,
        NUM: tl.constexpr, HAS_PRIOR: tl.constexpr, WITH_LSE: tl.constexpr, BLOCK: tl.constexpr,
        WIDE: tl.constexpr,
    ):
        local = _local_rows(BLOCK, WIDE)
        rid = row0 + local
        ok_r = (local < chunk) & (rid < rows)
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        pl = m
        if HAS_PRIOR:
            pl = tl.load(prior_l + rid, mask=ok_r, other=float("-inf"))
            m = tl.maximum(m, pl)
        if NUM > 0:
            y0, m = _map_part(rid, ok_r, local, idx, m, l0, off0, s10, n10, r10, q10, s20, n20, r20, q20, s30, n30, r30, q30, WITH_LSE)  # noqa: E501
        if NUM > 1:
            y1, m = _map_part(rid, ok_r, local, idx + chunk, m, l1, off1, s11, n11, r11, q11, s21, n21, r21, q21, s31, n31, r31, q31, WITH_LSE)  # noqa: E501
        if NUM > 2:
            y2, m = _map_part(rid, ok_r, local, idx + 2 * chunk, m, l2, off2, s12, n12, r12, q12, s22, n22, r22, q22, s32, n32, r32, q32, WITH_LSE)  # noqa: E501
        if NUM > 3:
            y3, m = _map_part(rid, ok_r, local, idx + 3 * chunk, m, l3, off3, s13, n13, r13, q13, s23, n23, r23, q23, s33, n33, r33, q33, WITH_LSE)  # noqa: E501
        if NUM > 4:
            y4, m = _map_part(rid, ok_r, local, idx + 4 * chunk, m, l4, off4, s14, n14, r14, q14, s24, n24, r24, q24, s34, n34, r34, q34, WITH_LSE)  # noqa: E501
        if NUM > 5:
            y5, m = _map_part(rid, ok_r, local, idx + 5 * chunk, m, l5, off5, s15, n15, r15, q15, s25, n25, r25, q25, s35, n35, r35, q35, WITH_LSE)  # noqa: E501
        if NUM > 6:
            y6, m = _map_part(rid, ok_r, local, idx + 6 * chunk, m, l6, off6, s16, n16, r16, q16, s26, n26, r26, q26, s36, n36, r36, q36, WITH_LSE)  # noqa: E501
        if NUM > 7:
            y7, m = _map_part(rid, ok_r, local, idx + 7 * chunk, m, l7, off7, s17, n17, r17, q17, s27, n27, r27, q27, s37, n37, r37, q37, WITH_LSE)  # noqa: E501
        if WITH_LSE:
            m_safe = tl.where(m == float("-inf"), 0.0, m)
            total = tl.zeros([BLOCK], tl.float32)
            if HAS_PRIOR:
                total = _weight(total, pl, m_safe)
            if NUM > 0:
                total = _weight(total, y0, m_safe)
            if NUM > 1:
                total = _weight(total, y1, m_safe)
            if NUM > 2:
                total = _weight(total, y2, m_safe)
            if NUM > 3:
                total = _weight(total, y3, m_safe)
            if NUM > 4:
                total = _weight(total, y4, m_safe)
            if NUM > 5:
                total = _weight(total, y5, m_safe)
            if NUM > 6:
                total = _weight(total, y6, m_safe)
            if NUM > 7:
                total = _weight(total, y7, m_safe)
            has = total > 0
            lse = tl.where(has, m_safe + tl.log(tl.where(has, total, 1.0)), float("-inf"))
            tl.store(lse_out + rid, lse, mask=ok_r)
            total = tl.where(has, total, 1.0)
            if NUM > 0:
                _store_weight(wmap, local, ok_r, y0, m_safe, total)
            if NUM > 1:
                _store_weight(wmap + chunk, local, ok_r, y1, m_safe, total)
            if NUM > 2:
                _store_weight(wmap + 2 * chunk, local, ok_r, y2, m_safe, total)
            if NUM > 3:
                _store_weight(wmap + 3 * chunk, local, ok_r, y3, m_safe, total)
            if NUM > 4:
                _store_weight(wmap + 4 * chunk, local, ok_r, y4, m_safe, total)
            if NUM > 5:
                _store_weight(wmap + 5 * chunk, local, ok_r, y5, m_safe, total)
            if NUM > 6:
                _store_weight(wmap + 6 * chunk, local, ok_r, y6, m_safe, total)
            if NUM > 7:
                _store_weight(wmap + 7 * chunk, local, ok_r, y7, m_safe, total)
    # fmt: on

    @triton.jit
    def _gather(acc, ok_r, cols, ok_d, at, idx, wmap, v, D, WEIGHTED: tl.constexpr, VEC: tl.constexpr):
        """Add one part's rows (its map entries at ``at``), weighted for the merge, to ``acc``."""
        vr = tl.load(idx + at, mask=ok_r, other=-1)
        ok = vr >= 0
        src = tl.multiple_of(vr.to(tl.int64) * D, VEC)
        vals = tl.load(v + src[:, None] + cols[None, :], mask=ok[:, None] & ok_d[None, :], other=0.0)
        if WEIGHTED:
            w = tl.load(wmap + at, mask=ok, other=0.0)
            return acc + vals.to(tl.float32) * w[:, None]
        return acc + vals.to(tl.float32)

    # fmt: off
    @triton.jit(do_not_specialize=_COMBINE_INTS)
    def _combine_kernel(
        out, lse_out, idx, wmap, prior_o, prior_l, row0, rows, chunk, D, v0, v1, v2, v3, v4, v5, v6, v7,
        NUM: tl.constexpr, HAS_PRIOR: tl.constexpr, WEIGHTED: tl.constexpr, BLOCK_R: tl.constexpr,
        BLOCK_D: tl.constexpr, WIDE: tl.constexpr, VEC: tl.constexpr,
    ):
        local = _local_rows(BLOCK_R, WIDE)
        rid = row0 + local
        ok_r = (local < chunk) & (rid < rows)
        cols = tl.arange(0, BLOCK_D)
        ok_d = cols < D
        dst = tl.multiple_of(rid.to(tl.int64) * D, VEC)[:, None] + cols[None, :]
        ok2 = ok_r[:, None] & ok_d[None, :]
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        if HAS_PRIOR:  # merge: an earlier launch group's result; sum: the destination's content
            prior = tl.load(prior_o + dst, mask=ok2, other=0.0).to(tl.float32)
            if WEIGHTED:
                lse = tl.load(lse_out + rid, mask=ok_r, other=float("-inf"))
                lse_safe = tl.where(lse == float("-inf"), 0.0, lse)
                prior_lse = tl.load(prior_l + rid, mask=ok_r, other=float("-inf"))
                prior = prior * tl.exp(prior_lse - lse_safe)[:, None]
            acc = acc + prior
        if NUM > 0:
            acc = _gather(acc, ok_r, cols, ok_d, local, idx, wmap, v0, D, WEIGHTED, VEC)
        if NUM > 1:
            acc = _gather(acc, ok_r, cols, ok_d, chunk + local, idx, wmap, v1, D, WEIGHTED, VEC)
        if NUM > 2:
            acc = _gather(acc, ok_r, cols, ok_d, 2 * chunk + local, idx, wmap, v2, D, WEIGHTED, VEC)
        if NUM > 3:
            acc = _gather(acc, ok_r, cols, ok_d, 3 * chunk + local, idx, wmap, v3, D, WEIGHTED, VEC)
        if NUM > 4:
            acc = _gather(acc, ok_r, cols, ok_d, 4 * chunk + local, idx, wmap, v4, D, WEIGHTED, VEC)
        if NUM > 5:
            acc = _gather(acc, ok_r, cols, ok_d, 5 * chunk + local, idx, wmap, v5, D, WEIGHTED, VEC)
        if NUM > 6:
            acc = _gather(acc, ok_r, cols, ok_d, 6 * chunk + local, idx, wmap, v6, D, WEIGHTED, VEC)
        if NUM > 7:
            acc = _gather(acc, ok_r, cols, ok_d, 7 * chunk + local, idx, wmap, v7, D, WEIGHTED, VEC)
        tl.store(out + dst, acc.to(out.dtype.element_ty), mask=ok2)
    # fmt: on

    # fmt: off
    @triton.jit(do_not_specialize=_INTO_INTS)
    def _merge_into_kernel(
        out, lse, vals, plse, rows, n1, n2, off, ds0, ds1, ds2, vs0, vs1, vs2, ls0, ls1, ls2,
        D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, WIDE: tl.constexpr,
        VEC: tl.constexpr,
    ):
        """One part merged into the running result, on the part's own rows: a program per block
        of the part's rows (i, j, t), whose destination row is ``off + i·ds0 + j·ds1 + t·ds2``."""
        r = _local_rows(BLOCK_R, WIDE)
        ok = r < rows
        t = r % n2
        rest = r // n2
        j = rest % n1
        i = rest // n1
        dst = off + i * ds0 + j * ds1 + t * ds2
        src = i * vs0 + j * vs1 + t * vs2
        l_old = tl.load(lse + dst, mask=ok, other=float("-inf"))
        l_p = tl.load(plse + (i * ls0 + j * ls1 + t * ls2), mask=ok, other=float("-inf")).to(tl.float32)
        m = tl.maximum(l_old, l_p)
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        merged = m_safe + tl.log(tl.exp(l_old - m_safe) + tl.exp(l_p - m_safe))
        w = tl.where(l_p == float("-inf"), 0.0, tl.exp(l_p - merged))
        cols = tl.arange(0, BLOCK_D)
        ok2 = ok[:, None] & (cols < D)[None, :]
        o_at = out + (tl.multiple_of(dst.to(tl.int64) * D, VEC)[:, None] + cols[None, :])
        o = tl.load(o_at, mask=ok2, other=0.0).to(tl.float32)
        v = tl.load(vals + (tl.multiple_of(src, VEC)[:, None] + cols[None, :]), mask=ok2, other=0.0)
        o = o + w[:, None] * (v.to(tl.float32) - o)
        tl.store(o_at, o.to(out.dtype.element_ty), mask=ok2)
        tl.store(lse + dst, merged, mask=ok)
    # fmt: on


def merge_into(part: Part, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Triton: merge one part into the running ``out (b, L, H, d)`` / float32 ``lse (b, L, H)``
    (``attention._merge.merge_online``), reading and writing only the rows the part covers.

    The merged LSE and the part's weight ``exp(lse_p − L')`` stay in float32 and the output row is
    rounded once; one kernel per part where the torch path launches five (on 2 H200s at 1M tokens
    those took 2.1 of a rank's 12.5 ms forward: docs/perf/distributed.md).
    """
    d = out.shape[-1]
    rows = part.sizes[0] * part.sizes[1] * part.sizes[2]
    if rows == 0:
        return
    vs = list(part.values.stride()[:3])
    span = d + sum((n - 1) * s for n, s in zip(part.sizes, vs, strict=True))  # the last value read
    wide = max(out.numel(), span, rows) >= (1 << 31) - 1
    bd = _block_d(d)
    br = _block_r(bd)
    vec = _VEC if d % _VEC == 0 and all(s % _VEC == 0 for s in vs) else 1
    _merge_into_kernel[(triton.cdiv(rows, br),)](
        out,
        lse,
        part.values,
        part.lse,
        rows,
        part.sizes[1],
        part.sizes[2],
        part.offset,
        *part.strides,
        *vs,
        *part.lse.stride()[:3],
        D=d,
        BLOCK_R=br,
        BLOCK_D=bd,
        WIDE=wide,
        VEC=vec,
    )


def _block_d(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def _block_r(block_d: int) -> int:
    """Rows per program of the combine kernel: 2K values (32 rows at head_dim 64)."""
    return max(16, 2048 // block_d)


def _run(
    parts: list[Part],
    out: torch.Tensor,
    lse_out: torch.Tensor | None,
    prior_o: torch.Tensor | None,
    prior_l: torch.Tensor | None,
) -> None:
    """One launch group (<= SLOTS parts): locate, then combine, over row chunks of the maps."""
    d = out.shape[-1]
    rows = out.numel() // d
    weighted = lse_out is not None
    wide = rows >= _WIDE_ROWS
    big = (1 << 62) if wide else (1 << 31) - 1
    num = len(parts)
    chunk = min(rows, max(_LOCATE_ROWS, (_MAP_ENTRIES // max(num, 1)) // _LOCATE_ROWS * _LOCATE_ROWS))
    idx = torch.empty(max(num, 1) * chunk, dtype=torch.int32, device=out.device)
    # float32 pointers the kernels get: the merged LSE and the weights (merge), else any float32
    # buffer (never read)
    lse_arg = lse_out if weighted else torch.empty(1, dtype=torch.float32, device=out.device)
    wmap = torch.empty(max(num, 1) * chunk, dtype=torch.float32, device=out.device) if weighted else lse_arg
    slots: list = []
    for i in range(SLOTS):
        slots += _slot(parts[i] if i < num else None, lse_arg, big, d)
    values = [parts[i].values if i < num else out for i in range(SLOTS)]
    bd = _block_d(d)
    br = _block_r(bd)
    for row0 in range(0, rows, chunk):
        _locate_kernel[(triton.cdiv(chunk, _LOCATE_ROWS),)](
            idx,
            wmap,
            lse_arg,
            prior_l if prior_l is not None else lse_arg,
            row0,
            rows,
            chunk,
            *slots,
            NUM=num,
            HAS_PRIOR=prior_l is not None,
            WITH_LSE=weighted,
            BLOCK=_LOCATE_ROWS,
            WIDE=wide,
        )
        _combine_kernel[(triton.cdiv(chunk, br),)](
            out,
            lse_arg,
            idx,
            wmap,
            prior_o if prior_o is not None else out,
            prior_l if prior_l is not None else lse_arg,
            row0,
            rows,
            chunk,
            d,
            *values,
            NUM=num,
            HAS_PRIOR=prior_o is not None,
            WEIGHTED=weighted,
            BLOCK_R=br,
            BLOCK_D=bd,
            WIDE=wide,
            VEC=_VEC if d % _VEC == 0 else 1,
        )


def merge(parts: list[Part], out: torch.Tensor, lse: torch.Tensor) -> None:
    """Triton merge of ``parts`` into contiguous ``out (b, L, H, d)`` and float32 ``lse (b, L, H)``."""
    groups = [parts[i : i + SLOTS] for i in range(0, len(parts), SLOTS)] or [[]]
    prior_o = prior_l = None
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        dest_o = out if last else torch.empty_like(out, dtype=torch.float32)
        dest_l = lse if last else torch.empty_like(lse, dtype=torch.float32)
        _run(group, dest_o, dest_l, prior_o, prior_l)
        prior_o, prior_l = dest_o, dest_l


def sum_rows(parts: list[Part], dest: torch.Tensor, *, accumulate: bool) -> None:
    """Triton ``dest = (dest if accumulate else 0) + Σ parts`` (float32 sums, one write per row).

    With several launch groups, ``dest`` is written by the last one only (the earlier ones sum into
    a float32 buffer): a group of a new part count compiles at its first launch, so a failure there
    leaves ``dest`` as it was, and the torch fallback (:func:`attention._merge.sum_parts`) never
    adds a group twice.
    """
    groups = [parts[i : i + SLOTS] for i in range(0, len(parts), SLOTS)] or [[]]
    if len(groups) > 1 and dest.dtype != torch.float32:  # sum in float32, round once
        target = dest.float() if accumulate else torch.empty_like(dest, dtype=torch.float32)
        for i, group in enumerate(groups):
            _run(group, target, None, target if accumulate or i > 0 else None, None)
        dest.copy_(target)
        return
    prior = dest if accumulate else None
    for i, group in enumerate(groups):
        target = dest if i == len(groups) - 1 else (prior if i > 0 else torch.empty_like(dest))
        _run(group, target, None, prior, None)
        prior = target
