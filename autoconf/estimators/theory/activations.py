"""Saved activations and logits/loss memory, per token, from the block structure.

Bytes per token per decoder layer (h = hidden, q / kv = query / KV widths, I = MLP width, a = heads),
bf16, from our own fake-tensor traces of HF transformers 5 training steps (docs/traced_vs_theory.md:
these closed forms reproduce the trace to the byte on all 25 dense catalogue architectures):

* llama family, flash/SDPA: 16h + 4q + 4kv + 8I + 4a + 8 — RMSNorm keeps an fp32 copy of its input
  (2 × 4h), attention saves q, k, v, its output and the fp32 logsumexp (4a), SwiGLU saves gate,
  silu(gate), up and their product (8I). gpt_bigcode (LayerNorm, GeLU): 8h + 4q + 4kv + 4I + 4a + 8.
* outside the layers: embeddings output, final norm (fp32 copy) and head input: 8h + 4·head_dim + 20
  per token (+8 with checkpointing); gpt_bigcode 4h + 28.
* LoRA: the frozen down projection no longer saves its input (−2I); each adapted module keeps its fp32
  lora_A output (4r); dropout > 0 keeps an fp32 dropout output (4h) per adapted module.
* MoE: each token goes through ``experts_per_token`` experts, so the MLP term scales by k.
* eager attention materialises the scores: fp32 softmax (4 B) + bf16 copy (2 B) per head per key,
  6·a·s per token, and GQA's k and v are expanded to full width (4q − 4kv − 4a more).
* gradient checkpointing keeps only each layer's bf16 input (exactly 2·h per token per layer) and
  recomputes one layer at a time during backward.
* QLoRA with bitsandbytes: ``MatMul4Bit`` keeps its input for backward whenever the input needs a
  gradient, frozen layers included, so the MLP input (2h), the o_proj input (2q) and the down_proj input
  (2I) are saved on top of what a bf16 LoRA layer saves (frameworks.Profile.quant_saves_input).
* other families (the traced grid, bench/traced_grid.py): the norms by kind and count (norms.py: bf16 LayerNorms
  4·h + 4 each, fp32 weight multiplies, post-norms, Cohere's fp32 LayerNorm), rotary through torch.cat copying the
  attention output (+2q), a fused qkv output kept whole by v (+2q + 2kv), gelu_new's 10·I, the rotary tables'
  width and dtype outside the layers; LoRA: each adapted linear's fp32 input cast instead of the norms' trained
  terms (lora_inputs_delta).
* the logits and cross-entropy at the loss peak: loss.py.

Every function takes one ``Job`` or the columns of a batch (rows.py); the architecture is one model's.
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.families import FAMILIES, qk_norm_kind
from autoconf.catalog.shapes import ATTENTION, CROSS, MAMBA, SLIDING, LayerShape
from autoconf.estimators.theory import images, layers
from autoconf.estimators.theory.norms import (
    NORM_STAT_BYTES,
    PARALLEL_FAMILIES,
    final_norm_bytes,
    lora_norm_bytes,
    norm_bytes,
    norm_stat_bytes,
    qk_norm_bytes,
)
from autoconf.estimators.theory.rows import AnyJob, Flag, Num, lookup, minimum, not_, per_value, settings_of, where
from autoconf.estimators.theory.states import largest
from autoconf.estimators.theory.weights import kbit_upcast
from autoconf.schema import Calibration

# Activation precision factor relative to bf16. fp32 doubles every tensor; under amp (fp32 weights +
# autocast) the traced decoder layer saves 1.20× the bf16 figure (llama3.1-8b: 241,800 vs 200,840 B per
# token; norms and the residual stream stay fp32). The autocast weight copies are counted as weights.
PRECISION_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp32": 2.0, "amp-bf16": 1.2, "amp-fp16": 1.2}
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
# cos / sin bytes per rotated unit outside the layers (rotary_dim): bf16 pairs 4; olmo2 fp32 8; gemma3 two pairs;
# gptj none (its tables are per layer, PER_LAYER_ROTARY_BYTES)
ROTARY_TABLE_BYTES = {"olmo2": 8, "gemma3_text": 8, "gptj": 0}
NO_ROTARY = frozenset({"gpt2", "gpt_bigcode", "mpt"})  # learned positions or ALiBi
TEXT_ONLY_SKIPS_CROSS = True  # a text-only step skips mllama's cross-attention layers (_runs)
POST_NORM_FAMILIES = frozenset({"olmo2"})  # no norm before attention: the projections read the residual stream
FROZEN_FIRST_LAYER = 1  # 0: LoRA's first layer counted like the others (frozen_input_bytes)
LEARNED_POSITION_BYTES = 8  # gpt2's int64 position ids, kept for wpe's backward (traced gpt2: 4·h + 28 outside)
# plain-MLP activations that save more than their input: transformers' NewGELUActivation ("gelu_new", Python
# 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))) keeps x, tanh(·), 1 + tanh(·) and 0.5·x: with fc1's output and the
# activation's output, 10 B per unit of the MLP width (F.gelu / gelu_pytorch_tanh keep their input only: 4)
PLAIN_MLP_BYTES = {"gelu_new": 10}
LORA_DROPOUT_BYTES_PER_HIDDEN = 4  # fp32 dropout output kept per adapted module (traced)
LORA_A_BYTES_PER_RANK = 4  # fp32 lora_A output kept per adapted module (traced)
LORA_INPUT_BYTES = 4  # an adapted linear's input cast to fp32 adapters, per unit (lora_inputs_delta)
EAGER_BYTES_PER_SCORE = 6  # fp32 softmax output + bf16 copy for the PV matmul
# SDPA on a sliding-window layer from the window on: transformers keeps the causal mask once kv_length >= the window
# (masking_utils._ignore_causal_mask_sdpa), and torch's scaled_dot_product_attention converts the boolean mask to an
# additive one in the query dtype on every call (aten attention.cpp convert_boolean_attn_mask), which the attention
# kernel keeps for backward: 2 bytes per key per token per layer in bf16/fp16 (traced: starcoder2-3b at 4,096 tokens).
MASKED_SDPA_BYTES_PER_KEY = 2
GC_BYTES_PER_HIDDEN = 2  # bf16 layer input kept per checkpointed layer
# Under FSDP with mixed precision (accelerate), the residual stream that checkpointing keeps is fp32:
# the fms-acceleration 2- and 4-GPU PEFT rows grow by 185·h bytes per token vs 127·h on one GPU
# (Mistral-7B, 32 layers: +1.8·h per layer ≈ 2 more bytes per hidden unit per layer). PEFT only: the full-FT
# FSDP rows (fms-acceleration 4-GPU, amp, batch 8 → 16 per GPU) grow by 535 kB per token for Mistral-7B with
# the fused CE and 498 kB for Llama-3-8B with Liger, i.e. 2·h·L checkpoints (262 kB) + the loss kernel's bytes
# (256 kB, 262 kB): a bf16 residual stream, as FSDP mixed precision computes every layer in bf16.
FSDP_GC_BYTES_PER_HIDDEN = 4
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


def precision_factor(job: AnyJob, fsdp: Flag = False) -> Num:
    """Activation bytes relative to bf16: the dtype's factor, or fp32's for a QLoRA whose embeddings and norms
    prepare_model_for_kbit_training made fp32 (weights.kbit_upcast): the residual stream is fp32 from the
    embedding output on, and each 4-bit linear returns its input's dtype (bitsandbytes Linear4bit.forward)."""
    return where(kbit_upcast(job, fsdp), PRECISION_FACTOR["fp32"], lookup(job.dtype, PRECISION_FACTOR))


def outside_layers_bytes_per_token(job: AnyJob, arch: Architecture, fsdp: Flag = False) -> Num:
    """Final norm, head input, rotary tables, ids and labels, saved once per token (traced).

    The final norm keeps what a decoder norm keeps (norm_bytes) and the head's bf16 input (2·h); the rotary cos and
    sin tables are bf16 (4 per rotated unit: rotary_dim), fp32 for olmo2 (Olmo2RotaryEmbedding.forward returns them
    uncast), two pairs for gemma3 (local and global rotary); ids, labels and the norm statistic 20, learned positions'
    ids 8 more. Traced llama 8·h + 4·head_dim + 20, starcoder2 4·h + 4·head_dim + 20, olmo2 10·h + 8·head_dim + 20,
    phi-2 4·h + 4 · 32 + 20, gpt2 4·h + 28.
    """
    if arch.model_type == "gpt_bigcode":
        fixed: Num = 4 * arch.hidden_size + 28
    else:
        extra = where(job.gradient_checkpointing, 8, 0) + (LEARNED_POSITION_BYTES if arch.position_params else 0)
        fixed = final_norm_bytes(job, arch) + ROTARY_TABLE_BYTES.get(arch.family, 4) * rotary_dim(arch) + 20 + extra
    peft = (job.method == "lora") & (settings_of(job).adapter_bytes == 4)  # the traced HF / peft path
    return where(peft, fixed - frozen_input_bytes(job, arch), fixed) * precision_factor(job, fsdp)


def frozen_input_bytes(job: AnyJob, arch: Architecture) -> Num:
    """What a peft LoRA step keeps less than the full fine-tuning terms, outside the per-layer figure.

    The frozen final norm keeps no normalized input for its weight (norm_bytes' trained term). Without
    checkpointing, the first layer's input comes from the frozen embedding and needs no gradient, so autograd
    records nothing that depends on it and frozen weights alone: the norms that read it (its input norm, a parallel
    block's norms), a parallel block's frozen MLP, a frozen k_proj's k_norm (gptj: its sin / cos). Traced: llama3.2-1b
    2·h + 4·head_dim + 16
    outside the layers (12,572 with checkpointing, −2·h), phi-2 4·h + 4 · 32 + 20 − (2·h + 4 + 8·I) = −76,656; the
    first layer (saved-tensor lists): qwen3 −(4·h + 4) − (4·kv + 4 · 8), pythia −(2·h + 8 + 2·I), olmo2 −(4·kv + 4),
    gpt-j −(2·h + 4 + 8·I + 4 · 64), santacoder −(2·h + 4).
    """
    h, count = arch.hidden_size, max(arch.norms_per_layer, 1)
    trained = final_norm_bytes(job, arch) - lora_norm_bytes(job, arch) / count - 2 * h
    if arch.mla is not None or arch.mamba is not None or FROZEN_FIRST_LAYER == 0:
        return trained
    parallel = arch.family in PARALLEL_FAMILIES
    if arch.family in POST_NORM_FAMILIES:
        norms: Num = 0.0
    else:
        norms = lora_norm_bytes(job, arch) * (1 if parallel else 1 / count) + NORM_STAT_BYTES * (count if parallel else 1)
    mlp_names = set(FAMILIES[arch.family].mlp)
    mlp_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, mlp_names)) > 0
    mlp = where(mlp_trains, 0.0, mlp_coef(job, arch) * h) if parallel else 0.0
    kind = qk_norm_kind(arch)
    k_norm: Num = 0.0
    if kind in ("head", "full"):
        k_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, {"k_proj"})) > 0
        rows = arch.kv_width // max(arch.head_dim, 1) if kind == "head" else 1
        k_norm = where(k_trains, 0.0, 4.0 * arch.kv_width + 4.0 * rows)
    if arch.family in PER_LAYER_ROTARY_BYTES:  # a frozen k_proj's k keeps no sin / cos of its own (gptj)
        k_trains = per_value(job.lora_target_modules, lambda t: _adapts(arch, t, {"k_proj"})) > 0
        k_norm = k_norm + where(k_trains, 0.0, PER_LAYER_ROTARY_BYTES[arch.family] / 2 * rotary_dim(arch))
    return trained + where(job.gradient_checkpointing, 0.0, norms + mlp + k_norm)


def _adapts(arch: Architecture, targets: tuple[str, ...], names: set[str]) -> float:
    """1 where the targets adapt one of these linears (0 for a batch's full fine-tuning rows: _targets_or_zero)."""
    try:
        return 1.0 if {lin.name for lin in arch.lora_targets(targets)} & names else 0.0
    except ValueError:
        return 0.0


def _adapts_down(targets: tuple[str, ...]) -> float:
    return 1.0 if DOWN_TARGETS & set(targets) else 0.0


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
    down = per_value(job.lora_target_modules, _adapts_down) > 0
    frozen_down = (job.method != "full") & not_(down) & not_(_quant_saves_input(job))
    return where(frozen_down, coef - 2 * ratio, coef)  # frozen down projection: its input is not saved


def layer_bytes_per_token(
    job: AnyJob, arch: Architecture, calib: Calibration | None = None, fsdp: Flag = False,
    layer: LayerShape | None = None,
) -> Num:
    """Bytes one decoder layer saves per token without checkpointing.

    Under FSDP mixed precision the layers compute in bf16 from gathered bf16 parameters even when the
    sharded master copy is fp32 (amp), so the amp precision factor does not apply there.
    """
    kind = layer.kind if layer is not None else ATTENTION
    coef = attention_coef(job, arch, calib, kind) + mlp_coef(job, arch, calib, None if layer is None else layer.moe)
    per_token = coef * arch.hidden_size
    lora = job.method != "full"
    if lora is not False:
        adapted = per_value(job.lora_target_modules, lambda t: len(arch.lora_targets(t)) if lora is True else
                            _targets_or_zero(arch, t))  # one Job: its targets' error is raised
        # lora_A's output is kept in the adapter dtype (fp32 under peft: LORA_A_BYTES_PER_RANK)
        adapter = per_token + adapted * LORA_A_BYTES_PER_RANK * job.lora_r * settings_of(job).adapter_bytes / 4
        # MLP input and o_proj input, bf16
        adapter = where(_quant_saves_input(job), adapter + (2 * arch.hidden_size + 2 * arch.q_width), adapter)
        adapter = adapter + lora_inputs_delta(job, arch, adapted_inputs(job, arch, lora))
        adapter = where(job.lora_dropout > 0, adapter + adapted * LORA_DROPOUT_BYTES_PER_HIDDEN * arch.hidden_size,
                        adapter)
        per_token = where(lora, adapter, per_token)
    factor = (calib.attn_act_factor_eager if calib and calib.attn_act_factor_eager is not None
              else EAGER_BYTES_PER_SCORE)
    per_token = where(job.attention == "eager", per_token + factor * arch.num_heads * _keys(job, arch, layer),
                      per_token)
    if kind == SLIDING and layer is not None and layer.window:
        tokens = images.text_tokens_per_sample(job, arch)
        masked = (job.attention == "sdpa") & (tokens >= layer.window)
        per_token = where(masked, per_token + MASKED_SDPA_BYTES_PER_KEY * tokens, per_token)
    return per_token * where(fsdp, 1.0, precision_factor(job))


def adapted_inputs(job: AnyJob, arch: Architecture, lora: Flag) -> Num:
    """Input units of the adapted linears of one layer (q, k, v, gate, up: h; o_proj: q; down: I; experts skipped)."""
    def width(targets: tuple[str, ...]) -> int:
        try:
            linears = arch.lora_targets(targets)
        except ValueError:
            if lora is True:
                raise
            return 0  # a full fine-tuning row of a batch (_targets_or_zero)
        return sum(lin.in_features for lin in linears if lin.per_layer == 1)
    return per_value(job.lora_target_modules, width)


def lora_inputs_delta(job: AnyJob, arch: Architecture, inputs: Num) -> Num:
    """What a peft LoRA layer keeps unlike the full fine-tuning layer it is derived from (bf16 LoRA, fp32 adapters).

    Each adapted linear keeps its input cast to the adapters' fp32 (peft lora Linear.forward: ``x =
    self._cast_input_dtype(x, lora_A.weight.dtype)``, lora_A's saved input: 4 per input unit), while the frozen
    norm weights keep no normalized input and the frozen linears keep no bf16 input (norm_bytes' outputs, the
    copied out-projection input of ROTARY_CAT_FAMILIES, or of eager attention). For llama's q_proj, v_proj the two
    cancel (+8·h − 8·h; eager −2·q);
    traced: phi-2 +6·h − 2·q, starcoder2 +4·h, stablelm +6·h − 2·q, phi-3-mini −6·h, cohere +2·h.
    """
    kept = norm_bytes(job, arch) - lora_norm_bytes(job, arch)
    # the out projection's copied input: eager attention's for every family, flash's after a rotary cat
    copy = where(job.attention == "eager", 2.0 * arch.q_width,
                 2.0 * arch.q_width if arch.family in ROTARY_CAT_FAMILIES else 0.0)
    # an adapted down projection's frozen base keeps no bf16 input either (mlp_coef keeps it for an adapted one)
    down = 0.0 if arch.is_moe else where(per_value(job.lora_target_modules, _adapts_down) > 0,
                                         2.0 * arch.intermediate_size, 0.0)
    delta = LORA_INPUT_BYTES * inputs - kept - copy - down
    return where((job.method == "lora") & (settings_of(job).adapter_bytes == 4), delta, 0.0)


def _targets_or_zero(arch: Architecture, targets: tuple[str, ...]) -> int:
    """Adapted modules of ``targets`` in a batch that may hold full fine-tuning rows (whose targets are never read:
    the rows that adapt them were checked first, see vector.py)."""
    try:
        return len(arch.lora_targets(targets))
    except ValueError:
        return 0


def _keys(job: AnyJob, arch: Architecture, layer: LayerShape | None) -> Num:
    """Keys each query scores under eager attention: the sequence, a sliding window's width, the image tokens
    of a cross-attention layer; a soft-capped score (gemma2) keeps its tanh output too (+2 B per 6)."""
    kind = layer.kind if layer is not None else ATTENTION
    if kind == MAMBA:
        return 0.0
    keys = images.cross_tokens_per_sample(job, arch) if kind == CROSS else images.text_tokens_per_sample(job, arch)
    if kind == SLIDING and layer is not None and layer.window:
        keys = minimum(keys, layer.window)
    return keys * (8 / 6 if arch.attn_logit_softcap else 1)


def stack_bytes_per_token(job: AnyJob, arch: Architecture, calib: Calibration | None, fsdp: Flag,
                          count: Num) -> tuple[Num, Num]:
    """(bytes per token kept by ``count`` decoder layers, bytes of the largest single layer without checkpointing).

    Layers are grouped by (kind, MoE or dense MLP, window); a homogeneous model is one group and gives exactly
    ``count`` × one layer. A mixed model keeps the mean layer of its whole stack for each of ``count`` layers.
    """
    groups: dict[tuple[str, bool, int], int] = {}
    for shape in arch.layers:
        key = (shape.kind, shape.moe, shape.window)
        groups[key] = groups.get(key, 0) + 1
    full = {key: layer_bytes_per_token(job, arch, calib, fsdp, _shape(arch, key)) * _runs(job, key[0])
            for key in groups}
    checkpoint = checkpoint_bytes_per_token(job, arch, calib, fsdp)
    kept = {key: where(job.gradient_checkpointing, checkpoint * _runs(job, key[0]), value) for key, value in full.items()}
    most = largest(list(full.values()))
    if len(groups) == 1:
        return next(iter(kept.values())) * count, most
    total = sum(kept[key] * n for key, n in groups.items())
    return total / arch.num_layers * count, most


def _runs(job: AnyJob, kind: str) -> Num:
    """1 for a layer the step runs; 0 for a cross-attention layer of a text-only step, which mllama skips
    (modeling_mllama MllamaTextModel.forward: ``if is_cross_attention_layer and cross_attention_states is None and
    is_cross_attention_cache_empty: continue``; traced llama3.2-11b-vision text-only: nothing saved there)."""
    if kind != CROSS or not TEXT_ONLY_SKIPS_CROSS:
        return 1.0
    return where(job.images_per_sample > 0, 1.0, 0.0)


def _shape(arch: Architecture, key: tuple[str, bool, int]) -> LayerShape | None:
    """The first layer with this (kind, moe, window), or None for plain attention (the traced llama path)."""
    if key == (ATTENTION, arch.is_moe, 0) and arch.mla is None:
        return None
    return next(s for s in arch.layers if (s.kind, s.moe, s.window) == key)


def checkpoint_bytes_per_token(
    job: AnyJob, arch: Architecture, calib: Calibration | None = None, fsdp: Flag = False
) -> Num:
    """Bytes one checkpointed layer keeps per token (its input), or a user-given fraction."""
    if calib and calib.grad_ckpt_reduction is not None:
        return calib.grad_ckpt_reduction * layer_bytes_per_token(job, arch, calib, fsdp)
    # under FSDP the gathered bf16 units compute in bf16 whatever the master copy (layer_bytes_per_token)
    sharded = where(job.method == "full", GC_BYTES_PER_HIDDEN, FSDP_GC_BYTES_PER_HIDDEN) * arch.hidden_size
    return where(fsdp, sharded, GC_BYTES_PER_HIDDEN * arch.hidden_size * precision_factor(job))


def _quant_saves_input(job: AnyJob) -> Flag:
    return (job.method == "qlora") & settings_of(job).profile.quant_saves_input
