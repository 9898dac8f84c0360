"""Saved activations and logits/loss memory, per token, from the block structure.

Coefficients are bytes per token per decoder layer in units of the hidden size h (bf16):

* HF Llama-style block with flash/SDPA attention saves ≈ (20 + 4·kv/h + 8·I/h)·h bytes per token and
  layer (kv = KV width, I = MLP width). Traced on fake tensors and matched to ±0.2 (shared/
  theory_notes.md): RMSNorm keeps an fp32 copy of its input (2 norms × 4 B), attention saves q, k, v,
  out and the logsumexp, SwiGLU saves gate, silu(gate), up and their product (8·I bytes).
* LoRA: the frozen down_proj no longer saves its input (the SwiGLU product, 2·I bytes); traced 40.2 vs
  45.7 (7B) and 42.1 vs 49.2 (8B) = 2·I/h. Dropout > 0 keeps about one extra h per adapted module
  (traced 44.0 vs 42.1 with p=0.05 on q,v).
* MoE: each token goes through ``experts_per_token`` experts, so the MLP term scales by k.
* gpt_bigcode (LayerNorm + GeLU MLP, no gating): 2h per LayerNorm input, c_attn input 2h, q/k/v
  2(h+2kv), attention output 2h, c_fc input 2h, GeLU input 2I, c_proj input 2I → 12 + 4·kv/h + 4·I/h.
* eager attention adds the materialised scores: fp32 softmax (4 B) + bf16 copy (2 B) per head per key,
  6·a·s bytes per token (traced: +6·a·s²·b per layer).
* gradient checkpointing keeps only each layer's bf16 input (exactly 2·h per token per layer, traced)
  and recomputes one layer at a time during backward.
* HF's un-fused cross-entropy upcasts logits to fp32: 4·V saved (log-softmax) + 8·V transient at the
  start of backward (two fp32 b·s·V gradients) → 12·V bytes per token at the loss peak (traced; the
  fms-acceleration LoRA rows peak at static + 2·h·L + 12·V per token to within 4 %).
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.schema import Calibration, Job

# Activation precision factor relative to bf16. fp32 doubles every tensor; amp (fp32 weights +
# autocast) traced at 26.51 vs 11.69 GiB saved after forward for Llama-2-7B → 2.27 (norms and the
# residual stream stay fp32 under autocast).
PRECISION_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp32": 2.0, "amp-bf16": 2.27, "amp-fp16": 2.27}
EAGER_BYTES_PER_SCORE = 6  # fp32 softmax output + bf16 copy for the PV matmul
GC_BYTES_PER_HIDDEN = 2  # bf16 layer input kept per checkpointed layer
LOSS_BYTES_PER_VOCAB = 12  # 4 saved fp32 log-softmax + 8 transient fp32 gradients
# FOAK's fused cross-entropy (a Triton kernel over the materialised bf16 logits) avoids the fp32 upcast
# copies: the fms-acceleration A100 rows grow by 8·V bytes per token beyond the checkpoints (Mistral-7B,
# V=32000: 8.1 GiB per 16k tokens; Llama-3-8B, V=128256: 19.9 GiB per 16k tokens).
FUSED_CE_BYTES_PER_VOCAB = 8
# Liger's fused linear cross-entropy never materialises the logits: the same rows grow by the same
# 127·h bytes per token for V=32000 and V=128256, i.e. independent of V; beyond the 2·h·L checkpoints
# that leaves ≈ 64·h per token (chunk buffers and the fp32 gradient of the hidden states it computes
# during the forward pass). Measured on h=4096, L=32 models only.
FUSED_LINEAR_CE_BYTES_PER_HIDDEN = 64
# Under FSDP with mixed precision (accelerate), the residual stream that checkpointing keeps is fp32:
# the fms-acceleration 2- and 4-GPU PEFT rows grow by 185·h bytes per token vs 127·h on one GPU
# (Mistral-7B, 32 layers: +1.8·h per layer ≈ 2 more bytes per hidden unit per layer).
FSDP_GC_BYTES_PER_HIDDEN = 4
DOWN_TARGETS = frozenset({"down_proj", "w2", "c_proj", "mlp.c_proj", "all-linear"})


def _mlp_width(arch: Architecture) -> float:
    return arch.intermediate_size * max(arch.experts_per_token, 1) if arch.is_moe else arch.intermediate_size


def attention_coef(job: Job, arch: Architecture, calib: Calibration | None = None) -> float:
    """Per-token per-layer bytes / h of norms, attention inputs/outputs (no s² term)."""
    if calib and calib.attn_act_factor_flash is not None:
        return calib.attn_act_factor_flash
    base = 12.0 if arch.model_type == "gpt_bigcode" else 20.0
    return base + 4 * arch.kv_width / arch.hidden_size


def mlp_coef(job: Job, arch: Architecture, calib: Calibration | None = None) -> float:
    """Per-token per-layer bytes / h saved by the MLP (and dropped by frozen LoRA linears)."""
    if calib and calib.mlp_act_factor is not None:
        return calib.mlp_act_factor
    ratio = _mlp_width(arch) / arch.hidden_size
    coef = (4 if arch.model_type == "gpt_bigcode" else 8) * ratio
    if job.method != "full" and not DOWN_TARGETS & set(job.lora_target_modules):
        coef -= 2 * ratio  # frozen down projection: its input is not saved
    return coef


def layer_bytes_per_token(
    job: Job, arch: Architecture, calib: Calibration | None = None, fsdp: bool = False
) -> float:
    """Bytes one decoder layer saves per token without checkpointing.

    Under FSDP mixed precision the layers compute in bf16 from gathered bf16 parameters even when the
    sharded master copy is fp32 (amp), so the amp precision factor does not apply there.
    """
    coef = attention_coef(job, arch, calib) + mlp_coef(job, arch, calib)
    if job.method != "full" and job.lora_dropout > 0:
        coef += len(arch.lora_targets(job.lora_target_modules))
    per_token = coef * arch.hidden_size
    if job.attention == "eager":
        factor = calib.attn_act_factor_eager if calib and calib.attn_act_factor_eager is not None else EAGER_BYTES_PER_SCORE
        per_token += factor * arch.num_heads * job.tokens_per_sample
    return per_token * (1.0 if fsdp else PRECISION_FACTOR[job.dtype])


def checkpoint_bytes_per_token(
    job: Job, arch: Architecture, calib: Calibration | None = None, fsdp: bool = False
) -> float:
    """Bytes one checkpointed layer keeps per token (its input), or a user-given fraction."""
    if calib and calib.grad_ckpt_reduction is not None:
        return calib.grad_ckpt_reduction * layer_bytes_per_token(job, arch, calib, fsdp)
    if fsdp:
        return FSDP_GC_BYTES_PER_HIDDEN * arch.hidden_size
    return GC_BYTES_PER_HIDDEN * arch.hidden_size * PRECISION_FACTOR[job.dtype]


def loss_bytes_per_token(job: Job, arch: Architecture) -> float:
    """Logits + cross-entropy bytes per token at the loss peak."""
    kernel = job.effective_loss_kernel
    if kernel == "fused-linear-ce":
        return FUSED_LINEAR_CE_BYTES_PER_HIDDEN * arch.hidden_size
    return (FUSED_CE_BYTES_PER_VOCAB if kernel == "fused-ce" else LOSS_BYTES_PER_VOCAB) * arch.vocab_size
