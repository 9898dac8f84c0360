"""Theory per layer kind and vision-language models, against hand-derived numbers.

Every expected value below is written out from the model's config (or the transformers processor
rules quoted in autoconf/estimators/theory/images.py), not computed by the code under test.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from autoconf.catalog import get_architecture
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory import images, layers
from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.vector import theory_batch
from autoconf.schema import Job, Placement

A100 = Placement(gpu_model="NVIDIA-A100-SXM4-80GB", number_gpus=1)
# CLIP ViT-L/14-336 (llava-1.5-7b's vision_config) and its 2-layer projector to 4096:
# per layer 4·(1024² + 1024) + (1024·4096 + 4096) + (4096·1024 + 1024) + 2 LayerNorms·2·1024 = 12,596,224;
# 24 layers = 302,309,376; class token 1024 + patch conv 3·14·14·1024 = 602,112 + positions 577·1024 = 590,848
# + pre/post LayerNorm 4,096 → tower 303,507,456; projector 1024·4096+4096 + 4096·4096+4096 = 20,979,712.
LLAVA_VISION_PARAMS = 303_507_456 + 20_979_712


def _llava(**kw: object) -> Job:
    return Job(model="llava-1.5-7b", method="lora", batch_size=1, tokens_per_sample=2048, images_per_sample=1,
               image_resolution=336, **kw)


def test_llava_vision_components_by_hand() -> None:
    job = _llava()
    assert images.tokens_per_image(job, get_architecture(job.model)) == (577, (336 // 14) ** 2)  # 576 = 24²
    mem = estimate_memory(job, A100)
    assert mem.vision_weights_bytes == 2 * LLAVA_VISION_PARAMS  # bf16, frozen tower, trained projector
    assert mem.vision_optimizer_bytes == 20_979_712 * 4  # trained projector (bf16, not a LoRA adapter): AdamW m, v 2+2 B
    # frozen tower keeps its output features (2·1024 per tower token); the trained projector saves its
    # input (2·1024) and 4·4096 per image token
    assert mem.vision_activations_bytes == 2 * 1024 * 577 + (2 * 1024 + 4 * 4096) * 576
    assert mem.peak_allocated_bytes is not None
    text_only = estimate_memory(_llava().model_copy(update={"images_per_sample": 0}), A100)
    assert text_only.vision_activations_bytes == 0 and text_only.vision_weights_bytes == 2 * LLAVA_VISION_PARAMS
    assert mem.activations_bytes > text_only.activations_bytes  # 576 image tokens join the text sequence


def test_unfrozen_vision_trains_tower() -> None:
    mem = estimate_memory(_llava(freeze_vision=False, freeze_projector=True), A100)
    assert mem.vision_optimizer_bytes == 303_507_456 * 4


@pytest.mark.parametrize(("resolution", "tokens"), [
    (448, (448 // 14) ** 2 // 4),  # 448 is a multiple of 28: 32² patches, 2×2 merge → 256
    (1000, 70 * 70 // 4),  # 1008² > 28²·1280 pixels → floor(1000/√(1000²/1,003,520)/28)·28 = 980 → 70² patches
    (30, (56 // 14) ** 2 // 4),  # 28² < 56² minimum → ceil(30·√(3136/900)/28)·28 = 56 → 4² patches → 4 tokens
])
def test_qwen2_vl_image_tokens(resolution: int, tokens: int) -> None:
    job = Job(model="qwen2-vl-7b", images_per_sample=1, image_resolution=resolution)
    assert images.tokens_per_image(job, get_architecture(job.model))[1] == tokens


def test_llava_next_anyres_672() -> None:
    # 672² fits the 672×672 pinpoint: 2×2 tiles of 24² features = 48×48, + 48 newlines, + the 24² base image
    job = Job(model="llava-v1.6-mistral-7b", images_per_sample=1, image_resolution=672)
    assert images.tokens_per_image(job, get_architecture(job.model))[1] == 48 * 48 + 48 + 576


def test_mamba_layer_keeps_ssm_state() -> None:
    m = get_architecture("granite-4.0-h-micro").mamba
    assert m is not None and (m.n_heads, m.d_head, m.d_state, m.n_groups, m.d_conv) == (64, 64, 128, 1, 4)
    # fp32 state 4·64·64·128 = 2,097,152 + bf16 conv buffer 2·(4 − 1)·(4096 + 2·128) = 26,112
    assert layers.ssm_state_bytes(m) == 2_097_152 + 26_112
    # 2·(4096 + 4352 + 64) + 4·4352 + 4·64 + 2·4096 + 4·64·64·128/256 + 6·4096 + 2·4096 = 83,840 per token
    assert layers.mamba_bytes(m, 2048) == 83_840 + 2_123_264 / 2048
    job = Job(model="granite-4.0-h-micro", method="lora", batch_size=1, tokens_per_sample=2048,
              gradient_checkpointing=False)
    mem = estimate_memory(job, A100)
    assert mem.activations_bytes > 36 * 83_840 * 2048  # 36 Mamba layers at least


def test_mla_attention_bytes() -> None:
    arch = get_architecture("deepseek-v2-lite")
    assert arch.mla is not None
    r_q, r_kv = arch.mla.q_lora_rank, arch.mla.kv_lora_rank
    # 16 heads, d_qk = 128 + 64, d_v = 128 (module docstring of layers.py, term by term)
    hand = 6 * r_q + 4 * 16 * 192 + 2 * (r_kv + 64) + 4 * r_kv + 2 * 16 * 256 + 2 * 16 * 192 * 2 + 2 * 16 * 128 + 64 + 8
    assert layers.mla_bytes(arch, arch.mla) == hand


@pytest.mark.parametrize("job", [
    _llava(), _llava(freeze_vision=False),
    Job(model="qwen2-vl-7b", method="lora", batch_size=2, tokens_per_sample=1024, images_per_sample=2),
    Job(model="granite-4.0-h-micro", method="lora", batch_size=1, tokens_per_sample=2048),
    Job(model="deepseek-v2-lite", method="lora", batch_size=1, tokens_per_sample=2048),
    Job(model="gemma-2-9b", method="lora", batch_size=1, tokens_per_sample=2048, attention="eager"),
])
def test_vector_equals_scalar(job: Job) -> None:
    scalar = estimate_memory(job, A100)
    batch = theory_batch([job], [A100])
    assert batch.peak[0] == scalar.peak_bytes
    for part in ("weights", "activations", "vision_weights", "vision_activations", "vision_optimizer"):
        assert batch.parts[part][0] == getattr(scalar, f"{part}_bytes")


def test_images_on_text_model_refused() -> None:
    with pytest.raises(InvalidInputError, match="images_per_sample"):
        estimate_memory(Job(model="llama3.1-8b", images_per_sample=1), A100)
    done = subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "estimate", "--model", "llama3.1-8b",
                           "--images-per-sample", "1", "--estimator", "theory"], capture_output=True, text=True)
    assert done.returncode == 2 and "images_per_sample" in done.stderr and "Traceback" not in done.stderr


def test_rest_vision_parts_and_refusal() -> None:
    from tests._server import serve

    body = {"model": "llava-1.5-7b", "method": "lora", "gpu_model": "NVIDIA-A100-SXM4-80GB", "number_gpus": 1,
            "tokens_per_sample": 2048, "batch_size": 1, "estimator": "theory", "images_per_sample": 1,
            "image_resolution": 336}
    with serve() as http:
        memory = http.post("/api/memory", json=body).json()["results"][0]["memory"]
        assert memory["vision_weights_gib"] == pytest.approx(2 * LLAVA_VISION_PARAMS / 2**30)
        refused = http.post("/api/memory", json={**body, "model": "llama3.1-8b"})
    assert refused.status_code == 422 and "images_per_sample" in refused.text


@pytest.mark.slow
def test_traced_builds_a_non_llama_family_from_its_config() -> None:
    pytest.importorskip("torch")
    from dataclasses import replace

    from autoconf.estimators import get_estimator
    from autoconf.estimators.traced.hf_config import hf_config

    arch = get_architecture("qwen3-0.6b")
    config = hf_config(arch, "sdpa")
    assert type(config).__name__ == "Qwen3Config" and config.num_hidden_layers == arch.num_layers
    assert hf_config(replace(arch, num_layers=2), "sdpa").num_hidden_layers == 2  # the probe's miniature
    job = Job(model="qwen3-0.6b", method="lora", batch_size=1, tokens_per_sample=256)
    mem = get_estimator("traced", None).estimate(job, A100).memory
    assert mem.weights_bytes == pytest.approx(2 * arch.total_params, rel=0.01)  # bf16 base + small fp32 adapters
