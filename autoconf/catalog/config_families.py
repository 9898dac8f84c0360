"""Per-family readers: a config.json's keys (transformers names) -> Architecture keyword arguments.

A key absent from a config takes the transformers 5 class default (``DEFAULTS``; a test compares
each entry with the config class itself); a key present with null keeps its null meaning (deepseek
``q_lora_rank: null`` = no query compression).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoconf.catalog.config_view import ConfigView
from autoconf.catalog.shapes import ATTENTION, CROSS, MAMBA, MLA, SLIDING, Mamba

# transformers 5 config-class defaults of the keys read with a default (see tests/test_catalog_families.py)
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "mistral": {"tie_word_embeddings": False}, "mixtral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False}, "qwen3": {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128},
    "qwen2_moe": {"tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen3_moe": {"tie_word_embeddings": False, "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "gemma": {"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256},
    "gemma2": {"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256, "sliding_window": 4096,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {"tie_word_embeddings": True, "attention_bias": False, "head_dim": 256, "sliding_window": 4096},
    "phi": {"tie_word_embeddings": False, "qk_layernorm": False},
    "phi3": {"tie_word_embeddings": False}, "phimoe": {"tie_word_embeddings": False, "attention_bias": False, "lm_head_bias": False},
    "deepseek_v2": {"tie_word_embeddings": False, "attention_bias": False, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_shared_experts": 2,
                    "first_k_dense_replace": 0},
    "deepseek_v3": {"tie_word_embeddings": False, "attention_bias": False, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_shared_experts": 1,
                    "first_k_dense_replace": 3},
    "olmo2": {"tie_word_embeddings": False, "attention_bias": False},
    "starcoder2": {"tie_word_embeddings": True, "use_bias": True},
    "falcon": {"tie_word_embeddings": True, "bias": False, "multi_query": True, "parallel_attn": True,
               "new_decoder_architecture": False},
    "gpt_neox": {"tie_word_embeddings": False, "attention_bias": True},
    "granite": {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "granitemoe": {"tie_word_embeddings": False, "attention_bias": False},
    "granitemoehybrid": {"tie_word_embeddings": False, "attention_bias": False},
    "gpt_bigcode": {"tie_word_embeddings": True, "multi_query": True},
    "mllama_text": {"tie_word_embeddings": False},
    "olmo": {"tie_word_embeddings": False, "attention_bias": False},
    "cohere": {"tie_word_embeddings": True, "attention_bias": False, "use_qk_norm": False},
    "stablelm": {"tie_word_embeddings": False, "use_qkv_bias": False, "use_parallel_residual": False, "qk_layernorm": False},
    "gptj": {"tie_word_embeddings": False},
    "gpt2": {"tie_word_embeddings": True},
    "mpt": {"tie_word_embeddings": True, "expansion_ratio": 4},
}
_LAYER_KIND = {"full_attention": ATTENTION, "attention": ATTENTION, "sliding_attention": SLIDING,
               "mamba": MAMBA, "linear_attention": MAMBA}


def common(c: ConfigView, family: str) -> dict[str, Any]:
    """The llama-shaped core every rotary family shares (transformers key names)."""
    heads = c.req("num_attention_heads", "n_head")
    hidden = c.req("hidden_size", "n_embd")
    head_dim = c.opt("head_dim", DEFAULTS[family].get("head_dim")) or hidden // heads
    return {
        "hidden_size": hidden, "num_layers": c.req("num_hidden_layers", "n_layer"), "num_heads": heads,
        "num_kv_heads": c.opt("num_key_value_heads") or heads, "head_dim": head_dim,
        "vocab_size": c.req("vocab_size"), "max_position_embeddings": c.opt("max_position_embeddings") or 0,
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", DEFAULTS[family]["tie_word_embeddings"])),
        "hidden_act": c.opt("hidden_activation") or c.opt("hidden_act", "silu"),
        "attention_bias": bool(c.opt("attention_bias", DEFAULTS[family].get("attention_bias", False))),
        "mlp_bias": bool(c.opt("mlp_bias", DEFAULTS[family].get("mlp_bias", False))),
        "intermediate_size": c.opt("intermediate_size") or 0,
    }


def _layer_types(c: ConfigView, layers: int, every: int = 0) -> tuple[str, ...]:
    """A config's layer_types, or the family's pattern: every ``every``-th layer global, others sliding."""
    given = c.opt("layer_types")
    if given:
        return tuple(_LAYER_KIND.get(str(t), str(t)) for t in given)
    if every:
        return tuple(ATTENTION if (i + 1) % every == 0 else SLIDING for i in range(layers))
    return ()


def _window(c: ConfigView, family: str, layers: tuple[str, ...]) -> dict[str, Any]:
    """The sliding window; with no layer_types it applies to every layer (mistral-7b-v0.1: 4096).
    Qwen configs carry a window that is off unless use_sliding_window is true."""
    window = c.opt("sliding_window", DEFAULTS[family].get("sliding_window"))
    if family.startswith("qwen") and not c.opt("use_sliding_window", False):
        window = 0
    return {"sliding_window": int(window or 0), "layer_types": layers}


def gemma(c: ConfigView, family: str) -> dict[str, Any]:
    kw = common(c, family)
    if family == "gemma":
        return kw
    layers = _layer_types(c, kw["num_layers"], 2 if family == "gemma2" else int(c.opt("sliding_window_pattern", 6)))
    caps = {k: float(c.opt(k, DEFAULTS[family].get(k)) or 0.0) for k in ("attn_logit_softcapping", "final_logit_softcapping")}
    return {**kw, **_window(c, family, layers), "attn_logit_softcap": caps["attn_logit_softcapping"],
            "final_logit_softcap": caps["final_logit_softcapping"]}


def llama_like(c: ConfigView, family: str) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2/3 (+ MoE), olmo2, granite(moe), phi3, phimoe, mllama text."""
    kw = common(c, family)
    kw["qkv_bias"] = family in ("qwen2", "qwen2_moe")  # Qwen2 q/k/v carry biases, o_proj none
    kw.update(_window(c, family, _layer_types(c, kw["num_layers"])))
    experts = c.opt("num_local_experts") or (c.opt("num_experts") if family in ("qwen2_moe", "qwen3_moe") else 0) or 0
    if experts:
        kw.update(num_experts=experts, experts_per_token=c.req("num_experts_per_tok"),
                  moe_intermediate_size=c.opt("moe_intermediate_size") or 0)
    if family in ("qwen2_moe", "qwen3_moe") and experts:
        step, only = c.opt("decoder_sparse_step") or 1, c.opt("mlp_only_layers") or []
        kw["dense_layers"] = tuple(i for i in range(kw["num_layers"]) if i in only or (i + 1) % step)
        if family == "qwen2_moe":
            kw["shared_intermediate_size"] = c.opt("shared_expert_intermediate_size") or 0
    if family == "phimoe":
        kw["lm_head_bias"] = bool(c.opt("lm_head_bias", False))
    if family == "cohere":
        kw["qk_norm"] = bool(c.opt("use_qk_norm", False))
    if family == "mllama_text":
        cross = set(c.req("cross_attention_layers"))
        kw.update(extra_vocab_rows=8, layer_types=tuple(CROSS if i in cross else ATTENTION for i in range(kw["num_layers"])))
    return kw


def granite_hybrid(c: ConfigView, family: str) -> dict[str, Any]:
    kw = common(c, family)
    kw.update(num_experts=c.opt("num_local_experts") or 0, experts_per_token=c.opt("num_experts_per_tok") or 0,
              shared_intermediate_size=c.req("shared_intermediate_size"), layer_types=_layer_types(c, kw["num_layers"]))
    expand, heads = c.opt("mamba_expand", 2), c.opt("mamba_n_heads", 128)
    d_head = c.opt("mamba_d_head", "auto")
    kw["mamba"] = Mamba(heads, expand * kw["hidden_size"] // heads if d_head == "auto" else d_head,
                        c.opt("mamba_n_groups", 1), c.opt("mamba_d_state", 256), c.opt("mamba_d_conv", 4), expand,
                        bool(c.opt("mamba_conv_bias", True)), bool(c.opt("mamba_proj_bias", False)))
    return kw


def deepseek(c: ConfigView, family: str) -> dict[str, Any]:
    kw, d = common(c, family), DEFAULTS[family]
    kw["mla"] = MLA(c.opt("q_lora_rank", d["q_lora_rank"]) or 0, c.opt("kv_lora_rank", d["kv_lora_rank"]),
                    c.opt("qk_nope_head_dim", d["qk_nope_head_dim"]), c.opt("qk_rope_head_dim", d["qk_rope_head_dim"]),
                    c.opt("v_head_dim", d["v_head_dim"]))
    shared, inter = c.opt("n_shared_experts", d["n_shared_experts"]) or 0, c.req("moe_intermediate_size")
    kw.update(num_experts=c.req("n_routed_experts"), experts_per_token=c.req("num_experts_per_tok"),
              moe_intermediate_size=inter, num_shared_experts=shared, shared_intermediate_size=shared * inter,
              first_k_dense=c.opt("first_k_dense_replace", d["first_k_dense_replace"]) or 0)
    return kw


READERS: dict[str, Callable[[ConfigView, str], dict[str, Any]]] = {
    **dict.fromkeys(("gemma", "gemma2", "gemma3_text"), gemma),
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo2", "granite",
                     "granitemoe", "phi3", "phimoe", "mllama_text", "olmo", "cohere"), llama_like),
    "granitemoehybrid": granite_hybrid, "deepseek_v2": deepseek, "deepseek_v3": deepseek,
}
