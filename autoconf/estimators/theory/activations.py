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
  lora_A output (4r); dropout > 0 keeps CUDA's 1-byte dropout mask (1h) per adapted module's input.
* MoE: each token goes through ``experts_per_token`` experts, so the MLP term scales by k.
* eager attention materialises the scores: fp32 softmax (4 B) + bf16 copy (2 B) per head per key,
  6·a·s per token, and GQA's k and v are expanded to full width (4q − 4kv − 4a more). SDPA that falls to torch's
  math kernel (falcon-7b's multi-query call: coefficients.sdpa_math) keeps the fp32 softmax, 4·a·s, and fp32
  q, k, v with a copied output (2q + 4kv − 4a more than flash).
* gradient checkpointing keeps only each layer's bf16 input (exactly 2·h per token per layer) and
  recomputes one layer at a time during backward.
* QLoRA with bitsandbytes: ``MatMul4Bit`` keeps its input for backward whenever the input needs a
  gradient, frozen layers included, so the MLP input (2h), the o_proj input (2q) and the down_proj input
  (2I) are saved on top of what a bf16 LoRA layer saves (frameworks.Profile.quant_saves_input).
* other families (the traced grid, bench/traced_grid.py): the norms by kind and count (norms.py: bf16 LayerNorms
  4·h + 4 each, fp32 weight multiplies, post-norms, Cohere's fp32 LayerNorm), rotary through torch.cat copying the
  attention output (+2q), a fused qkv output kept whole by v (+2q + 2kv), the Python GELUs' saved tensors
  (gelu_new 10·I, gelu_fast 16·I: coefficients.PLAIN_MLP_BYTES), Falcon's layouts (coefficients), the rotary tables'
  width and dtype outside the layers; LoRA: each adapted linear's fp32 input cast instead of the norms' trained
  terms (lora_inputs_delta).
* the logits and cross-entropy at the loss peak: loss.py.

Every function takes one ``Job`` or the columns of a batch (rows.py); the architecture is one model's. The attention
and MLP coefficients are in coefficients.py, peft LoRA's differences from full fine-tuning in lora_activations.py.
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.shapes import ATTENTION, CROSS, MAMBA, SLIDING, LayerShape
from autoconf.estimators.theory import images
from autoconf.estimators.theory.coefficients import (
    SDPA_MATH_BYTES_PER_SCORE,
    attention_coef,
    falcon_sdpa_mask,
    mlp_coef,
    quant_saves_input,
    rotary_dim,
    sdpa_math,
)
from autoconf.estimators.theory.lora_activations import (
    adapted_inputs,
    distinct_inputs,
    frozen_input_bytes,
    kbit_stream,
    kbit_stream_delta,
    lora_inputs_delta,
    model_dtype_adapters,
    peft_adapters,
    targets_or_zero,
)
from autoconf.estimators.theory.norms import final_norm_bytes
from autoconf.estimators.theory.rows import AnyJob, Flag, Num, lookup, minimum, per_value, settings_of, where
from autoconf.estimators.theory.states import largest
from autoconf.estimators.theory.weights import kbit_upcast
from autoconf.schema import Calibration

# Activation precision factor relative to bf16. fp32 doubles every tensor; under amp (fp32 weights +
# autocast) the traced decoder layer saves 1.20× the bf16 figure (llama3.1-8b: 241,800 vs 200,840 B per
# token; norms and the residual stream stay fp32). The autocast weight copies are counted as weights.
PRECISION_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp32": 2.0, "amp-bf16": 1.2, "amp-fp16": 1.2}
# cos / sin bytes per rotated unit outside the layers (rotary_dim): bf16 pairs 4; olmo2 fp32 8; gemma3 two pairs;
# gptj none (its tables are per layer, PER_LAYER_ROTARY_BYTES)
ROTARY_TABLE_BYTES = {"olmo2": 8, "gemma3_text": 8, "gptj": 0}
TEXT_ONLY_SKIPS_CROSS = True  # a text-only step skips mllama's cross-attention layers (_runs)
LEARNED_POSITION_BYTES = 8  # gpt2's int64 position ids, kept for wpe's backward (traced gpt2: 4·h + 28 outside)
# CUDA's fused dropout (aten native_dropout; Dropout.cpp is_fused_kernel_acceptable) keeps a bool mask: 1 byte per
# input unit of each adapted module; its output replaces fp32 adapters' cast copy of the input as lora_A's saved
# input (traced with traced/cuda_dropout.py; 4 when the CPU trace kept the dropout's fp32 noise)
LORA_DROPOUT_BYTES_PER_HIDDEN = 1
# the dropout output is as wide as the module's input: o_proj q, down_proj I (traced llama3.2-1b all-linear: +24,576
# B per token per layer over 4·h per module); 0: h wide for every module
DROPOUT_BY_INPUT = 1
LORA_A_BYTES_PER_RANK = 4  # fp32 lora_A output kept per adapted module (traced)
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
    return where(peft_adapters(job), fixed - frozen_input_bytes(job, arch), fixed) * precision_factor(job, fsdp)


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
                            targets_or_zero(arch, t))  # one Job: its targets' error is raised
        # lora_A's output is kept in the adapter dtype (fp32 under peft: LORA_A_BYTES_PER_RANK)
        adapter = per_token + adapted * LORA_A_BYTES_PER_RANK * job.lora_r * settings_of(job).adapter_bytes / 4
        # MLP input and o_proj input, bf16
        adapter = where(quant_saves_input(job), adapter + (2 * arch.hidden_size + 2 * arch.q_width), adapter)
        adapter = adapter + lora_inputs_delta(job, arch, adapted_inputs(job, arch, lora))
        # one dropout mask per adapted module, as wide as its input (DROPOUT_BY_INPUT; 0: h wide); adapters in the
        # model dtype keep each module's dropout output where, without dropout, lora_A kept the shared input
        dropped = adapted_inputs(job, arch, lora) if DROPOUT_BY_INPUT else adapted * arch.hidden_size
        own = where(model_dtype_adapters(job),
                    settings_of(job).adapter_bytes * (dropped - distinct_inputs(job, arch)), 0.0)
        adapter = where(job.lora_dropout > 0, adapter + LORA_DROPOUT_BYTES_PER_HIDDEN * dropped + own, adapter)
        adapter = adapter + kbit_stream_delta(job, arch, adapted_inputs(job, arch, lora), fsdp,
                                              None if layer is None else layer.moe)
        per_token = where(lora, adapter, per_token)
    # the kbit upcast's fp32 stream is counted by kbit_stream_delta: the layer's bytes stay at the bf16 factor
    stream = kbit_stream(job, arch, fsdp, None if layer is None else layer.moe)
    layer_factor = where(stream, lookup(job.dtype, PRECISION_FACTOR), precision_factor(job, fsdp))
    factor = (calib.attn_act_factor_eager if calib and calib.attn_act_factor_eager is not None
              else EAGER_BYTES_PER_SCORE)
    keys = _keys(job, arch, layer)
    scores = where(job.attention == "eager", factor * arch.num_heads * keys, 0.0)
    scores = where(sdpa_math(job, arch), SDPA_MATH_BYTES_PER_SCORE * arch.num_heads * keys, scores)
    scores = where(falcon_sdpa_mask(job, arch), scores + MASKED_SDPA_BYTES_PER_KEY * keys, scores)
    if kind == SLIDING and layer is not None and layer.window:
        tokens = images.text_tokens_per_sample(job, arch)
        masked = (job.attention == "sdpa") & (tokens >= layer.window)
        scores = where(masked, scores + MASKED_SDPA_BYTES_PER_KEY * tokens, scores)
    # the scores and masks follow the activation dtype (fp32 under the kbit upcast: not traced)
    return where(fsdp, per_token + scores, per_token * layer_factor + scores * precision_factor(job))


def score_backward_bytes_per_token(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per token one layer's backward adds while the math kernel differentiates its softmax: the fp32 gradient
    of the probabilities (grad_out @ vᵀ) and of the scores (_softmax_backward_data) live together beside the saved
    probabilities, 2 × SDPA_MATH_BYTES_PER_SCORE per head per key (traced falcon-7b, SDPA, 4,096 tokens: the peak
    is 2 × the layer's probabilities above the saved activations, with checkpointing and without)."""
    return where(sdpa_math(job, arch), 2 * SDPA_MATH_BYTES_PER_SCORE * arch.num_heads * _keys(job, arch, None), 0.0)


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
