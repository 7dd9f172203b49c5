"""Benchmark profiles: which sequence lengths, dtypes and shapes a benchmark run covers.

A profile is chosen with ``--profile`` (``perfguard run`` / ``check`` / ``calibrate``) and handed to
the asv suites through ``PERFGUARD_PROFILE``; the suites build their ``params`` from it at import,
so the profile decides what asv runs.  The sequence ranges are the ones users know from earlier
dilated-attention tools (document 512–4K, context 4K–32K, book 50K–200K) plus perfguard's own
``quick`` (CPU-sized: the whole suite runs in minutes on a 2-core CI machine), ``production``
(1K–16K), ``medium`` (32K–128K) and ``long`` (256K–1M, skipping what does not fit the GPU).

The attention configuration follows the sequence length: segments ``[2048, 4096, 8192]`` with
rates ``[1, 2, 4]`` (the configuration of ``research/gpu_timing.md`` §11 and issue 8) from 8K
tokens up, and ``[n/4, n/2, n]`` below, so a short sequence is not padded to 8K tokens (DESIGN.md's
padding rule would make a 1K benchmark time 8K tokens of work).  The segments are part of what a
benchmark measures, so they are stored with every result (``info.config``), never changed for an
existing (profile, seq_len).

This module imports nothing heavy: the suites import it in asv's discovery process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: Version of what the suites measure and how (the asv ``version`` of every suite benchmark).  Bump it
#: when a change makes new numbers incomparable with old ones (the timer, the case's work): perfguard
#: then re-measures stored baselines instead of comparing numbers taken by different rules.  It lives
#: here, in a module without heavy imports, because ``perfguard check`` reads it on every run.
SUITE_VERSION = "2"  # 2: adaptive CUDA timer, memory before capture, work metrics

#: Environment variables the asv suites read (set by perfguard for each asv invocation).
PROFILE_ENV = "PERFGUARD_PROFILE"
DEVICE_ENV = "PERFGUARD_DEVICE"

#: The largest segments (and their rates) used from 8K tokens up.
LONG_SEGMENTS = (2048, 4096, 8192)
RATES = (1, 2, 4)


@dataclass(frozen=True)
class Shape:
    """Batch, heads and head size of the benchmark inputs (the sequence length is a parameter)."""

    batch: int
    num_heads: int
    head_dim: int


@dataclass(frozen=True)
class Profile:
    """One profile: sequence lengths and dtypes per device, and the input shape per device."""

    name: str
    description: str
    seq_lens: tuple[int, ...]
    cpu_dtypes: tuple[str, ...]
    cuda_dtypes: tuple[str, ...]
    cpu_shape: Shape
    cuda_shape: Shape

    def dtypes(self, device: str) -> tuple[str, ...]:
        return self.cuda_dtypes if device == "cuda" else self.cpu_dtypes

    def shape(self, device: str) -> Shape:
        return self.cuda_shape if device == "cuda" else self.cpu_shape


# CPU inputs: small enough that the whole quick suite (9 implementations, several rounds) takes
# minutes on 2 cores.  GPU inputs: 1 x n x 12 x 64, the configuration the research measured.
_CPU = Shape(batch=1, num_heads=4, head_dim=32)
_GPU = Shape(batch=1, num_heads=12, head_dim=64)

PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            Profile("quick", "CPU-sized smoke run (512 and 1024 tokens)", (512, 1024), ("float32",),
                    ("bfloat16",), _CPU, _GPU),
            Profile("production", "1K-16K tokens", (1024, 4096, 16384), ("float32",), ("bfloat16",),
                    _CPU, _GPU),
            Profile("medium", "32K-128K tokens", (32768, 65536, 131072), ("float32",), ("bfloat16",),
                    _CPU, _GPU),
            Profile("long", "256K-1M tokens (what does not fit the GPU is skipped)",
                    (262144, 524288, 1048576), ("float32",), ("bfloat16",), _CPU, _GPU),
            Profile("document", "512-4K tokens", (512, 1024, 2048, 4096), ("float32",), ("bfloat16",),
                    _CPU, _GPU),
            Profile("context", "4K-32K tokens", (4096, 8192, 16384, 32768), ("float32",), ("bfloat16",),
                    _CPU, _GPU),
            Profile("book", "50K-200K tokens", (57344, 114688, 196608), ("float32",), ("bfloat16",),
                    _CPU, _GPU),
        )
    }
)  # fmt: skip

#: ``--profile auto``: quick without CUDA, production with.
AUTO = "auto"
CHOICES = (AUTO, *PROFILES)


def resolve(name: str, *, cuda: bool) -> Profile:
    """The profile named ``name`` (``auto``: ``production`` with CUDA, else ``quick``)."""
    if name == AUTO:
        name = "production" if cuda else "quick"
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(CHOICES)}") from None


def dilation_for(seq_len: int) -> dict[str, list[int]]:
    """Segments and rates for one sequence length (see the module docstring)."""
    if seq_len >= LONG_SEGMENTS[-1]:
        segments = list(LONG_SEGMENTS)
    else:
        top = max(16, 1 << (max(seq_len, 1) - 1).bit_length())  # the next power of two >= seq_len
        segments = [top // 4, top // 2, top]
    return {"segment_lengths": segments, "dilation_rates": list(RATES)}


def from_environment(*, cuda: bool) -> Profile:
    """The profile the suites run under: ``$PERFGUARD_PROFILE`` (default ``auto``)."""
    return resolve(os.environ.get(PROFILE_ENV) or AUTO, cuda=cuda)
