"""Memory meters of the probe that need no torch: the host RSS high-water mark and nvidia-smi's peak.

* Host (CPU runs): Linux keeps a per-process RSS high-water mark (``VmHWM`` in /proc/self/status)
  and resets it to the current RSS when "5" is written to /proc/self/clear_refs (proc(5), since
  Linux 4.0). The peak of a span is therefore exact, not sampled: HWM after the span minus the RSS
  before the model was built. Python's tracemalloc cannot see torch's allocations, so it is not used.
* GPU: ``nvidia-smi --query-gpu=memory.used -lms N`` prints device-wide used memory every N ms
  (it includes the CUDA context and any other process on that GPU); a thread keeps the maximum, and
  the figure is that peak minus the first reading (taken before the model is built), as
  fms-acceleration's benchmark reports it (data/README.md, ``nvidia_smi_bytes``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import threading
import time
from pathlib import Path

MIB = 2**20
KIB = 2**10
POLL_MS = 20  # nvidia-smi's loop period; a 20 ms sample misses only spikes shorter than one step kernel
FIRST_SAMPLE_S = 5  # nvidia-smi's first line comes within ~0.1-1 s
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
        self.baseline_bytes = _proc_status_bytes("VmRSS")
        self.exact = self.reset()

    def reset(self) -> bool:
        """Restart the high-water mark at the current RSS; False where the kernel cannot."""
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def peak_bytes(self) -> float | None:
        """None where the high-water mark cannot be reset (the lifetime peak would be a wrong answer)."""
        hwm = _proc_status_bytes("VmHWM")
        if not self.exact or hwm is None or self.baseline_bytes is None:
            return None
        return float(max(0, hwm - self.baseline_bytes))


class NvidiaSmiPeak:
    """Context manager: the peak of nvidia-smi's memory.used while it is open (None without nvidia-smi)."""

    def __init__(self, device_id: str | None) -> None:
        self.device_id = device_id
        self._peak_mib: int | None = None
        self._last_mib: int | None = None
        self._first = threading.Event()
        self._first_mib = 0
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "NvidiaSmiPeak":
        if self.device_id is None or shutil.which("nvidia-smi") is None:
            return self
        command = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                   "-i", self.device_id, "-lms", str(POLL_MS)]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, name="nvidia-smi-peak", daemon=True)
        self._thread.start()
        self._first.wait(timeout=FIRST_SAMPLE_S)  # the idle reading must precede the CUDA context
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            text = line.strip()
            if text.isdigit():
                if not self._first.is_set():
                    self._first_mib = int(text)
                    self._first.set()
                self._last_mib = int(text)
                self._peak_mib = max(self._peak_mib or 0, self._last_mib)

    def reset(self) -> None:
        """Forget the peak so far (e.g. a build-time copy); keep the latest sample."""
        self._peak_mib = self._last_mib

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        time.sleep(3 * POLL_MS / 1000)  # let the last samples of the final step arrive
        self._proc.terminate()
        self._proc.wait(timeout=QUERY_TIMEOUT_S)
        if self._thread is not None:
            self._thread.join(timeout=QUERY_TIMEOUT_S)

    @property
    def peak_bytes(self) -> float | None:
        """Peak memory.used minus the first reading; None without nvidia-smi."""
        return None if self._peak_mib is None else float(max(0, self._peak_mib - self._first_mib) * MIB)


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
