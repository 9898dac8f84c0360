"""Loss-sized segments that shorter batches leave cached when samples vary in length (loss.LOSS_SEGMENT_NOTE):
hand-counted bytes (24 V-wide bytes per token under ms-swift's profile, the vocabulary from the model's config.json),
reserved and device peaks only, scalar == vectorised."""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.theory import loss as ce
from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.vector import theory_batch
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.schema import Job, Placement

A100 = "NVIDIA-A100-80GB-PCIe"
LLAMA = "llama3.1-8b"  # config.json: vocab_size 128256
LLAMA_V = 128256


def _job(**changes: object) -> Job:
    base: dict[str, object] = dict(model=LLAMA, framework="ms-swift", method="lora", tokens_per_sample=2048, batch_size=1,
                                   samples_vary_in_length=True)
    return Job(**{**base, **changes})


@pytest.mark.parametrize("changes, per_vocab", [
    ({}, 24),  # 2 + 2 + 4 + 4 forward, 4 + 4 + 2 + 2 backward (LOSS_SEGMENT_NOTE)
    ({"samples_vary_in_length": False}, 0),  # fixed length: every batch reuses the same segments
    ({"packing": True}, 0),  # packed samples fill tokens_per_sample: one length
    ({"loss_kernel": "fused-linear-ce"}, 0),  # no V-wide tensors
    ({"fused_loss": True}, 0),
    ({"framework": "hf-trainer"}, 0),  # profile value 0: not checked on that stack's rows
])
def test_bytes_per_token(changes: dict[str, object], per_vocab: int) -> None:
    job = _job(**changes)
    assert ce.loss_segment_bytes_per_token(job, get_architecture(job.model)) == per_vocab * LLAMA_V


@pytest.mark.parametrize("method, batch, tokens", [("lora", 1, 2048), ("lora", 4, 1024), ("full", 2, 512),
                                                   ("qlora", 1, 4096)])
def test_reserved_and_device_grow_allocated_does_not(method: str, batch: int, tokens: int) -> None:
    place = Placement(gpu_model="NVIDIA-H200", number_gpus=1)
    fixed = estimate_memory(_job(method=method, batch_size=batch, tokens_per_sample=tokens,
                                 samples_vary_in_length=False), place)
    varying = estimate_memory(_job(method=method, batch_size=batch, tokens_per_sample=tokens), place)
    cache = 24 * LLAMA_V * batch * tokens
    assert varying.allocated_bytes == fixed.allocated_bytes
    assert varying.peak_phase == fixed.peak_phase and varying.logits_bytes == fixed.logits_bytes
    assert varying.reserved_bytes - fixed.reserved_bytes == pytest.approx(cache, rel=1e-12)
    assert varying.peak_bytes - fixed.peak_bytes == pytest.approx(cache, rel=1e-12)
    # free cached blocks are released before an allocation fails: the risk reads the peak without them
    assert varying.releasable_bytes == pytest.approx(cache, rel=1e-12) and fixed.releasable_bytes == 0
    assert varying.oom_risk == pytest.approx(fixed.oom_risk, rel=1e-9, abs=1e-300)


def test_tensor_parallel_splits_the_cache() -> None:
    place = Placement(gpu_model="NVIDIA-H200", number_gpus=2, tp=2)
    fixed = estimate_memory(_job(samples_vary_in_length=False), place)
    varying = estimate_memory(_job(), place)
    assert varying.reserved_bytes - fixed.reserved_bytes == pytest.approx(24 * LLAMA_V * 2048 / 2, rel=1e-12)


def test_cached_segments_never_exceed_the_gpu() -> None:
    """Free cached segments are released when cudaMalloc fails: they fill the GPU, never overflow it."""
    place = Placement(gpu_model=A100, number_gpus=1)
    capacity = get_gpu(A100).memory_bytes
    fixed = estimate_memory(_job(method="full", tokens_per_sample=8192, samples_vary_in_length=False), place)
    varying = estimate_memory(_job(method="full", tokens_per_sample=8192), place)
    assert varying.peak_bytes == max(fixed.peak_bytes, min(capacity, fixed.peak_bytes + 24 * LLAMA_V * 8192))
    assert varying.fits == fixed.fits


def test_vector_equals_scalar() -> None:
    jobs, places = [], []
    for vary in (False, True):
        for method, tp, gpus, strategy in (("lora", 1, 1, None), ("full", 1, 4, "fsdp"), ("qlora", 2, 2, None),
                                           ("full", 1, 1, None)):
            for framework in ("ms-swift", "fms-hf-tuning", "hf-trainer"):
                jobs.append(_job(method=method, batch_size=gpus // tp * 2, framework=framework, tokens_per_sample=4096,
                                 samples_vary_in_length=vary))
                places.append(Placement(gpu_model=A100, number_gpus=gpus, tp=tp, strategy=strategy))
    batch = theory_batch(jobs, places)
    for i, (job, place) in enumerate(zip(jobs, places, strict=True)):
        mem = estimate_memory(job, place)
        assert (batch.allocated[i], batch.reserved[i], batch.peak[i], batch.oom_risk[i]) == (
            mem.peak_allocated_bytes, mem.peak_reserved_bytes, mem.peak_bytes, mem.oom_risk)


def test_measured_rows_state_varying_length() -> None:
    """The swift benchmark's rows (unpacked cls-fudan-news-zh samples) vary in length; fixed-length sources do not."""
    frame = load_measurements()
    swift = frame[frame["campaign"] == "ms-swift/ms_swift_v2_benchmark_A100_memory_speed.csv"].iloc[0]
    fixed = frame[(frame["source"] == "fsdp-qlora") & (frame["scored"] == 1)].iloc[0]
    assert row_to_inputs(swift)[0].samples_vary_in_length
    assert not row_to_inputs(fixed)[0].samples_vary_in_length
