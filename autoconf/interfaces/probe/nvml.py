"""Device-wide GPU memory peak sampled by a thread through NVML (nvidia-ml-py), for one-process campaigns.

The same figure as ``memory.NvidiaSmiPeak`` — device-wide ``used`` memory, peak minus the first reading,
taken before this process creates its CUDA context — and the same sampler, but each sample is an
in-process ``nvmlDeviceGetMemoryInfo`` call (microseconds) instead of one ``nvidia-smi`` process (tens of
ms), so it samples every few milliseconds and short steps are not missed. ``open_device_peak`` falls back
to nvidia-smi without NVML.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from autoconf.interfaces.probe.memory import MIB, NvidiaSmiPeak, nvidia_smi_id

POLL_S = 0.005  # 5 ms; the device figure follows torch's reserved pool, which only grows within a step


class DevicePeak(Protocol):
    def __enter__(self) -> DevicePeak: ...
    def __exit__(self, *exc: object) -> None: ...
    def reset(self) -> None: ...
    def reading(self) -> tuple[float | None, str]: ...


class NvmlPeak(NvidiaSmiPeak):
    """nvidia-smi's sampler with NVML as the reader: one handle opened on entry, closed on exit."""

    source = "NVML"
    poll_s = POLL_S

    def __init__(self, nvml: Any, device_id: str) -> None:  # noqa: ANN401 (the pynvml module)
        super().__init__(device_id)
        self._nvml = nvml
        self._handle: Any = None

    def _available(self) -> bool:
        self._nvml.nvmlInit()
        ident = self.device_id or "0"
        self._handle = (self._nvml.nvmlDeviceGetHandleByUUID(ident) if ident.startswith(("GPU-", "MIG-"))
                        else self._nvml.nvmlDeviceGetHandleByIndex(int(ident)))
        return True

    def _used_mib(self) -> int | None:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used) // MIB

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self._handle is not None:
            self._nvml.nvmlShutdown()


def open_device_peak() -> DevicePeak:
    """NVML's sampler where nvidia-ml-py imports, else nvidia-smi's (both: peak minus the idle reading)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return NvidiaSmiPeak(nvidia_smi_id())
    return NvmlPeak(nvml, nvidia_smi_id())
