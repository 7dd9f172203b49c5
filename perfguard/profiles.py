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

**Distributed profiles** (``distributed``: 128K–1M tokens; ``distributed-quick``: 2K and 4K
tokens, the CPU smoke run) measure the implementations that declare a sequence-parallel path
(``attention``: the rings) across ranks with their own suite
(``asv_benchmarks/bench_distributed.py``): perfguard starts every round of them under ``torchrun``
with :func:`ranks_for` processes (one per visible GPU, 2 on the CPU, or ``$PERFGUARD_RANKS``), and
the number of ranks is part of the machine key (:func:`perfguard.engine.machine.with_ranks`).  Their
attention configuration reaches across the whole sequence (:func:`distributed_dilation`: the
largest segment is the sequence itself), so key/value shards really travel around the ring; with
the 8K segments of the other profiles every segment would fit inside one rank's shard and nothing
would be communicated at all.

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
SUITE_VERSION = "4"  # 2: adaptive CUDA timer, memory before capture, work metrics; 3: accuracy;
#  4: peak memory counts the bytes tensors request, not the allocator's blocks (timing.memory)

#: Environment variables the asv suites read (set by perfguard for each asv invocation).
PROFILE_ENV = "PERFGUARD_PROFILE"
DEVICE_ENV = "PERFGUARD_DEVICE"
#: The number of ranks of a distributed profile, when not the default (one per GPU, 2 on the CPU).
RANKS_ENV = "PERFGUARD_RANKS"

#: The asv module of the single-process suite and of the distributed one.
SUITE = "bench_attention"
DISTRIBUTED_SUITE = "bench_distributed"

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
    suite: str = SUITE  # the asv module a round of this profile runs
    cpu_ranks: int = 1  # ranks on the CPU (distributed profiles); on CUDA: one per visible GPU

    @property
    def distributed(self) -> bool:
        """Whether rounds of this profile run as a group of ranks under torchrun."""
        return self.suite == DISTRIBUTED_SUITE

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
            Profile("distributed", "the ring across ranks, 128K-1M tokens (torchrun: one rank per GPU)",
                    (131072, 524288, 1048576), ("float32",), ("bfloat16",), _CPU, _GPU,
                    DISTRIBUTED_SUITE, cpu_ranks=2),
            Profile("distributed-quick", "the ring across ranks at CPU sizes, 2K and 4K tokens (torchrun)",
                    (2048, 4096), ("float32",), ("bfloat16",), _CPU, _GPU, DISTRIBUTED_SUITE, cpu_ranks=2),
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


def distributed_dilation(seq_len: int) -> dict[str, list[int]]:
    """Segments and rates of the distributed profiles: the largest segment is the whole sequence.

    Segments ``b, 4b, 16b, …`` below ``n``, then ``n`` itself, with rates ``w / b`` (every branch
    attends ``b`` keys per query row), ``b = min(2048, n / 16)``: at 128K tokens
    ``[2048, 8192, 32768, 131072]`` with rates ``[1, 4, 16, 64]``, at 4K ``[256, 1024, 4096]``
    with ``[1, 4, 16]``.  Because a segment spans every rank's shard, every key/value shard
    travels the whole ring of ranks.
    """
    if seq_len < 64:
        raise ValueError(f"a distributed benchmark needs at least 64 tokens, got {seq_len}")
    base = min(2048, seq_len // 16)
    segments = []
    w = base
    while w < seq_len:
        segments.append(w)
        w *= 4
    segments.append(seq_len)
    return {"segment_lengths": segments, "dilation_rates": [s // base for s in segments]}


def ranks_for(profile: Profile, *, device: str, gpus: int, environ: Mapping[str, str] | None = None) -> int:
    """How many ranks a round of ``profile`` runs (1 for a single-process profile).

    ``$PERFGUARD_RANKS`` when set (at most the visible GPUs on CUDA), else one rank per visible
    GPU on CUDA and ``profile.cpu_ranks`` on the CPU.  Raises ``ValueError`` (saying what to do)
    on a bad value.
    """
    if not profile.distributed:
        return 1
    env = os.environ if environ is None else environ
    text = (env.get(RANKS_ENV) or "").strip()
    if text:
        if not text.isdigit() or not 1 <= int(text) <= 64:
            raise ValueError(f"${RANKS_ENV}={text!r} is not a number of ranks between 1 and 64")
        ranks = int(text)
        if device == "cuda" and ranks > gpus:
            raise ValueError(
                f"${RANKS_ENV}={ranks} but only {gpus} GPU(s) are visible: one rank per GPU at most "
                "(CUDA_VISIBLE_DEVICES picks which)"
            )
        return ranks
    if device == "cuda":
        return max(1, gpus)
    return profile.cpu_ranks


def from_environment(*, cuda: bool) -> Profile:
    """The profile the suites run under: ``$PERFGUARD_PROFILE`` (default ``auto``)."""
    return resolve(os.environ.get(PROFILE_ENV) or AUTO, cuda=cuda)
