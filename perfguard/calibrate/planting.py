"""Planted slowdowns: a commit on top of HEAD, in a temporary clone, whose every forward pass does a
known fraction of its own work more (the harness plants it, never product code).

:func:`planted_source` is the Python appended to the declared registry module of the clone (generated
source: a wrapper around ``ImplSpec.build``); :func:`planted_clone` makes the clone and the commit
and removes them afterwards; :func:`forward_selection` restricts a ``--bench`` selection to the
benchmark the plant is in.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.errors import GitError
from perfguard.gitrepo import git

#: The benchmark the planted work is in (and the only one the planted phase measures).
PLANTED_BENCHMARK = "Forward.track_time"
#: A plant larger than ten times the module's own work tells nothing a smaller one does not.
MAX_FRACTION = 10.0


def planted_key(fraction: float) -> str:
    """The :class:`Measurer` side key of the commit planted with ``fraction``."""
    return f"planted:{fraction:g}"


def percent(fraction: float) -> str:
    """0.25 -> "+25%", 1.0 -> "+100%" (a plant's label)."""
    return f"+{fraction * 100:g}%"


def parse_fractions(text: str) -> tuple[float, ...]:
    """``--planted``: comma-separated fractions in (0, 10], no duplicates; "" plants nothing.

    Raises ValueError naming the offending value (the CLI turns it into exit 2).
    """
    fractions: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            if text.strip():
                raise ValueError("an empty value between commas")
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{part} is not a fraction above 0 (0.1 plants +10%)")
        if value > MAX_FRACTION:
            raise ValueError(
                f"{part} is more than {MAX_FRACTION:g} (a fraction: 0.1 plants +10%, not 10 for 10%)"
            )
        if value in fractions:
            raise ValueError(f"{part} is given twice")
        fractions.append(value)
    return tuple(fractions)


_PLANTED_TEMPLATE = """

# --- planted by `perfguard calibrate` in a temporary clone of HEAD: a known slowdown of __PERCENT__ ---
# Every module built through the registry does extra work of __FRACTION__ x its own forward time
# before each forward call.  CPU: a busy loop of process CPU time (the CPU timer measures
# time.process_time, which sleeping does not use).  CUDA: torch.cuda._sleep, a kernel that spins
# for a number of GPU clock cycles, so a CUDA-graph capture replays it.  The module's own time is
# measured once, on its first forward call, which perfguard's timer never times: on the CPU two
# warm calls, then the median of five timed calls (process CPU time); on CUDA by perfguard's own
# timer (perfguard.engine.timing.time_call: the call captured as a CUDA graph and replayed after L2
# flushes, or timed eagerly where capture fails), so the plant is the fraction of the number the
# gate compares.  (Timing eager calls queued back to back counted each kernel's launch latency on
# the GPU: a +10% plant made a 324-kernel forward 1.33x slower under graph replay.)
import statistics as _planted_statistics
import time as _planted_time

import torch as _planted_torch

_PLANTED_FRACTION = __FRACTION__
_planted_sleep_rate = []  # cycles per second of torch.cuda._sleep, measured once per process


def _planted_gpu_seconds(fn):
    start = _planted_torch.cuda.Event(enable_timing=True)
    end = _planted_torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def _planted_gpu_work_seconds(fn):
    from perfguard.engine.timing import time_call

    return time_call(fn, "cuda").median


def _planted_cpu_seconds(fn):
    started = _planted_time.process_time()
    fn()
    return _planted_time.process_time() - started


def _planted_cycles_per_second():
    if not _planted_sleep_rate:
        cycles = 20_000_000  # ~10 ms: the launch of the timed kernel is noise next to it
        _planted_torch.cuda._sleep(cycles)
        seconds = [_planted_gpu_seconds(lambda: _planted_torch.cuda._sleep(cycles)) for _ in range(3)]
        _planted_sleep_rate.append(cycles / _planted_statistics.median(seconds))
    return _planted_sleep_rate[0]


def _planted_slowed(module):
    forward = module.forward
    state = {}

    def planted_forward(*a, **k):
        if "extra" not in state:
            tensors = [t for t in (*a, *k.values()) if isinstance(t, _planted_torch.Tensor)]
            cuda = any(t.is_cuda for t in tensors)
            if cuda and _planted_torch.cuda.is_current_stream_capturing():
                return forward(*a, **k)  # never measured inside a capture (not reached: warm first)
            for _ in range(2):
                forward(*a, **k)
            if cuda:
                own = _planted_gpu_work_seconds(lambda: forward(*a, **k))
            else:
                own = _planted_statistics.median(
                    [_planted_cpu_seconds(lambda: forward(*a, **k)) for _ in range(5)]
                )
            state["cuda"] = cuda
            state["own_s"] = own
            if cuda:
                state["extra"] = int(_PLANTED_FRACTION * own * _planted_cycles_per_second())
            else:
                state["extra"] = _PLANTED_FRACTION * own
        if state["cuda"]:
            if state["extra"] > 0:
                _planted_torch.cuda._sleep(state["extra"])
        else:
            until = _planted_time.process_time() + state["extra"]
            while _planted_time.process_time() < until:
                pass
        return forward(*a, **k)

    module.forward = planted_forward
    return module


def _planted_wrap(cls):
    original = cls.build

    def build(self, *args, **kwargs):
        return _planted_slowed(original(self, *args, **kwargs))

    cls.build = build


def _planted_entry_classes():
    from collections.abc import Mapping as _PlantedMapping

    registry = __ATTRIBUTE__
    if callable(registry) and not isinstance(registry, _PlantedMapping):
        registry = registry()
    entries = registry.values() if isinstance(registry, _PlantedMapping) else registry
    return {type(entry) for entry in entries}


for _planted_class in _planted_entry_classes():  # every entry's class: perfguard builds through it
    _planted_wrap(_planted_class)
"""


def planted_source(fraction: float, attribute: str = "REGISTRY") -> str:
    """The code appended to the guarded package's registry module to plant a slowdown of ``fraction``.

    ``attribute``: the registry the module defines (``[tool.perfguard] registry``'s attribute).  The
    ``build`` of every entry's class is wrapped (the pattern of ``tests/test_workflows_pr_run.py``),
    so every implementation the suite builds is slowed, whatever package declares it, and nothing in
    the product changes.
    """
    return (
        _PLANTED_TEMPLATE.replace("__FRACTION__", repr(float(fraction)))
        .replace("__PERCENT__", percent(fraction))
        .replace("__ATTRIBUTE__", attribute)
    )


@dataclass(frozen=True)
class PlantedCommit:
    """A commit on top of HEAD, in a temporary clone, whose forward passes are ``fraction`` slower."""

    fraction: float
    sha: str
    parent: str
    path: Path  # the clone: its declared package is what the planted rounds import
    subject: str


def registry_file(root: Path) -> tuple[Path, str]:
    """The file of the registry module ``root`` declares (``[tool.perfguard] registry``), and the
    registry's attribute: where a planted slowdown goes."""
    from perfguard.declaration import read_declaration

    declaration = read_declaration(root)
    base = declaration.source_dir.joinpath(*declaration.registry_module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate, declaration.registry_attribute
    raise GitError(
        f"{root} declares the registry {declaration.registry!r}, but no file holds that module",
        hint="fix [tool.perfguard] registry, or commit the registry module",
    )


_IDENTITY = (
    "-c", "user.name=perfguard calibrate", "-c", "user.email=calibrate@perfguard.invalid",
    "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
)  # fmt: skip


@contextmanager
def planted_clone(root: Path, head: str, fraction: float, parent: Path) -> Iterator[PlantedCommit]:
    """A ``git clone --shared`` of ``root`` at ``head`` plus a commit planting ``fraction``.

    The commit lives in the clone only (the user's repository gets no objects, refs or worktree
    entries) and the clone is removed on exit.  asv labels the planted rounds with ``head``, a
    commit it can resolve in ``root``; the store keeps them under the planted commit's own sha.
    """
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f"planted-{fraction:g}"
    if path.exists():
        shutil.rmtree(path)
    try:
        git(parent, "clone", "--shared", "--no-checkout", "-q", str(root), str(path))
        git(path, "checkout", "-q", "--detach", head)
        registry, attribute = registry_file(path)
        with registry.open("a", encoding="utf-8") as fh:
            fh.write(planted_source(fraction, attribute))
        subject = f"perfguard calibrate: planted slowdown {percent(fraction)} of every forward pass"
        git(path, *_IDENTITY, "commit", "-q", "--no-verify", "-am", subject)
        sha = str(git(path, "rev-parse", "HEAD"))
        yield PlantedCommit(fraction=fraction, sha=sha, parent=head, path=path, subject=subject)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def forward_selection(bench: Sequence[str]) -> list[str]:
    """asv ``--bench`` regexes selecting the ``Forward.track_time`` benchmarks within ``bench``.

    asv keeps a combination when any regex matches its ``name(params)``; a user's regex is
    combined with the forward restriction by lookaheads, so both must match.
    """
    forward = r"\.Forward\.track_time\("
    if not bench:
        return [forward]
    return [f"^(?=.*?(?:{regex}))(?=.*?{forward})" for regex in bench]


def meta_commits(planted: Mapping[float, PlantedCommit]) -> list[dict[str, Any]]:
    """The planted commits for the report's ``planted_commits``."""
    return [
        {"fraction": f, "sha": p.sha, "parent": p.parent, "subject": p.subject}
        for f, p in sorted(planted.items())
    ]
