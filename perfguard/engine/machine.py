"""The machine fingerprint: what hardware and software a measurement was made on.

Baselines are stored under the machine *key*, the hardware class: ``"<GPU name> x<count>"`` with a
GPU (``NVIDIA H100 80GB HBM3 x1``), ``"cpu:<model> x<logical cores>"`` without (a 2-core runner and
a 64-core one of the same model are different classes for CPU timings).  A pool of identical
runners shares one key and so one baseline history; per-card identities (UUID, PCI bus, serial,
host name) are kept as metadata only (``research/gpu_timing.md`` §7).  The software versions
(driver, CUDA runtime, torch, cuDNN, Triton, Python) are stored with every run, and a comparison
across different software says so in its report.

GPU facts come from NVML (nvidia-ml-py) first: it answers without creating a CUDA context, which
this process must not hold while asv's benchmark processes measure memory.  torch's device
properties fill in what NVML lacks (SM count, L2 size) only when CUDA is already initialised in
this process (inside a benchmark); otherwise those fields are absent rather than costing a context.

A distributed round (a group of ranks under torchrun) is measured under the key of the machine
*and its number of ranks* (:func:`with_ranks`: ``NVIDIA H200 x4 ranks=4``): a 2-rank baseline is
never compared with a 4-rank run, and the site's scaling view reads the number back
(:func:`split_ranks`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Keys that identify one physical device or host: metadata, never a difference between runs.
METADATA_KEYS = frozenset({"uuid", "hostname", "pci_bus_id", "serial"})
#: How a machine key names the ranks of a distributed run (``<key> ranks=<n>``).
RANKS_MARK = " ranks="


@dataclass(frozen=True)
class Fingerprint:
    """Everything known about this machine; :attr:`key` is what baselines are stored under."""

    kind: str  # "cuda" | "cpu"
    key: str
    label: str
    hardware: Mapping[str, Any] = field(default_factory=dict)
    software: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_cuda(self) -> bool:
        return self.kind == "cuda"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form stored with every run (``runs.fingerprint``)."""
        return {
            "kind": self.kind,
            "key": self.key,
            "label": self.label,
            "hardware": dict(self.hardware),
            "metadata": dict(self.metadata),
        }


def cpu_model() -> str:
    """The CPU model name (``/proc/cpuinfo`` on Linux, ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def nvml_gpus() -> list[dict[str, Any]] | None:
    """Per-GPU facts from NVML, honouring ``CUDA_VISIBLE_DEVICES``; None without NVML or a GPU.

    Never creates a CUDA context, so it is safe at import time of a benchmark module (asv's
    forkserver) and in a parent process whose children measure GPU memory.
    """
    try:
        import pynvml as nv
    except ImportError:
        return None
    try:
        nv.nvmlInit()
    except Exception:  # no driver, no device, container without NVML
        return None
    try:
        count = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            handles = _visible(nv, handles, visible)
        gpus = []
        for h in handles:
            gpus.append(_nvml_facts(nv, h))
        driver = _text(nv.nvmlSystemGetDriverVersion())
        cuda_driver = nv.nvmlSystemGetCudaDriverVersion()
        for gpu in gpus:
            gpu["driver"] = driver
            gpu["cuda_driver"] = f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}"
        return gpus or None
    except Exception:  # a partial NVML is as good as none here
        return None
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible(nv: Any, handles: list[Any], visible: str) -> list[Any]:
    """The handles ``CUDA_VISIBLE_DEVICES`` leaves visible (indices or UUID prefixes), in its order."""
    chosen = []
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            break
        if token.isdigit():
            if int(token) >= len(handles):
                break
            chosen.append(handles[int(token)])
            continue
        match = [h for h in handles if _text(nv.nvmlDeviceGetUUID(h)).startswith(token)]
        if not match:
            break
        chosen.append(match[0])
    return chosen


def _nvml_facts(nv: Any, h: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"name": _text(nv.nvmlDeviceGetName(h))}
    for name, call in (
        ("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h))),
        ("compute_capability", lambda: "{}.{}".format(*nv.nvmlDeviceGetCudaComputeCapability(h))),
        ("memory_gib", lambda: round(nv.nvmlDeviceGetMemoryInfo(h).total / 2**30)),
        ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) // 1000),
        ("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
        ("cuda_cores", lambda: nv.nvmlDeviceGetNumGpuCores(h)),
        ("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId)),
        ("mig_mode", lambda: nv.nvmlDeviceGetMigMode(h)[0]),
    ):
        with contextlib.suppress(Exception):  # older drivers lack some queries
            facts[name] = call()
    return facts


def _distribution_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` that is installed (no import)."""
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def torch_build() -> dict[str, Any]:
    """``torch.version`` (``__version__``, ``cuda``, ``hip``) read from its file, without importing torch.

    Importing torch costs about a second (more for a CUDA build), and ``perfguard check`` with both
    sides stored must stay within 2 s of its own work (docs/perf/check.md).
    """
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    values: dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    with contextlib.suppress(ValueError):
                        values[target.id] = ast.literal_eval(node.value)
    return values


def _software(gpus: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Versions of what the numbers depend on, read from package metadata (no torch import)."""
    build = torch_build()
    software: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": build.get("__version__") or _distribution_version("torch"),
        "perfguard": _perfguard_version(),
        "numpy": _distribution_version("numpy"),
    }
    if gpus:
        software["driver"] = gpus[0].get("driver")
        software["cuda_driver"] = gpus[0].get("cuda_driver")
        software["cuda_runtime"] = build.get("cuda")
        software["cudnn"] = _distribution_version(
            "nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"
        )
        software["triton"] = _distribution_version("triton", "pytorch-triton")
    return software


def _perfguard_version() -> str:
    from perfguard import __version__

    return __version__


def fingerprint(*, device: str = "auto") -> Fingerprint:
    """This machine's fingerprint.  ``device``: ``auto`` (GPU when NVML sees one), ``cpu`` or ``cuda``.

    ``cuda`` without a visible GPU raises ``RuntimeError`` (the CLI turns it into exit 2).
    """
    gpus = None if device == "cpu" else nvml_gpus()
    if gpus is None and device != "cpu":
        gpus = _torch_gpus()
    if device == "cuda" and not gpus:
        raise RuntimeError("CUDA was asked for, but no GPU is visible (NVML and torch see none)")
    cores = os.cpu_count() or 0
    model = cpu_model()
    hardware: dict[str, Any] = {"cpu_model": model, "cpu_count": cores, "ram_bytes": _ram_bytes()}
    metadata: dict[str, Any] = {"hostname": platform.node()}
    software = _software(gpus)
    if gpus:
        first = gpus[0]
        names = sorted({g["name"] for g in gpus})
        name = names[0] if len(names) == 1 else " + ".join(names)
        count = len(gpus)
        hardware.update(
            gpu_name=name,
            gpu_count=count,
            **{k: first[k] for k in ("compute_capability", "memory_gib", "power_limit_w",
                                     "sm_clock_max_mhz", "cuda_cores", "sm_count", "l2_bytes",
                                     "mig_mode") if k in first},
        )  # fmt: skip
        metadata["uuid"] = [g.get("uuid") for g in gpus]
        metadata["pci_bus_id"] = [g.get("pci_bus_id") for g in gpus]
        key = f"{name} x{count}"
        label = f"{name} ×{count}" if count > 1 else name
        return Fingerprint("cuda", key, label, hardware, software, metadata)
    key = f"cpu:{model} x{cores}"
    return Fingerprint("cpu", key, f"{model} ({cores} cores)", hardware, software, metadata)


def _torch_gpus() -> list[dict[str, Any]] | None:
    """GPU facts through torch, for machines without NVML (initialises CUDA: a last resort).

    A torch built without CUDA (or ROCm) cannot see a GPU: say so without importing it.
    """
    build = torch_build()
    if build and not build.get("cuda") and not build.get("hip"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(
            {
                "name": p.name,
                "uuid": str(getattr(p, "uuid", "")),
                "compute_capability": f"{p.major}.{p.minor}",
                "memory_gib": round(p.total_memory / 2**30),
                "sm_count": p.multi_processor_count,
                "l2_bytes": getattr(p, "L2_cache_size", None),
            }
        )
    return gpus


def cuda_visible() -> bool:
    """Whether a GPU is usable here, asked without creating a CUDA context (NVML, then torch's NVML check)."""
    if nvml_gpus():
        return True
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return bool(torch.cuda.is_available())


def with_ranks(fp: Fingerprint, ranks: int) -> Fingerprint:
    """The fingerprint of ``fp`` running a group of ``ranks`` processes: its own key and label.

    The machine key gets `` ranks=<n>`` and the hardware ``ranks``; a run of one process keeps the
    plain key, so the history of the single-process suite is untouched.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive int, got {ranks!r}")
    if RANKS_MARK in fp.key:
        raise ValueError(f"machine key {fp.key!r} already names its ranks")
    return Fingerprint(
        fp.kind,
        f"{fp.key}{RANKS_MARK}{ranks}",
        f"{fp.label}, {ranks} rank{'s' if ranks != 1 else ''}",
        {**fp.hardware, "ranks": ranks},
        fp.software,
        fp.metadata,
    )


def split_ranks(key: str) -> tuple[str, int | None]:
    """``("NVIDIA H200 x4", 4)`` for ``"NVIDIA H200 x4 ranks=4"``; ``(key, None)`` for a plain key."""
    base, mark, count = key.rpartition(RANKS_MARK)
    if not mark or not count.isdigit():
        return key, None
    return base, int(count)


def scaling_class(key: str) -> str:
    """What runs with different numbers of ranks have in common: the hardware they scale over.

    A GPU key loses its GPU count too (``NVIDIA H200 x2 ranks=2`` and ``NVIDIA H200 x4 ranks=4``
    are the same GPU at 2 and 4); a CPU key keeps its core count (the ranks share those cores).
    """
    base, _ = split_ranks(key)
    if base.startswith("cpu:"):
        return base
    name, sep, count = base.rpartition(" x")
    return name if sep and count.isdigit() else base


def software_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (base, head)}`` for the software versions that differ between two runs."""
    names = sorted((set(base) | set(head)) - METADATA_KEYS)
    return {n: (base.get(n), head.get(n)) for n in names if base.get(n) != head.get(n)}


if __name__ == "__main__":  # pragma: no cover - `python -m perfguard.engine.machine` prints the fingerprint
    import json

    fp = fingerprint()
    json.dump({"key": fp.key, **fp.as_dict(), "software": dict(fp.software)}, sys.stdout, indent=2)
    print()
