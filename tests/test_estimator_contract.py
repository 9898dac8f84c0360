"""One contract suite over every estimator: theory, learned, hybrid and traced (when importable).

Same output schema, no NaNs, per-GPU memory that does not rise when GPUs are added at a fixed global
batch, memory that rises with tokens, graceful out-of-domain answers, and one meaning of
``estimate_frame`` for all (the batch columns at each row's own number_gpus, 1 if unset; never a
recommendation). The theory itself is one implementation over columns (a single estimate is a batch of one);
tests/test_theory_identity.py checks it against outputs of the code before it.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest

from autoconf.errors import UnknownModelError, UnverifiedModelError
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.frame import OUTPUT_COLUMNS
from autoconf.schema import Estimate, Job, Placement

HAS_TRACED = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
ESTIMATORS = ["theory", "learned", "hybrid",
              pytest.param("traced", marks=[pytest.mark.slow, pytest.mark.skipif(not HAS_TRACED, reason="no torch")])]
A100 = "NVIDIA-A100-80GB-PCIe"


def _model(name: str) -> str:
    """Traced runs real (fake-tensor) training steps: keep it on the tiny test architecture."""
    return "tiny-llama-test" if name == "traced" else "llama3.1-8b"


@pytest.fixture(scope="module", params=ESTIMATORS)
def estimator(request: pytest.FixtureRequest):
    return get_estimator(request.param)


def _finite_memory(est: Estimate) -> None:
    mem = est.memory
    for name in ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "peak", "capacity"):
        value = getattr(mem, f"{name}_bytes")
        assert math.isfinite(value) and value >= 0, name
    assert 0.0 <= mem.oom_risk <= 1.0
    assert mem.fits == (mem.peak_bytes <= mem.capacity_bytes)


def test_schema_and_no_nans(estimator) -> None:
    job = Job(model=_model(estimator.name), method="lora", tokens_per_sample=1024, batch_size=4)
    est = estimator.estimate(job, Placement(gpu_model=A100, number_gpus=2))
    assert isinstance(est, Estimate) and est.estimator == estimator.name
    assert est.model_version == estimator.model_version
    _finite_memory(est)
    parts = sum(getattr(est.memory, f"{p}_bytes") for p in ("weights", "gradients", "optimizer", "activations",
                                                            "logits"))
    assert est.memory.peak_bytes == pytest.approx(parts + est.memory.overhead_bytes, rel=1e-9)
    if est.throughput is not None:
        assert est.throughput.tokens_per_second > 0


@pytest.mark.parametrize("method", ["full", "lora"])
def test_more_gpus_never_raise_per_gpu_memory(estimator, method: str) -> None:
    job = Job(model=_model(estimator.name), method=method, tokens_per_sample=2048, batch_size=8)
    peaks = [estimator.estimate(job, Placement(gpu_model=A100, number_gpus=n)).memory.peak_bytes for n in (2, 4, 8)]
    assert peaks[0] >= peaks[1] >= peaks[2]


@pytest.mark.parametrize("gpus", [1, 2])
def test_memory_rises_with_tokens(estimator, gpus: int) -> None:
    # LoRA: the peak is at the loss, where activations and logits grow with tokens (a full fine-tune of
    # an 8B model on one GPU peaks in the optimizer step, flat in tokens until activations catch up)
    peaks = [estimator.estimate(Job(model=_model(estimator.name), method="lora", tokens_per_sample=s, batch_size=4),
                                Placement(gpu_model=A100,
                                          number_gpus=gpus)).memory.peak_bytes for s in (512, 2048, 8192)]
    assert peaks[0] < peaks[1] < peaks[2]


@pytest.mark.parametrize("model, error",
                         [("no-such-model-xyz", UnknownModelError), ("powerlm-3b", UnverifiedModelError)])
def test_unknown_or_unverified_model_is_a_typed_error(estimator, model: str, error: type) -> None:
    with pytest.raises(error):
        estimator.estimate(Job(model=model), Placement(gpu_model=A100))


def test_far_outside_the_measured_domain_is_still_answered(estimator) -> None:
    # 64 GPUs, 32k tokens, an H100: nothing like it was measured; the answer must still be complete.
    job = Job(model=_model(estimator.name), tokens_per_sample=32768, batch_size=64)
    est = estimator.estimate(job, Placement(gpu_model="NVIDIA-H100-80GB-HBM3", number_gpus=64))
    _finite_memory(est)


def test_estimate_frame_columns(estimator) -> None:
    frame = pd.DataFrame({"model_name": [_model(estimator.name), "no-such-model-xyz"], "method": ["lora", "full"],
                          "gpu_model": [A100, A100], "tokens_per_sample": [1024, 1024], "batch_size": [4, 4],
                          "my_tag": ["a", "b"]})
    out = estimator.estimate_frame(frame)
    assert list(out.columns)[:1] == ["model_name"] and set(OUTPUT_COLUMNS) <= set(out.columns)
    assert out["my_tag"].tolist() == ["a", "b"]
    assert out["error"].iloc[0] is None or pd.isna(out["error"].iloc[0])
    assert "no-such-model-xyz" in str(out["error"].iloc[1])
    assert np.isfinite(out["peak_memory_gib"].iloc[0])
    assert list(out.columns) == ["model_name", "method", "gpu_model", "tokens_per_sample", "batch_size", "my_tag",
                                 *OUTPUT_COLUMNS]  # one schema for every estimator


GPU_COUNTS = [None, 1, 2, 4]  # None: the row does not say; estimate_frame then means 1 GPU


def _gpu_frame(model: str) -> pd.DataFrame:
    return pd.DataFrame({"model_name": model, "method": "lora", "gpu_model": A100, "tokens_per_sample": 1024,
                         "batch_size": 8, "number_gpus": GPU_COUNTS})


def test_estimate_frame_estimates_at_each_rows_gpus_and_never_recommends(estimator) -> None:
    """One meaning for every estimator: row i is ``estimate`` at its own number_gpus (1 if unset)."""
    model = _model(estimator.name)
    out = estimator.estimate_frame(_gpu_frame(model))
    job = Job(model=model, method="lora", tokens_per_sample=1024, batch_size=8)
    for i, n in enumerate(GPU_COUNTS):
        one = estimator.estimate(job, Placement(gpu_model=A100, number_gpus=n or 1)).memory
        assert out["peak_memory_gib"].iloc[i] == pytest.approx(one.peak_bytes / 2**30, abs=1e-4), n
    assert out["peak_memory_gib"].iloc[0] == out["peak_memory_gib"].iloc[1]  # unset = 1 GPU
    assert out[["can_recommend", "gpus", "workers", "reason"]].isna().all().all()  # it never recommends


def test_theory_and_hybrid_frames_mean_the_same_placement() -> None:
    """The same rows through theory and hybrid: the same GPU count per row (the row's own, 1 if unset),
    so the peaks differ only by the hybrid's correction, not by a placement (the issue's 172 vs 57 GiB)."""
    frame = pd.concat([_gpu_frame("llama3.1-8b").assign(method="full"), _gpu_frame("mistral-7b-v0.1")],
                      ignore_index=True)
    theory, hybrid = get_estimator("theory").estimate_frame(frame), get_estimator("hybrid").estimate_frame(frame)
    assert theory["number_gpus"].equals(hybrid["number_gpus"]) and theory["number_gpus"].equals(frame["number_gpus"])
    ratio = hybrid["peak_memory_gib"] / theory["peak_memory_gib"]
    assert ratio.between(0.75, 1 / 0.75).all(), ratio.tolist()
    for frame_out in (theory, hybrid):  # per-GPU peaks fall as the row's GPUs grow, in both
        for start in (0, len(GPU_COUNTS)):
            peaks = frame_out["peak_memory_gib"].iloc[start + 1:start + len(GPU_COUNTS)].tolist()
            assert peaks == sorted(peaks, reverse=True) and peaks[0] > peaks[-1]
