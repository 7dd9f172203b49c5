"""What perfguard knows about the asv suite: where it is, what its benchmarks measure, how they are named.

The suite itself (``asv_benchmarks/``) is plain asv; perfguard reads three things from it:

- where it lives: ``benchmark_dir`` of the project's ``asv.conf.json`` (:func:`load_benchmark_dir`);
- what each benchmark's numbers are (:func:`kind_of`: metric, unit, better direction, gated), by its
  name (docs/design.md, "asv suites"), else by its unit;
- asv's ``name(param reprs)`` labels, which ``--bench`` regexes match (:func:`suite_labels`,
  :func:`selected`), and regexes that select exactly one benchmark x params for a re-measurement
  (:func:`selection_regex`, :func:`suspect_selection`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard import metrics
from perfguard.errors import BenchmarkError
from perfguard.profiles import DISTRIBUTED_SUITE, SUITE
from perfguard.store.records import ResultRecord
from perfguard.store.result_info import ResultInfo

#: The suite's module, as asv names its benchmarks (``bench_attention.Forward.track_time``).
SUITE_MODULE = SUITE
#: The parameters of the suite's benchmarks, in asv's order (a derived result records none).
PARAM_NAMES = ("impl", "seq_len", "dtype")


@dataclass(frozen=True)
class Kind:
    """What perfguard makes of a benchmark's numbers (docs/design.md, "asv suites")."""

    metric: str
    unit: str
    direction: str
    gated: bool

    @classmethod
    def of(cls, metric: str, *, gated: bool | None = None) -> Kind:
        """A benchmark of ``metric`` (:mod:`perfguard.metrics`: its unit and direction); ``gated``
        overrides the metric's default (a reported timing, such as communication)."""
        m = metrics.metric(metric)
        return cls(m.name, m.unit, m.direction, m.gated if gated is None else gated)


_KINDS = {
    "Forward.track_time": Kind.of("time"),
    "ForwardBackward.track_time": Kind.of("time"),
    "PeakMemory.track_forward": Kind.of("memory"),
    "PeakMemory.track_forward_backward": Kind.of("memory"),
}
for _pass in ("forward", "forward_backward"):
    for _work in (name for name in metrics.NAMES if name in metrics.WORK_METRICS):
        _KINDS[f"Work.track_{_pass}_{_work}"] = Kind.of(_work)
    # the distributed suite: seconds of communication per call, reported (its share is in info)
    _KINDS[f"Communication.track_{_pass}"] = Kind.of("time", gated=False)
#: The accuracy of one call (perfguard.engine.accuracy): the output and each input gradient.
ACCURACY_TENSORS = ("output", "q", "k", "v")
for _tensor in ACCURACY_TENSORS:
    _KINDS[f"Accuracy.track_{_tensor}_error"] = Kind.of(metrics.ERROR)
    # the same of a causal call: benchmarks of their own, so the non-causal series keep their keys
    _KINDS[f"Accuracy.track_{_tensor}_error_causal"] = Kind.of(metrics.ERROR)
#: The forward time of each implementation that declares a ``kernels`` module (``attention``:
#: ``improved``) on each of its kernels: reported, never gated.  It compares kernels on one machine
#: (which is fastest where), not commits; a kernel that gets slower is torch's or the driver's
#: business, and ``Forward.track_time`` gates the kernel the implementation really runs.
BACKENDS = "Backends.track_time"
_KINDS[BACKENDS] = Kind.of("time", gated=False)
#: Benchmarks measured for the history only (``perfguard run``): reported, never gated, so the
#: commands that decide something (check, calibrate, bisect) leave them out unless ``--bench`` asks
#: for them, and a PR's rounds do not pay for them (8 kernels x the lengths, FlexAttention compiling).
HISTORY_ONLY = (BACKENDS,)


def short_name(benchmark: str) -> str:
    """``Class.method`` of an asv name (``bench_attention.Forward.track_time`` -> ``Forward.track_time``)."""
    return benchmark.split(".", 1)[1] if benchmark.count(".") >= 2 else benchmark


#: The benchmarks over ``impl x seq_len x dtype`` (the backends comparison adds ``backend``).
_PER_IMPL = tuple(name for name in _KINDS if name != BACKENDS)
_UNIT_KINDS = {
    "seconds": Kind.of("time"),
    "bytes": Kind.of("memory"),
    "relative error": Kind.of(metrics.ERROR),
}
#: Derived from ``Forward.track_time`` (the same measurement, inverted): reported, never gated.
THROUGHPUT = Kind.of("throughput")
EFFICIENCY = Kind.of("efficiency")


def suite_labels(
    impls: Iterable[str],
    seq_lens: Iterable[int],
    dtypes: Iterable[str],
    *,
    kernels: Mapping[str, Sequence[str]] | None = None,
    distributed: Collection[str] | None = None,
) -> list[str]:
    """asv's ``name(params)`` labels of the suites' benchmarks for these parameters (``--bench`` matching).

    The single-process suite's; the distributed suite's for the implementations in ``distributed``
    (those whose entry declares ``sequence_parallel``; None: not known here, e.g. in a check's own
    process, which never imports the guarded package: every implementation's); and the kernel
    comparison's (``impl, backend, seq_len, dtype``) for each implementation in ``kernels``
    (implementation -> its declared kernels).
    """
    out = []
    kernels = kernels or {}
    for impl in impls:
        parallel = distributed is None or impl in distributed
        suites = (SUITE_MODULE, DISTRIBUTED_SUITE) if parallel else (SUITE_MODULE,)
        for seq_len in seq_lens:
            for dtype in dtypes:
                params = f"({impl!r}, {seq_len!r}, {dtype!r})"
                out += [f"{suite}.{name}{params}" for suite in suites for name in _PER_IMPL]
                out += [
                    f"{SUITE_MODULE}.{BACKENDS}({impl!r}, {kernel!r}, {seq_len!r}, {dtype!r})"
                    for kernel in kernels.get(impl, ())
                ]
    return out


def kind_of(benchmark: str, unit: str | None) -> Kind:
    """The metric of a benchmark, by its name (``module.Class.method``) or else by its unit."""
    short = short_name(benchmark)
    if short in _KINDS:
        return _KINDS[short]
    if unit in _UNIT_KINDS:
        return _UNIT_KINDS[unit]
    return Kind("throughput", unit or "unknown", "higher", False)


def load_benchmark_dir(root: Path) -> Path:
    """The suite directory named by the project's ``asv.conf.json`` (asv's reader: comments allowed)."""
    path = root / "asv.conf.json"
    if not path.exists():
        raise BenchmarkError(
            f"there is no asv.conf.json in {root}",
            hint="run perfguard at the root of a project with asv suites (asv.conf.json, asv_benchmarks/)",
        )
    import json5  # what asv itself reads asv.conf.json with (comments allowed)

    try:
        config = json5.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchmarkError(f"{path} is not valid asv configuration: {exc}", hint="fix the file") from None
    if not isinstance(config, dict):
        raise BenchmarkError(f"{path} is not a JSON object", hint="fix the file")
    directory = (root / str(config.get("benchmark_dir", "benchmarks"))).resolve()
    if not directory.is_dir():
        raise BenchmarkError(
            f"the asv benchmark directory {directory} does not exist",
            hint="check benchmark_dir in asv.conf.json",
        )
    return directory


def label(benchmark: str, params: Mapping[str, Any], order: Sequence[str] | None = None) -> str:
    """asv's ``name(p1, p2, ...)``: the values' ``repr`` in the suite's parameter order ``order``
    (stored results keep it in ``info["param_names"]``: a JSON column on PostgreSQL does not keep key
    order), parameters it does not name after them."""
    names = [n for n in (order or []) if n in params] + [n for n in params if n not in (order or [])]
    return f"{benchmark}({', '.join(repr(params[n]) for n in names)})"


def selection_regex(benchmark: str, params: Mapping[str, Any], order: Sequence[str] | None = None) -> str:
    """An asv ``--bench`` regex that selects exactly one benchmark x params (for re-measurements).

    asv matches ``name(p1, p2, ...)`` with the values' ``repr`` in the suite's parameter order;
    ``order`` gives it (stored results keep it in ``info["param_names"]``: a JSON column on
    PostgreSQL does not keep key order).
    """
    return "^" + re.escape(label(benchmark, params, order)) + "$"


def suspect_selection(items: Iterable[Any], rounds: Iterable[Iterable[ResultRecord]]) -> list[str]:
    """``--bench`` regexes that re-measure exactly ``items`` (anything with ``benchmark``, ``params``
    and ``key``, e.g. compare's suspects), in the parameter order the ``rounds`` they came from record.
    """
    orders = {r.key: ResultInfo.from_json(r.info).param_names for results in rounds for r in results}
    return [selection_regex(i.benchmark, i.params, orders.get(i.key)) for i in items]


def selected(result: ResultRecord, bench: Sequence[str]) -> bool:
    """Whether a result belongs to a ``--bench`` selection (asv's ``name(param reprs)`` match).

    A derived result (tokens/s, TFLOP/s) belongs to it when the forward time it comes from does.
    """
    if not bench:
        return True
    info = ResultInfo.from_json(result.info)
    name = info.derived_from or result.benchmark
    order = list(info.param_names or [])
    if info.derived_from and not order:
        order = list(PARAM_NAMES)
    text = label(name, result.params, order) if result.params else name
    return any(re.search(regex, text) for regex in bench)
