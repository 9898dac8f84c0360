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
# plain-MLP activations that save more than their input: transformers' NewGELUActivation ("gelu_new", Python
# 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))) keeps x, tanh(·), 1 + tanh(·) and 0.5·x: with fc1's output and the
# activation's output, 10 B per unit of the MLP width (F.gelu / gelu_pytorch_tanh keep their input only: 4)
PLAIN_MLP_BYTES = {"gelu_new": 10}
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
    if arch.model_type != "gpt_bigcode":  # eager: GQA k, v expanded
        attn = where(job.attention == "eager", attn + (4 * arch.q_width - 4 * arch.kv_width - 4 * arch.num_heads), attn)
    return (norms + attn) / h


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
