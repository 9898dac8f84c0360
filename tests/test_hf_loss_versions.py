"""bench/hf_loss_versions.py: the loss peaks of transformers' release lines, against tensors counted by hand."""

from __future__ import annotations

import pytest

from bench.hf_loss_versions import LINES, measure

# Bytes per token per vocabulary entry alive at the peak, counted from each line's code (bench module docstring):
# fp32 logits 4 + their shifted fp32 copy 4 + the saved fp32 log-softmax 4 (the bf16 logits dropped by the rebind);
# 4.46–4.48 keep the bf16 logits 2 besides; ≥ 4.49: bf16 2 + fp32 4 + log-softmax 4 in forward, then in backward
# the saved log-softmax 4 + its gradient 4 + the input gradient 4; gpt_bigcode: bf16 logits 2 + copy 2 + log-softmax 2.
EXPECTED = {"4.39–4.45 llama/mistral": (12, 12), "4.46–4.48": (14, 14), "≥ 4.49, 5.x": (10, 12),
            "gpt_bigcode 4.x": (6, 6)}


@pytest.mark.parametrize("line", LINES)
def test_loss_peak_per_release_line(line: str) -> None:
    forward, step = measure(line)
    # + one V × h bf16 temporary of the CPU matmul: 2·h/tokens = 0.125 per token·V at 2 × 256 tokens, h = 32
    assert forward == pytest.approx(EXPECTED[line][0] + 0.125, abs=0.03)
    assert step == pytest.approx(EXPECTED[line][1] + 0.125, abs=0.03)
