"""Which layout should ``improved`` feed its fused kernel?  Measure the candidates on the GPU.

For one dilated branch (segment w, rate r, longnet offsets ``h // ceil(H/r)``) of bf16 q/k/v laid
out ``(1, n, H, d)``, compare:

- ``pregathered``: contiguous ``(segments, H, w/r, d)`` tensors (the yardstick; gather not timed);
- ``gather+kernel``: an ``index_select`` gather per tensor, then the kernel (what a copy costs);
- ``views``: zero-copy strided views, one kernel call per offset group (``r`` calls with
  ``ceil(H/r)`` heads each; the sequence stride is ``r*H*d`` elements);

for the kernels ``cudnn`` (LSE) and ``flash`` (LSE), checking each output against SDPA on the
pre-gathered tensors.  Then the cost of merging three branch outputs by log-sum-exp with plain
torch ops, to size the merge against the attention itself.

Run on the GPU machine: ``python3 docs/perf/improved_variants.py``; prints a table.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

H, D = 12, 64
aten = torch.ops.aten
_FLUSH = None


def bench(fn, reps: int = 30) -> float:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        _FLUSH.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def kernel(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    if name == "cudnn":
        out = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False)
    else:
        out = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
    return out[0], out[1]


def group_views(x: torch.Tensor, w: int, r: int) -> list[torch.Tensor]:
    """(1, n, H, d) -> per offset group g: view (segments, heads_g, w/r, d), zero-copy."""
    n = x.shape[1]
    c = -(-H // r)
    x6 = x.view(n // w, w // r, r, H, D)
    views = []
    for g in range(r):
        hs = slice(g * c, min((g + 1) * c, H))
        views.append(x6[:, :, g, hs, :].permute(0, 2, 1, 3))
    return views


def gathered(x: torch.Tensor, w: int, r: int) -> torch.Tensor:
    n = x.shape[1]
    c = -(-H // r)
    sel = torch.tensor([(h // c) * H + h for h in range(H)], device=x.device)
    x4 = x.view(n // w, w // r, r * H, D)
    return x4.index_select(2, sel).permute(0, 2, 1, 3)  # (segments, H, w/r, d) non-contiguous


def main() -> None:
    print(torch.__version__, torch.cuda.get_device_name(0))
    rows = []
    for n in (8192, 32768, 131072):
        q, k, v = (torch.randn(1, n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        outs = {}
        for w, r in ((2048, 1), (4096, 2), (8192, 4)):
            w = min(w, n)
            pre = [gathered(t, w, r).contiguous() for t in (q, k, v)]
            ref = F.scaled_dot_product_attention(*pre)
            for kern in ("cudnn", "flash"):
                t_pre = bench(lambda pre=pre, kern=kern: kernel(kern, *pre))

                def gk(kern=kern, w=w, r=r, q=q, k=k, v=v):
                    return kernel(kern, *(gathered(t, w, r) for t in (q, k, v)))

                t_g = bench(gk)
                views = [group_views(t, w, r) for t in (q, k, v)]

                def vk(views=views, kern=kern):
                    return [kernel(kern, views[0][g], views[1][g], views[2][g]) for g in range(len(views[0]))]

                try:
                    res = vk()
                    o = torch.cat([x[0] for x in res], dim=1)
                    err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                    strides = tuple(res[0][0].stride())
                    t_v = bench(vk)
                except Exception as exc:
                    err, strides, t_v = float("nan"), repr(exc)[:120], float("nan")
                rows.append((n, w, r, kern, t_pre, t_g, t_v, err, strides))
                print(rows[-1], flush=True)
            outs[(w, r)] = kernel("cudnn", *pre)
        # merge cost: three branch outputs (contiguous gathered layout) merged by LSE into (1, n, H, d)

        def merge(n=n, outs=outs):
            out = torch.zeros(1, n, H, D, device="cuda", dtype=torch.float32)
            lse = torch.full((1, n, H), -float("inf"), device="cuda")
            for (w, r), (o, lo) in outs.items():
                c = -(-H // r)
                o6 = out.view(n // w, w // r, r, H, D)
                l5 = lse.view(n // w, w // r, r, H)
                for g in range(r):
                    hs = slice(g * c, min((g + 1) * c, H))
                    ov, lv = o6[:, :, g, hs, :], l5[:, :, g, hs]
                    ob = o[:, hs].permute(0, 2, 1, 3).float()
                    lb = (
                        lo[:, hs].squeeze(-1).permute(0, 2, 1)
                        if lo.dim() == 4
                        else lo[:, hs].permute(0, 2, 1)
                    )
                    m = torch.maximum(lv, lb)
                    a, b = torch.exp(lv - m), torch.exp(lb - m)
                    ov.mul_(a.unsqueeze(-1)).add_(ob * b.unsqueeze(-1))
                    lv.copy_(m + torch.log(a + b))
            return out.to(torch.bfloat16)

        rows.append((n, "merge(torch ops, 3 branches)", bench(merge)))
        print(rows[-1], flush=True)
    print("\nn w r kernel pregathered_ms gather+kernel_ms views_ms views_err out_strides")
    for r in rows:
        print(" ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in r))


if __name__ == "__main__":
    main()
