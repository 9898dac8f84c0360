"""Memory meters of the probe that need no torch: the host RSS high-water mark and nvidia-smi's peak.

* Host (CPU runs): Linux keeps a per-process RSS high-water mark (``VmHWM`` in /proc/self/status)
  and resets it to the current RSS when "5" is written to /proc/self/clear_refs (proc(5), since
  Linux 4.0). The peak of a span is therefore exact, not sampled: HWM after the span minus the RSS
  before the model was built. Python's tracemalloc cannot see torch's allocations, so it is not used.
* GPU: ``nvidia-smi --query-gpu=memory.used`` gives device-wide used memory (the CUDA context and
  any other process on that GPU included); a thread polls it and keeps the maximum, and the figure is
  that peak minus the first reading (taken before the model is built), as fms-acceleration's
  benchmark reports it (data/README.md, ``nvidia_smi_bytes``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import threading
from pathlib import Path

MIB = 2**20
KIB = 2**10
POLL_S = 0.02  # pause between nvidia-smi calls; each call itself takes tens of ms
QUERY_TIMEOUT_S = 20  # nvidia-smi answers in well under a second on a healthy machine


def _proc_status_bytes(field: str) -> int | None:
    """A ``VmXXX:  N kB`` line of /proc/self/status in bytes (None off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * KIB
    except OSError:
        return None
    return None


M_MMAP_THRESHOLD = -3  # glibc <malloc.h> mallopt parameter number
MMAP_THRESHOLD_BYTES = 128 * KIB  # glibc's documented default, here fixed (no dynamic raise)


def pin_mmap_threshold() -> bool:
    """Make glibc serve every allocation >= 128 KiB by mmap and give it back on free.

    By default glibc raises the threshold after the first large free (up to 32 MiB) and then keeps
    freed tensors in the heap, so a later allocation reuses resident pages and the RSS peak under-reads
    (measured here: 1.19 GiB vs 1.43 GiB for the same step). Fixing the threshold (mallopt(3))
    makes RSS follow the live tensors. False where glibc is not the allocator.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


class HostPeak:
    """Peak process RSS since the last reset, minus the RSS when this meter was created."""

    def __init__(self) -> None:
        self.exact = self.reset()
        # read after the reset: the high-water mark restarts at this RSS, so the span's peak is never below it
        self.baseline_bytes = _proc_status_bytes("VmRSS")

    def reset(self) -> bool:
        """Restart the high-water mark at the current RSS; False where the kernel cannot."""
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def reading(self) -> tuple[float | None, str]:
        """(peak bytes, "") or (None, why there is no figure)."""
        hwm = _proc_status_bytes("VmHWM")
        if not self.exact or hwm is None or self.baseline_bytes is None:
            return None, "the RSS high-water mark cannot be read or reset here (Linux /proc needed)"
        if hwm <= self.baseline_bytes:  # a model and its step cannot take 0 bytes: the meter did not see them
            return None, (f"RSS high-water mark {hwm / MIB:.0f} MiB is not above the {self.baseline_bytes / MIB:.0f} "
                          "MiB before the build (memory returned to the OS, or the step reused pages the process "
                          "already held; run the probe in a fresh process), so the span has no measurable peak")
        return float(hwm - self.baseline_bytes), ""

    def peak_bytes(self) -> float | None:
        """None where there is no trustworthy figure (see :meth:`reading` for why)."""
        return self.reading()[0]


class NvidiaSmiPeak:
    """Context manager: the peak of nvidia-smi's memory.used while open, minus the first reading.

    One ``nvidia-smi --query-gpu=memory.used`` call per sample (not its ``-lms`` loop, whose output
    may sit in a pipe buffer and be lost when it is stopped): a sample every ~0.05-0.1 s, the time
    one call takes with the driver loaded. None without nvidia-smi.
    """

    source = "nvidia-smi"  # named in the reasons a reading is missing
    poll_s = POLL_S

    def __init__(self, device_id: str | None) -> None:
        self.device_id = device_id
        self._first_mib: int | None = None
        self._last_mib: int | None = None
        self._peak_mib: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NvidiaSmiPeak:
        if not self._available():
            return self
        self._sample()  # the idle reading, before this process creates its CUDA context
        self._thread = threading.Thread(target=self._poll, name="nvidia-smi-peak", daemon=True)
        self._thread.start()
        return self

    def _available(self) -> bool:
        return self.device_id is not None and shutil.which("nvidia-smi") is not None

    def _used_mib(self) -> int | None:
        assert self.device_id is not None
        return memory_used_mib(self.device_id)

    def _sample(self) -> None:
        value = self._used_mib()
        if value is None:
            return
        if self._first_mib is None:
            self._first_mib = value
        self._last_mib = value
        self._peak_mib = value if self._peak_mib is None else max(self._peak_mib, value)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._sample()

    def reset(self) -> None:
        """Forget the peak so far (e.g. a build-time copy); keep the latest sample."""
        self._peak_mib = self._last_mib

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=QUERY_TIMEOUT_S)

    def reading(self) -> tuple[float | None, str]:
        """(peak bytes above the first reading, "") or (None, why there is no figure)."""
        if self._peak_mib is None or self._first_mib is None:
            return None, f"{self.source} gave no reading"
        if self._peak_mib < self._first_mib:  # possible after reset(): used memory fell below the idle reading
            return None, (f"{self.source} peak {self._peak_mib} MiB is below the first reading {self._first_mib} MiB "
                          "(another process freed memory on this GPU), so the span has no measurable peak")
        return float((self._peak_mib - self._first_mib) * MIB), ""

    @property
    def peak_bytes(self) -> float | None:
        return self.reading()[0]


def memory_used_mib(device_id: str) -> int | None:
    """Device-wide memory.used of one GPU in MiB, from one nvidia-smi call (None if it fails)."""
    command = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", device_id]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    return int(lines[0]) if lines and lines[0].isdigit() else None


def cap_address_space(extra_gib: float) -> None:
    """Limit the process's virtual memory to its current size + ``extra_gib`` (RLIMIT_AS).

    An allocation past the cap then fails with ENOMEM, which torch raises as "can't allocate
    memory": a host OOM the probe can report. CPU only: CUDA maps far more address space than it uses.
    """
    import resource

    size = _proc_status_bytes("VmSize")
    if size is None:
        raise OSError("host memory cap needs Linux /proc/self/status")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + int(extra_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def nvidia_smi_id() -> str:
    """The GPU nvidia-smi should watch: the first of CUDA_VISIBLE_DEVICES (index or UUID), else 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def gpu_facts() -> dict[str, str] | None:
    """Name, driver and total memory (MiB) of the watched GPU from nvidia-smi; None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    command = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
               "--format=csv,noheader,nounits", "-i", nvidia_smi_id()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = [p.strip() for p in done.stdout.strip().splitlines()[0].split(",")] if done.stdout.strip() else []
    if len(parts) != 3:
        return None
    return {"name": parts[0], "driver": parts[1], "memory_mib": parts[2]}


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (platform's answer elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
