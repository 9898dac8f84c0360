"""Which jobs LitGPT's own finetune code can be traced for, and the spec its driver (litgpt_step.py) runs; no torch.

LitGPT's finetune scripts fix what the job's flags would choose elsewhere: ``full.py`` and ``lora.py`` train one
device without activation checkpointing, several under FSDP (full.py: FSDP1, lora.py: FSDP2) checkpointing every
``Block``;
they compute ``chunked_cross_entropy`` (the ``chunked`` loss kernel), take the optimizer from
``instantiate_torch_optimizer`` (AdamW in every ``config_hub/finetune`` config) and quantise only through
bitsandbytes (``--quantize bnb.nf4``, Fabric's ``BitsandbytesPrecision``).
"""

from __future__ import annotations

from typing import Any

from autoconf.catalog import Architecture
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.traced.stacks.spec import arch_spec
from autoconf.schema import Job, Placement

# catalogue model types built as LitGPT's LLaMA block (RMSNorm, LLaMAMLP, sequential residual, full rotary)
LITGPT_TYPES = ("llama", "mistral", "qwen2")
LITGPT_PRECISIONS = ("bf16", "fp32", "amp-bf16")  # bf16-true, 32-true, bf16-mixed
LITGPT_LORA = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "all-linear")


def litgpt_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why LitGPT's finetune code cannot be traced for this job (None: it can)."""
    if arch.model_type not in LITGPT_TYPES:
        return f"no LitGPT Config is mapped for {arch.model_type} (traced: {', '.join(LITGPT_TYPES)})"
    if arch.mlp_bias or arch.num_experts > 1:
        return "LitGPT's LLaMA block is traced without MLP biases or experts"
    if job.method == "qlora":
        return ("LitGPT quantises through bitsandbytes (Fabric BitsandbytesPrecision, Linear4bit), whose 4-bit "
                "weights cannot hold fake tensors")
    if job.dora and job.method == "lora":
        return "LitGPT has no DoRA (litgpt.lora's LoRALinear and LoRAQKVLinear only)"
    if arch.max_position_embeddings and job.tokens_per_sample > arch.max_position_embeddings:
        return f"LitGPT refuses sequences longer than the model's block_size ({arch.max_position_embeddings})"
    if job.dtype not in LITGPT_PRECISIONS:
        return f"LitGPT's --precision is traced as bf16-true, 32-true or bf16-mixed, not {job.dtype}"
    if job.optimizer != "adamw":
        return f"LitGPT's finetune configs use torch.optim.AdamW; {job.optimizer} is not traced"
    if job.effective_loss_kernel != "chunked":
        return f"LitGPT's finetune computes chunked_cross_entropy, not the {job.effective_loss_kernel} loss kernel"
    if job.method == "lora" and not set(job.lora_target_modules) <= set(LITGPT_LORA):
        return f"LitGPT's LoRA adapts {', '.join(LITGPT_LORA[:-1])}; got {', '.join(job.lora_target_modules)}"
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "tensor/pipeline/sequence parallelism and offload are not LitGPT finetune options"
    if placement.dp > 1 and placement.effective_strategy != "fsdp":
        return (f"LitGPT shards with FSDP on several devices (full.py: Fabric's FSDPStrategy, lora.py: "
                f"ModelParallelStrategy's fully_shard), not {placement.effective_strategy}: use --strategy fsdp")
    return None


def litgpt_spec(job: Job, placement: Placement, arch: Architecture, batch: int) -> dict[str, Any]:
    """A LitGPT trace's spec (also its cache key)."""
    return {
        "stack": "litgpt",
        "arch": arch_spec(arch, attention_bias=arch.attention_bias),
        # GPT.__init__ builds the rotary cache for the context (block_size); fit rebuilds it for the sequence
        "block_size": arch.max_position_embeddings or job.tokens_per_sample,
        "method": job.method, "dtype": job.dtype, "optimizer_impl": job.optimizer_impl,
        "lora_r": job.lora_r, "lora_alpha": job.lora_alpha, "lora_dropout": job.lora_dropout,
        "lora_target_modules": sorted(job.lora_target_modules) if job.method == "lora" else [],
        "world": placement.dp, "strategy": "fsdp" if placement.dp > 1 else "single", "shape": [batch, job.tokens_per_sample],
        # a second micro-batch runs with the first one's gradients kept (under FSDP: unsharded, no_sync); more
        # micro-batches repeat it
        "accumulation": min(job.gradient_accumulation_steps, 2),
        "expandable_segments": resolve(job).expandable_segments,
    }
