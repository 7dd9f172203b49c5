# ruff: noqa: E501  (Markdown table rows are kept one per line)
"""Where one benchmark round's time goes: trace every process of a round, then add the phases up.

Measures the round as it is, without editing perfguard: ``install`` drops a tracer module and a
``.pth`` line into an interpreter's site-packages, so that every process of that interpreter
(perfguard, asv, asv's discovery, its fork server and every benchmark process forked from it)
records, when ``PERFGUARD_TRACE_DIR`` is set, its start and exit and the wall time of the calls
that make up a measurement: importing torch, CUDA initialisation, building a case, first calls,
peak-memory passes, the CUDA timer's eager samples, graph capture, timed samples and warm-up
(the timer's remainder).  ``analyze`` turns the per-process event files into one table.

Usage (on the GPU machine, as root, after ``source docs/perf/device_setup.sh``)::

    python3 docs/perf/round_phases.py install          # into this interpreter's site-packages
    PERFGUARD_TRACE_DIR=/tmp/trace perfguard run --profile production --rounds 1 --db sqlite:////tmp/t.db
    python3 docs/perf/round_phases.py analyze /tmp/trace --markdown phases.md --json phases.json
    python3 docs/perf/round_phases.py uninstall

The tracer wraps functions by name when their module is first imported; a name that does not
exist (another perfguard version) is skipped and listed in the table's notes.
"""

from __future__ import annotations

import argparse
import json
import site
import sys
from collections import defaultdict
from pathlib import Path

TRACER = r'''
"""perfguard round-phase tracer (docs/perf/round_phases.py); active only with PERFGUARD_TRACE_DIR."""
import functools, importlib.abc, importlib.util, json, os, sys, time

_DIR = os.environ.get("PERFGUARD_TRACE_DIR")
_T0 = time.time()


def _process_start():
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


def _emit(kind, **fields):
    if not _DIR:
        return
    fields.update(kind=kind, pid=os.getpid(), ppid=os.getppid(), t=time.time())
    with open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(fields, default=str) + "\n")


_DEPTH = {"n": 0}


def _wrap(module, name, label=None, args_label=None):
    fn = getattr(module, name, None)
    if fn is None or getattr(fn, "_traced", False):
        _emit("missing", name=f"{module.__name__}.{name}")
        return
    @functools.wraps(fn)
    def traced(*args, **kwargs):
        extra = args_label(args, kwargs) if args_label else {}
        start = time.time()
        _DEPTH["n"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _DEPTH["n"] -= 1
            _emit("call", name=label or name, start=start, end=time.time(), depth=_DEPTH["n"], **extra)
    traced._traced = True
    setattr(module, name, traced)


def _patch(name, module):
    if name == "perfguard.engine.timing.cpu":
        _wrap(module, "time_cpu")
    elif name == "perfguard.engine.timing.memory":
        _wrap(module, "peak_memory")
    elif name == "perfguard.engine.timing.cuda":
        _wrap(module, "time_cuda")
        _wrap(module, "capture")
        _wrap(module, "_event_samples", args_label=lambda a, k: {
            "what": "eager" if (a[2] if len(a) > 2 else k.get("nvml")) is None else "timed",
            "n": a[1] if len(a) > 1 else k.get("n")})
    elif name == "perfguard.engine.cases":
        _wrap(module, "build", args_label=lambda a, k: {"impl": a[0], "seq_len": a[1]})
        _wrap(module, "first_call")
    elif name.endswith("bench_attention"):
        _wrap(module, "_measure_group", args_label=lambda a, k: {"impl": a[1], "dtype": a[2]})
    elif name == "torch.cuda":
        _wrap(module, "_lazy_init", label="cuda_init")


class _Finder(importlib.abc.MetaPathFinder):
    WATCH = ("torch", "torch.cuda", "perfguard.engine.timing.cpu", "perfguard.engine.timing.cuda",
             "perfguard.engine.timing.memory", "perfguard.engine.cases")

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.WATCH and not fullname.endswith("bench_attention"):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module, _original=original, _name=fullname):
            start = time.time()
            _original(module)
            if _name == "torch":
                _emit("call", name="import torch", start=start, end=time.time(), depth=_DEPTH["n"])
            _patch(_name, module)

        loader.exec_module = exec_module
        return spec


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    _emit("start", argv=sys.argv, orig_argv=getattr(sys, "orig_argv", None), started=_process_start(), pth=_T0)
    sys.meta_path.insert(0, _Finder())
    import atexit
    atexit.register(lambda: _emit("exit"))
    _fork_pid = {"pid": os.getpid()}
    def _after_fork():
        _emit("forked", argv=sys.argv)
    os.register_at_fork(after_in_child=_after_fork)
'''

PTH = "import perfguard_phase_trace\n"


def _site_dir() -> Path:
    return Path(site.getsitepackages()[0])


def install() -> None:
    target = _site_dir()
    (target / "perfguard_phase_trace.py").write_text(TRACER)
    (target / "zz_perfguard_phase_trace.pth").write_text(PTH)
    print(f"tracer installed in {target}")


def uninstall() -> None:
    target = _site_dir()
    for name in ("perfguard_phase_trace.py", "zz_perfguard_phase_trace.pth"):
        (target / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# analysis
# --------------------------------------------------------------------------------------------


def _load(trace_dir: Path) -> dict[int, list[dict]]:
    events: dict[int, list[dict]] = defaultdict(list)
    for path in trace_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            events[int(e["pid"])].append(e)
    for evs in events.values():
        evs.sort(key=lambda e: e["t"])
    return events


def _argv(e: dict) -> str:
    return " ".join(str(a) for a in (e.get("orig_argv") or e.get("argv") or []))


def _role(evs: list[dict]) -> str:
    """What a process was: the last exec'ed command line decides, else what it was forked from."""
    starts = [e for e in evs if e["kind"] == "start"]
    if starts:
        argv = _argv(starts[-1])
        if "benchmark.py discover" in argv:
            return "asv discovery"
        if "benchmark.py run_server" in argv:
            return "asv fork server"
        if " -m asv " in f" {argv} " or "asv/__main__.py" in argv:
            return "asv"
        if "perfguard" in argv:
            return "perfguard"
        return "helper"
    forked = next((e for e in evs if e["kind"] == "forked"), None)
    if forked is not None and "run_server" in _argv(forked):
        if any(e["kind"] == "call" and e["name"] == "_measure_group" for e in evs):
            return "group"
        return "benchmark"
    return "helper"


def _span(p: dict) -> float:
    return p["end"] - p["begin"]


def analyze(trace_dir: Path) -> dict:
    events = _load(trace_dir)
    processes = []
    for pid, evs in events.items():
        starts = [e for e in evs if e["kind"] == "start"]
        forked = next((e["t"] for e in evs if e["kind"] == "forked"), None)
        begin = (starts[-1].get("started") or starts[-1]["pth"]) if starts else (forked or evs[0]["t"])
        end = max(e.get("end", e["t"]) for e in evs)
        processes.append({"pid": pid, "role": _role(evs), "begin": begin, "end": end, "events": evs})
    # Only the last perfguard invocation (a trace directory may hold earlier ones).
    runs = [p for p in processes if p["role"] == "perfguard"]
    if runs:
        last = max(p["begin"] for p in runs)
        processes = [p for p in processes if p["begin"] >= last - 0.001]
    by_role: dict[str, list[dict]] = defaultdict(list)
    for p in processes:
        by_role[p["role"]].append(p)
    rounds = sorted(by_role["asv"], key=lambda p: p["begin"])
    total = sum(_span(p) for p in rounds)
    phases: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    groups = []
    for p in by_role["group"]:
        calls = [e for e in p["events"] if e["kind"] == "call"]
        group = next(e for e in calls if e["name"] == "_measure_group")
        inside = [
            e for e in calls if e is not group and group["start"] <= e["start"] and e["end"] <= group["end"]
        ]
        own: dict[str, float] = defaultdict(float)
        for e in inside:
            name, span = e["name"], e["end"] - e["start"]
            if name == "_event_samples":
                own[f"timer: {e.get('what')} samples"] += span
                counts[f"{e.get('what')} samples"] += int(e.get("n") or 0)
            elif name in ("time_cuda", "time_cpu"):
                nested = sum(
                    x["end"] - x["start"]
                    for x in inside
                    if x["name"] in ("_event_samples", "capture")
                    and e["start"] <= x["start"]
                    and x["end"] <= e["end"]
                )
                own["timer: first call and warm-up"] += span - nested
                counts["timings"] += 1
            elif name == "capture":
                own["timer: graph capture (3 warm calls + capture)"] += span
            elif name == "peak_memory":
                own["peak-memory passes (1 warm + 2 measured calls)"] += span
                counts["memory numbers"] += 1
            elif name == "build":
                own["building cases (module, inputs)"] += span
            elif name == "first_call":
                own["first calls before each benchmark (compile, autotune)"] += span
            elif name == "cuda_init":
                own["CUDA init"] += span
        accounted = sum(v for k, v in own.items() if k != "CUDA init")
        own["group: the rest (sidecars, gc, empty_cache)"] = (group["end"] - group["start"]) - accounted
        own["group process: fork to group start"] = group["start"] - p["begin"]
        own["group process: after the group"] = p["end"] - group["end"]
        for k, v in own.items():
            phases[k] += v
        groups.append(
            {
                "impl": group.get("impl"),
                "dtype": group.get("dtype"),
                "seconds": group["end"] - group["start"],
                "process": _span(p),
                "phases": dict(own),
            }
        )
    phases["benchmark processes that read their group's sidecar"] = sum(
        _span(p) for p in by_role["benchmark"]
    )
    counts["benchmark processes"] = len(by_role["benchmark"]) + len(by_role["group"])
    counts["rounds"] = len(rounds)
    for role in ("asv discovery", "asv fork server"):
        for p in by_role[role]:
            imports = sum(
                e["end"] - e["start"]
                for e in p["events"]
                if e["kind"] == "call" and e["name"] == "import torch"
            )
            if role == "asv discovery":
                phases["asv discovery process: import torch"] += imports
                phases["asv discovery process: the rest"] += _span(p) - imports
            else:  # the server idles while its children run: count its start-up only
                children = [
                    q["begin"] for q in by_role["group"] + by_role["benchmark"] if q["begin"] >= p["begin"]
                ]
                ready = min(children) if children else p["end"]
                phases["asv fork server: import torch (suite pre-import)"] += imports
                phases["asv fork server: the rest of its start-up"] += (ready - p["begin"]) - imports
    for p in by_role["perfguard"]:
        phases["perfguard process outside asv (start-up, store, git, worktrees)"] += _span(p) - total
    grand = total + phases["perfguard process outside asv (start-up, store, git, worktrees)"]
    accounted = sum(v for k, v in phases.items() if k != "CUDA init")
    phases["asv's own work between benchmark processes (remainder)"] = grand - accounted
    return {
        "total_s": grand,
        "asv_rounds_s": total,
        "phases": dict(phases),
        "counts": dict(counts),
        "groups": groups,
        "roles": {k: len(v) for k, v in by_role.items()},
    }


def markdown(result: dict) -> str:
    total = result["total_s"]
    lines = ["| phase | s | share |", "| --- | ---: | ---: |"]
    for name, value in sorted(result["phases"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {name} | {value:.1f} | {100 * value / total:.0f}% |")
    lines.append(f"| **perfguard run, start to exit** | **{total:.1f}** | |")
    lines.append("")
    lines.append("CUDA init is inside the group's first call; it is shown on its own and not added again.")
    lines += ["", "| group (one process per implementation) | group s | phases |", "| --- | ---: | --- |"]
    for g in sorted(result["groups"], key=lambda g: -g["seconds"]):
        top = ", ".join(f"{k} {v:.1f}" for k, v in sorted(g["phases"].items(), key=lambda kv: -kv[1])[:4])
        lines.append(f"| {g['impl']} {g['dtype']} | {g['seconds']:.1f} | {top} |")
    lines += ["", "counts: " + ", ".join(f"{k} {v}" for k, v in sorted(result["counts"].items()))]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install")
    sub.add_parser("uninstall")
    a = sub.add_parser("analyze")
    a.add_argument("trace_dir", type=Path)
    a.add_argument("--markdown", type=Path)
    a.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "install":
        install()
    elif args.command == "uninstall":
        uninstall()
    else:
        result = analyze(args.trace_dir)
        text = markdown(result)
        print(text)
        if args.markdown:
            args.markdown.write_text(text)
        if args.json:
            args.json.write_text(json.dumps({k: v for k, v in result.items()}, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
