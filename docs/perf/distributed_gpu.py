# ruff: noqa: E501  (command lines and table rows are kept one per line)
"""The ring across GPUs (issue 15): scaling over N = 1, 2, 4 and a perfguard check A/A, in one call.

Run on a lent multi-GPU machine (nvidia-h200-x2 or -x4) after ``source docs/perf/device_setup.sh``;
every number is the distributed suite's own measurement (``perfguard.engine.shards`` builds the rank's
case, ``perfguard.engine.timing`` / ``perfguard.engine.communication`` measure it), logs go to ``--out``, and a
short table is printed last:

1. ``scaling``: ``ring`` at 128K, 512K and 1M tokens (bfloat16, 1 x n x 12 x 64, the distributed
   profile's segments: the largest is the sequence) on N = 1, 2, 4 GPUs (those the machine has),
   one ``torchrun`` group per N, and ``improved`` at N = 1 (the other candidate for the best
   one-GPU implementation); ``--passes`` forward and/or forward_backward.  Per case: the time (per
   call, the slowest rank's median; graph replay when every rank captured the call, else eager:
   ``method``), each rank's peak memory beyond the inputs and the largest of them against one
   GPU's (the table: against the one-GPU ring, the JSON has both), and for the forward the
   communication share and the bytes each rank sent.  A length that does not fit is "oom".
2. ``aa``: ``perfguard check --baseline main --profile distributed`` of ``main`` against itself
   (A/A) on the ring at 128K with every GPU of the machine as one rank each: forward time, peak
   memory, work counts and communication, 2 rounds a side (a suspect re-measured 3 rounds a side,
   ``[tool.perfguard.retry]`` in the scratch clone, to stay within one call).  It must pass.

    python3 docs/perf/distributed_gpu.py --out $OUT                 # both steps, ~5-8 min
    python3 docs/perf/distributed_gpu.py --out $OUT --steps scaling  # or one of them
    python3 docs/perf/distributed_gpu.py --out /tmp/smoke --smoke    # CPU, gloo, 2K and 4K tokens

``--smoke`` runs the same code on the CPU (gloo, N = 1, 2, the ``distributed-quick`` profile): what
this script does can be checked without a GPU.  NVLink multicast stays off in every rank
(``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GPU_LENGTHS = (131072, 524288, 1048576)
SMOKE_LENGTHS = (2048, 4096)
AA_BENCH = r"(Forward\.track_time|PeakMemory\.track_forward|Work\.track_forward_(flops|ops|allocated)|Communication\.track_forward)\('ring', {n},"
GIB = 2**30


# --------------------------------------------------------------------------------------------------
# one rank of one group (started by torchrun: --worker)


def exactness(group, device: str) -> list[dict[str, Any]]:
    """The sequence-parallel ring on this group against the one-device ring over the whole sequence.

    8K tokens (smoke: 1K), 1 x n x 12 x 64, segments crossing every shard, the module's own lanes
    (one) and 4 forced (``ring_lanes=4``); forward and the q/k/v gradients, causal or not, bf16
    and fp32.  Every rank computes its shard; rank 0 gathers them and compares with its own
    one-device run.
    """
    import torch
    import torch.distributed as dist

    from attention.reference import relative_error
    from attention.ring import RingDilatedAttention

    n = 1024 if device == "cpu" else 8192
    cfg = {"segment_lengths": [n // 8, n // 4, n], "dilation_rates": [1, 2, 4]}
    lengths = [n // group.world + (1 if r < n % group.world else 0) for r in range(group.world)]
    lo = sum(lengths[: group.rank])
    rows = []
    for dtype, causal, lanes in itertools.product((torch.bfloat16, torch.float32), (False, True), (None, 4)):
        gen = torch.Generator(device=device).manual_seed(11)
        q, k, v, g = (torch.randn(1, n, 12, 64, generator=gen, device=device).to(dtype) for _ in range(4))
        mine = [t[:, lo : lo + lengths[group.rank]].clone().requires_grad_() for t in (q, k, v)]
        ring = RingDilatedAttention(**cfg, sequence_parallel=True, ring_lanes=lanes)
        out = ring(*mine, is_causal=causal)
        out.backward(g[:, lo : lo + lengths[group.rank]])
        got = {}
        for name, t in (
            ("out", out.detach()),
            ("dq", mine[0].grad),
            ("dk", mine[1].grad),
            ("dv", mine[2].grad),
        ):
            pieces = [torch.empty(1, m, 12, 64, dtype=dtype, device=device) for m in lengths]
            dist.all_gather(pieces, t.contiguous())
            got[name] = torch.cat(pieces, dim=1)
        if group.writer:
            whole = [t.clone().requires_grad_() for t in (q, k, v)]
            single = RingDilatedAttention(**cfg, ring_size=8, sequence_parallel=False, single_shot_bytes=0)
            ref = single(*whole, is_causal=causal)
            ref.backward(g)
            want = {"out": ref.detach(), "dq": whole[0].grad, "dk": whole[1].grad, "dv": whole[2].grad}
            # the scale of bf16 rounding: both against the same computation in float32
            exact = single(q.float(), k.float(), v.float(), is_causal=causal).detach()
            scale = {
                "bf16_scale_out": relative_error(ref, exact),
                "dist_vs_fp32_out": relative_error(got["out"], exact),
            }
            rows.append(
                {
                    "check": "distributed == one device",
                    "tokens": n,
                    "ranks": group.world,
                    "dtype": str(dtype).replace("torch.", ""),
                    "causal": causal,
                    "lanes": lanes or "module",
                    **{f"rel_err_{key}": relative_error(got[key], want[key]) for key in want},
                    **scale,
                }
            )
    return rows


def one_gpu_case(impl: str, n: int, dtype: str, device: str, profile):
    """``improved`` over the whole sequence on one GPU with the distributed profile's segments:
    the other candidate for "the best one-GPU implementation" (the ring's N = 1 point is
    ``perfguard.engine.shards``' own case)."""
    import torch

    from perfguard import profiles
    from perfguard.engine import cases, guarded, shards

    if impl == "ring":
        return shards.build("ring", n, dtype, device, profile)
    spec = guarded.current().get(impl)
    shape = profile.shape(device)
    torch_dtype = cases.DTYPES[dtype]
    overrides = {**profiles.distributed_dilation(n), **cases.head_overrides(spec.multihead, shape)}
    module = spec.build("bench", device=device, dtype=torch_dtype, **overrides)
    gen = torch.Generator(device=device).manual_seed(1000)
    dims = (shape.batch, n, shape.num_heads, shape.head_dim)
    q, k, v = (torch.randn(dims, generator=gen, device=device).to(torch_dtype) for _ in range(3))
    return cases.Case(impl=impl, seq_len=n, dtype=dtype, device=device, module=module, inputs=(q, k, v),
                      multihead=spec.multihead, config=dict(overrides), tokens=shape.batch * n,
                      forward_flops=0.0)  # fmt: skip


def measure(impl: str, n: int, pass_name: str, group, device: str, dtype: str, profile) -> dict[str, Any]:
    """One implementation x length x pass on this group: peak memory, the time (graph replay where
    every rank could capture the call, else eager; the slowest rank's), communication (forward,
    N > 1)."""
    import torch

    from perfguard.engine import cases, communication, passes, shards, timing

    started = time.perf_counter()
    row: dict[str, Any] = {"impl": impl, "seq_len": n, "pass": pass_name, "ranks": group.world, "dtype": dtype,
                           "device": device}  # fmt: skip
    try:
        case = one_gpu_case(impl, n, dtype, device, profile)
        p = passes.Pass(
            case, pass_name, case.forward() if pass_name == "forward" else case.forward_backward()
        )
        p.first()
        if device == "cuda":
            memory = p.memory()
            peaks = timing.per_rank(float(memory.peak_bytes))
            row.update(peak_bytes=max(peaks), peak_per_rank=peaks)
            captured = p.captured()
            row.update(capture_error=captured.error, eager_first_s=captured.eager_s)
        result = timing.slowest_rank(p.timing())
        samples = list(result.samples)
        cv = statistics.pstdev(samples) / statistics.mean(samples) if len(samples) > 1 else None
        row.update(time_s=result.median, samples=len(samples), method=result.method, sample_cv=cv,
                   rank_medians=result.info.get("rank_medians", [result.median]), stop=result.info.get("stop"),
                   config=case.config, steps_s=dict(p.log))  # fmt: skip
        if group.world > 1 and pass_name == "forward":
            exchange = communication.measure(p.fn, device)
            row.update(
                comm_method=exchange.method,
                comm_share=max(timing.per_rank(exchange.share)),
                bytes_sent=timing.per_rank(float(exchange.bytes_sent)),
            )
        del p, case
    except cases.Unsupported as exc:
        row["skipped"] = str(exc)
    except torch.cuda.OutOfMemoryError as exc:
        row["skipped"] = f"oom: {str(exc).splitlines()[0]}"
    shards.release()
    if device == "cuda":
        torch.cuda.empty_cache()
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def worker(args: argparse.Namespace) -> int:
    """Every rank measures every length; rank 0 writes one JSON line per length to ``--jsonl``."""

    from perfguard import profiles
    from perfguard.engine import rank_group, timing

    device = "cpu" if args.smoke else "cuda"
    group = rank_group.join(device)
    profile = profiles.PROFILES["distributed-quick" if args.smoke else "distributed"]
    dtype = profile.dtypes(device)[0]
    settings = timing.pin_settings(device)
    with open(args.jsonl if group.writer else os.devnull, "a", encoding="utf-8") as out:
        if group.world > 1:
            for row in exactness(group, device):
                out.write(json.dumps(row) + "\n")
            out.flush()
        impls = ["ring"] + (["improved"] if group.world == 1 else [])
        for n in (int(x) for x in args.lengths.split(",")):
            for impl in impls:
                for pass_name in args.passes.split(","):
                    row = measure(impl, n, pass_name, group, device, dtype, profile)
                    row["settings"] = settings
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(
                        f"[rank {group.rank}] {impl} {pass_name} {n} tokens on {group.world}: "
                        f"{row.get('time_s', row.get('skipped'))} ({row.get('method')}, {row.get('capture_error')})",
                        flush=True,
                    )
    rank_group.leave()
    return 0


# --------------------------------------------------------------------------------------------------
# the parent: groups, the A/A check, the table


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dist", "GIT_AUTHOR_EMAIL": "d@x", "GIT_COMMITTER_NAME": "dist",
           "GIT_COMMITTER_EMAIL": "d@x"}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def visible_gpus() -> int:
    from perfguard.engine.machine import nvml_gpus

    return len(nvml_gpus() or [])


def run_group(
    n: int, lengths: list[int], out: Path, smoke: bool, limit: float, passes: str
) -> dict[str, Any]:
    """One torchrun group of ``n`` ranks measuring every length; its log and JSON lines in ``out``."""
    from perfguard.engine.rank_group import LAUNCH_ENV

    jsonl = out / f"scaling-N{n}.jsonl"
    jsonl.unlink(missing_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", str(n),
               "--max-restarts", "0", str(Path(__file__).resolve()), "--worker", "--jsonl", str(jsonl),
               "--lengths", ",".join(map(str, lengths)), "--passes", passes] + (["--smoke"] if smoke else [])  # fmt: skip
    env = {
        **os.environ,
        **LAUNCH_ENV,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    started = time.perf_counter()
    log = out / f"scaling-N{n}.log"
    with open(log, "w", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            code = proc.wait(timeout=max(10.0, limit))
        except subprocess.TimeoutExpired:
            proc.terminate()  # torchrun ends its ranks
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            fh.write(f"\n(stopped after {limit:.0f} s)\n")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
    return {
        "ranks": n,
        "exit": code,
        "wall_s": round(time.perf_counter() - started, 1),
        "rows": rows,
        "log": log.name,
    }


def perfguard(repo: Path, args: list[str], log: Path, limit: float) -> dict[str, Any]:
    started = time.perf_counter()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    try:
        proc = subprocess.run([sys.executable, "-m", "perfguard", *args], cwd=repo, capture_output=True, text=True,
                              timeout=max(10.0, limit), check=False, env=env)  # fmt: skip
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = (
            124,
            str(exc.stdout or ""),
            str(exc.stderr or "") + f"\n(stopped after {limit:.0f} s)",
        )
    wall = time.perf_counter() - started
    log.write_text(f"$ perfguard {' '.join(args)}\n{out}\n--- stderr ---\n{err}\nexit {code}, {wall:.1f} s\n")
    return {"exit": code, "wall_s": round(wall, 1), "log": log.name}


def aa_check(out: Path, work: Path, smoke: bool, limit: float) -> dict[str, Any]:
    """``perfguard check`` of main against itself with the distributed profile (a scratch clone)."""
    repo = work / "repo"
    if not repo.exists():
        git(work, "clone", "-q", str(ROOT), str(repo))
        git(repo, "checkout", "-q", "-B", "main")
        # within one call's budget: a suspect is re-measured 3 rounds a side (default 5); both sides
        # are this one commit, so it is still an A/A check
        with (repo / "pyproject.toml").open("a") as fh:
            fh.write("\n[tool.perfguard.retry]\nrounds = 3\n")
        git(repo, "commit", "-qam", "distributed_gpu.py: retry 3 rounds a side")
    n = SMOKE_LENGTHS[0] if smoke else GPU_LENGTHS[0]
    profile = "distributed-quick" if smoke else "distributed"
    db = f"sqlite:///{work / 'aa-history.db'}"
    result = perfguard(repo, ["check", "--baseline", "main", "--profile", profile, "--bench", AA_BENCH.format(n=n),
                              "--rounds", "2", "--db", db, "--json", str(out / "aa.json"), "--markdown", str(out / "aa.md")],
                       out / "aa-check.log", limit)  # fmt: skip
    doc = json.loads((out / "aa.json").read_text()) if (out / "aa.json").exists() else {}
    items = doc.get("items", [])
    result.update(
        verdict=doc.get("verdict"),
        machine=(doc.get("machine") or {}).get("key")
        if isinstance(doc.get("machine"), dict)
        else doc.get("machine"),
        items=[f"{i['benchmark'].split('.', 1)[-1]}: {i['verdict']} x{(i['ratio'] or 0):.3f}" for i in items],
        failing=[
            i["benchmark"] for i in items if i["gated"] and i["verdict"] in ("regression", "failed", "broken")
        ],
    )
    return result


def table(groups: list[dict[str, Any]]) -> str:
    """Per length, pass and N: the ring's time against the best one-GPU implementation (ring or
    improved at N = 1, whichever is faster), and its per-GPU peak against one GPU's (the ring's at
    N = 1) and the 1.25/N bound."""
    rows = {(r["seq_len"], r.get("pass", "forward"), r["impl"], g["ranks"]): r
            for g in groups for r in g["rows"] if "check" not in r}  # fmt: skip
    lines = ["| tokens | pass | N | ring (slowest rank) | method | sample CV | best one GPU | speed-up | peak / GPU | vs N=1 | bound 1.25/N | comm share |",
             "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for n_tokens, pass_name in sorted({(k[0], k[1]) for k in rows}):
        ones = [rows.get((n_tokens, pass_name, impl, 1), {}) for impl in ("ring", "improved")]
        timed = [(r["time_s"], r["impl"]) for r in ones if r.get("time_s")]
        best = min(timed) if timed else None
        one_ring = ones[0]
        for ranks in sorted(k[3] for k in rows if k[:3] == (n_tokens, pass_name, "ring")):
            r = rows[(n_tokens, pass_name, "ring", ranks)]
            if "skipped" in r:
                lines.append(f"| {n_tokens} | {pass_name} | {ranks} | {r['skipped'][:50]} | | | | | | | | |")
                continue
            t = r["time_s"]
            best_text = f"{best[0] * 1e3:.2f} ms ({best[1]})" if best else "–"
            speedup = f"{best[0] / t:.2f}x" if best and ranks > 1 else "–"
            peak = f"{r['peak_bytes'] / GIB:.2f} GiB" if r.get("peak_bytes") else "–"
            ratio = (
                r["peak_bytes"] / one_ring["peak_bytes"]
                if r.get("peak_bytes") and one_ring.get("peak_bytes")
                else None
            )
            bound = 1.25 / ranks
            vs = f"{ratio:.3f}" if ratio is not None else "–"
            ok = ("ok" if ratio <= bound else "OVER") if ratio is not None else "–"
            cv = f"{r['sample_cv']:.2%}" if r.get("sample_cv") is not None else "–"
            share = f"{r['comm_share']:.1%}" if r.get("comm_share") is not None else "–"
            lines.append(
                f"| {n_tokens} | {pass_name} | {ranks} | {t * 1e3:.2f} ms | {r.get('method')} | {cv} | {best_text} | {speedup} | {peak} | {vs} | {bound:.3f} {ok} | {share} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/distributed")))
    parser.add_argument(
        "--budget", type=float, default=540.0, help="seconds for all steps (a call may take 9 min)"
    )
    parser.add_argument("--steps", default="scaling,aa")
    parser.add_argument("--ranks", default="1,2,4", help="group sizes to measure (those the machine has)")
    parser.add_argument(
        "--lengths", default=None, help="sequence lengths (default 128K,512K,1M; --smoke 2K,4K)"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/distributed-work"))
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, gloo, tiny sizes: check the script without a GPU"
    )
    parser.add_argument(
        "--passes", default="forward,forward_backward", help="forward and/or forward_backward"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jsonl", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    lengths = (
        [int(x) for x in args.lengths.split(",")]
        if args.lengths
        else list(SMOKE_LENGTHS if args.smoke else GPU_LENGTHS)
    )
    available = 2 if args.smoke else visible_gpus()
    wanted = [int(x) for x in args.ranks.split(",")]
    sizes = [n for n in wanted if n <= available]
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": "cpu (smoke)" if args.smoke else f"{available} GPU(s)",
        "lengths": lengths,
        "ranks": sizes,
        "not_measured": [n for n in wanted if n > available],
    }
    if not args.smoke:
        from perfguard.engine.machine import fingerprint

        fp = fingerprint()
        results["machine"] = {"key": fp.key, "label": fp.label, "software": dict(fp.software)}

    def left() -> float:
        return args.budget - (time.perf_counter() - started)

    steps = args.steps.split(",")
    groups: list[dict[str, Any]] = []
    if "scaling" in steps:
        # the A/A check needs ~3-4 min: the scaling groups share what is left before it
        reserve = 240.0 if "aa" in steps and not args.smoke else (90.0 if "aa" in steps else 0.0)
        for i, n in enumerate(sizes):
            share = (left() - reserve) / (len(sizes) - i)
            if share < 30:
                groups.append({"ranks": n, "skipped": f"{left():.0f} s left", "rows": []})
                continue
            groups.append(run_group(n, lengths, args.out, args.smoke, share, args.passes))
        results["scaling"] = groups
    if "aa" in steps:
        if left() > 60:
            results["aa"] = aa_check(args.out, args.work, args.smoke, left() - 10)
        else:
            results["aa"] = {"skipped": f"{left():.0f} s left"}
    results["wall_s"] = round(time.perf_counter() - started, 1)
    (args.out / "distributed_gpu.json").write_text(json.dumps(results, indent=1))
    text = table(groups) if groups else "(no scaling step)"
    (args.out / "table.md").write_text(text + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "scaling"}, indent=1)[-5000:])
    for g in groups:
        print(
            f"group N={g['ranks']}: exit {g.get('exit')}, {g.get('wall_s')} s, {len(g['rows'])} lengths, log {g.get('log')}"
        )
    checks = [r for g in groups for r in g["rows"] if "check" in r]
    if checks:
        worst = {k: max(r[k] for r in checks) for k in checks[0] if k.startswith("rel_err")}
        print("exactness (distributed vs one device, worst over dtypes/causal/N): " + ", ".join(
            f"{k[8:]} {v:.2e}" for k, v in worst.items()))  # fmt: skip
        for r in checks:
            errs = " ".join(
                f"{k[8:] if k.startswith('rel_err') else k}={r[k]:.1e}"
                for k in r
                if k.startswith(("rel_err", "bf16_", "dist_"))
            )
            print(f"  N={r['ranks']} {r['dtype']} causal={r['causal']} lanes={r.get('lanes')}: {errs}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
