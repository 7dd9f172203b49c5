# ruff: noqa: E501  (Markdown table rows are kept one per line)
"""Probe for the fast gate (issue 19) and the work metrics (issue 12), on one GPU.

Runs each method in fresh processes on the same benchmark cases (``perfguard.engine.cases`` at the
``production`` profile's shape) and writes one JSON file per process:

- ``proto``: the candidate timer: CUDA-graph replay, L2 flush before every sample, warm-up only as
  long as the GPU needs (0.3 s of GPU work when it was idle, 20 ms after other timed work), and
  sampling in batches until the 95% order-statistic interval of the median is within ±0.2% (at
  least 10 samples, at most 0.3 s of sampled GPU time);
- ``nvbench``: ``cuda-bench`` (NVBench's Python package) on ``torch.cuda.ExternalStream`` of
  NVBench's stream, cold (L2-flushed) measurement, its stdrel criterion with short times;
- ``work``: what a call *does*, counted: aten ops and FLOPs (``TorchDispatchMode`` +
  ``FlopCounterMode``), kernel nodes of the captured CUDA graph (``cuda.bindings``) and kernels in
  a ``torch.profiler`` pass, each with what it costs.

``python docs/perf/timer_probe.py all --out DIR`` runs 3 processes per timing method and one
``work`` process, then prints the table (process CV and seconds per number).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

CASES = [
    ("improved", 1024, "forward"), ("improved", 4096, "forward"), ("improved", 16384, "forward"),
    ("improved", 4096, "forward_backward"), ("multihead_improved", 4096, "forward"),
    ("dilated", 4096, "forward"), ("ring", 1024, "forward"), ("ring", 16384, "forward"),
    ("ring", 4096, "forward_backward"), ("hilbert_ring", 4096, "forward"),
    ("block_sparse_ring", 4096, "forward"), ("multihead_dilated", 4096, "forward"),
]  # fmt: skip


def _build(impl: str, seq_len: int, pass_name: str):
    from perfguard import profiles
    from perfguard.engine import cases

    profile = profiles.resolve("production", cuda=True)
    case = cases.build(impl, seq_len, "bfloat16", "cuda", profile)
    fn = case.forward() if pass_name == "forward" else case.forward_backward()
    return case, fn


# --------------------------------------------------------------------------------------------
# the candidate timer
# --------------------------------------------------------------------------------------------

_LAST_BUSY: list[float] = []


def _median_ci(xs: list[float]) -> tuple[float, float, float]:
    s = sorted(xs)
    n = len(s)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(s), s[lo], s[hi]


def proto_time(fn) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    t_first = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        s0.record()
        fn()
        s1.record()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager_ms = s0.elapsed_time(s1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    t_capture = time.perf_counter()
    idle = not _LAST_BUSY or time.perf_counter() - _LAST_BUSY[-1] > 1.0
    target = 0.3 if idle else 0.02
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    graph.replay()
    e1.record()
    torch.cuda.synchronize()
    est = max(e0.elapsed_time(e1) / 1000.0, 1e-6)
    warm_calls = max(3, int(target / est))
    for _ in range(warm_calls):
        graph.replay()
    torch.cuda.synchronize()
    t_warm = time.perf_counter()
    samples: list[float] = []
    batch = max(5, min(100, int(0.01 / est)))
    stop = ""
    while True:
        pairs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)
        ]
        for a, b in pairs:
            flush.zero_()
            a.record()
            graph.replay()
            b.record()
        torch.cuda.synchronize()
        samples += [a.elapsed_time(b) / 1000.0 for a, b in pairs]
        if len(samples) >= 10:
            med, lo, hi = _median_ci(samples)
            if (hi - lo) / 2 / med <= 0.002:
                stop = "precise"
                break
        if sum(samples) >= 0.3:
            stop = "time"
            break
        if len(samples) >= 3000:
            stop = "count"
            break
    t_end = time.perf_counter()
    _LAST_BUSY.append(t_end)
    med, lo, hi = _median_ci(samples)
    return {
        "median": med, "ci": [lo, hi], "n": len(samples), "stop": stop, "eager_ms": eager_ms,
        "warm_calls": warm_calls, "warm_target_s": target,
        "seconds": {"first": t_first - t0, "capture": t_capture - t_first, "warm": t_warm - t_capture,
                    "samples": t_end - t_warm, "total": t_end - t0},
    }  # fmt: skip


# --------------------------------------------------------------------------------------------
# NVBench (cuda-bench)
# --------------------------------------------------------------------------------------------


def nvbench_all(cases: list[tuple], out: Path) -> dict[str, Any]:
    import torch
    from cuda import bench

    built = {}
    timings: dict[str, float] = {}
    for impl, n, p in cases:
        name = f"{impl}-{n}-{p}"
        if impl in ("ring", "hilbert_ring"):
            continue  # synchronises with the host on a side stream: NVBench reports a deadlock

        def make(impl=impl, n=n, p=p, name=name):
            def run(state):
                t0 = time.perf_counter()
                if name not in built:
                    built[name] = _build(impl, n, p)
                    built[name][1]()
                    torch.cuda.synchronize()
                fn = built[name][1]

                def launch(launch):
                    stream = torch.cuda.ExternalStream(launch.get_stream().addressof())
                    with torch.cuda.stream(stream):
                        fn()

                state.exec(launch, batched=False)
                timings[name] = time.perf_counter() - t0

            run.__name__ = name.replace("-", "_")
            return run

        bench.register(make())
    json_path = out.with_suffix(".nvbench.json")
    t0 = time.perf_counter()
    bench.run_all_benchmarks(
        ["nvbench", "--json", str(json_path), "--min-time", "0.1", "--max-noise", "0.5", "--timeout", "5"]
    )
    total = time.perf_counter() - t0
    results: dict[str, Any] = {"total_s": total, "per_state_s": timings}
    try:
        results.update(_nvbench_values(json_path))
    except Exception as exc:  # keep the timing even if the JSON layout differs
        results["json_error"] = repr(exc)
    return results


def _nvbench_values(json_path: Path) -> dict[str, dict[str, float]]:
    """{benchmark name: {summary tag: value}} from NVBench's JSON output (values are strings)."""
    out: dict[str, dict[str, float]] = {}
    for b in json.loads(json_path.read_text()).get("benchmarks", []):
        for st in b.get("states", []):
            entry: dict[str, float] = {}
            for summary in st.get("summaries") or []:
                for d in summary.get("data", []):
                    if d.get("name") == "value":
                        with contextlib.suppress(TypeError, ValueError):
                            entry[summary.get("tag")] = float(d.get("value"))
            out[b["name"]] = entry
    return out


# --------------------------------------------------------------------------------------------
# work metrics
# --------------------------------------------------------------------------------------------


def dispatch_counts(fn) -> dict[str, Any]:
    """aten ops, FLOPs (``torch.utils.flop_counter``'s formulas) and bytes of new tensors of one call.

    ``FlopCounterMode`` itself tracks modules with backward hooks that ``torch.autograd.grad``
    refuses, so its registry of per-op formulas is used from one plain dispatch mode.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: Counter[str] = Counter()
            self.bytes = 0
            self.flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func.overloadpacket
            self.ops[str(packet.__name__)] += 1
            formula = flop_registry.get(packet)
            if formula is not None:
                self.flops += int(formula(*args, **kwargs, out_val=out))
            seen = set()
            for a in torch.utils._pytree.tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor):
                    seen.add(a.untyped_storage().data_ptr())
            for o in torch.utils._pytree.tree_leaves(out):
                if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in seen:
                    self.bytes += o.untyped_storage().nbytes()
            return out

    t0 = time.perf_counter()
    ops = Ops()
    with ops:
        fn()
    torch.cuda.synchronize()
    return {
        "ops": sum(ops.ops.values()),
        "flops": ops.flops,
        "bytes": ops.bytes,
        "top_ops": ops.ops.most_common(8),
        "seconds": time.perf_counter() - t0,
    }


def graph_kernels(fn) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError as exc:
        return {"error": f"keep_graph: {exc}"}
    with torch.cuda.graph(graph):
        fn()
    t_cap = time.perf_counter()
    out: dict[str, Any] = {"capture_s": t_cap - t0}
    try:
        from cuda.bindings import driver, runtime

        handle = graph.raw_cuda_graph()
        types: Counter[str] = Counter()
        names: Counter[str] = Counter()

        def walk(g) -> None:
            _err, _, count = runtime.cudaGraphGetNodes(g, 0)
            _err, nodes, count = runtime.cudaGraphGetNodes(g, count)
            for node in nodes[:count]:
                _err, kind = runtime.cudaGraphNodeGetType(node)
                types[str(kind).rsplit(".", 1)[-1]] += 1
                if kind == runtime.cudaGraphNodeType.cudaGraphNodeTypeKernel:
                    try:
                        _, params = driver.cuGraphKernelNodeGetParams(driver.CUgraphNode(int(node)))
                        _err2, name = driver.cuFuncGetName(params.func)
                        names[name.decode() if isinstance(name, bytes) else str(name)] += 1
                    except Exception as exc:
                        names[f"?{type(exc).__name__}"] += 1
                elif kind == runtime.cudaGraphNodeType.cudaGraphNodeTypeGraph:
                    _err, child = runtime.cudaGraphChildGraphNodeGetGraph(node)
                    walk(child)

        walk(runtime.cudaGraph_t(init_value=int(handle)))
        out.update(
            node_types=dict(types),
            kernels=sum(v for k, v in types.items() if "Kernel" in k),
            top_kernels=names.most_common(6),
            count_s=time.perf_counter() - t_cap,
        )
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def profiler_kernels(fn) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    rows = [e for e in prof.key_averages() if getattr(e, "device_type", None) is not None
            and str(e.device_type).endswith("CUDA")]  # fmt: skip
    kernels = sum(e.count for e in rows)
    top = sorted(rows, key=lambda e: -getattr(e, "device_time_total", 0))[:6]
    return {
        "kernels": kernels,
        "seconds": t1 - t0,
        "analyse_s": time.perf_counter() - t1,
        "top": [(e.key[:80], e.count, getattr(e, "device_time_total", 0)) for e in top],
    }


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------


def worker(method: str, out: Path) -> None:
    t_start = time.perf_counter()
    import torch

    t_import = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    t_cuda = time.perf_counter()
    doc: dict[str, Any] = {
        "method": method,
        "import_torch_s": t_import - t_start,
        "cuda_init_s": t_cuda - t_import,
    }
    from perfguard.engine import timing

    timing.pin_settings("cuda")
    if method == "nvbench":
        doc["nvbench"] = nvbench_all(CASES, out)
    else:
        for impl, n, p in CASES:
            key = f"{impl}-{n}-{p}"
            t0 = time.perf_counter()
            try:
                case, fn = _build(impl, n, p)
                t_build = time.perf_counter() - t0
                if method == "proto":
                    r = proto_time(fn)
                else:
                    fn()
                    torch.cuda.synchronize()
                    r = {"dispatch": dispatch_counts(fn), "graph": graph_kernels(fn)}
                    r["profiler_1"] = profiler_kernels(fn)
                    r["profiler_2"] = profiler_kernels(fn)
                r["build_s"] = t_build
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
            doc[key] = r
            del case, fn
            torch.cuda.empty_cache()
    doc["process_s"] = time.perf_counter() - t_start
    out.write_text(json.dumps(doc, indent=1, default=str))


def run_all(out_dir: Path, processes: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    walls: dict[str, list[float]] = {}
    for method in ("work", *(["proto", "nvbench"] * processes)):
        i = len(walls.get(method, []))
        path = out_dir / f"{method}-{i}.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "worker", method, str(path)], capture_output=True,
                              text=True, timeout=400)  # fmt: skip
        walls.setdefault(method, []).append(time.perf_counter() - t0)
        (out_dir / f"{method}-{i}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
        print(f"{method} {i}: exit {proc.returncode} in {walls[method][-1]:.1f} s", flush=True)
    summarize(out_dir, walls)


def summarize(out_dir: Path, walls: dict[str, list[float]] | None = None) -> None:
    docs: dict[str, list[dict]] = {}
    for path in sorted(out_dir.glob("*.json")):
        if path.name.endswith(".nvbench.json") or path.name == "walls.json":
            continue
        d = json.loads(path.read_text())
        side = path.with_suffix(".nvbench.json")
        if side.exists():
            d["_nvbench_json"] = str(side)
        docs.setdefault(d["method"], []).append(d)
    lines = ["| case | proto median (ms) | proto CV | proto s/number | n | nvbench median (ms) | nvbench CV | nvbench s/state |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for impl, n, p in CASES:
        key = f"{impl}-{n}-{p}"
        pm = [d[key]["median"] * 1e3 for d in docs.get("proto", []) if "median" in d.get(key, {})]
        ps = [d[key]["seconds"]["total"] for d in docs.get("proto", []) if "median" in d.get(key, {})]
        pn = [d[key]["n"] for d in docs.get("proto", []) if "median" in d.get(key, {})]
        nm, ns = [], []
        for d in docs.get("nvbench", []):
            nb = d.get("nvbench", {})
            entry = nb.get(key.replace("-", "_")) or {}
            if d.get("_nvbench_json"):
                entry = _nvbench_values(Path(d["_nvbench_json"])).get(key.replace("-", "_"), {})
            gpu = entry.get("nv/cold/time/gpu/mean")
            if isinstance(gpu, (int, float)):
                nm.append(gpu * 1e3)
            st = nb.get("per_state_s", {}).get(key)
            if st:
                ns.append(st)

        def cv(xs: list[float]) -> str:
            return f"{100 * statistics.pstdev(xs) / statistics.mean(xs):.2f}%" if len(xs) > 1 else "–"

        def med(xs: list[float], f: str = ".3f") -> str:
            return format(statistics.median(xs), f) if xs else "–"

        lines.append(
            f"| {key} | {med(pm)} | {cv(pm)} | {med(ps, '.2f')} | {med(pn, '.0f')} | {med(nm)} | {cv(nm)} | {med(ns, '.2f')} |"
        )
    for d in docs.get("work", []):
        lines += ["", "| case | aten ops | GFLOP | MB allocated | dispatch s | graph kernels | profiler kernels | profiler s (1st, 2nd) | graph count s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]  # fmt: skip
        for impl, n, p in CASES:
            w = d.get(f"{impl}-{n}-{p}", {})
            if "dispatch" not in w:
                lines.append(f"| {impl}-{n}-{p} | {w.get('error', '?')} |")
                continue
            dd, g = w["dispatch"], w["graph"]
            lines.append(
                f"| {impl}-{n}-{p} | {dd['ops']} | {dd['flops'] / 1e9:.2f} | {dd['bytes'] / 1e6:.1f} | {dd['seconds']:.3f} | "
                f"{g.get('kernels') or sum(v for k, v in g.get('node_types', {}).items() if 'Kernel' in k)} | "
                f"{w['profiler_2']['kernels']} | "
                f"{w['profiler_1']['seconds']:.2f}, {w['profiler_2']['seconds']:.2f} | {g.get('count_s', 0):.3f} |"
            )
    for method, ds in docs.items():
        lines.append(f"\n{method}: import torch {[round(d['import_torch_s'], 2) for d in ds]} s, CUDA init "
                     f"{[round(d['cuda_init_s'], 2) for d in ds]} s, process {[round(d['process_s'], 1) for d in ds]} s")  # fmt: skip
    if walls:
        (out_dir / "walls.json").write_text(json.dumps(walls))
    text = "\n".join(lines)
    (out_dir / "summary.md").write_text(text + "\n")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("method", choices=("proto", "nvbench", "work"))
    w.add_argument("out", type=Path)
    a = sub.add_parser("all")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--processes", type=int, default=3)
    s = sub.add_parser("summarize")
    s.add_argument("out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.cmd == "worker":
        worker(args.method, args.out)
    elif args.cmd == "all":
        run_all(args.out, args.processes)
    else:
        summarize(args.out)


if __name__ == "__main__":
    main()
