"""Bytes per token the norms of a decoder layer keep for backward, by family (bf16, one GPU, no checkpointing).

Read from each family's modelling code in transformers 5 and checked against our fake-tensor traces (the traced
grid, bench/traced_grid.py): an RMSNorm that upcasts keeps an fp32 copy of its input and its fp32 rsqrt, and, where
its weight trains, the normalized input in the dtype of the weight multiply; a torch LayerNorm keeps its bf16 input,
mean and rstd; the next linear keeps the norm's bf16 output. activations.py adds them to the attention and MLP terms.
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.families import qk_norm_kind
from autoconf.estimators.theory.rows import AnyJob, Num, is_in, not_, where
from autoconf.estimators.theory.weights import AMP

NORM_BYTES_PER_HIDDEN = 8  # RMSNorm with an fp32 input copy (traced llama: 16·h for its two norms)
# families whose RMSNorm multiplies by its weight in fp32: (1 + weight) in modeling_gemma / gemma2 / gemma3
# RMSNorm.forward, ``(self.weight * hidden_states).to(input_dtype)`` in modeling_olmo2 Olmo2RMSNorm.forward
FP32_WEIGHT_NORMS = frozenset({"gemma", "gemma2", "gemma3_text", "olmo2"})
BF16_NORM_BYTES_PER_HIDDEN = 4  # a norm computed in bf16: its input and its output (traced gpt_bigcode: 8·h for two)
# families whose norms are torch nn.LayerNorm, run in the activation dtype (F.layer_norm saves its bf16 input, mean and
# rstd): modeling_phi / phimoe / stablelm / gptj / gpt2 / starcoder2 / falcon / gpt_neox build nn.LayerNorm
BF16_NORM_FAMILIES = frozenset({"gpt_bigcode", "phi", "phimoe", "stablelm", "gptj", "gpt2", "starcoder2", "falcon",
                                "gpt_neox"})
# attention and MLP read one input (phi, gptj, cohere, falcon, gpt_neox's use_parallel_residual): two LayerNorms of
# that input (gpt_neox input_layernorm and post_attention_layernorm) save it once
PARALLEL_FAMILIES = frozenset({"phi", "gptj", "cohere", "falcon", "gpt_neox"})
# families whose decoder norms have no weight: OLMo's OlmoLayerNorm runs ``F.layer_norm(x.float(), shape, None, None)``
# and casts back (modeling_olmo), so it keeps the fp32 input (4 per unit) and no normalized input for a weight
NO_WEIGHT_NORM_FAMILIES = frozenset({"olmo"})
NORM_STAT_BYTES = 4  # per norm and token: RMSNorm's fp32 rsqrt, or LayerNorm's bf16 mean and rstd (2 + 2)
COHERE_NORM = True  # CohereLayerNorm's own bytes (norm_bytes); False: counted as an RMSNorm


def norm_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per token one layer's decoder norms keep, with the inputs of the linears they feed.

    Per norm: its saved input (an RMSNorm's fp32 copy, 4 per unit; a bf16 LayerNorm's input, 2, once for the
    norms of a parallel block; Cohere's fp32 LayerNorm two fp32 copies of x − mean, 8) and the normalized input its
    weight's gradient needs (2 in bf16, 4 where the weight multiplies in fp32, none for a LayerNorm); then one bf16
    input (2 per unit) for each of the attention and MLP blocks (a parallel block's one). Traced per layer: llama
    16·h, gemma3 36·h (four norms), olmo2 20·h (post-norms: the residual feeds the linears), starcoder2 8·h, phi 4·h,
    pythia 6·h, cohere 14·h (full fine-tuning); the norms' statistics are norm_stat_bytes.
    """
    h, count = arch.hidden_size, arch.norms_per_layer
    inputs = min(count, 2) * 2 * h
    if arch.family == "cohere" and COHERE_NORM:  # CohereLayerNorm: fp32 (x − mean) twice, the fp32 weight multiply
        return 8 * h + where(job.method == "full", 4.0, 2.0) * h + inputs
    if arch.family in NO_WEIGHT_NORM_FAMILIES:  # the fp32 input copy alone
        return 4.0 * h * count + inputs
    per_norm = _norm_bytes(job, arch) - 2  # without its output, the next block's input
    once = (per_norm == BF16_NORM_BYTES_PER_HIDDEN - 2) & (arch.family in PARALLEL_FAMILIES)
    return (per_norm + _fp32_weight_input(job, arch)) * h * where(once, 1, count) + inputs


def lora_norm_bytes(job: AnyJob, arch: Architecture) -> Num:
    """norm_bytes under LoRA: the saved inputs alone (frozen weights keep no normalized input, frozen linears no
    input). Traced per layer: llama 8·h, cohere 8·h, starcoder2 4·h, phi 2·h."""
    h, count = arch.hidden_size, arch.norms_per_layer
    if arch.family == "cohere" and COHERE_NORM:
        return 8.0 * h
    copy = _norm_bytes(job, arch) - 4  # an RMSNorm's fp32 copy (4), a bf16 LayerNorm's input (0 here: below)
    bf16 = copy == BF16_NORM_BYTES_PER_HIDDEN - 4
    once = bf16 & (arch.family in PARALLEL_FAMILIES)
    return where(bf16, 2.0, copy) * h * where(once, 1, count)


def bf16_norms(job: AnyJob, arch: Architecture) -> Num:
    """1 where the decoder norms run in the activation dtype (their input and statistics double in fp32), else 0."""
    return where(_norm_bytes(job, arch) == BF16_NORM_BYTES_PER_HIDDEN, 1.0, 0.0)


def norm_stat_bytes(arch: Architecture) -> float:
    """Per token, the statistics a layer's decoder norms keep (NORM_STAT_BYTES each: the llama pair's traced 8)."""
    per_norm = 8 if arch.family in NO_WEIGHT_NORM_FAMILIES else NORM_STAT_BYTES  # OLMo's fp32 mean and rstd
    return float(per_norm * arch.norms_per_layer)


def _fp32_weight_input(job: AnyJob, arch: Architecture) -> Num:
    """Extra bytes per unit a trainable FP32_WEIGHT_NORMS RMSNorm keeps: Gemma multiplies by (1 + weight) in fp32
    (GemmaRMSNorm.forward: ``output * (1.0 + self.weight.float())``), so the normalized input its weight's
    gradient needs is saved in fp32 (4 B) where llama's multiply keeps it in the activation dtype (2 B): +2 per
    unit per norm under full fine-tuning (traced gemma-2b: +4·h per layer for its two norms, olmo2 likewise; LoRA: equal)."""
    return where((job.method == "full") & (arch.family in FP32_WEIGHT_NORMS), 2.0, 0.0)


def qk_norm_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per token one layer's q_norm and k_norm keep (RMSNorm over each head, or over all of q / k).

    Like the decoder norms: the fp32 input copy (4 per unit), the fp32 rsqrt per normalized row (4 per head,
    or per token for a full-width norm), and, where the norm weight trains, the normalized input its gradient
    needs (2 per unit, 4 for Gemma's fp32 multiply). Traced qwen3-0.6b: +18,528 B per token per layer in full
    fine-tuning (6 · 3,072 + 4 · 24), +12,384 with LoRA (4 · 3,072 + 4 · 24), exactly.
    """
    kind = qk_norm_kind(arch)
    if not kind:
        return 0.0
    width = arch.q_width + arch.kv_width
    if kind == "layer_head":  # phi's optional per-head LayerNorm: untraced, its fp32 input copies only
        return 4.0 * width
    rows = arch.num_heads + arch.kv_width // max(arch.head_dim, 1) if kind == "head" else 2
    weight = where(job.method == "full", 2.0 + _fp32_weight_input(job, arch), 0.0)
    return (4.0 + weight) * width + 4.0 * rows


def _norm_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per hidden unit one norm keeps: 8 for an RMSNorm that upcasts (llama's traced 16·h for two), 4 for a
    LayerNorm that runs in the activation dtype: its bf16 input (2·h, F.layer_norm's saved input) and its bf16
    output, the next linear's saved input (2·h) — gpt_bigcode's traced 8·h for its two LayerNorms. MPT's LayerNorm
    runs in bf16 under llm-foundry (LPLayerNorm casts input and weight to the autocast dtype and disables autocast,
    llmfoundry/models/layers/norm.py; the benchmark sweep sets low_precision_layernorm) and in transformers without
    autocast (torch LayerNorm keeps its input dtype); under HF amp, autocast runs layer_norm in fp32."""
    if arch.model_type == "gpt_bigcode":
        return BF16_NORM_BYTES_PER_HIDDEN
    if arch.model_type == "mpt" or arch.family in BF16_NORM_FAMILIES:
        return where((job.framework == "llm-foundry") | not_(is_in(job.dtype, AMP)), BF16_NORM_BYTES_PER_HIDDEN,
                     NORM_BYTES_PER_HIDDEN)
    return NORM_BYTES_PER_HIDDEN


def final_norm_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes per token the final norm keeps with the head's input: one decoder norm's (norm_bytes)."""
    h = arch.hidden_size
    if arch.family == "cohere" and COHERE_NORM:
        return 8 * h + where(job.method == "full", 4.0, 2.0) * h + 2 * h
    return (_norm_bytes(job, arch) - 2 + _fp32_weight_input(job, arch)) * h + 2 * h
