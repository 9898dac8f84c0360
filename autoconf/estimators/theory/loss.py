"""Logits and cross-entropy memory per token at the loss peak, by loss kernel, and what the loss leaves cached.

Bytes per token (V = vocabulary size, h = hidden size), bf16, from our own fake-tensor traces of HF transformers
training steps (docs/traced_vs_theory.md) and the measured rows named at each constant:

* HF's un-fused cross-entropy: 4·V saved (fp32 log-softmax) + 8·V transient at the start of backward
  → exactly 12·V bytes per token at the loss peak (traced; the fms-acceleration LoRA rows agree to 4 %).
* chunked cross-entropy (torchtune's CEWithChunkedOutputLoss, LitGPT's chunked_cross_entropy): the
  log-softmax of every chunk is saved (fp32 in torchtune, 4·V; bf16 in LitGPT plus its bf16 logits,
  2·V + 2·V), while the fp32 upcast and its gradient exist for one chunk at a time → 4·V per token, plus
  in torchtune the first chunk's backward transients (HF's 8·V on 1/8 of the tokens: + 1·V; traced).
* HF's loss by transformers release (``Job.transformers_version``; HF_LOSS_LINES): the bytes above are the
  installed release's (4.49 on, 5.x); 4.46–4.48 keep 14·V, and gpt_bigcode's loss before 4.49 runs on the
  bf16 logits, 6·V.
* samples of varying length (``Job.samples_vary_in_length``): a reserved-only term, not a tensor
  (``loss_segment_bytes_per_token``, LOSS_SEGMENT_NOTE below).

Every function takes one ``Job`` or the columns of a batch (rows.py); the architecture is one model's.
"""

from __future__ import annotations

import numpy as np

from autoconf.catalog.architecture import Architecture
from autoconf.estimators.theory.rows import AnyJob, Flag, Num, not_, settings_of, where
from autoconf.estimators.theory.weights import kbit_upcast
from autoconf.schema import Calibration

LOSS_BYTES_PER_VOCAB = 12  # 4 saved fp32 log-softmax + 8 transient fp32 gradients
# HF's loss by transformers release line, bytes per token·V at the loss peak with half-precision logits from the
# head (bench/hf_loss_versions.py runs each line's tensor operations on real CPU tensors and counts the live bytes:
# docs/traced_vs_theory.md, section loss-versions; the rows: findings 17, 18, 24). Keyed by the first release of the
# line; a release below the next key takes the line's figure; "" (no version stated) = the installed release.
# * 4.39–4.45 (modeling_llama.py / modeling_mistral.py / modeling_mixtral.py ``*ForCausalLM.forward``: ``logits =
#   logits.float()`` right after the head, the bf16 logits dropped; ``shift_logits = logits[..., :-1, :]
#   .contiguous()``; ``CrossEntropyLoss``): fp32 logits 4 + their shifted copy 4 + log-softmax 4 in forward, 4 saved
#   + 8 transient in backward: 12.
# * 4.46–4.48 (loss/loss_utils.py ``ForCausalLMLoss``: ``logits = logits.float()`` inside the loss, the same shifted
#   copy; the model output keeps the bf16 logits through the loss): 2 + 4 + 4 + 4 = 14, in forward and backward.
# * 4.49 on, 5.x (``ForCausalLMLoss`` pads and shifts the labels, ``nn.functional.pad(labels, (0, 1))``; the fp32
#   logits are not copied): 10 in forward, 12 in backward (LOSS_BYTES_PER_VOCAB, which the trace runs).
HF_LOSS_LINES: tuple[tuple[tuple[int, int], float], ...] = (((4, 39), 12.0), ((4, 46), 14.0), ((4, 49), 12.0))
# gpt_bigcode before 4.49 (modeling_gpt_bigcode.py ``GPTBigCodeForCausalLM.forward``, read at 4.44.2, 4.45.2 and
# 4.48.1: ``shift_logits = lm_logits[..., :-1, :].contiguous()`` and ``CrossEntropyLoss`` on them, no upcast): the
# bf16 logits 2 + their shifted copy 2 + the bf16 log-softmax 2; backward 2 saved + 4 transient: 6 (measured 6.1).
BF16_LOSS_FAMILIES: dict[str, tuple[int, int]] = {"gpt_bigcode": (4, 49)}  # family -> first release with the shared loss
BF16_LOSS_BYTES_PER_VOCAB = 6.0
# accelerate's ``convert_outputs_to_fp32`` (accelerate/utils/operations.py ``ConvertOutputsToFp32``), which
# ``Accelerator.prepare_model`` wraps around the forward under bf16/fp16 mixed precision (the HF Trainer's
# ``bf16=True``, as every fms-acceleration scenario sets it: scripts/benchmarks/scenarios.yaml), copies the returned
# half-precision logits to fp32 after the forward and its loss ran. With an fp32 loss that is below the loss peak
# (5.x and 4.46–4.48: bf16 logits 2 + the copy 4 + the saved fp32 log-softmax 4 = 10; 4.39–4.45 return fp32 logits:
# no copy); with gpt_bigcode's bf16 loss it is the peak: 2 + 4 + the saved bf16 log-softmax 2 = 8 (the santacoder rows
# of the 4.45.2 and 4.48.1 campaigns: finding 24). Stacks that train through the HF Trainer say so
# (frameworks.Profile.fp32_outputs).
BF16_LOSS_FP32_OUTPUT_BYTES_PER_VOCAB = 8.0
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


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a transformers release as Job.transformers_version spells it; None for "" (not stated)."""
    if not version:
        return None
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def hf_release_bytes_per_vocab(version: str, model_type: str) -> float:
    """HF's loss bytes per token·V with half-precision logits, for one release ("" = the installed one)."""
    found = release(version)
    if found is None:
        return float(LOSS_BYTES_PER_VOCAB)
    if model_type in BF16_LOSS_FAMILIES and found < BF16_LOSS_FAMILIES[model_type]:
        return BF16_LOSS_BYTES_PER_VOCAB
    per_vocab = float(LOSS_BYTES_PER_VOCAB)
    for first, figure in HF_LOSS_LINES:
        if found >= first:
            per_vocab = figure
    return per_vocab


def hf_bytes_per_vocab(job: AnyJob, arch: Architecture, fsdp: Flag = False) -> Num:
    """HF's loss bytes per token·V at the job's transformers release. Logits that are fp32 already (fp32 training,
    or QLoRA whose fp32 head peft's kbit preparation made) are 12·V in every line: ``.float()`` is then no copy,
    and the 4.x bf16 loss does not apply."""
    versions = job.transformers_version
    half: Num
    if isinstance(versions, np.ndarray):
        keys, inverse = np.unique(versions, return_inverse=True)
        half = np.array([hf_release_bytes_per_vocab(str(k), arch.model_type) for k in keys.tolist()])[inverse]
    else:
        half = hf_release_bytes_per_vocab(versions or "", arch.model_type)
    fp32_output = settings_of(job).profile.fp32_outputs & (half == BF16_LOSS_BYTES_PER_VOCAB)
    half = where(fp32_output, BF16_LOSS_FP32_OUTPUT_BYTES_PER_VOCAB, half)
    fp32_logits = (job.dtype == "fp32") | kbit_upcast(job, fsdp)
    return where(fp32_logits, float(LOSS_BYTES_PER_VOCAB), half)


def loss_bytes_per_token(job: AnyJob, arch: Architecture, calib: Calibration | None = None,
                         fsdp: Flag = False) -> Num:
    """Logits + cross-entropy bytes per token at the loss peak (or the VRAM-budget CLI's logits factor);
    ``fsdp``: sharded over > 1 GPU (QLoRA's kbit preparation is then skipped: weights.kbit_upcast)."""
    if calib and calib.logits_factor is not None:
        return calib.logits_factor * arch.vocab_size * where(job.fused_loss, FUSED_LOSS_LOGITS_SHARE, 1.0)
    kernel = job.effective_loss_kernel
    stated = settings_of(job).profile.fused_ce_bytes_per_vocab
    # a profile without its own figure (None; 0 in columns) uses the HF models' FUSED_CE_BYTES_PER_VOCAB
    fused = np.where(stated > 0, stated, FUSED_CE_BYTES_PER_VOCAB) if isinstance(stated, np.ndarray) else (
        stated or FUSED_CE_BYTES_PER_VOCAB)
    chunked = CHUNKED_BYTES_PER_VOCAB + where(job.framework == "litgpt", 0.0, CHUNK_TRANSIENT_BYTES_PER_VOCAB)
    per_vocab = where(kernel == "fused-ce", fused, where(kernel == "chunked", chunked,
                                                         hf_bytes_per_vocab(job, arch, fsdp)))
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
