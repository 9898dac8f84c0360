"""Transformers configs of catalogue architectures, shared by the probe and the traced estimator.

Only the torch-side modules (probe_step, traced_model) import this module, so the core install stays
torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import transformers

from autoconf.catalog import Architecture, resolve_model
from autoconf.errors import AutoconfError

# Job.dtype -> (parameter dtype, autocast dtype or None). amp-* keeps fp32 master weights and
# autocasts to the low precision (the "AMP" row of shared/theory_notes.md, 16 B/param static).
DTYPES: dict[str, tuple[torch.dtype, torch.dtype | None]] = {
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
    "fp32": (torch.float32, None),
    "amp-bf16": (torch.float32, torch.bfloat16),
    "amp-fp16": (torch.float32, torch.float16),
}


# Families built from the Architecture's fields as before (their traces are the reference of the theory);
# every other family is built from its own config.json (resolve_model(name).config).
LEGACY_TYPES = frozenset({"llama", "mistral", "granite", "qwen2", "mixtral", "granitemoe", "gpt_bigcode"})
_DROP = ("architectures", "transformers_version", "torch_dtype", "dtype", "auto_map", "_name_or_path",
         "quantization_config")
# Architecture field -> config key, applied when a caller changed it (the probe's miniature, a layer subset)
_OVERRIDES = {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
              "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
              "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim", "vocab_size": "vocab_size"}


NO_WINDOW = 1 << 30  # tokens: longer than any sequence we trace


def _from_catalogue(arch: Mapping[str, Any]) -> transformers.PretrainedConfig | None:
    """AutoConfig.for_model over the model's own config.json, with the Architecture's changed core fields
    applied to the (text) config; None for the legacy families or a model that does not resolve by name."""
    if arch["model_type"] in LEGACY_TYPES:
        return None
    try:
        found = resolve_model(arch["name"])
    except (AutoconfError, ValueError):
        return None
    config = {k: v for k, v in found.config.items() if k not in _DROP}
    text = config
    if isinstance(config.get("text_config"), dict):
        text = config["text_config"] = dict(config["text_config"])
    for name, key in _OVERRIDES.items():
        if arch[name] != getattr(found.architecture, name):
            text[key] = arch[name]
    layers = text.get("num_hidden_layers", arch["num_layers"])
    if isinstance(text.get("layer_types"), list):  # keep one kind per layer when the layer count changed
        text["layer_types"] = [text["layer_types"][i % len(text["layer_types"])] for i in range(layers)]
    mtype = config.pop("model_type")
    return transformers.AutoConfig.for_model(mtype, **config)


def _llama_like_kwargs(arch: Mapping[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "vocab_size": arch["vocab_size"],
        "hidden_size": arch["hidden_size"],
        "intermediate_size": arch["intermediate_size"],
        "num_hidden_layers": arch["num_layers"],
        "num_attention_heads": arch["num_heads"],
        "num_key_value_heads": arch["num_kv_heads"],
        "head_dim": arch["head_dim"],
        "tie_word_embeddings": arch["tie_word_embeddings"],
        # Rotary tables are sized at runtime; 131072 only bounds the position ids we feed.
        "max_position_embeddings": arch["max_position_embeddings"] or 131072,
    }
    mtype = arch["model_type"]
    if mtype in ("llama", "granite", "granitemoe"):
        kwargs["attention_bias"] = arch["attention_bias"]
    if mtype in ("llama", "granite"):
        kwargs["mlp_bias"] = arch["mlp_bias"]
    if mtype in ("mistral", "mixtral"):
        # GPU flash-attention handles a sliding window inside the kernel; SDPA would need an explicit
        # (b, 1, s, s) mask for it. No window reproduces the flash memory (same saved tensors).
        kwargs["sliding_window"] = None
    if mtype in ("mixtral", "granitemoe"):
        kwargs["num_local_experts"] = arch["num_experts"]
        kwargs["num_experts_per_tok"] = arch["experts_per_token"]
    return kwargs


def _no_window(text: transformers.PretrainedConfig) -> None:
    """Sliding-window layers attend as full causal layers (unless the job's SDPA keeps the mask: estimator
    ``_masked_sdpa``, traced at its own shape). GPU flash-attention applies the window inside the kernel
    and saves the same tensors (out and logsumexp) either way; SDPA on fake CPU tensors would need an explicit
    (b, 1, s, s) mask once the length passes the window, which also changes the op sequence with the length
    (gemma3 builds its sliding mask for every step), so no fit could be made. A window longer than any sequence
    skips the mask, as the mistral / mixtral ``sliding_window=None`` above."""
    if getattr(text, "sliding_window", None):
        text.sliding_window = NO_WINDOW


def hf_config(arch: Architecture | Mapping[str, Any], attention: str,
              sliding_mask: bool = False) -> transformers.PretrainedConfig:
    """The transformers config of an Architecture (or a dict of its fields); ``attention`` is the
    transformers implementation name (sdpa, eager, flash_attention_2); ``sliding_mask``: keep the sliding window
    (a real run, or an SDPA trace past the window), else its layers attend as full causal ones (``_no_window``)."""
    if isinstance(arch, Architecture):
        arch = {f.name: getattr(arch, f.name) for f in dataclasses.fields(arch)}
    mtype = arch["model_type"]
    built = _from_catalogue(arch)
    if built is not None:
        config: transformers.PretrainedConfig = built
    elif mtype == "gpt_bigcode":
        config = transformers.GPTBigCodeConfig(
            vocab_size=arch["vocab_size"], n_positions=arch["max_position_embeddings"] or 8192,
            n_embd=arch["hidden_size"], n_layer=arch["num_layers"], n_head=arch["num_heads"],
            n_inner=arch["intermediate_size"], multi_query=arch["num_kv_heads"] == 1,
            tie_word_embeddings=arch["tie_word_embeddings"],
        )
    else:
        config = transformers.AutoConfig.for_model(mtype, **_llama_like_kwargs(arch))
    config.use_cache = False
    if not sliding_mask:
        _no_window(config.get_text_config())
    # Dropout 0 everywhere (HF defaults for these families; fms-hf-tuning keeps them).
    for name in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    config._attn_implementation = attention
    if mtype in ("mixtral", "granitemoe") or (built is not None and arch["num_experts"] > 1):
        # Static shapes: tokens sorted by expert and one grouped GEMM per projection. The eager
        # per-expert loop has data-dependent shapes that fake tensors cannot size.
        config._experts_implementation = "grouped_mm"
    return config
