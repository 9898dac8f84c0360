"""What a traced step depends on besides the micro-batch shape: the Job and architecture as a trace spec.

The spec is also the trace cache's key, so a key appears only where the trace differs from the installed stack's
(earlier cache entries stay valid): the LoRA targets in the architecture's own module names, the transformers
release's loss line, the bitsandbytes release's kept 4-bit input, a stack loop that holds the model output,
adapters in the model dtype (peft before 0.12), a LoRA dropout traced as CUDA runs it, and SDPA's mask past a
sliding window.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoconf.catalog import Architecture
from autoconf.catalog.lora import target_names
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory.coefficients import bnb_release_keeps_input
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.loss import BF16_LOSS_BYTES_PER_VOCAB, LOSS_BYTES_PER_VOCAB, hf_release_bytes_per_vocab
from autoconf.schema import Job

# Architecture fields that do not change the model (kept out of the cache key).
_NON_STRUCTURAL = ("source", "verification", "answerable", "aliases")


def lora_targets(job: Job, arch: Architecture) -> tuple[str, ...]:
    """The job's LoRA targets as modules of this architecture: the default q_proj, v_proj becomes the family's own
    default where it has no such modules (catalog/lora.py DEFAULT_TARGETS, peft's mapping where peft has the family)."""
    if arch.lora_targets(job.lora_target_modules):
        return target_names(arch, tuple(job.lora_target_modules))
    names = ", ".join(lin.name for lin in arch.layer_linears if lin.name != "router")
    raise InvalidInputError(
        "lora_target_modules",
        f"must name linear modules of {arch.name} ({names}) or all-linear; got {', '.join(job.lora_target_modules)}"
    )


def trace_spec(job: Job, arch: Architecture) -> dict[str, Any]:
    """Everything the trace depends on besides the micro-batch shape (also the cache key)."""
    arch_fields = {k: v for k, v in dataclasses.asdict(arch).items() if k not in _NON_STRUCTURAL}
    if arch.model_type != "gpt_bigcode":  # rotary models size no tensor by the context length
        arch_fields["max_position_embeddings"] = 0
    spec: dict[str, Any] = {
        "arch": arch_fields, "method": job.method, "dtype": job.dtype,
        # flash and sdpa both run SDPA; on fake CPU it takes the flash route (out + logsumexp saved, no s²)
        "attention": "eager" if job.attention == "eager" else "sdpa",
        "optimizer": job.optimizer, "optimizer_impl": job.optimizer_impl,
        "gradient_checkpointing": job.gradient_checkpointing,
    }
    if arch.family == "falcon" and job.attention != "eager":  # absent elsewhere: earlier cache keys stay valid
        if job.attention == "flash":  # transformers' FalconFlashAttention2, not the SDPA module (falcon_flash.py)
            spec["falcon_flash"] = True
        else:  # FalconModel always hands SDPA a mask, or the math kernel runs: scores and masks grow with s²
            spec["quadratic"] = True
    if job.method in ("lora", "qlora"):
        spec.update(lora_r=job.lora_r, lora_alpha=job.lora_alpha, lora_dropout=job.lora_dropout,
                    lora_target_modules=list(lora_targets(job, arch)))
        if job.lora_dropout > 0:  # traced as CUDA's fused dropout (cuda_dropout.py): earlier CPU-dropout keys retire
            spec["cuda_dropout"] = True
        if resolve(job).profile.peft_model_dtype_adapters:
            # the stack's peft (before 0.12) builds the adapters in the base weights' dtype (model._lora); absent
            # for fp32 adapters: earlier cache keys stay valid
            spec["adapter_dtype"] = "model"
    if job.method == "qlora":
        spec.update(double_quant=resolve(job).double_quant, kbit_upcast=resolve(job).kbit_upcast)
    if job.effective_loss_kernel != "hf":  # absent for HF's loss: earlier cache keys stay valid
        spec["loss_kernel"] = job.effective_loss_kernel
    line = release_loss_line(job, arch)
    if line:  # absent for the installed release's loss: earlier cache keys stay valid
        spec["hf_loss"] = line
    if line == "bf16-4.x" and resolve(job).profile.fp32_outputs:  # accelerate's fp32 copy is then the peak
        spec["fp32_outputs"] = True
    if job.effective_loss_kernel == "hf" and resolve(job).profile.holds_output:  # the loop holds the output
        spec["keep_output"] = True
    if bnb_keeps_input(job):  # absent for bitsandbytes >= 0.43.2 (the installed behaviour): earlier keys stay valid
        spec["bnb_keeps_input"] = True
        if job.gradient_checkpointing and not transformers_5(job):
            spec["reentrant"] = True
    if masked_sdpa(job, arch):  # the window (and its mask) is kept only where real SDPA keeps it (absent: no window)
        spec["sliding_mask"] = True
    return spec


def bnb_keeps_input(job: Job) -> bool:
    """QLoRA on a bitsandbytes release that keeps each 4-bit matmul's input for backward (up to 0.43.1;
    theory's coefficients.bnb_release_keeps_input, traced by qlora.keep_matmul_input)."""
    return job.method == "qlora" and bnb_release_keeps_input(job.bitsandbytes_version or "")


def transformers_5(job: Job) -> bool:
    """The job's transformers is 5.x, whose checkpointing is non-reentrant (``activation_checkpointing_kwargs``
    default ``{"use_reentrant": False}``); 4.x passes ``{"use_reentrant": True}`` when the Trainer gives no kwargs
    (modeling_utils.py ``gradient_checkpointing_enable``, read at 4.44.2, 4.53.0, 4.57.6). Unstated with a
    bitsandbytes before 0.43.2 it is 4.x: transformers 5.x refuses bitsandbytes below 0.46.1
    (``BITSANDBYTES_MIN_VERSION``, read at 5.18.0 and 5.24.0)."""
    return bool(job.transformers_version) and int(str(job.transformers_version).split(".")[0]) >= 5


def release_loss_line(job: Job, arch: Architecture) -> str | None:
    """The loss of the job's transformers release where its peak differs from the installed one's (kernels.py
    ``release_loss``): 4.46–4.48's fp32 copy beside the bf16 logits, gpt_bigcode's bf16 loss before 4.49; None for
    the installed line (4.39–4.45 included: the same 12·V at the backward's start) and for other loss kernels."""
    if job.effective_loss_kernel != "hf":
        return None
    per_vocab = hf_release_bytes_per_vocab(job.transformers_version or "", arch.model_type)
    if per_vocab == BF16_LOSS_BYTES_PER_VOCAB:
        return "bf16-4.x"
    return "4.46-4.48" if per_vocab > LOSS_BYTES_PER_VOCAB else None


def masked_sdpa(job: Job, arch: Architecture) -> bool:
    """SDPA on a sliding-window model from the window on, where transformers stops skipping the causal mask
    (masking_utils ``_ignore_causal_mask_sdpa``: ``kv_length >= local_attention_size`` keeps it) and attention runs
    with the materialised mask. Flash-attention takes the window as a kernel argument and never builds it."""
    window = arch.sliding_window
    return job.attention == "sdpa" and bool(window) and job.tokens_per_sample >= window
