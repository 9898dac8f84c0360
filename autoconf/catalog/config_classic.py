"""Readers for the families with pre-llama layouts: phi (phi-2), stablelm, starcoder2, falcon, gpt_neox,
gpt_bigcode, gpt2, gpt-j, MPT and Qwen (v1, remote code).

They differ from the llama core in key names (n_embd, n_head, ffn_hidden_size, ...), biases on
every linear and LayerNorms with a bias; defaults are transformers 5's (config_families.DEFAULTS).
"""

from __future__ import annotations

from typing import Any

from autoconf.catalog.config_families import DEFAULTS, common
from autoconf.catalog.config_view import ConfigView


def phi(c: ConfigView, family: str) -> dict[str, Any]:
    """phi-2: q/k/v/dense with biases, fc1/fc2 (gelu_new), one LayerNorm per layer (parallel
    attention and MLP), lm_head with a bias, partial rotary (0.4 of head_dim for phi-2)."""
    kw = common(c, family)
    kw.update(attention_bias=True, mlp_bias=True, lm_head_bias=True, hidden_act=c.opt("hidden_act", "gelu_new"),
              qk_norm=bool(c.opt("qk_layernorm", DEFAULTS[family]["qk_layernorm"])),
              partial_rotary_factor=float(c.opt("partial_rotary_factor", 0.5)))
    return kw


def stablelm(c: ConfigView, family: str) -> dict[str, Any]:
    """StableLM: llama-like gated MLP, LayerNorms with bias (one per layer with a parallel residual),
    optional q/k/v biases and per-head q/k LayerNorms, rotary on a quarter of head_dim by default."""
    d = DEFAULTS[family]
    kw = common(c, family)
    parallel = bool(c.opt("use_parallel_residual", d["use_parallel_residual"]))
    kw.update(qkv_bias=bool(c.opt("use_qkv_bias", d["use_qkv_bias"])), norm_count=1 if parallel else 2,
              qk_norm=bool(c.opt("qk_layernorm", d["qk_layernorm"])),
              partial_rotary_factor=float(c.opt("partial_rotary_factor", 0.25)))
    return kw


def gptj(c: ConfigView, family: str) -> dict[str, Any]:
    """GPT-J: q/k/v/out_proj without bias, fc_in/fc_out with bias (n_inner, default 4h), one LayerNorm
    per layer (parallel attention and MLP), lm_head with a bias, rotary on rotary_dim channels."""
    hidden, heads = c.req("n_embd", "hidden_size"), c.req("n_head", "num_attention_heads")
    return {
        "hidden_size": hidden, "num_layers": c.req("n_layer", "num_hidden_layers"), "num_heads": heads,
        "num_kv_heads": heads, "vocab_size": c.req("vocab_size"), "intermediate_size": c.opt("n_inner") or 4 * hidden,
        "max_position_embeddings": c.opt("n_positions") or 0, "mlp_bias": True, "lm_head_bias": True,
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", DEFAULTS[family]["tie_word_embeddings"])),
        "hidden_act": c.opt("activation_function", "gelu_new"),
        "partial_rotary_factor": (c.opt("rotary_dim") or 64) / (hidden // heads),
    }


def starcoder2(c: ConfigView, family: str) -> dict[str, Any]:
    """starcoder2: q/k/v/o and c_fc/c_proj, biases when use_bias, LayerNorm with bias, one window."""
    kw = common(c, family)
    bias = bool(c.opt("use_bias", DEFAULTS[family]["use_bias"]))
    window = c.opt("sliding_window") or 0
    kw.update(attention_bias=bias, mlp_bias=bias, hidden_act=c.opt("hidden_act", "gelu_pytorch_tanh"), sliding_window=window)
    return kw


def gpt_neox(c: ConfigView, family: str) -> dict[str, Any]:
    """Pythia / GPT-NeoX: fused query_key_value (3h), dense, h->4h->h MLP with biases, 2 LayerNorms,
    rotary on rotary_pct of head_dim, untied embed_out."""
    kw = common(c, family)
    rope = c.opt("rope_parameters") or {}
    kw.update(num_kv_heads=kw["num_heads"], mlp_bias=True, hidden_act=c.opt("hidden_act", "gelu"),
              partial_rotary_factor=float(c.opt("rotary_pct", rope.get("partial_rotary_factor", 0.25))))
    return kw


def falcon(c: ConfigView, family: str) -> dict[str, Any]:
    """Falcon: fused query_key_value over q + 2 kv heads (new_decoder_architecture: num_kv_heads
    groups; else multi_query: one kv head; else MHA); parallel attention + MLP."""
    d = DEFAULTS[family]
    hidden, heads = c.req("hidden_size", "n_embd"), c.req("num_attention_heads", "n_head")
    if c.opt("new_decoder_architecture", d["new_decoder_architecture"]):
        kv = c.opt("num_kv_heads") or c.opt("n_head_kv") or heads
    else:
        kv = 1 if c.opt("multi_query", d["multi_query"]) else heads
    parallel = c.opt("parallel_attn", d["parallel_attn"])
    norms = c.opt("num_ln_in_parallel_attn") or (2 if c.opt("new_decoder_architecture", False) else 1)
    bias = bool(c.opt("bias", d["bias"]))
    return {
        "hidden_size": hidden, "num_layers": c.req("num_hidden_layers", "n_layer"), "num_heads": heads,
        "num_kv_heads": kv, "vocab_size": c.req("vocab_size"), "intermediate_size": c.opt("ffn_hidden_size") or 4 * hidden,
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", d["tie_word_embeddings"])),
        "attention_bias": bias, "mlp_bias": bias, "hidden_act": "gelu", "norm_count": norms if parallel else 2,
        "max_position_embeddings": c.opt("max_position_embeddings") or 0,
    }


def gpt_bigcode(c: ConfigView, family: str) -> dict[str, Any]:
    """gpt_bigcode (santacoder, granite-20b/34b code) and gpt2: c_attn over h + 2 kv widths (MQA: one
    kv head; gpt2: MHA), c_fc/c_proj (n_inner, default 4h), biases and LayerNorms everywhere, learned
    positions (n_positions). gpt2's Conv1D modules hold the same parameters as linears."""
    d = {**DEFAULTS[family], "multi_query": DEFAULTS[family].get("multi_query", False)}
    hidden, heads = c.req("n_embd", "hidden_size"), c.req("n_head", "num_attention_heads")
    return {
        "hidden_size": hidden, "num_layers": c.req("n_layer", "num_hidden_layers"), "num_heads": heads,
        "num_kv_heads": 1 if c.opt("multi_query", d["multi_query"]) else heads, "vocab_size": c.req("vocab_size"),
        "intermediate_size": c.opt("n_inner") or 4 * hidden, "max_position_embeddings": c.req("n_positions"),
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", d["tie_word_embeddings"])),
        "attention_bias": True, "mlp_bias": True, "hidden_act": c.opt("activation_function", "gelu_pytorch_tanh"),
    }


def qwen(c: ConfigView, family: str) -> dict[str, Any]:
    """Qwen (v1) remote code (modeling_qwen.py of the Qwen/Qwen-*B repositories): c_attn over q, k, v of
    kv_channels per head (always with a bias), c_proj, and an MLP whose two up projections w1 / w2 are each
    intermediate_size // 2 wide (the config states twice the MLP width); no_bias (true in every release)
    drops the other biases; untied lm_head; RMSNorms. No transformers class, so defaults are the remote
    QWenConfig's: no_bias true, tie_word_embeddings false."""
    heads = c.req("num_attention_heads")
    no_bias = bool(c.opt("no_bias", True))
    return {
        "hidden_size": c.req("hidden_size"), "num_layers": c.req("num_hidden_layers"), "num_heads": heads,
        "num_kv_heads": heads, "head_dim": c.opt("kv_channels") or c.req("hidden_size") // heads,
        "vocab_size": c.req("vocab_size"), "intermediate_size": c.req("intermediate_size") // 2,
        "max_position_embeddings": c.opt("max_position_embeddings") or c.opt("seq_length") or 0,
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", False)), "qkv_bias": True,
        "attention_bias": not no_bias, "mlp_bias": not no_bias, "hidden_act": "silu",
        "partial_rotary_factor": float(c.opt("rotary_pct", 1.0)),
    }


def mpt(c: ConfigView, family: str) -> dict[str, Any]:
    """MPT (MosaicML) as transformers 5 builds it: d_model / n_heads / n_layers, MHA through one fused Wqkv, an
    MLP of expansion_ratio·d_model (GELU, 2 matrices), no biases anywhere (MptAttention/MptMLP build their
    linears with bias=False whatever no_bias says), ALiBi (no position parameters), tied embeddings."""
    d = DEFAULTS[family]
    hidden, heads = c.req("d_model"), c.req("n_heads")
    return {
        "hidden_size": hidden, "num_layers": c.req("n_layers"), "num_heads": heads, "num_kv_heads": heads,
        "vocab_size": c.req("vocab_size"), "intermediate_size": int(c.opt("expansion_ratio", d["expansion_ratio"]) * hidden),
        "max_position_embeddings": c.opt("max_seq_len") or 0, "hidden_act": "gelu",
        "tie_word_embeddings": bool(c.opt("tie_word_embeddings", d["tie_word_embeddings"])),
    }


CLASSIC_READERS = {"phi": phi, "stablelm": stablelm, "starcoder2": starcoder2, "gpt_neox": gpt_neox, "falcon": falcon,
                   "gpt_bigcode": gpt_bigcode, "gpt2": gpt_bigcode, "gptj": gptj, "qwen": qwen, "mpt": mpt}
