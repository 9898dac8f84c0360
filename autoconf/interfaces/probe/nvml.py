"""Device-wide GPU memory peak sampled by a thread through NVML (nvidia-ml-py), for one-process campaigns.

The same figure as ``memory.NvidiaSmiPeak`` — device-wide ``used`` memory, peak minus the first reading,
taken before this process creates its CUDA context — but read in-process every few milliseconds
(``nvmlDeviceGetMemoryInfo``: microseconds a call) instead of one ``nvidia-smi`` process per sample
(tens of ms), so short steps are not missed. ``open_device_peak`` falls back to nvidia-smi without NVML.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Protocol

from autoconf.interfaces.probe.memory import NvidiaSmiPeak, nvidia_smi_id

POLL_S = 0.005  # 5 ms; the device figure follows torch's reserved pool, which only grows within a step


class DevicePeak(Protocol):
    def __enter__(self) -> DevicePeak: ...
    def __exit__(self, *exc: object) -> None: ...
    def reset(self) -> None: ...
    def reading(self) -> tuple[float | None, str]: ...


class NvmlPeak:
    """Context manager: peak NVML ``used`` bytes while open, minus the reading taken on entry."""

    def __init__(self, nvml: Any, device_id: str) -> None:
        self._nvml = nvml
        self._device_id = device_id
        self._handle: Any = None
        self._first: int | None = None
        self._last: int | None = None
        self._peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NvmlPeak:
        self._nvml.nvmlInit()
        ident = self._device_id
        self._handle = (self._nvml.nvmlDeviceGetHandleByUUID(ident) if ident.startswith(("GPU-", "MIG-"))
                        else self._nvml.nvmlDeviceGetHandleByIndex(int(ident)))
        self._sample()  # the idle reading: before this process's CUDA context
        self._first = self._last
        self._thread = threading.Thread(target=self._poll, name="nvml-peak", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        self._last = used
        self._peak = used if self._peak is None else max(self._peak, used)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._sample()

    def reset(self) -> None:
        """Forget the peak so far; keep the latest sample (the peak restarts at what is in use now)."""
        self._peak = self._last

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._nvml.nvmlShutdown()

    def reading(self) -> tuple[float | None, str]:
        if self._peak is None or self._first is None:
            return None, "NVML gave no reading"
        if self._peak < self._first:
            return None, "NVML peak below the idle reading (another process freed memory on this GPU)"
        return float(self._peak - self._first), ""


def open_device_peak() -> DevicePeak:
    """NVML's sampler where nvidia-ml-py imports, else nvidia-smi's (both: peak minus the idle reading)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return NvidiaSmiPeak(nvidia_smi_id())
    return NvmlPeak(nvml, nvidia_smi_id())
