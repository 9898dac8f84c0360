"""Logits and cross-entropy memory per token at the loss peak, by loss kernel, and what the loss leaves cached.

Bytes per token (V = vocabulary size, h = hidden size), bf16, from our own fake-tensor traces of HF transformers
training steps (docs/traced_vs_theory.md) and the measured rows named at each constant:

* HF's un-fused cross-entropy: 4·V saved (fp32 log-softmax) + 8·V transient at the start of backward
  → exactly 12·V bytes per token at the loss peak (traced; the fms-acceleration LoRA rows agree to 4 %).
* chunked cross-entropy (torchtune's CEWithChunkedOutputLoss, LitGPT's chunked_cross_entropy): the
  log-softmax of every chunk is saved (fp32 in torchtune, 4·V; bf16 in LitGPT plus its bf16 logits,
  2·V + 2·V), while the fp32 upcast and its gradient exist for one chunk at a time → 4·V per token, plus
  in torchtune the first chunk's backward transients (HF's 8·V on 1/8 of the tokens: + 1·V; traced).
* samples of varying length (``Job.samples_vary_in_length``): a reserved-only term, not a tensor
  (``loss_segment_bytes_per_token``, LOSS_SEGMENT_NOTE below).

Every function takes one ``Job`` or the columns of a batch (rows.py); the architecture is one model's.
"""

from __future__ import annotations

import numpy as np

from autoconf.catalog.architecture import Architecture
from autoconf.estimators.theory.rows import AnyJob, Num, not_, settings_of, where
from autoconf.schema import Calibration

LOSS_BYTES_PER_VOCAB = 12  # 4 saved fp32 log-softmax + 8 transient fp32 gradients
CHUNKED_BYTES_PER_VOCAB = 4  # saved log-softmax of every chunk; upcasts one chunk at a time (module docstring)
# torchtune's CEWithChunkedOutputLoss splits the output into num_output_chunks = 8 (torchtune/modules/loss/
# ce_chunked_output_loss.py) and the backward of the last chunk's cross-entropy starts while every chunk's saved
# log-softmax is alive: the same 8·V fp32 transients as HF's loss (LOSS_BYTES_PER_VOCAB − the 4 saved) on 1/8 of
# the tokens, +1·V per token. Seen in the traces (docs/traced_vs_theory.md, findings: the traced backward peak
# holds 5.00·V per token for llama3.1-8b, 5.03·V for qwen3-4b; our H100 rows measure it). LitGPT's chunks are
# 128 positions each, so its transient does not grow with the tokens: not added for it.
TORCHTUNE_OUTPUT_CHUNKS = 8
CHUNK_TRANSIENT_BYTES_PER_VOCAB = (LOSS_BYTES_PER_VOCAB - CHUNKED_BYTES_PER_VOCAB) / TORCHTUNE_OUTPUT_CHUNKS
# FOAK's fused cross-entropy (a Triton kernel over the materialised bf16 logits) avoids the fp32 upcast
# copies: the fms-acceleration A100 rows grow by 8·V bytes per token beyond the checkpoints (Mistral-7B,
# V=32000: 8.1 GiB per 16k tokens; Llama-3-8B, V=128256: 19.9 GiB per 16k tokens).
# That is the fp32 logits these HF models return (transformers 4.4x: logits.float() in the CausalLM forward) and
# their fp32 gradient, 4 + 4; a stack whose model returns bf16 logits states its own (frameworks.Profile: llm-foundry).
FUSED_CE_BYTES_PER_VOCAB = 8
# Liger's fused linear cross-entropy never materialises the logits: the same rows grow by the same
# 127·h bytes per token for V=32000 and V=128256, i.e. independent of V; beyond the 2·h·L checkpoints
# that leaves ≈ 64·h per token (chunk buffers and the fp32 gradient of the hidden states it computes
# during the forward pass). Measured on h=4096, L=32 models only.
FUSED_LINEAR_CE_BYTES_PER_HIDDEN = 64
# The VRAM-budget CLI's rule for its --logits-factor override: a fused loss keeps 0.2 of the logits.
FUSED_LOSS_LOGITS_SHARE = 0.2
SOFTCAP_BYTES_PER_VOCAB = 2  # logit soft-capping keeps tanh's bf16 output (same reasoning as any saved bf16 tensor)


def loss_bytes_per_token(job: AnyJob, arch: Architecture, calib: Calibration | None = None) -> Num:
    """Logits + cross-entropy bytes per token at the loss peak (or the VRAM-budget CLI's logits factor)."""
    if calib and calib.logits_factor is not None:
        return calib.logits_factor * arch.vocab_size * where(job.fused_loss, FUSED_LOSS_LOGITS_SHARE, 1.0)
    kernel = job.effective_loss_kernel
    stated = settings_of(job).profile.fused_ce_bytes_per_vocab
    # a profile without its own figure (None; 0 in columns) uses the HF models' FUSED_CE_BYTES_PER_VOCAB
    fused = np.where(stated > 0, stated, FUSED_CE_BYTES_PER_VOCAB) if isinstance(stated, np.ndarray) else (
        stated or FUSED_CE_BYTES_PER_VOCAB)
    chunked = CHUNKED_BYTES_PER_VOCAB + where(job.framework == "litgpt", 0.0, CHUNK_TRANSIENT_BYTES_PER_VOCAB)
    per_vocab = where(kernel == "fused-ce", fused, where(kernel == "chunked", chunked, LOSS_BYTES_PER_VOCAB))
    if arch.final_logit_softcap:  # gemma2: cap·tanh(logits / cap) saves tanh's bf16 output for backward (2·V)
        per_vocab = per_vocab + SOFTCAP_BYTES_PER_VOCAB
    return where(kernel == "fused-linear-ce", FUSED_LINEAR_CE_BYTES_PER_HIDDEN * arch.hidden_size,
                 per_vocab * arch.vocab_size)


# LOSS_SEGMENT_NOTE. torch's caching allocator gives each large tensor a segment of its own (rounded to 2 MiB) and
# serves a later request only from a cached block at least as large (c10/cuda/CUDACachingAllocator.cpp: get_free_block
# takes the smallest cached block >= the request and splits it); cached segments go back to the driver only on
# empty_cache() or when cudaMalloc fails. With unpacked samples of varying length, a batch longer than all before it
# finds every cached loss-sized block (cut for a V-wide tensor of a shorter batch) too small: its V-wide tensors get
# fresh segments and the old ones stay reserved. At the longest batch the reserved pool therefore holds loss segments
# of earlier, shorter batches on top of the allocated peak. Their bytes per token are taken as the V-wide bytes one
# step of the HF loss allocates, 24·V, in the path the ms-swift benchmark ran (transformers 4.3x, Trainer bf16=True:
# forward under torch.autocast, which runs cross_entropy in fp32): forward, the bf16 logits (2), their shifted
# contiguous copy (2), autocast's fp32 copy (4) and the fp32 log-softmax (4); backward, the nll gradient (4), the
# log-softmax gradient (4), its bf16 cast (2) and the slice's zero-filled bf16 gradient of the logits (2). The traced
# 12·V above is the subset alive at once. Not a bound: fewer bytes stay cached where later tensors reuse the old
# blocks, more where several earlier batches each left a set (accelerate's fp32 output copy of the logits, when it
# converts outputs, adds 4 more). On the swift benchmark's Qwen LoRA rows, reserved exceeds the component model by
# 24–34·V bytes per token at 1,024–2,048 tokens (5–31 at 512, less past 2,048; docs/frameworks.md [11]). Profile
# value: frameworks.py.


def loss_segment_bytes_per_token(job: AnyJob, arch: Architecture) -> Num:
    """Reserved bytes per token of cached loss-sized segments left by shorter batches (LOSS_SEGMENT_NOTE): only
    for unpacked samples of varying length under HF's loss, and only for stacks whose profile models it."""
    kept = job.samples_vary_in_length & not_(job.packing) & (job.effective_loss_kernel == "hf")
    per_vocab = settings_of(job).profile.loss_segment_bytes_per_vocab
    return where(kept, per_vocab * arch.vocab_size * 1.0, 0.0)


def loss_fixed_bytes(job: AnyJob, arch: Architecture) -> Num:
    """Bytes at the loss peak that do not scale with tokens: a 4-bit lm_head dequantised to bf16 for its matmul
    (bitsandbytes dequantises the whole weight in forward and again in backward, one copy at a time)."""
    quantised = ((job.method == "qlora") & settings_of(job).quantize_lm_head
                 & (job.effective_loss_kernel != "fused-linear-ce"))
    return where(quantised, 2.0 * arch.lm_head_params, 0.0)
