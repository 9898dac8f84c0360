"""QLoRA's saved bytes per decoder layer without checkpointing, against the traced step's saved tensors.

Hand-derived for llama3.2-1b (h = q = 2,048, kv = 512, I = 8,192, 32 heads, r = 8), per token, from the tensors a
fake-tensor step of transformers 5.24 + peft 0.21 + bitsandbytes 0.50.2 saves for backward (saved-tensor hooks on
the second layer): under peft's kbit upcast the residual stream is fp32, so each norm keeps its fp32 input and
rsqrt (4·h + 4), q, k, v and attention's output are fp32 (4·q + 8·kv + 4·q) with the fp32 logsumexp (4·32), the
MLP keeps fp32 gate, silu(gate) and up (12·I), lora_A its fp32 output (4·r per module) and its input once per
distinct tensor (the attention input 4·h, the MLP input 4·h, the down projection's input 4·I); bitsandbytes keeps
no 4-bit matmul input. Without the upcast, bf16 LoRA's layer: norms 8·h + 8, one fp32 cast per adapted input
(4·h each), bf16 q, k, v, output (2·q + 4·kv + 2·q) + 4·32, SwiGLU 6·I.
"""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.theory.activations import layer_bytes_per_token
from autoconf.schema import Job

H, KV, INTER, HEADS, R = 2048, 512, 8192, 32, 8
NORMS = 2 * (4 * H + 4)
KBIT_ATTENTION = 4 * H + 8 * KV + 4 * H + 4 * HEADS
BF16_ATTENTION = 2 * H + 4 * KV + 2 * H + 4 * HEADS


@pytest.mark.parametrize(("targets", "kbit", "expected"), [
    (["q_proj", "v_proj"], True, NORMS + 4 * H + 2 * 4 * R + KBIT_ATTENTION + 12 * INTER),  # 143,560 traced
    (["all-linear"], True, NORMS + 7 * 4 * R + KBIT_ATTENTION + 4 * H + 4 * H + 12 * INTER + 4 * INTER),  # 184,680
    (["q_proj", "v_proj"], False, NORMS + 2 * 4 * H + 2 * 4 * R + BF16_ATTENTION + 6 * INTER),  # 92,360
])
def test_qlora_layer_matches_the_traced_saved_tensors(targets: list[str], kbit: bool, expected: int) -> None:
    job = Job(model="llama3.2-1b", method="qlora", gradient_checkpointing=False, lora_target_modules=targets,
              kbit_prepare=kbit)
    assert layer_bytes_per_token(job, get_architecture("llama3.2-1b")) == expected


def test_dropout_keeps_one_input_per_adapted_module() -> None:
    """With dropout each adapted linear keeps its own fp32 dropout output (lora_A's input, in place of the shared
    fp32 stream) and CUDA's 1-byte mask (native_dropout; traced with cuda_dropout: 6·h over the 143,560 without)."""
    job = Job(model="llama3.2-1b", method="qlora", gradient_checkpointing=False, lora_dropout=0.1)
    assert layer_bytes_per_token(job, get_architecture("llama3.2-1b")) == (
        NORMS + 2 * (4 * H + H) + 2 * 4 * R + KBIT_ATTENTION + 12 * INTER)


def test_dropout_output_is_as_wide_as_each_input() -> None:
    """bf16 QLoRA on all linears with dropout: each module's fp32 dropout output replaces its fp32 cast copy, and
    CUDA's mask adds 1 B per input unit (q, k, v, gate, up read h; o_proj q; down I) on top of the traced 158,056
    without dropout (traced with cuda_dropout)."""
    job = Job(model="llama3.2-1b", method="qlora", gradient_checkpointing=False, lora_target_modules=["all-linear"],
              lora_dropout=0.1, kbit_prepare=False)
    no_dropout = NORMS + 4 * (5 * H + H + INTER) + 7 * 4 * R + BF16_ATTENTION + 6 * INTER
    assert layer_bytes_per_token(job, get_architecture("llama3.2-1b")) == no_dropout + (5 * H + H + INTER)


def test_layernorm_family_doubles_its_norms() -> None:
    """starcoder2-3b (h = q = 3,072, kv = 256, I = 12,288, 24 heads), q and v under the kbit upcast: its bf16
    LayerNorms run in fp32 (input 4·h, mean and rstd 4 + 4 each), the plain MLP keeps fp32 c_fc output (4·I), the
    frozen 4-bit c_proj nothing (traced 112,816)."""
    h, kv, inter, heads = 3072, 256, 12288, 24
    job = Job(model="starcoder2-3b", method="qlora", gradient_checkpointing=False, lora_target_modules=["q_proj", "v_proj"])
    expected = 2 * (4 * h + 8) + 4 * h + 2 * 4 * R + (4 * h + 8 * kv + 4 * h + 4 * heads) + 4 * inter
    assert layer_bytes_per_token(job, get_architecture("starcoder2-3b")) == expected
