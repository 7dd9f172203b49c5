"""Run the asv suites on one commit in the current environment and read back what they measured.

perfguard uses asv as its benchmark runner (asv.md §7): one ``asv run -E existing:<python>
--set-commit-hash SHA`` per *round*, each (benchmark, parameters) in a fresh process, no per-commit
virtualenv builds of torch.  What differs between commits is only the code under test: the suite,
the timer and perfguard itself always come from the checkout perfguard runs in (as with ``asv
continuous``, both sides are measured by the same rules), while ``attention`` is imported from the
commit being measured through an *import shim*: a directory first on ``sys.path`` of every benchmark
process (asv's ``ASV_PYTHONPATH``; asv drops a plain ``PYTHONPATH``) holding one link,
``attention -> <source>/attention``, where ``<source>`` is the work tree itself (HEAD, dirty or not)
or a git worktree of another commit.

Each invocation gets its own configuration (the project's ``asv.conf.json`` with private result,
environment and HTML directories), its own asv machine file (``HOME`` points at a private
directory holding ``.asv-machine.json`` with GPU fields, asv.md §2.6; Triton, CUDA and torch caches
keep their usual places) and its own sidecar directory (:mod:`perfguard.sidecar`).  Results are
parsed from asv's result file (asv.md §3), joined with the sidecars' samples, and returned as
:class:`perfguard.store.ResultRecord` values; nothing is written to the store here.

Failures are told apart (asv.md §5: never read "non-zero" as "slower"): asv's exit 1 (its own
configuration or environment) is a :class:`BenchmarkError`; exit 2 means some benchmarks failed,
which become ``failed`` results with the traceback asv printed; a missing, truncated or malformed
result file is a :class:`ResultsError`.  Both errors exit 2 and leave the store untouched.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfguard import sidecar
from perfguard.errors import BenchmarkError, ResultsError
from perfguard.machine import Fingerprint
from perfguard.profiles import DEVICE_ENV, PROFILE_ENV, Profile
from perfguard.store.records import ResultRecord

#: Environment variable naming the asv command (default: this interpreter's ``-m asv``).
ASV_ENV = "PERFGUARD_ASV"
#: The ``--bench`` regexes of a round, for the suite's group measurement (asv_benchmarks/bench_attention.py).
SELECTION_ENV = "PERFGUARD_SELECTION"
#: The package whose code differs between the commits perfguard compares.
PACKAGE = "attention"


@dataclass(frozen=True)
class Kind:
    """What perfguard makes of a benchmark's numbers (docs/design.md, "asv suites")."""

    metric: str
    unit: str
    direction: str
    gated: bool


_KINDS = {
    "Forward.track_time": Kind("time", "seconds", "lower", True),
    "ForwardBackward.track_time": Kind("time", "seconds", "lower", True),
    "PeakMemory.track_forward": Kind("memory", "bytes", "lower", True),
    "PeakMemory.track_forward_backward": Kind("memory", "bytes", "lower", True),
}
_UNIT_KINDS = {
    "seconds": Kind("time", "seconds", "lower", True),
    "bytes": Kind("memory", "bytes", "lower", True),
}
#: Derived from ``Forward.track_time`` (the same measurement, inverted): reported, never gated.
THROUGHPUT = Kind("throughput", "tokens/s", "higher", False)
EFFICIENCY = Kind("efficiency", "TFLOP/s", "higher", False)


def kind_of(benchmark: str, unit: str | None) -> Kind:
    """The metric of a benchmark, by its name (``module.Class.method``) or else by its unit."""
    short = benchmark.split(".", 1)[1] if benchmark.count(".") >= 2 else benchmark
    if short in _KINDS:
        return _KINDS[short]
    if unit in _UNIT_KINDS:
        return _UNIT_KINDS[unit]
    return Kind("throughput", unit or "unknown", "higher", False)


@dataclass(frozen=True)
class Target:
    """What one round measures: the commit asv labels it with, and where its ``attention`` lives."""

    sha: str  # a commit of the repository (for a dirty tree: HEAD)
    source: Path  # the directory whose attention/ package is measured


@dataclass
class Round:
    """The outcome of one asv invocation."""

    results: list[ResultRecord]
    started_at: datetime
    finished_at: datetime
    command: list[str]
    log: str
    exit_code: int
    bench: tuple[str, ...] = ()  # the round's --bench selection

    @property
    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "failed": 0, "skipped": 0}
        for r in self.results:
            out[r.status] += 1
        return out


@dataclass
class Progress:
    """Progress of one round: combinations finished out of those selected, and the latest one."""

    done: int
    total: int | None
    latest: str = ""


def import_shim(source: Path, parent: Path) -> Path:
    """A directory holding only ``attention -> <source>/attention``, to put first on ``PYTHONPATH``."""
    shim = Path(tempfile.mkdtemp(prefix="import-shim-", dir=parent))
    package = source / PACKAGE
    if not (package / "__init__.py").exists():
        raise BenchmarkError(
            f"{source} has no {PACKAGE}/ package to benchmark",
            hint="the commit predates the attention package, or the checkout is incomplete",
        )
    (shim / PACKAGE).symlink_to(package.resolve(), target_is_directory=True)
    return shim


def asv_command() -> list[str]:
    """``$PERFGUARD_ASV`` split like a shell would, else ``<this python> -m asv``."""
    custom = os.environ.get(ASV_ENV)
    return shlex.split(custom) if custom else [sys.executable, "-m", "asv"]


def _real_home_caches() -> dict[str, str]:
    """Cache locations that follow ``HOME``, pinned to the real home so compiled kernels are reused."""
    home = Path.home()
    return {
        "TRITON_CACHE_DIR": str(home / ".triton" / "cache"),
        "CUDA_CACHE_PATH": str(home / ".nv" / "ComputeCache"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
    }


def load_asv_config(root: Path) -> dict[str, Any]:
    """The project's ``asv.conf.json`` (asv's own reader: ``//`` comments allowed)."""
    path = root / "asv.conf.json"
    if not path.exists():
        raise BenchmarkError(
            f"there is no asv.conf.json in {root}",
            hint="run perfguard at the root of a project with asv suites (asv.conf.json, asv_benchmarks/)",
        )
    import json5  # what asv itself reads asv.conf.json with (comments allowed); importing asv is slower

    try:
        config = json5.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchmarkError(f"{path} is not valid asv configuration: {exc}", hint="fix the file") from None
    if not isinstance(config, dict):
        raise BenchmarkError(f"{path} is not a JSON object", hint="fix the file")
    return config


class AsvRunner:
    """Runs rounds of the suites for one machine, profile and device (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        machine: Fingerprint,
        profile: Profile,
        device: str,
        work_dir: Path,
        *,
        on_progress: Callable[[Progress], None] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.root = root
        self.machine = machine
        self.profile = profile
        self.device = device
        self.work_dir = work_dir
        self.on_progress = on_progress
        self.timeout_s = timeout_s
        self.config = load_asv_config(root)
        self.benchmark_dir = (root / str(self.config.get("benchmark_dir", "benchmarks"))).resolve()
        if not self.benchmark_dir.is_dir():
            raise BenchmarkError(
                f"the asv benchmark directory {self.benchmark_dir} does not exist",
                hint="check benchmark_dir in asv.conf.json",
            )
        self.home = work_dir / "asv-home"
        self.home.mkdir(parents=True, exist_ok=True)
        entry = machine.asv_entry()
        (self.home / ".asv-machine.json").write_text(
            json.dumps({"version": 1, machine.asv_name(): entry}, indent=2)
        )

    # --- one round ----------------------------------------------------------------------------

    def run(self, target: Target, *, bench: Sequence[str] = (), label: str = "") -> Round:
        """One asv invocation: every selected benchmark x params once, each in a fresh process."""
        invocation = Path(tempfile.mkdtemp(prefix="round-", dir=self.work_dir))
        results_dir, run_dir = invocation / "results", invocation / "sidecars"
        run_dir.mkdir()
        config = {
            **self.config,
            "repo": str(self.root),
            "benchmark_dir": str(self.benchmark_dir),
            "results_dir": str(results_dir),
            "html_dir": str(invocation / "html"),
            "env_dir": str(invocation / "env"),
            "environment_type": "existing",
            "branches": ["HEAD"],
        }
        config_path = invocation / "asv.conf.json"
        config_path.write_text(json.dumps(config, indent=2))
        shim = import_shim(target.source, invocation)
        command = [
            *asv_command(),
            "--config",
            str(config_path),
            "run",
            "-E",
            f"existing:{sys.executable}",
            "--set-commit-hash",
            target.sha,
            "--machine",
            self.machine.asv_name(),
            "--show-stderr",
        ]
        for regex in bench:
            command += ["--bench", regex]
        env = {
            **os.environ,
            **{k: v for k, v in _real_home_caches().items() if v and k not in os.environ},
            "HOME": str(self.home),
            # asv's benchmark runner drops PYTHONPATH from sys.path unless ASV_PYTHONPATH is set
            # (asv/benchmark.py); ASV_PYTHONPATH is put first on sys.path of every benchmark process.
            "ASV_PYTHONPATH": os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p),
            "PYTHONUNBUFFERED": "1",
            sidecar.RUN_DIR_ENV: str(run_dir),
            SELECTION_ENV: json.dumps(list(bench)),
            PROFILE_ENV: self.profile.name,
            DEVICE_ENV: self.device,
        }
        started = datetime.now(timezone.utc)
        log, code = self._execute(command, env, results_dir, run_dir, bench, label)
        finished = datetime.now(timezone.utc)
        if code == 1 or code < 0 or code not in (0, 2):
            raise BenchmarkError(
                f"asv could not run the suites (exit {code}){_tail(log)}",
                hint="the lines above are asv's; fix the configuration or environment it names "
                "(PERFGUARD_ASV overrides the asv command)",
            )
        results = parse_results(
            results_dir,
            self.machine.asv_name(),
            target.sha,
            run_dir,
            bench=bench,
            log=log,
        )
        return Round(results, started, finished, command, log, code, tuple(bench))

    def _execute(
        self,
        command: list[str],
        env: Mapping[str, str],
        results_dir: Path,
        run_dir: Path,
        bench: Sequence[str],
        label: str,
    ) -> tuple[str, int]:
        """Run asv, collecting its output and reporting progress; (output, exit code)."""
        try:
            proc = subprocess.Popen(
                command,
                cwd=self.root,
                env=dict(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=False,
            )
        except OSError as exc:
            raise BenchmarkError(
                f"could not start asv ({' '.join(command[:3])}): {exc}",
                hint=f"install asv==0.6.6 into this environment, or set {ASV_ENV}",
            ) from None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        total: int | None = None
        seen: set[str] = set()
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            while proc.poll() is None:
                reader.join(timeout=0.5)
                if total is None:
                    total = _selected_count(results_dir / "benchmarks.json", bench)
                if self.on_progress is not None:
                    before = len(seen)
                    for n, line in enumerate(self._finished(run_dir, seen), start=before + 1):
                        self.on_progress(Progress(n, total, f"{label}{line}"))  # each one (CI logs)
                if deadline is not None and time.monotonic() > deadline:
                    proc.kill()
                    raise BenchmarkError(
                        f"asv did not finish within {self.timeout_s:.0f} s",
                        hint="select fewer benchmarks (--bench) or raise the timeout",
                    )
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        reader.join()
        if self.on_progress is not None:
            before = len(seen)
            for n, line in enumerate(self._finished(run_dir, seen), start=before + 1):
                self.on_progress(Progress(n, total, f"{label}{line}"))
        return "".join(lines), proc.returncode

    @staticmethod
    def _finished(run_dir: Path, seen: set[str]) -> list[str]:
        """Every combination finished since the last call (from their sidecars), in finishing order."""
        done = []
        for path in sorted(run_dir.glob("*.json"), key=lambda p: p.stat().st_mtime):
            if path.name in seen or path.name.startswith("group-"):  # the suite's group records
                continue
            seen.add(path.name)
            try:
                doc = json.loads(path.read_text())
                params = ", ".join(str(v) for v in doc["params"].values())
                done.append(f"{doc['benchmark'].split('.', 1)[-1]}({params}) {_format_value(doc)}")
            except (OSError, ValueError, KeyError, AttributeError):
                done.append(path.name)
        return done


def _format_value(doc: Mapping[str, Any]) -> str:
    value = doc.get("value")
    if not isinstance(value, (int, float)):
        return ""
    if doc.get("unit") == "seconds":
        return f"{value * 1e3:.3f} ms"
    if doc.get("unit") == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value:g}"


def _tail(log: str, lines: int = 25) -> str:
    kept = [line for line in log.strip().splitlines() if line.strip()][-lines:]
    return (":\n  " + "\n  ".join(kept)) if kept else ""


def _selected_count(benchmarks_json: Path, bench: Sequence[str]) -> int | None:
    """How many benchmark x params combinations this round runs (after asv's discovery)."""
    try:
        meta = json.loads(benchmarks_json.read_text())
    except (OSError, ValueError):
        return None
    count = 0
    for name, entry in meta.items():
        if not isinstance(entry, dict):
            continue
        for combo in itertools.product(*entry.get("params") or [[]]):
            label = f"{name}({', '.join(combo)})" if entry.get("params") else name
            if not bench or any(re.search(regex, label) for regex in bench):
                count += 1
    return count


# --------------------------------------------------------------------------------------------
# reading asv's results
# --------------------------------------------------------------------------------------------


def _result_file(results_dir: Path, machine: str, sha: str) -> Path:
    machine_dir = results_dir / machine
    found = sorted(machine_dir.glob(f"{sha[:8]}-*.json")) if machine_dir.is_dir() else []
    if not found:
        raise ResultsError(
            f"asv wrote no result file for commit {sha[:12]} under {machine_dir}",
            hint="asv ran nothing: check --bench (it must match 'name(params)') and the output above",
        )
    if len(found) > 1:
        raise ResultsError(f"several asv result files for {sha[:12]}: {', '.join(p.name for p in found)}")
    return found[0]


def _bad(path: Path, what: str) -> ResultsError:
    return ResultsError(
        f"asv result file {path} is corrupt: {what}; nothing was stored",
        hint="the file was truncated or edited after asv wrote it; run the measurement again",
    )


def read_result_file(path: Path) -> dict[str, Any]:
    """Load and check the shape of one asv result file (results API version 2)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, f"unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(document, dict):
        raise _bad(path, "not a JSON object")
    if document.get("version") != 2:
        raise _bad(path, f"results API version {document.get('version')!r}, expected 2 (asv 0.6)")
    columns = document.get("result_columns")
    results = document.get("results")
    if not isinstance(columns, list) or "result" not in columns or "params" not in columns:
        raise _bad(path, "no 'result_columns' with 'result' and 'params'")
    if not isinstance(results, dict):
        raise _bad(path, "no 'results' object")
    if not isinstance(document.get("commit_hash"), str):
        raise _bad(path, "no 'commit_hash'")
    return document


def _params_of(path: Path, name: str, row: Mapping[str, Any]) -> tuple[list[str], list[tuple[str, ...]]]:
    params = row.get("params") or []
    if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
        raise _bad(path, f"{name}: 'params' is not a list of lists")
    combos = [tuple(c) for c in itertools.product(*params)] if params else [()]
    return params, combos


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _failure_texts(log: str) -> dict[str, dict[str, str]]:
    """asv's ``--show-stderr`` blocks: {benchmark: {param string or "": text}}.

    asv prints, after a benchmark's status line, a block starting ``[ nn%] ···· `` that holds the
    traceback (per parameter set: ``For parameters: 'dilated', 512, 'float32'``) and, for skipped
    parameter sets, ``asv: skipped: <reason>``.
    """
    texts: dict[str, dict[str, str]] = {}
    current: str | None = None
    block: list[str] = []

    def flush() -> None:
        if current is None or not block:
            return
        per: dict[str, list[str]] = {}
        key = ""
        for line in block:
            stripped = line.strip()
            if stripped.startswith("For parameters: "):
                key = stripped[len("For parameters: ") :]
                per.setdefault(key, [])
                continue
            per.setdefault(key, []).append(line)
        merged = texts.setdefault(current, {})
        for key, lines in per.items():
            text = "\n".join(lines).strip("\n")
            if text.strip():
                merged[key] = _dedent(text)

    # "[ 50.00%] ··· bench_attention.Forward.track_time   ok"; not the "··· ====" of a result table
    status_line = re.compile(r"^\[\s*[\d.]+%\] ·{3} ([A-Za-z_][\w]*(?:\.[\w]+)+)(?:\s|$)")
    detail_line = re.compile(r"^\[\s*[\d.]+%\] ·{4} ?(.*)$")
    in_detail = False
    for raw in log.splitlines():
        m = status_line.match(raw)
        if m:
            flush()
            block, in_detail = [], False
            current = m.group(1)
            continue
        m = detail_line.match(raw)
        if m:
            flush()
            block, in_detail = [m.group(1)], True
            continue
        if raw.startswith("[") or raw.startswith("·"):
            flush()
            block, in_detail = [], False
            continue
        if in_detail:
            block.append(raw)
    flush()
    return texts


def _dedent(text: str) -> str:
    lines = text.splitlines()
    widths = [len(line) - len(line.lstrip(" ")) for line in lines[1:] if line.strip()]
    cut = min(widths) if widths else 0
    return "\n".join([lines[0].strip(), *(line[cut:] for line in lines[1:])]).strip()


def parse_results(
    results_dir: Path,
    machine: str,
    sha: str,
    run_dir: Path,
    *,
    bench: Sequence[str] = (),
    log: str = "",
) -> list[ResultRecord]:
    """The results of one round as store records (see the module docstring)."""
    path = _result_file(results_dir, machine, sha)
    document = read_result_file(path)
    columns: list[str] = document["result_columns"]
    meta_path = results_dir / "benchmarks.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    failures = _failure_texts(log)
    records: list[ResultRecord] = []
    for name, raw_row in document["results"].items():
        if not isinstance(raw_row, list):
            raise _bad(path, f"{name}: its row is not a list")
        row = dict(zip(columns, raw_row, strict=False))  # asv drops trailing null columns
        entry = meta.get(name) if isinstance(meta.get(name), dict) else {}
        param_names = list(entry.get("param_names") or [])
        params, combos = _params_of(path, name, row)
        if params and len(param_names) != len(params):
            param_names = [f"param{i}" for i in range(len(params))]
        values = row.get("result")
        if values is None:
            values = [None] * len(combos)
        if not isinstance(values, list) or len(values) != len(combos):
            raise _bad(path, f"{name}: {len(values) if isinstance(values, list) else 'no'} results "
                             f"for {len(combos)} parameter combinations")  # fmt: skip
        kind = kind_of(name, entry.get("unit"))
        for combo, value in zip(combos, values, strict=True):
            label = f"{name}({', '.join(combo)})" if params else name
            if bench and not any(re.search(regex, label) for regex in bench):
                continue  # not selected this round (asv writes NaN for those too)
            named = {n: _literal(v) for n, v in zip(param_names, combo, strict=True)}
            records.extend(
                _records(
                    path, name, named, ", ".join(combo), value, row, kind, run_dir, failures.get(name, {})
                )
            )
    for record in records:  # asv's parameter order, for --bench regexes of re-measurements
        record.info.setdefault("param_names", list(record.params))
    return records


def _records(
    path: Path,
    name: str,
    params: dict[str, Any],
    combo: str,
    value: Any,
    row: Mapping[str, Any],
    kind: Kind,
    run_dir: Path,
    failures: Mapping[str, str],
) -> Iterable[ResultRecord]:
    impl = str(params.get("impl") or name)
    version = row.get("version") if isinstance(row.get("version"), str) else None
    base = {
        "benchmark": name,
        "impl": impl,
        "params": params,
        "metric": kind.metric,
        "unit": kind.unit,
        "direction": kind.direction,
        "gated": kind.gated,
        "benchmark_version": version,
    }
    text = failures.get(combo) or failures.get("") or ""
    if value is None:
        error = text or "the benchmark failed (asv kept no message)"
        yield ResultRecord(**base, status="failed", error=error[-4000:])
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _bad(path, f"{name}({combo}): result {value!r} is not a number")
    if math.isnan(value):
        reason = text.removeprefix("asv: skipped: ").strip() if text else "skipped (cannot run here)"
        wrapped = re.fullmatch(r"\w+\((['\"])(.*)\1\)", reason, flags=re.S)  # Unsupported('why') -> why
        reason = wrapped.group(2) if wrapped else reason
        yield ResultRecord(**base, status="skipped", error=reason[-2000:])
        return
    try:
        side = sidecar.read(run_dir, name, params)
    except ValueError as exc:
        raise ResultsError(str(exc), hint="run the measurement again") from None
    samples: list[float] | None = None
    method = None
    info: dict[str, Any] = {}
    if side is not None:
        if not math.isclose(float(side["value"]), float(value), rel_tol=1e-9, abs_tol=0.0):
            raise ResultsError(
                f"{name}({combo}): asv stored {value!r} but the timing sidecar says {side['value']!r}",
                hint="a sidecar from another run was left in the run directory; run the measurement again",
            )
        samples = [float(s) for s in side["samples"]]
        method = side.get("method")
        info = dict(side.get("info") or {})
    else:
        info = {"note": "no timing sidecar: asv's single number only"}
    yield ResultRecord(**base, value=float(value), samples=samples, method=method, info=info)
    if kind.metric == "time" and name.endswith("Forward.track_time") and samples:
        yield from _derived(name, base, samples, method, info)


def _derived(
    name: str, base: Mapping[str, Any], samples: Sequence[float], method: str | None, info: Mapping[str, Any]
) -> Iterable[ResultRecord]:
    """tokens/s and attended-pair TFLOP/s from the forward samples and the case's work per call."""
    module = name.split(".", 1)[0]
    tokens = info.get("tokens")
    flops = info.get("forward_flops")
    positive = [s for s in samples if s > 0]
    if not positive:
        return
    keep = {"derived_from": name, "config": info.get("config")}
    for work, kind, method_name in (
        (tokens, THROUGHPUT, "track_tokens_per_second"),
        (flops / 1e12 if isinstance(flops, (int, float)) else None, EFFICIENCY, "track_tflops"),
    ):
        if not isinstance(work, (int, float)) or work <= 0:
            continue
        yield ResultRecord(
            **{
                **base,
                "benchmark": f"{module}.Throughput.{method_name}",
                "metric": kind.metric,
                "unit": kind.unit,
                "direction": kind.direction,
                "gated": kind.gated,
            },
            samples=[work / s for s in positive],
            method=method,
            info=keep,
        )


def selection_regex(benchmark: str, params: Mapping[str, Any], order: Sequence[str] | None = None) -> str:
    """An asv ``--bench`` regex that selects exactly one benchmark x params (for re-measurements).

    asv matches ``name(p1, p2, ...)`` with the values' ``repr`` in the suite's parameter order;
    ``order`` gives it (stored results keep it in ``info["param_names"]``: a JSON column on
    PostgreSQL does not keep key order).
    """
    names = [n for n in (order or []) if n in params] + [n for n in params if n not in (order or [])]
    combo = ", ".join(repr(params[n]) for n in names)
    return "^" + re.escape(f"{benchmark}({combo})") + "$"


def suspect_selection(items: Iterable[Any], rounds: Iterable[Iterable[ResultRecord]]) -> list[str]:
    """``--bench`` regexes that re-measure exactly ``items`` (anything with ``benchmark``, ``params``
    and ``key``, e.g. compare's suspects), in the parameter order the ``rounds`` they came from record.
    """
    orders = {r.key: r.info.get("param_names") for results in rounds for r in results}
    return [selection_regex(i.benchmark, i.params, orders.get(i.key)) for i in items]


@dataclass
class Measured:
    """Several rounds of one target, in the order they ran."""

    target: Target
    rounds: list[Round] = field(default_factory=list)
