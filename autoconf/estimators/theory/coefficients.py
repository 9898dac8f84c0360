"""Per-token bytes / h that the attention and the MLP of one decoder layer save (their coefficients), traced.

The closed forms, their traces and the family rules are in activations.py's docstring; this module holds the two
sub-layer coefficients and the family layout rules they read (rotary through torch.cat, fused q/k/v, gelu_new).
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.shapes import ATTENTION, CROSS, MAMBA
from autoconf.estimators.theory import images, layers
from autoconf.estimators.theory.norms import norm_bytes, norm_stat_bytes, qk_norm_bytes
from autoconf.estimators.theory.rows import AnyJob, Flag, Num, not_, per_value, settings_of, where
from autoconf.schema import Calibration

# rotary applied through torch.cat (partial rotary: modeling_phi / stablelm / gpt_neox ``torch.cat((query_rot,
# query_pass), dim=-1)``; modeling_phi3 apply_rotary_pos_emb always) gives q a contiguous (b, a, s, d) layout; the
# flash kernel's output takes q's layout (``empty_like(q)``; torch/_meta_registrations.py the same), so
# ``attn_output.transpose(1, 2).contiguous()`` (integrations/sdpa_attention.py) copies it before the out projection
ROTARY_CAT_FAMILIES = frozenset({"phi", "phi3", "stablelm", "gpt_neox"})
# a fused q/k/v projection whose q and k the rotary rewrites: v stays a view of the fused output, so attention's saved
# v keeps all of it (phi3 qkv_proj ``value_states = qkv[..., query_pos + ...]``, gpt_neox query_key_value chunk)
FUSED_QKV_FAMILIES = frozenset({"phi3", "gpt_neox"})
# gptj recomputes sin / cos per layer (modeling_gptj apply_rotary_pos_emb ``torch.repeat_interleave(sin[:, :, None,
# :], 2, 3)``): two bf16 rotary_dim-wide tables kept by each of q's and k's multiplies, 4 · 2 B per rotary unit
PER_LAYER_ROTARY_BYTES = {"gptj": 8}
NO_ROTARY = frozenset({"gpt2", "gpt_bigcode", "mpt"})  # learned positions or ALiBi
# plain-MLP activations written in Python save more than their input (transformers activations.py; autograd keeps
# every operand of a tensor-tensor product and tanh's / sigmoid's output). Per unit of the MLP width, with the
# activation's output (the down projection's input, 2 B): NewGELUActivation ("gelu_new", and "gelu_accurate", the
# same expression) 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) keeps x, tanh(·), 1 + tanh(·) and 0.5·x: 10 B;
# FastGELUActivation ("gelu_fast", gpt-neox-20b) 0.5·x·(1 + tanh(x·0.798·(1 + 0.044715·x·x))) keeps x, 0.044715·x,
# x·0.798, 1 + 0.044715·x·x, the tanh, 1 + tanh and 0.5·x: 16 B; "gelu_python" (x·0.5·(1 + erf(x/√2))) keeps
# x/√2, 0.5·x and 1 + erf(·) but not x: 8 B; QuickGELU ("quick_gelu", x·sigmoid(1.702·x)) keeps x and the sigmoid,
# ClippedGELU ("gelu_10") x and gelu(x): 6 B. F.gelu / gelu_pytorch_tanh / relu keep their input only: 4 B (the default)
PLAIN_MLP_BYTES = {"gelu_new": 10, "gelu_accurate": 10, "gelu_fast": 16, "gelu_python": 8, "quick_gelu": 6,
                   "gelu_10": 6}
# torch's math SDPA kernel (the route when the fused kernels refuse a call) upcasts bf16 / fp16 q, k, v to fp32 on
# every device unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) (aten attention.cpp
# _scaled_dot_product_attention_math, ``query_.to(at::kFloat)``; torch >= 2.5) and keeps the fp32 softmax output for
# backward: 4 B per head per key, where eager attention (EAGER_BYTES_PER_SCORE) also keeps a bf16 copy
SDPA_MATH_BYTES_PER_SCORE = 4
BNB_KEEPS_4BIT_INPUT = False  # every release keeps it (the behaviour before 0.43.2; the identity pins' switch)
BNB_INPUT_DROPPED = (0, 43, 2)  # the first bitsandbytes release whose 4-bit matmul does not keep its input
DOWN_TARGETS = frozenset({"down_proj", "w2", "c_proj", "mlp.c_proj", "all-linear"})


def _mlp_width(arch: Architecture, moe: bool | None = None) -> float:
    """MLP width a token goes through: a MoE layer's k routed experts plus its shared experts (each token
    passes through k expert MLPs of width I_e and the always-on shared MLP: the same 8 B per unit of width
    as a dense SwiGLU); a dense layer (or a MoE's leading dense layers) its intermediate_size."""
    if moe is None:
        moe = arch.is_moe
    if not moe:
        return arch.intermediate_size
    if arch.moe_intermediate_size or arch.shared_intermediate_size:
        return arch.expert_intermediate_size * max(arch.experts_per_token, 1) + arch.shared_intermediate_size
    return arch.intermediate_size * max(arch.experts_per_token, 1)


def attention_coef(job: AnyJob, arch: Architecture, calib: Calibration | None = None, kind: str = ATTENTION) -> Num:
    """Per-token per-layer bytes / h of norms and attention (no s² term) for a layer of this kind."""
    if calib and calib.attn_act_factor_flash is not None:
        return calib.attn_act_factor_flash
    h = arch.hidden_size
    norms = norm_bytes(job, arch)
    if kind == MAMBA and arch.mamba is not None:
        return (norms + layers.mamba_bytes(arch.mamba, images.text_tokens_per_sample(job, arch))) / h
    if kind == CROSS:
        cross = layers.cross_bytes(arch, images.cross_tokens_per_sample(job, arch), job.tokens_per_sample)
        return (norms + cross) / h
    if arch.mla is not None:
        return (norms + layers.mla_bytes(arch, arch.mla)) / h
    attn = 4 * arch.q_width + 4 * arch.kv_width + 4 * arch.num_heads + norm_stat_bytes(arch)
    attn = attn + qk_norm_bytes(job, arch) + attention_layout_bytes(job, arch)
    # the math kernel keeps fp32 q, k, v (4q + 8kv) and no logsumexp, and its (b, heads, s, d) output is copied to
    # (b, s, h) for the dense projection, which keeps the copy (2q), as under eager attention; flash keeps q, k, v, its
    # output in q's (b, s, heads, d) layout, which the projection reads as it is, and the logsumexp (4q + 4kv + 4a)
    attn = where(sdpa_math(job, arch), attn + (2 * arch.q_width + 4 * arch.kv_width - 4 * arch.num_heads), attn)
    if falcon_expands_kv(arch):  # k and v copied to every query head before any kernel (eager expands them already)
        attn = where(job.attention == "eager", attn, attn + (4 * arch.q_width - 4 * arch.kv_width))
    if arch.model_type != "gpt_bigcode":  # eager: GQA k, v expanded
        attn = where(job.attention == "eager", attn + (4 * arch.q_width - 4 * arch.kv_width - 4 * arch.num_heads), attn)
    return (norms + attn) / h


def sdpa_math(job: AnyJob, arch: Architecture) -> Flag:
    """SDPA that runs torch's math kernel: Falcon's multi-query layers (one kv head, the layout before
    new_decoder_architecture: falcon-7b) pass k and v with one head and no ``enable_gqa`` to
    scaled_dot_product_attention (modeling_falcon FalconAttention.forward), and torch's flash and memory-efficient
    kernels take a dense call only with as many k / v heads as q heads unless ``enable_gqa`` (sdp_utils
    check_batch_size_and_num_heads_dense), so the call runs the math kernel: the scores per head and key are saved
    (SDPA_MATH_BYTES_PER_SCORE). flash (transformers' flash_attention_2) takes the one kv head as it is."""
    return (job.attention == "sdpa") & multi_query_sdpa(arch)


def multi_query_sdpa(arch: Architecture) -> bool:
    """Falcon with one kv head for many query heads (its multi_query layout; a new_decoder_architecture model
    broadcasts k and v to the query heads before the call and keeps the fused kernels)."""
    return arch.family == "falcon" and arch.num_kv_heads == 1 < arch.num_heads


def falcon_expands_kv(arch: Architecture) -> bool:
    """Falcon's new_decoder_architecture layout (grouped kv heads: falcon-40b, falcon-11B) broadcasts each group's
    k and v to its query heads and flattens them (``_split_heads``: ``torch.broadcast_to(key, query.shape)``, then
    ``flatten(2, 3)``, a copy), so every kernel, flash_attention_2 included, gets and keeps full-width k and v."""
    return arch.family == "falcon" and 1 < arch.num_kv_heads < arch.num_heads


def falcon_sdpa_mask(job: AnyJob, arch: Architecture) -> Flag:
    """Falcon under SDPA always materialises the causal mask (FalconModel.forward: ``create_causal_mask(...,
    allow_is_causal_skip=False)``), so a fused SDPA kernel keeps it for backward (activations.MASKED_SDPA_BYTES_PER_KEY);
    the math kernel (sdpa_math) adds it to the scores and keeps nothing of it."""
    return (job.attention == "sdpa") & (arch.family == "falcon") & not_(sdpa_math(job, arch))


def attention_layout_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per token attention keeps beyond q, k, v, its output and logsumexp, from the family's tensor layout:
    the out projection's copied input (2·q, ROTARY_CAT_FAMILIES), the rest of a fused q/k/v output that attention's
    v holds (2·q + 2·kv, FUSED_QKV_FAMILIES), gptj's per-layer sin / cos (PER_LAYER_ROTARY_BYTES). Traced phi-2:
    +2·q; phi-3-mini and pythia: +4·q + 2·kv; gpt-j: +8 · 64. Eager attention copies its (b, a, s, d) output for every
    family (the traced eager form counts it), so the rotary-cat copy adds nothing there."""
    copy = where(job.attention == "eager", 0.0, 2.0 * arch.q_width) if arch.family in ROTARY_CAT_FAMILIES else 0.0
    extra = 2 * arch.q_width + 2 * arch.kv_width if arch.family in FUSED_QKV_FAMILIES else 0
    return copy + float(extra + PER_LAYER_ROTARY_BYTES.get(arch.family, 0) * rotary_dim(arch))


def rotary_dim(arch: Architecture) -> int:
    """Rotated units per head (the rotary tables' width): head_dim × partial_rotary_factor; none without rotary."""
    return 0 if arch.family in NO_ROTARY else int(arch.head_dim * arch.partial_rotary_factor)


def mlp_coef(job: AnyJob, arch: Architecture, calib: Calibration | None = None, moe: bool | None = None) -> Num:
    """Per-token per-layer bytes / h saved by the MLP (and dropped by frozen LoRA linears).

    Gated MLPs (SwiGLU, GeGLU with gelu or gelu-tanh) save gate, act(gate), up and their product (8·I:
    the traced SwiGLU figure; torch's tanh-GeLU saves only its input, like SiLU); a plain 2-layer MLP
    (gpt_bigcode, phi-2, starcoder2) saves fc1's output and the activation's output (4·I, traced)."""
    if calib and calib.mlp_act_factor is not None:
        return calib.mlp_act_factor
    ratio = _mlp_width(arch, moe) / arch.hidden_size
    coef = (8 if arch.gated_mlp else PLAIN_MLP_BYTES.get(arch.hidden_act, 4)) * ratio
    if arch.is_moe if moe is None else moe:  # routing: the experts' gathered input only where they train
        routing = where(job.method == "full", layers.moe_routing_bytes(arch, True), layers.moe_routing_bytes(arch, False))
        coef = coef + routing / arch.hidden_size
    down = per_value(job.lora_target_modules, adapts_down) > 0
    frozen_down = (job.method != "full") & not_(down) & not_(quant_saves_input(job))
    return where(frozen_down, coef - 2 * ratio, coef)  # frozen down projection: its input is not saved


def mlp_compute_bytes(arch: Architecture, moe: bool | None = None) -> float:
    """Per-token bytes of the MLP's saved activations in the compute dtype, the down projection's input left out
    (a frozen or 4-bit down keeps none; an adapted one keeps an fp32 cast: lora_inputs_delta): SwiGLU's gate,
    silu(gate) and up (6 per unit of width), a plain MLP's fc1 output (2), gelu_new's four more (8)."""
    per_unit = 8 if arch.gated_mlp else PLAIN_MLP_BYTES.get(arch.hidden_act, 4)
    return float((per_unit - 2) * _mlp_width(arch, moe))


def adapts_down(targets: tuple[str, ...]) -> float:
    return 1.0 if DOWN_TARGETS & set(targets) else 0.0


def bnb_release_keeps_input(version: str) -> bool:
    """A bitsandbytes release ("" = the installed one, which does not) whose ``MatMul4Bit.forward`` keeps its
    input: ``ctx.tensors = (A, B)`` at tags 0.39.1 … 0.43.1, ``(None, B)`` from 0.43.2 (bitsandbytes #1270)."""
    if not version:
        return False
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts))) < BNB_INPUT_DROPPED


def quant_saves_input(job: AnyJob) -> Flag:
    """bitsandbytes' MatMul4Bit kept its input for backward before 0.43.2; since #1270 (July 2024) it keeps
    ``ctx.tensors = (None, B)`` (autograd/_functions.py), as the traced QLoRA (bitsandbytes 0.50.2) shows: the
    profiles' quant_saves_input holds where the Job's ``bitsandbytes_version`` is older (or BNB_KEEPS_4BIT_INPUT)."""
    old = per_value(job.bitsandbytes_version, lambda v: float(bnb_release_keeps_input(str(v or "")))) > 0
    return (job.method == "qlora") & settings_of(job).profile.quant_saves_input & (old | BNB_KEEPS_4BIT_INPUT)
