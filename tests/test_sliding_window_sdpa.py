"""Sliding-window models under SDPA from the window on: traced at their own shape, and the mask in theory."""

from __future__ import annotations

import pytest

from autoconf.estimators.traced.estimator import _regime
from autoconf.schema import Job

# starcoder2-3b: sliding_window 4096 (its config.json). transformers keeps the causal mask from kv_length >= window
# on (masking_utils._ignore_causal_mask_sdpa), so SDPA runs with a materialised mask only there; flash-attn takes the
# window as a kernel argument and never builds the mask.


@pytest.mark.parametrize(("attention", "tokens", "batch", "regime"), [
    ("sdpa", 4096, 1, "at 1x4096"),
    ("sdpa", 8192, 4, "at 4x8192"),
    ("sdpa", 4095, 1, "single"),
    ("sdpa", 2048, 4, "batched"),
    ("flash", 4096, 1, "single"),
])
def test_sliding_window_sdpa_traced_at_its_shape(attention: str, tokens: int, batch: int, regime: str) -> None:
    job = Job(model="starcoder2-3b", method="lora", attention=attention, tokens_per_sample=tokens, batch_size=batch)
    assert _regime(job, batch) == regime


def test_no_window_keeps_the_fit() -> None:
    assert _regime(Job(model="llama3.1-8b", attention="sdpa", tokens_per_sample=16384, batch_size=1), 1) == "single"


def _activations(attention: str, tokens: int, checkpointing: bool = False) -> float:
    from autoconf.estimators.theory.memory import estimate_memory
    from autoconf.schema import Placement

    job = Job(model="starcoder2-3b", method="lora", attention=attention, tokens_per_sample=tokens, batch_size=1,
              gradient_checkpointing=checkpointing)
    return estimate_memory(job, Placement(gpu_model="NVIDIA-H100-80GB-HBM3")).activations_bytes


@pytest.mark.parametrize(("tokens", "extra"), [(4096, 2 * 30 * 4096**2), (4095, 0)])
def test_theory_keeps_the_converted_mask_per_layer(tokens: int, extra: int) -> None:
    # torch converts the boolean mask to a bf16 additive one (2 bytes per query·key) in each of the 30 layers'
    # attention calls and keeps it for backward; below the window transformers passes no mask at all
    assert _activations("sdpa", tokens) - _activations("flash", tokens) == pytest.approx(extra, abs=1)
