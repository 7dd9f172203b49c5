"""What the timer is set to: how long it warms up and when it stops sampling, per device, and the
torch settings that change kernels or numbers, pinned for every measurement and recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TimerSettings:
    """How long to warm up and when to stop sampling (seconds are of measured work)."""

    warmup_s: float  # warm-up when the GPU was idle (first timing, or > idle_gap_s since the last)
    rewarm_s: float  # warm-up right after other timed work
    idle_gap_s: float
    min_warmup_calls: int
    min_samples: int
    max_samples: int
    precision: float  # stop when the 95% interval of the median is within ± this fraction of it
    min_sample_s: float  # CPU: at least this much sampled work (the CPU's samples are noisier)
    max_sample_s: float  # at most this much sampled work
    max_wall_s: float  # and at most this much wall time of sampling

    @classmethod
    def for_device(cls, device: str) -> TimerSettings:
        if device == "cuda":
            return CUDA_SETTINGS
        return CPU_SETTINGS


# On an H100 this stopped on "precise" for all 12 probed cases, 10-200 samples, 0.14-0.9 s per
# number including the first call, process CV 0.03-0.41% (docs/perf/check.md, "The timer").
CUDA_SETTINGS = TimerSettings(
    warmup_s=0.3, rewarm_s=0.02, idle_gap_s=1.0, min_warmup_calls=2, min_samples=10, max_samples=3000,
    precision=0.002, min_sample_s=0.0, max_sample_s=0.3, max_wall_s=3.0,
)  # fmt: skip
# The CPU is the smoke-test device (CI has no GPU): short warm-up, enough samples for the rank test,
# a fixed amount of work (its process CPU time is far noisier than a GPU's replay).
CPU_SETTINGS = TimerSettings(
    warmup_s=0.2, rewarm_s=0.2, idle_gap_s=1.0, min_warmup_calls=2, min_samples=12, max_samples=200,
    precision=0.0, min_sample_s=0.4, max_sample_s=3.0, max_wall_s=30.0,
)  # fmt: skip


def pin_settings(device: str) -> dict[str, Any]:
    """Pin what changes kernels or numbers, and return it for the record.

    TF32 off and float32 matmuls at "highest" (an implementation cannot speed itself up by
    loosening precision), cuDNN autotuning off (its choice can differ between processes and make
    A/A comparisons bimodal), every SDPA backend enabled (the default; each implementation picks its
    kernel, and the record says which were allowed), one CPU intra-op thread on the CPU.
    """
    torch.set_float32_matmul_precision("highest")
    settings: dict[str, Any] = {"float32_matmul_precision": "highest"}
    if device == "cpu":
        torch.set_num_threads(1)
    settings["cpu_intra_op_threads"] = torch.get_num_threads()
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        for name in ("flash", "mem_efficient", "math", "cudnn"):
            enable = getattr(torch.backends.cuda, f"enable_{name}_sdp", None)
            if enable is not None:
                enable(True)
        settings.update(
            cuda_matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
            cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
            cudnn_benchmark=torch.backends.cudnn.benchmark,
            cudnn_deterministic=torch.backends.cudnn.deterministic,
            sdpa_backends={
                name: bool(getattr(torch.backends.cuda, f"{name}_sdp_enabled", lambda: None)())
                for name in ("flash", "mem_efficient", "math", "cudnn")
            },
        )
    return settings
