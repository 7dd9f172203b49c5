"""What ``perfguard verify`` runs: the rows (implementation x device x dtype) and the cases in a row.

:func:`plan` turns a selection (names, device, dtypes) into rows, refusing what cannot be verified
here with a :class:`UsageError`; :func:`scope` narrows a selection to what a benchmark selection
measures (``perfguard verify --bench R --profile P``: what ``perfguard check --bench R`` verifies).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from perfguard.declare import Implementation
from perfguard.errors import UsageError
from perfguard.verify.numerics import DTYPES, dtype_name

DEFAULT_DTYPES: dict[str, tuple[str, ...]] = {"cpu": ("float32",), "cuda": ("bfloat16", "float32")}


@dataclass(frozen=True)
class Scenario:
    """One way an implementation is called in verification: a mode (forward, backward, ...) and causality."""

    mode: str
    causal: bool

    @property
    def label(self) -> str:
        return f"{self.mode}, {'causal' if self.causal else 'non-causal'}"


@dataclass(frozen=True)
class PlannedRow:
    spec: Implementation
    device: str
    dtype: torch.dtype
    skip: str | None = None


def plan(
    registry: Mapping[str, Implementation],
    *,
    impls: Sequence[str] = (),
    device: str = "auto",
    dtypes: Sequence[str] = (),
) -> list[PlannedRow]:
    """The rows to run, or a :class:`UsageError` for an unknown name, missing CUDA or a bad dtype."""
    unknown = [name for name in impls if name not in registry]
    if unknown:
        raise UsageError(
            f"unknown implementation(s): {', '.join(unknown)}",
            hint=f"known implementations: {', '.join(registry)}",
        )
    specs = [registry[name] for name in dict.fromkeys(impls)] if impls else list(registry.values())
    bad_dtypes = [d for d in dtypes if d not in DTYPES]
    if bad_dtypes:
        raise UsageError(f"unknown dtype(s): {', '.join(bad_dtypes)}", hint=f"use one of {', '.join(DTYPES)}")

    cuda = torch.cuda.is_available()
    if device == "auto":
        devices = ["cpu", "cuda"] if cuda else ["cpu"]
    elif device in ("cpu", "cuda"):
        devices = [device]
    else:
        raise UsageError(f"unknown device {device!r}", hint="use auto, cpu or cuda")
    if "cuda" in devices and not cuda:
        raise UsageError(
            "--device cuda was asked for, but torch.cuda.is_available() is False",
            hint="run on a machine with a CUDA GPU and a CUDA build of torch, or use --device cpu",
        )

    def supported(dev: str, spec: Implementation) -> tuple[torch.dtype, ...]:
        return spec.cpu_dtypes if dev == "cpu" else spec.cuda_dtypes

    per_device: dict[str, list[torch.dtype]] = {}
    for dev in devices:
        anywhere = {dt for spec in specs for dt in supported(dev, spec)}
        wanted = [DTYPES[d] for d in (dtypes or DEFAULT_DTYPES[dev])]
        per_device[dev] = [dt for dt in wanted if dt in anywhere]
        missing = [dt for dt in wanted if dt not in anywhere]
        if missing and dtypes and device != "auto":  # asked for explicitly: say so, never drop silently
            names = ", ".join(dtype_name(d) for d in missing)
            known = ", ".join(dtype_name(d) for d in DTYPES.values() if d in anywhere) or "none"
            raise UsageError(
                f"{names} is not verified on {dev} by the selected implementations (supported: {known})",
                hint=f"pick --dtype from: {known}" + (", or use --device cuda" if dev == "cpu" else ""),
            )
    if dtypes and not any(per_device.values()):
        raise UsageError(
            f"none of the dtypes {', '.join(dtypes)} is verified on {', '.join(devices)}",
            hint="CPU rows run in float32; bfloat16 and float16 need --device cuda",
        )

    rows: list[PlannedRow] = []
    for dev in devices:
        for dt in per_device[dev]:
            for spec in specs:
                skip = None
                if dt not in supported(dev, spec):
                    skip = f"{dtype_name(dt)} is not among {spec.name}'s {dev} dtypes"
                elif spec.needs_distributed and not _distributed_ready():
                    skip = "needs an initialised torch.distributed process group"
                rows.append(PlannedRow(spec, dev, dt, skip))
    return rows


def _distributed_ready() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def scope(
    registry: Mapping[str, Implementation],
    *,
    impls: tuple[str, ...],
    dtypes: tuple[str, ...],
    device: str,
    bench_regexes: tuple[str, ...],
    profile_name: str | None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(impls, dtypes) narrowed to what ``bench_regexes`` measure with ``profile_name`` on ``device``.

    Without either, the selection is returned as it is.  With a profile and an explicit device the
    dtypes default to the ones the profile measures there; a regex keeps the implementations one of
    whose suite labels (asv's ``name(params)``) it matches, and selecting none is a usage error.
    """
    from perfguard import profiles
    from perfguard.engine.suite import suite_labels

    if profile_name is None and not bench_regexes:
        return impls, dtypes
    if profile_name is not None and profile_name not in profiles.CHOICES:
        raise UsageError(f"--profile {profile_name!r} is not one of {', '.join(profiles.CHOICES)}")
    cuda = device == "cuda"
    profile = profiles.resolve(profile_name or "auto", cuda=cuda)
    measured = profile.dtypes("cuda" if cuda else "cpu")
    if profile_name is not None and not dtypes and device != "auto":
        dtypes = measured
    if bench_regexes:
        try:
            compiled = [re.compile(r) for r in bench_regexes]
        except re.error as exc:
            raise UsageError(f"--bench is not a regular expression: {exc}") from None
        from perfguard.engine import guarded

        # the kernel comparison's and the distributed suite's, as the entries declare them
        declared = [(n, e) for n, e in registry.items() if getattr(e, "kernels", None)]
        kernels = {n: tuple(guarded.kernels_of(e).KERNELS) for n, e in declared}
        distributed = [n for n, e in registry.items() if guarded.sequence_parallel(e) is not None]
        names = impls or tuple(registry)
        chosen = []
        for name in names:
            labels = suite_labels(
                [name], profile.seq_lens, measured, kernels=kernels, distributed=distributed
            )
            if any(r.search(label) for r in compiled for label in labels):
                chosen.append(name)
        if not chosen:
            raise UsageError(
                f"--bench {bench_regexes[0]!r} selects no benchmark of profile {profile.name!r}",
                hint="it must match asv's 'name(params)', e.g. \"Forward\\.track_time\\('improved'\"",
            )
        impls = tuple(chosen)
    return impls, dtypes
