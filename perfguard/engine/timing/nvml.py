"""NVML readings during a round: SM clock, power, temperature and clock-event reasons.

Read while the queued samples run (no sync), so a round's numbers come with what the GPU was doing;
without NVML the timings are still valid, only unexplained.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Any

import torch

#: Clock-event reason bits that mean the GPU was slowed by something other than its normal power
#: cap (HW slowdown, SW thermal, HW thermal, HW power brake): a round with these is suspect.
THROTTLE_BITS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


class Nvml:
    """Reads SM clock, power, temperature and clock-event reasons of the current device."""

    def __init__(self) -> None:
        self.readings: list[dict[str, float]] = []
        self._nv: Any = None
        self._handle: Any = None
        try:
            import pynvml as nv

            nv.nvmlInit()
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            uuid = str(getattr(props, "uuid", ""))
            try:
                self._handle = nv.nvmlDeviceGetHandleByUUID(
                    "GPU-" + uuid if not uuid.startswith("GPU-") else uuid
                )
            except Exception:  # fall back to the index (no CUDA_VISIBLE_DEVICES remap)
                self._handle = nv.nvmlDeviceGetHandleByIndex(index)
            self._nv = nv
        except Exception:  # no NVML: timings are still valid, only unexplained
            self._nv = None

    def read(self) -> None:
        if self._nv is None:
            return
        nv, h = self._nv, self._handle
        try:
            reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        except Exception:  # older bindings
            try:
                reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            except Exception:
                reasons = 0
        with contextlib.suppress(Exception):
            self.readings.append(
                {
                    "sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                    "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "temperature_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                    "reasons": float(reasons),
                }
            )

    def summary(self) -> dict[str, Any]:
        if not self.readings:
            return {}
        clocks = [r["sm_clock_mhz"] for r in self.readings]
        reasons = 0
        for r in self.readings:
            reasons |= int(r["reasons"])
        return {
            "readings": len(self.readings),
            "sm_clock_mhz_median": statistics.median(clocks),
            "sm_clock_mhz_min": min(clocks),
            "power_w_median": statistics.median(r["power_w"] for r in self.readings),
            "temperature_c_max": max(r["temperature_c"] for r in self.readings),
            "clock_event_reasons": reasons,
            "throttled": [name for bit, name in THROTTLE_BITS.items() if reasons & bit],
        }
