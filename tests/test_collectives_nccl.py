"""NCCL 2.18's latency constants (collectives.latency_seconds(..., nccl="2.18")) and the stack that uses them."""

from __future__ import annotations

import math

import pytest

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.theory import communication
from autoconf.estimators.theory.collectives import Collective, latency_seconds
from autoconf.estimators.theory.stacks import stack_for
from autoconf.schema import Job, Placement


# NCCL v2.18.1 src/graph/tuning.cc, Simple protocol: ring base 8.4 µs, ring hop 3.4 (NVLink) / 14.0 (network) µs,
# tree hop 28 (NVLink) / 28 (network) µs, a multi-node ring all-reduce 1.4 × its sum (compute capability >= 8.0).
# Worked by hand:
@pytest.mark.parametrize("kind, ranks, nodes, micros", [
    ("all-gather", 8, 1, 8.4 + 7 * 3.4),  # inside a node nothing changed
    ("all-reduce", 8, 1, 8.4 + 14 * 3.4),
    ("all-gather", 16, 2, 8.4 + 14 * 3.4 + 1 * 14.0),
    ("all-reduce", 16, 2, (8.4 + 28 * 3.4 + 2 * 14.0) * 1.4),  # ring 184 µs beats the tree's 2 · (7 + 1) · 28
    ("all-reduce", 1024, 128, 2 * (7 * 28 + 7 * 28)),  # tree 784 µs (NCCL 2.8's: 1,092 µs)
    ("send", 2, 2, 8.4 + 14.0),
])
def test_nccl_2_18_latency(kind: Collective, ranks: int, nodes: int, micros: float) -> None:
    assert latency_seconds(kind, ranks, nodes, "nvlink", "2.18") == pytest.approx(micros * 1e-6)


def test_nanotron_prices_its_calls_with_nccl_2_18(monkeypatch: pytest.MonkeyPatch) -> None:
    """nanotron's benchmark ran PyTorch 2.1 (NCCL 2.18.1): its DDP all-reduce over 16 GPUs on 2 nodes costs one
    184.24 µs α per 25 MiB bucket of bf16 gradients (exposed: its launcher's CUDA_DEVICE_MAX_CONNECTIONS=1); the HF
    profile keeps NCCL 2.8's (8.4 + 28·3.4 + 2·9.6)·1.9, overlapped."""
    monkeypatch.setattr(communication, "_ring_seconds", lambda *args: 0.0)  # latency only
    arch, gpu = get_architecture("llama3.2-1b"), get_gpu("H100")
    job = Job(model="llama3.2-1b", tokens_per_sample=4096, batch_size=16, dtype="amp-bf16")
    place = Placement(gpu_model="H100", number_gpus=16, gpus_per_worker=8, strategy="ddp", inter_node_gbps=400.0)
    nanotron = stack_for("nanotron")
    assert nanotron.nccl == "2.18" and stack_for("hf").nccl == "2.8"
    buckets = math.ceil(arch.total_params / (25 * 2**20 / 2))
    comm = communication.communication(job, arch, place, gpu, stack=nanotron)
    assert comm.exposed == pytest.approx(buckets * (8.4 + 28 * 3.4 + 2 * 14.0) * 1.4e-6)
    hf = communication.communication(job, arch, place, gpu, stack=stack_for("hf"))
    assert hf.overlappable == pytest.approx(buckets * (8.4 + 28 * 3.4 + 2 * 9.6) * 1.9e-6)
