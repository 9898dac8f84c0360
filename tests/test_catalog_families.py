"""Every family's counts against transformers itself: a small config dict per family (and every
catalogue config at full size) parsed by autoconf and built by transformers on the meta device.

The oracle is the built model (parameters deduplicated by identity, so tied weights count once) and,
for LoRA, peft's own wrapping. torch / transformers / peft are test-only dependencies.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import pytest
import torch
import transformers
from peft import LoraConfig, get_peft_model
from torch import nn

from autoconf.catalog import (
    Architecture,
    UnsupportedModelTypeError,
    catalogue_architecture,
    list_models,
    parse_config,
)
from autoconf.catalog.catalogue import entries
from autoconf.catalog.config_families import DEFAULTS
from autoconf.catalog.config_parse import TEXT_CORE_DEFAULTS
from autoconf.catalog.families import REMOTE_CODE

_S = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
_CLIP = {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
         "num_attention_heads": 2, "image_size": 28, "patch_size": 14}
_MAMBA = {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2}
_MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
        "moe_intermediate_size": 8, "first_k_dense_replace": 1, "num_hidden_layers": 3, "num_experts_per_tok": 2}
# family -> a small config with the family's distinguishing features switched on
SMALL: dict[str, dict[str, Any]] = {
    "llama-biases": {"model_type": "llama", "attention_bias": True, "mlp_bias": True},
    "mistral-head-dim-window": {"model_type": "mistral", "head_dim": 16, "sliding_window": 8},
    "mixtral": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2-tied": {"model_type": "qwen2", "tie_word_embeddings": True},
    "qwen2_moe-shared-dense": {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                               "shared_expert_intermediate_size": 24, "mlp_only_layers": [0]},
    "qwen3-qk-norm": {"model_type": "qwen3", "head_dim": 16},
    "qwen3_moe-sparse-step": {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
                              "head_dim": 16, "decoder_sparse_step": 2},
    "gemma": {"model_type": "gemma", "head_dim": 16},
    "gemma2": {"model_type": "gemma2", "head_dim": 16},
    "gemma3_text": {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 6},
    "phi-qk-layernorm": {"model_type": "phi", "qk_layernorm": True},
    "phi3": {"model_type": "phi3"},
    "phimoe": {"model_type": "phimoe", "num_local_experts": 4, "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True},
    "deepseek_v2-no-q-lora": {"model_type": "deepseek_v2", **_MLA, "n_shared_experts": 2, "q_lora_rank": None},
    "deepseek_v3": {"model_type": "deepseek_v3", **_MLA, "n_shared_experts": 1, "q_lora_rank": 24, "n_group": 2, "topk_group": 1},
    "olmo2": {"model_type": "olmo2"},
    "starcoder2": {"model_type": "starcoder2"},
    "falcon-new-decoder": {"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 2, "ffn_hidden_size": 48},
    "falcon-7b-mqa": {"model_type": "falcon", "new_decoder_architecture": False, "multi_query": True, "parallel_attn": True},
    "falcon-sequential": {"model_type": "falcon", "new_decoder_architecture": False, "multi_query": False, "parallel_attn": False,
                          "bias": True},
    "gpt_neox": {"model_type": "gpt_neox"},
    "granite": {"model_type": "granite"},
    "granitemoe": {"model_type": "granitemoe", "num_local_experts": 4, "num_experts_per_tok": 2},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "num_local_experts": 4, "num_experts_per_tok": 2,
                         "shared_intermediate_size": 24, "layer_types": ["mamba", "attention"], **_MAMBA},
    "granitemoehybrid-dense": {"model_type": "granitemoehybrid", "num_local_experts": 0, "num_experts_per_tok": 0,
                               "shared_intermediate_size": 24, "layer_types": ["mamba", "attention"], **_MAMBA},
    "gpt_bigcode": {"model_type": "gpt_bigcode", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64, "n_inner": 48},
    "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64},
    "gptj": {"model_type": "gptj", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64, "rotary_dim": 4},
    "olmo": {"model_type": "olmo"},
    "cohere-qk-norm": {"model_type": "cohere", "use_qk_norm": True},
    "stablelm-qkv-bias-qk-norm": {"model_type": "stablelm", "use_qkv_bias": True, "qk_layernorm": True},
    "stablelm-parallel": {"model_type": "stablelm", "use_parallel_residual": True},
    "llava": {"model_type": "llava", "text_config": {"model_type": "llama", **_S}, "vision_config": _CLIP},
    "llava-two-feature-layers": {"model_type": "llava", "text_config": {"model_type": "mistral", **_S, "head_dim": 8},
                                 "vision_config": _CLIP, "vision_feature_layer": [-2, -5], "tie_word_embeddings": True},
    "llava_next": {"model_type": "llava_next", "text_config": {"model_type": "llama", **_S}, "vision_config": _CLIP},
    "qwen2_vl": {"model_type": "qwen2_vl", "text_config": _S, "vision_config": {
        "depth": 2, "embed_dim": 16, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2}},
    "qwen2_vl-flat-tied": {"model_type": "qwen2_vl", **_S, "tie_word_embeddings": True, "vision_config": {
        "depth": 2, "embed_dim": 16, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2}},
    "qwen2_5_vl": {"model_type": "qwen2_5_vl", "text_config": _S, "vision_config": {
        "depth": 2, "hidden_size": 16, "out_hidden_size": 32, "intermediate_size": 24, "num_heads": 2, "fullatt_block_indexes": [1]}},
    "mllama": {"model_type": "mllama", "text_config": {**_S, "num_hidden_layers": 4, "cross_attention_layers": [1, 3]},
               "vision_config": {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_global_layers": 1,
                                 "attention_heads": 2, "image_size": 28, "patch_size": 14, "max_num_tiles": 4,
                                 "intermediate_layers_indices": [0, 1], "vision_output_dim": 48}},
    "gemma3": {"model_type": "gemma3", "mm_tokens_per_image": 4, "text_config": {
        "model_type": "gemma3_text", **_S, "head_dim": 8, "num_hidden_layers": 6}, "vision_config": {
        "model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 2, "image_size": 56, "patch_size": 14, "vision_use_head": False}},
}
VISION_MODULES = ("vision_tower", "visual", "vision_model", "multi_modal_projector", "image_newline")


def small_config(label: str) -> dict[str, Any]:
    cfg = SMALL[label]
    return cfg if "text_config" in cfg or label.startswith("qwen2_vl-flat") else {**_S, **cfg}


def build(cfg: dict[str, Any]) -> nn.Module:
    config = transformers.AutoConfig.for_model(**cfg)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        for auto in (transformers.AutoModelForImageTextToText, transformers.AutoModelForCausalLM):
            try:
                return cast(nn.Module, auto.from_config(config))  # type: ignore[no-untyped-call]
            except ValueError:  # not a VLM: no image-text-to-text class
                continue
    raise AssertionError(f"transformers builds no model for {cfg['model_type']}")


def unique_params(module: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for _, p in module.named_parameters(remove_duplicate=False)}.values())


def largest_direct(model: nn.Module) -> int:
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


def decoder_layers(model: nn.Module, count: int) -> nn.ModuleList:
    for name, module in model.named_modules():
        vision = any(v in name for v in VISION_MODULES)
        if isinstance(module, nn.ModuleList) and len(module) == count and not vision and name.endswith(("layers", ".h")):
            return module
    raise AssertionError("no decoder layer list found")


@pytest.fixture(scope="module", params=sorted(SMALL))
def pair(request: pytest.FixtureRequest) -> tuple[Architecture, nn.Module]:
    cfg = small_config(request.param)
    return parse_config(cfg, request.param), build(cfg)


def test_total_and_largest_module_equal_transformers(pair: tuple[Architecture, nn.Module]) -> None:
    arch, model = pair
    assert arch.total_params == unique_params(model)
    assert arch.largest_layer_params == largest_direct(model)


def test_every_decoder_layer_equals_transformers(pair: tuple[Architecture, nn.Module]) -> None:
    arch, model = pair
    layers = decoder_layers(model, arch.num_layers)
    assert [layer.params for layer in arch.layers] == [unique_params(layer) for layer in layers]


def test_vision_part_on_its_own(pair: tuple[Architecture, nn.Module]) -> None:
    arch, model = pair
    vision = {id(p): p for n, p in model.named_parameters() if any(v in n for v in VISION_MODULES)}
    assert arch.vision_params == sum(p.numel() for p in vision.values())
    assert arch.text_params == arch.total_params - arch.vision_params


def _hf_kind(layer: nn.Module, config_kind: str) -> str:
    if getattr(layer, "mamba", None) is not None:
        return "mamba"
    if "CrossAttention" in type(layer).__name__:
        return "cross_attention"
    return {"full_attention": "attention"}.get(config_kind, config_kind)


@pytest.mark.parametrize("label", ["mistral-head-dim-window", "gemma2", "gemma3_text", "granitemoehybrid", "mllama", "gemma3"])
def test_layer_kinds_follow_transformers(label: str) -> None:
    cfg = small_config(label)
    arch, model = parse_config(cfg, label), build(cfg)
    text = cast(transformers.PretrainedConfig, model.config).get_text_config()
    kinds = getattr(text, "layer_types", None) or ["full_attention"] * arch.num_layers
    if getattr(text, "sliding_window", None) and not getattr(text, "layer_types", None):
        kinds = ["sliding_attention"] * arch.num_layers
    hf = [_hf_kind(layer, kind) for layer, kind in zip(decoder_layers(model, arch.num_layers), kinds, strict=True)]
    assert list(arch.layer_kinds) == hf


@pytest.mark.parametrize("label", ["deepseek_v2-no-q-lora", "qwen2_moe-shared-dense", "qwen3_moe-sparse-step", "mixtral"])
def test_moe_layers_and_dense_leading_layers(label: str) -> None:
    cfg = small_config(label)
    arch, model = parse_config(cfg, label), build(cfg)
    hf = [any(isinstance(p, nn.Parameter) and p.dim() == 3 for p in layer.parameters())
          for layer in decoder_layers(model, arch.num_layers)]
    assert [layer.moe for layer in arch.layers] == hf


def peft_trainable(cfg: dict[str, Any], targets: list[str] | str | None, rank: int = 8) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(build(cfg), LoraConfig(r=rank, target_modules=targets))
    trainable, _ = model.get_nb_trainable_parameters()
    return int(trainable)


@pytest.mark.parametrize(
    ("label", "targets"),
    [
        ("llama-biases", "all-linear"), ("phi3", "all-linear"), ("phi-qk-layernorm", None), ("falcon-new-decoder", None),
        ("gpt_neox", None), ("gpt_neox", "all-linear"), ("starcoder2", "all-linear"), ("gemma2", None),
        ("deepseek_v2-no-q-lora", "all-linear"), ("deepseek_v3", "all-linear"), ("qwen2_moe-shared-dense", "all-linear"),
        ("qwen2_moe-shared-dense", ["gate_proj", "up_proj", "down_proj"]), ("qwen3_moe-sparse-step", "all-linear"),
        ("qwen3_moe-sparse-step", ["q_proj", "down_proj"]), ("deepseek_v3", ["gate_proj", "up_proj", "down_proj", "gate"]),
        ("granitemoehybrid", "all-linear"), ("granitemoehybrid", ["in_proj", "out_proj", "q_proj", "v_proj"]),
        ("olmo2", "all-linear"), ("phimoe", "all-linear"), ("gpt2", None), ("gpt2", "all-linear"), ("gptj", "all-linear"),
        ("cohere-qk-norm", "all-linear"), ("stablelm-parallel", "all-linear"),
        ("llava", ["q_proj", "v_proj"]), ("llava", "all-linear"), ("mllama", ["q_proj", "v_proj"]),
        ("qwen2_vl", ["q_proj", "v_proj", "qkv"]), ("qwen2_5_vl", "all-linear"), ("gemma3", ["q_proj", "v_proj"]),
    ],
)
def test_lora_params_equal_peft(label: str, targets: list[str] | str | None) -> None:
    cfg = small_config(label)
    arch = parse_config(cfg, label)
    ours = arch.default_lora_targets if targets is None else (tuple(targets) if isinstance(targets, list) else (targets,))
    peft_targets = None if targets is None and label.split("-")[0] in ("phi", "falcon", "gpt_neox", "gemma2", "gpt2") else targets
    assert arch.lora_params(ours, 8) == peft_trainable(cfg, peft_targets if targets is None else targets)


@pytest.mark.parametrize("family", ["phi3", "deepseek_v3", "granitemoehybrid"])
def test_default_lora_targets_exist_where_peft_has_no_default(family: str) -> None:
    label = next(k for k in SMALL if k.startswith(family))
    cfg = small_config(label)
    arch = parse_config(cfg, label)
    assert arch.lora_targets(arch.default_lora_targets)
    assert arch.lora_params(arch.default_lora_targets, 8) == peft_trainable(cfg, list(arch.default_lora_targets))


CATALOGUED = [n for n in list_models() if entries()[n].config is not None]



@pytest.mark.parametrize("name", CATALOGUED)
def test_every_catalogue_config_equals_its_transformers_build(name: str) -> None:
    """Full size, every catalogued config of a supported family: total and largest module."""
    try:
        arch = catalogue_architecture(name)
    except UnsupportedModelTypeError as exc:  # a catalogued family this version does not model
        pytest.skip(str(exc))
    if arch.model_type in REMOTE_CODE:
        pytest.skip(f"{arch.model_type} is hub remote code, no transformers class: tests/test_catalog_remote_code.py")
    config = entries()[name].config
    assert config is not None
    model = build({k: v for k, v in config.items() if k != "_autoconf"} if "_autoconf" in config else _csv_build(arch))
    assert arch.total_params == unique_params(model)
    assert arch.largest_layer_params == largest_direct(model)


def _csv_build(arch: Architecture) -> dict[str, Any]:
    """A models.csv row's transformers config (the llama-shaped rows and gpt_bigcode)."""
    if arch.model_type == "gpt_bigcode":
        return {"model_type": "gpt_bigcode", "n_embd": arch.hidden_size, "n_inner": arch.intermediate_size,
                "n_layer": arch.num_layers, "n_head": arch.num_heads, "multi_query": arch.num_kv_heads == 1,
                "n_positions": arch.max_position_embeddings, "vocab_size": arch.vocab_size,
                "tie_word_embeddings": arch.tie_word_embeddings}
    return {"model_type": arch.model_type, "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size,
            "num_hidden_layers": arch.num_layers, "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads,
            "head_dim": arch.head_dim, "vocab_size": arch.vocab_size, "tie_word_embeddings": arch.tie_word_embeddings,
            "attention_bias": arch.attention_bias, "mlp_bias": arch.mlp_bias, "pad_token_id": 0, "bos_token_id": 0,
            "eos_token_id": 0}


_CLASS = {"mllama_text": "mllama_text_model"}


@pytest.mark.parametrize(("family", "key"), [(f, k) for f, keys in DEFAULTS.items() for k in keys])
def test_defaults_are_the_transformers_class_defaults(family: str, key: str) -> None:
    config = transformers.CONFIG_MAPPING[_CLASS.get(family, family)]()
    assert getattr(config, key) == DEFAULTS[family][key]


@pytest.mark.parametrize(("family", "key"), [(f, k) for f, keys in TEXT_CORE_DEFAULTS.items() for k in keys])
def test_vlm_text_core_defaults_are_the_class_defaults(family: str, key: str) -> None:
    assert getattr(transformers.CONFIG_MAPPING[family](), key) == TEXT_CORE_DEFAULTS[family][key]
