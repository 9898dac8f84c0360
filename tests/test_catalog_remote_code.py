"""Qwen (v1), a family whose modelling code lives in its hub repositories (``model_type: qwen``, no
transformers class, so no meta-device build can be the oracle).

Oracles instead: (1) the count written out by hand from modeling_qwen.py's module list (c_attn h -> 3h with
bias, c_proj h -> h, w1 / w2 h -> I/2, c_proj I/2 -> h, two RMSNorms per layer, untied wte / lm_head, final
norm), and the three-digit sizes quoted for the four models (1.84 / 7.72 / 14.2 / 72.3 B; Qwen's model cards and
technical report round them to 1.8 / 7 / 14 / 72 B, the three-digit figures were not found in the stored pages);
(2) the trainable parameters ms-swift printed for LoRA on qwen-7b-chat in its
benchmark table (shared/data/external/ms-swift/ms_swift_v2_benchmark_A100_memory_speed.csv, column
"Trainable Params (M)"): 1.05 M at rank 2, 4.19 M at rank 8 and 33.55 M at rank 64 on c_attn, 17.89 M at rank 8
on all linear layers.
"""

from __future__ import annotations

import pytest

from autoconf.catalog import resolve_model

# name -> (hidden, config intermediate_size, layers, vocab) from the configs cited in the catalogue files
SHAPES = {"qwen-1_8b-chat": (2048, 11008, 24, 151936), "qwen-7b-chat": (4096, 22016, 32, 151936),
          "qwen-14b-chat": (5120, 27392, 40, 152064), "qwen-72b-chat": (8192, 49152, 80, 152064)}
PUBLISHED_BILLIONS = {"qwen-1_8b-chat": 1.84, "qwen-7b-chat": 7.72, "qwen-14b-chat": 14.2, "qwen-72b-chat": 72.3}


def by_hand(hidden: int, config_inter: int, layers: int, vocab: int) -> int:
    mlp = config_inter // 2  # QWenMLP: Linear(h, intermediate_size // 2) twice
    attention = hidden * 3 * hidden + 3 * hidden + hidden * hidden  # c_attn (with bias) + c_proj (no bias)
    per_layer = attention + 3 * hidden * mlp + 2 * hidden  # w1, w2, c_proj + ln_1, ln_2
    return layers * per_layer + 2 * vocab * hidden + hidden  # wte + lm_head (untied) + ln_f


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_total_params_by_hand_and_published(name: str) -> None:
    arch = resolve_model(name).architecture
    assert arch.model_type == "qwen"
    assert arch.total_params == by_hand(*SHAPES[name])
    digits = 2 if PUBLISHED_BILLIONS[name] < 10 else 1
    assert round(arch.total_params / 1e9, digits) == PUBLISHED_BILLIONS[name]


@pytest.mark.parametrize(("targets", "rank", "millions"), [
    (("c_attn",), 2, 1.05), (("c_attn",), 8, 4.19), (("c_attn",), 64, 33.55), (("all-linear",), 8, 17.89),
])
def test_lora_params_equal_ms_swift_log(targets: tuple[str, ...], rank: int, millions: float) -> None:
    arch = resolve_model("qwen-7b-chat").architecture
    assert round(arch.lora_params(targets, rank) / 1e6, 2) == millions


def test_default_lora_target_is_c_attn() -> None:
    """peft's mapping for model_type qwen and ms-swift's LoRATM.qwen both name c_attn alone."""
    assert resolve_model("Qwen/Qwen-7B").architecture.default_lora_targets == ("c_attn",)


def test_mlp_width_is_half_the_config_value() -> None:
    arch = resolve_model("Qwen/Qwen-14B-Chat").architecture
    assert arch.intermediate_size == 27392 // 2 and arch.gated_mlp and not arch.tie_word_embeddings


def test_traced_refuses_remote_code_and_says_why() -> None:
    """No transformers class to build: the traced estimator does not start a trace worker, it refuses the
    job with a one-line reason (theory answers it)."""
    from autoconf.errors import InvalidInputError
    from autoconf.estimators.contract import get_estimator
    from autoconf.schema import Job, Placement

    job = Job(model="qwen-7b-chat", method="lora", tokens_per_sample=512, batch_size=1, lora_target_modules=("c_attn",))
    with pytest.raises(InvalidInputError, match="qwen is hub remote code"):
        get_estimator("traced").estimate(job, Placement(gpu_model="NVIDIA-RTX-A5000", number_gpus=1))
