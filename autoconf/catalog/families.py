"""Each supported family's module layout, as transformers 5 builds it (names and shapes of one layer).

A Family says which projections a decoder layer has and under which names; ``layer_shape`` turns an
Architecture and a layer index into that layer's linears and other parameters. Every layout here is
checked against a meta-device build in tests/test_catalog_families.py, except Qwen (v1), whose modelling
code lives in its hub repositories (no transformers class): its count is checked by hand there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoconf.catalog.shapes import CROSS, MAMBA, LayerShape, Linear

if TYPE_CHECKING:
    from autoconf.catalog.architecture import Architecture

GATED = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Family:
    """Module names and norm layout of one transformers model family."""

    qkv: tuple[str, ...] = ("q_proj", "k_proj", "v_proj")  # one name = fused q, k, v
    out: str = "o_proj"
    mlp: tuple[str, ...] = GATED  # 3 names: gated; 2 names: plain (in, out); ("gate_up_proj", ...) fused gated
    norm: str = "rms"  # rms: weight only; layer: LayerNorm, weight and bias; none: no parameters (olmo)
    norms_per_layer: int = 2
    qk_norm: str = ""  # "head": RMSNorm(head_dim) on q and k; "full": a weight per q / k channel (olmo2);
    # "layer_head": LayerNorm(head_dim) with bias on q and k (phi)
    qk_norm_optional: bool = False  # the config switches it (phi qk_layernorm, cohere use_qk_norm, stablelm)
    experts: tuple[str, ...] = GATED  # names LoRA gives the fused experts' gate, up, down slices
    router: str = "gate"
    shared: str = ""  # shared-expert module: shared_expert (+ gate), shared_experts, shared_mlp
    mla: bool = False


_LLAMA = Family()
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "granite": _LLAMA, "gemma": _LLAMA,
    "mllama_text": _LLAMA,
    "mixtral": Family(experts=("w1", "w3", "w2")),
    "granitemoe": Family(router="router"),
    "phimoe": Family(norm="layer", router="router"),
    "qwen2_moe": Family(shared="shared_expert"),
    "qwen3": Family(qk_norm="head"),
    "qwen3_moe": Family(qk_norm="head"),
    "gemma2": Family(norms_per_layer=4),
    "gemma3_text": Family(norms_per_layer=4, qk_norm="head"),
    "olmo2": Family(qk_norm="full"),
    "phi": Family(out="dense", mlp=("fc1", "fc2"), norm="layer", norms_per_layer=1, qk_norm="layer_head",
                  qk_norm_optional=True),
    "olmo": Family(norm="none"),
    "cohere": Family(norms_per_layer=1, qk_norm="full", qk_norm_optional=True),
    "stablelm": Family(norm="layer", qk_norm="full", qk_norm_optional=True),
    "gptj": Family(out="out_proj", mlp=("fc_in", "fc_out"), norm="layer", norms_per_layer=1),
    "gpt2": Family(qkv=("c_attn",), out="attn.c_proj", mlp=("c_fc", "mlp.c_proj"), norm="layer"),
    "phi3": Family(qkv=("qkv_proj",), mlp=("gate_up_proj", "down_proj")),
    "starcoder2": Family(mlp=("c_fc", "c_proj"), norm="layer"),
    "falcon": Family(qkv=("query_key_value",), out="dense", mlp=("dense_h_to_4h", "dense_4h_to_h"), norm="layer"),
    "gpt_neox": Family(qkv=("query_key_value",), out="dense", mlp=("dense_h_to_4h", "dense_4h_to_h"), norm="layer"),
    "gpt_bigcode": Family(qkv=("c_attn",), out="attn.c_proj", mlp=("c_fc", "mlp.c_proj"), norm="layer"),
    # MPT: fused Wqkv, out_proj, up_proj/down_proj; its LayerNorms carry a weight only (transformers 5
    # MptBlock builds norm_1/norm_2/norm_f with the bias removed), counted like an RMSNorm
    "mpt": Family(qkv=("Wqkv",), out="out_proj", mlp=("up_proj", "down_proj"), norm="rms"),
    "deepseek_v2": Family(shared="shared_experts", mla=True),
    "deepseek_v3": Family(shared="shared_experts", mla=True),
    "granitemoehybrid": Family(router="router", shared="shared_mlp"),
    # Qwen (v1, remote code modeling_qwen.py): fused c_attn, c_proj; MLP c_proj(w1(x) * silu(w2(x))), so w2 is the gate
    "qwen": Family(qkv=("c_attn",), out="attn.c_proj", mlp=("w2", "w1", "mlp.c_proj")),
}

# Families whose modelling code lives in their hub repositories (trust_remote_code): no transformers class
# builds them, so neither a meta-device test nor the traced estimator can (tests/test_catalog_remote_code.py).
REMOTE_CODE = frozenset({"qwen"})


def norm_size(arch: Architecture, width: int) -> int:
    """Parameters of one norm over ``width`` features: RMSNorm a weight, LayerNorm weight + bias."""
    return width * {"layer": 2, "rms": 1}.get(FAMILIES[arch.family].norm, 0)


def qk_norm_kind(arch: Architecture) -> str:
    """The QK-norm the architecture runs ("head", "full", "layer_head") or "" : implied by the family (qwen3,
    gemma3, olmo2) or switched on by the config where the family makes it optional."""
    fam = FAMILIES[arch.family]
    return fam.qk_norm if arch.qk_norm or not fam.qk_norm_optional else ""


def attention(arch: Architecture) -> tuple[tuple[Linear, ...], int]:
    """Self-attention linears and its other parameters (QK-norms, MLA's latent norms)."""
    fam, h = FAMILIES[arch.family], arch.hidden_size
    if fam.mla:
        return _mla(arch)
    qkv_b, out_b = arch.attention_bias or arch.qkv_bias, arch.attention_bias
    if len(fam.qkv) == 1:
        qkv: tuple[Linear, ...] = (Linear(fam.qkv[0], h, arch.q_width + 2 * arch.kv_width, qkv_b),)
    else:
        q, k, v = fam.qkv
        qkv = (Linear(q, h, arch.q_width, qkv_b), Linear(k, h, arch.kv_width, qkv_b), Linear(v, h, arch.kv_width, qkv_b))
    sizes = {"head": 2 * arch.head_dim, "full": arch.q_width + arch.kv_width, "layer_head": 2 * 2 * arch.head_dim}
    other = sizes.get(qk_norm_kind(arch), 0)
    return qkv + (Linear(fam.out, arch.q_width, h, out_b),), other


def _mla(arch: Architecture) -> tuple[tuple[Linear, ...], int]:
    """DeepSeek MLA: q (optionally through a rank-q_lora latent), a shared KV latent of kv_lora_rank
    plus one rope key of qk_rope_head_dim, expanded per head to nope keys and values."""
    mla, h, heads, bias = arch.mla, arch.hidden_size, arch.num_heads, arch.attention_bias
    assert mla is not None
    q_out = heads * mla.qk_head_dim
    if mla.q_lora_rank:
        q: tuple[Linear, ...] = (Linear("q_a_proj", h, mla.q_lora_rank, bias), Linear("q_b_proj", mla.q_lora_rank, q_out, False))
    else:
        q = (Linear("q_proj", h, q_out, False),)
    kv = (
        Linear("kv_a_proj_with_mqa", h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias),
        Linear("kv_b_proj", mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), False),
    )
    out = Linear("o_proj", heads * mla.v_head_dim, h, bias)
    return q + kv + (out,), mla.kv_lora_rank + mla.q_lora_rank  # kv_a_layernorm (+ q_a_layernorm)


def cross_attention(arch: Architecture) -> tuple[tuple[Linear, ...], int]:
    """mllama cross-attention: q/k/v/o without bias, RMS q_norm/k_norm of head_dim and two tanh gates."""
    linears, _ = attention(arch)
    return tuple(Linear(f"cross_attn.{lin.name}", lin.in_features, lin.out_features, False) for lin in linears), 2 * arch.head_dim + 2


def mamba(arch: Architecture) -> tuple[tuple[Linear, ...], int]:
    """Mamba-2 mixer: in_proj -> (z, xBC, dt); depthwise conv1d over xBC; dt_bias, A_log, D per head;
    a gated RMSNorm over the inner width; out_proj back to hidden."""
    m, h = arch.mamba, arch.hidden_size
    assert m is not None
    inner = m.expand * h
    conv_dim = inner + 2 * m.n_groups * m.d_state  # x, B and C go through the conv
    linears = (Linear("in_proj", h, inner + conv_dim + m.n_heads, m.proj_bias), Linear("out_proj", inner, h, m.proj_bias))
    conv = conv_dim * m.d_conv + (conv_dim if m.conv_bias else 0)
    return linears, conv + 3 * m.n_heads + inner


def mlp(arch: Architecture, index: int) -> tuple[tuple[Linear, ...], bool]:
    """The layer's feed-forward linears and whether they are a routed MoE."""
    fam, h = FAMILIES[arch.family], arch.hidden_size
    shared = _shared(arch, fam)
    if not arch.moe_layer(index):
        if fam.shared == "shared_mlp":  # granite-4.0-h dense: the shared MLP is the whole MLP
            return shared, False
        return _dense(fam.mlp, h, arch.intermediate_size, arch.mlp_bias), False
    inter, experts = arch.expert_intermediate_size, arch.num_experts
    g, u, d = fam.experts
    fused = (Linear(g, h, inter, False, experts), Linear(u, h, inter, False, experts), Linear(d, inter, h, False, experts))
    return fused + (Linear(fam.router, h, experts, False),) + shared, True


def _dense(names: tuple[str, ...], h: int, inter: int, bias: bool, prefix: str = "") -> tuple[Linear, ...]:
    if names[0] == "gate_up_proj":  # phi3: gate and up fused in one linear
        return (Linear(prefix + names[0], h, 2 * inter, bias), Linear(prefix + names[1], inter, h, bias))
    if len(names) == 2:  # plain: up (with the activation), down
        return (Linear(prefix + names[0], h, inter, bias), Linear(prefix + names[1], inter, h, bias))
    return (Linear(prefix + names[0], h, inter, bias), Linear(prefix + names[1], h, inter, bias),
            Linear(prefix + names[2], inter, h, bias))


def _shared(arch: Architecture, fam: Family) -> tuple[Linear, ...]:
    width, h = arch.shared_intermediate_size, arch.hidden_size
    if not fam.shared or not width:
        return ()
    if fam.shared == "shared_mlp":  # input_linear h -> 2S (gate and up fused), output_linear S -> h
        return (Linear("shared_mlp.input_linear", h, 2 * width, False), Linear("shared_mlp.output_linear", width, h, False))
    shared = _dense(GATED, h, width, False, prefix=f"{fam.shared}.")
    gate = (Linear("shared_expert_gate", h, 1, False),) if fam.shared == "shared_expert" else ()
    return shared + gate


def layer_shape(arch: Architecture, index: int) -> LayerShape:
    """Layer ``index``: its mixer (attention / mamba / cross-attention), its MLP and its norms."""
    kind = arch.layer_kinds[index]
    if kind == MAMBA:
        mixer, other = mamba(arch)
    elif kind == CROSS:
        mixer, other = cross_attention(arch)
    else:
        mixer, other = attention(arch)
    ffn, moe = mlp(arch, index)
    norms = arch.norms_per_layer * norm_size(arch, arch.hidden_size)
    window = arch.sliding_window if kind == "sliding_attention" else 0
    return LayerShape(kind, mixer + ffn, other + norms, window, moe)
