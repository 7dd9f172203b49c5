# ruff: noqa: E501
"""Where the sequence-parallel ring's GPU time goes, per kernel, against ``improved`` on one GPU
(issues 33 and 34): the backward is the part that does not reach its target.

Under torchrun (one rank per GPU): for each length, the distributed suite's ring case (and, with
one rank, ``improved`` over the whole sequence: ``docs/perf/distributed_gpu.py``'s one-GPU case),
one warm call of the forward and of the forward+backward under ``torch.profiler``
(``perfguard.engine.work.profile_breakdown``).  Rank 0 prints per case the device time by kind of
kernel (attention, the merge/sum kernels, copies and fills, NCCL, other) and the top kernels, and
writes everything to ``--out/profile-N{ranks}.json``.

    torchrun --standalone --nproc-per-node 2 docs/perf/distributed_profile_gpu.py --out $OUT --tokens 1048576
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "docs" / "perf"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

KINDS = (
    ("nccl", ("nccl",)),
    ("attention", ("flash", "fmha", "cudnn", "sm90", "sm100", "attn", "xmma", "cutlass")),
    ("merge/sum (triton)", ("triton",)),
    ("copy/fill", ("copy", "memcpy", "memset", "fill", "zero", "cat")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, words in KINDS:
        if any(w in low for w in words):
            return kind
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", default="1048576")
    parser.add_argument(
        "--device", default="cuda", help="cpu: the distributed-quick profile, gloo (a smoke run)"
    )
    args = parser.parse_args()
    import torch
    from distributed_gpu import one_gpu_case

    from perfguard import profiles
    from perfguard.engine import passes, rank_group, shards, work

    work.BREAKDOWN_LIMIT = 10**6  # every kernel: the totals by kind are over all of them
    device = args.device
    dtype = "bfloat16" if device == "cuda" else "float32"
    group = rank_group.join(device)
    profile = profiles.PROFILES["distributed" if device == "cuda" else "distributed-quick"]
    results = []
    for n in (int(x) for x in args.tokens.split(",")):
        for impl in ["ring"] + (["improved"] if group.world == 1 else []):
            for pass_name in ("forward", "forward_backward"):
                case = one_gpu_case(impl, n, dtype, device, profile)
                p = passes.Pass(
                    case, pass_name, case.forward() if pass_name == "forward" else case.forward_backward()
                )
                p.first()
                p.fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                breakdown = work.profile_breakdown(p.fn, device)
                rows = breakdown["rows"]
                kinds: dict[str, float] = {}
                for name, (_, ms) in rows.items():
                    kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + ms
                results.append({"impl": impl, "tokens": n, "pass": pass_name, "ranks": group.world,
                                "rank": group.rank, "kinds_ms": kinds, "rows": rows})  # fmt: skip
                if group.writer:
                    total = sum(kinds.values())
                    print(
                        f"\n== {impl} {n} tokens {pass_name} on {group.world} rank(s), rank 0: {total:.2f} ms of kernels (CPU: aten ops' self time) =="
                    )
                    print(
                        "   "
                        + ", ".join(
                            f"{k} {v:.2f} ms" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
                        )
                    )
                    for name, (count, ms) in list(rows.items())[:14]:
                        print(f"   {ms:8.2f} ms {count:5d} x  [{kind_of(name)}] {name[:110]}")
                del p, case
                shards.release()
                if device == "cuda":
                    torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"profile-N{group.world}-rank{group.rank}.json").write_text(json.dumps(results, indent=1))
    rank_group.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
