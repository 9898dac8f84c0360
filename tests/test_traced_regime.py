"""Which shape a job is traced at: a sliding-window model under SDPA from its window on is traced at its own shape."""

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
