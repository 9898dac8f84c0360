"""The probe's memory meters report no figure, and say why, when the reading would be negative."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoconf.interfaces.probe.memory import MIB, HostPeak, NvidiaSmiPeak
from autoconf.interfaces.probe.runner import NOTES, ProbeResult, data_row
from autoconf.schema import Job

BIG = 256 * MIB  # far above glibc's mmap threshold: freed straight back to the kernel


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's RSS high-water mark reset")
def test_host_peak_below_its_baseline_is_no_figure() -> None:
    """Memory held when the baseline is taken and returned before the span: RSS high-water < baseline."""
    block = bytearray(BIG)  # zero-filled, so every page is resident
    meter = HostPeak()
    del block
    assert meter.reset()
    value, why = meter.reading()
    assert value is None and meter.peak_bytes() is None
    assert "not above" in why and "before the build" in why


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's RSS high-water mark reset")
def test_host_peak_of_a_real_allocation() -> None:
    meter = HostPeak()
    block = bytearray(BIG)
    value, why = meter.reading()
    del block
    assert why == "" and value is not None and value >= BIG * 0.9


def test_nvidia_smi_peak_below_the_first_reading_is_no_figure() -> None:
    meter = NvidiaSmiPeak(None)
    assert meter.reading() == (None, "nvidia-smi gave no reading")
    meter._first_mib, meter._peak_mib = 1000, 900  # after reset(): another process freed 100 MiB on the GPU
    value, why = meter.reading()
    assert value is None and meter.peak_bytes is None and "below the first reading" in why


def test_an_ok_run_without_a_figure_writes_an_empty_peak_and_the_reason() -> None:
    job = Job(model="llama3.1-8b", tokens_per_sample=128, batch_size=1)
    why = "no host_rss figure: RSS high-water mark 10 MiB is below the 20 MiB before the build"
    result = ProbeResult(status="ok", device="cpu", device_name="cpu", gpu_model="cpu", memory_metric="host_rss",
                         peak_memory_bytes=None, host_rss_bytes=None, tokens_per_second=100.0, notes=why,
                         catalogue_parameters=8_030_261_248, attention_implementation="sdpa")
    row = data_row(job, result, "cpu", "ref")
    assert row["status"] == "ok" and row["peak_memory_bytes"] == "" and row["memory_metric"] == "host_rss"
    assert row["notes"] == f"{NOTES}; {why}"
    assert row["tokens_per_second"] == "100"
