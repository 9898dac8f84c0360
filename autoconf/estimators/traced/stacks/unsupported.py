"""Why a stack's own code cannot be traced for a job (torchtune, torchtitan, DeepSpeed, TRL; LitGPT's in litgpt_plan.py).

No torch here: each rule reads the job, placement and architecture only, so a refusal does not depend on what is
installed (traced/refusal.py asks ``stack_unsupported`` for the stacks with a driver, memory.py ``DRIVERS``). Kept
apart from memory.py, which runs the drivers and reads their traces.
"""

from __future__ import annotations

from autoconf.catalog import Architecture
from autoconf.catalog.families import REMOTE_CODE
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.traced.stacks.litgpt_plan import litgpt_unsupported
from autoconf.schema import Job, Placement

# torchtune builders we map catalogue architectures onto (torchtune.models.<family>._component_builders)
TORCHTUNE_TYPES = {"llama": "llama3_2", "qwen2": "qwen2", "mistral": "mistral"}
LORA_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "all-linear")


def torchtune_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why torchtune's own code cannot be traced for this job (None: it can)."""
    if arch.model_type not in TORCHTUNE_TYPES:
        return f"no torchtune builder is mapped for {arch.model_type} (traced: {', '.join(TORCHTUNE_TYPES)})"
    if arch.head_dim * arch.num_heads != arch.hidden_size:
        return "torchtune's llama/qwen2/mistral builders derive head_dim = hidden / heads; this model's differs"
    if arch.mlp_bias or (arch.attention_bias and arch.model_type != "qwen2") or arch.num_experts > 1:
        return "torchtune's builder for this family has no biases or experts where this model has them"
    if job.method == "qlora" and placement.dp > 1:
        return "QLoRA on several GPUs: sharding torchao's NF4Tensor weights with FSDP2 was not traced"
    if job.dtype not in ("bf16", "fp32"):
        return f"torchtune recipes train in bf16 or fp32 (training.get_dtype), not {job.dtype}"
    if job.attention == "eager":
        return "torchtune's attention is SDPA or flex attention (_sdpa_or_flex_attention); it has no eager path"
    if job.optimizer != "adamw":
        return f"torchtune configs use torch.optim.AdamW; {job.optimizer} is not traced"
    if job.effective_loss_kernel not in ("chunked", "hf"):
        return (f"torchtune's recipes compute CEWithChunkedOutputLoss (chunked) or nn.CrossEntropyLoss (hf); "
                f"the {job.effective_loss_kernel} loss kernel is not theirs")
    if job.dora and job.method != "full":
        return "DoRA: torchtune's DoRALinear (use_dora) is not traced (the driver builds LoRALinear)"
    if job.method != "full" and not set(job.lora_target_modules) <= set(LORA_NAMES):
        return f"torchtune's LoRA builders adapt {', '.join(LORA_NAMES[:-1])}; got {', '.join(job.lora_target_modules)}"
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none":
        return "tensor/pipeline parallelism and offload are not traced for torchtune"
    if placement.dp > 1 and placement.effective_strategy not in ("fsdp", "fsdp-shard-grad-op"):
        return f"torchtune shards with FSDP2 (training.shard_model); strategy {placement.effective_strategy} is not its"
    if job.sequence_parallel > 1:
        return "sequence parallelism is not traced for torchtune"
    return None


def torchtitan_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why torchtitan's own code cannot be traced for this job (None: it can)."""
    if arch.model_type != "llama" or arch.attention_bias or arch.mlp_bias:
        return f"torchtitan's Llama3Model is traced for bias-free llama models, not {arch.model_type}"
    if job.method == "qlora":
        return "torchtitan has no QLoRA (no 4-bit base weights; its low precision is float8 training)"
    if job.method != "full":
        return "torchtitan is traced for full training; its LoRA converter (components/lora.py) is not traced"
    if arch.head_dim * arch.num_heads != arch.hidden_size:
        return "the driver builds torchtitan's Llama3 layers from dim and n_heads (head_dim = dim / heads); this model's differs"
    if job.dtype not in ("bf16", "amp-bf16", "fp32"):
        return f"torchtitan trains in training.dtype float32 or bfloat16 with bf16 or fp32 compute, not {job.dtype}"
    if job.attention == "eager":
        return "torchtitan's attention is SDPA or flex attention; it has no eager path"
    if job.optimizer != "adamw":
        return f"torchtitan's default optimizer is AdamW; {job.optimizer} is not traced"
    if job.effective_loss_kernel != "hf":
        return f"torchtitan's loss is cross_entropy_loss over fp32 logits; the {job.effective_loss_kernel} kernel is not its"
    if placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "pipeline and context parallelism and CPU offload are not traced for torchtitan"
    if placement.dp > 1 and placement.effective_strategy not in ("fsdp", "fsdp-shard-grad-op"):
        return f"torchtitan shards with FSDP2; strategy {placement.effective_strategy} is not its"
    return None


def stack_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why ``job.framework``'s own code cannot be traced (None: it can); only stacks in DRIVERS are asked."""
    if resolve(job).optimizer_in_backward or resolve(job).activation_offloading:
        return f"optimizer-in-backward and activation offloading are not traced for {job.framework}"
    low = job.dtype in ("bf16", "fp16") and (job.method == "full" or job.framework == "torchtune")
    if job.framework != "deepspeed" and job.optimizer_state_dtype == "fp32" and low:
        # torch optimizers keep states in the trained parameters' dtype: the base's, or for LoRA torchtune's adapters'
        # (peft's are fp32); DeepSpeed keeps fp32 master weights and states whatever the model dtype
        return f"{job.framework}'s torch AdamW keeps its states in the parameter dtype ({job.dtype}), not fp32"
    if job.framework == "torchtitan":
        return torchtitan_unsupported(job, placement, arch)
    if job.framework == "deepspeed":
        return deepspeed_unsupported(job, placement, arch)
    if job.framework == "trl":
        return trl_unsupported(job, placement, arch)
    if job.framework == "litgpt":
        return litgpt_unsupported(job, placement, arch)
    return torchtune_unsupported(job, placement, arch)


TRL_STRATEGIES = ("ddp", "fsdp", "fsdp-shard-grad-op")


def trl_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why TRL's SFTTrainer cannot be traced for this job (None: it can)."""
    if job.method == "qlora" and job.dora and placement.dp > 1 and placement.effective_strategy != "ddp":
        return ("DoRA QLoRA under FSDP2: TRL casts the adapters to bf16 but keeps DoRA's magnitudes fp32 "
                "(sft_trainer.py), and FSDP2 asserts one dtype for a unit's trained parameters (_init_mp_dtypes)")
    if job.optimizer != "adamw" or job.optimizer_impl != "fused":
        return (f"the Trainer's adamw_torch_fused is traced; {job.optimizer} ({job.optimizer_impl}) is not "
                "(adamw_torch picks foreach on CUDA but for-loop on CPU tensors)")
    if job.effective_loss_kernel != "fused-linear-ce":
        return (f"TRL 1.16's SFTTrainer computes its loss through its fused LM head (add_fused_lm_head), "
                f"not {job.effective_loss_kernel}")
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "tensor/pipeline/sequence parallelism and offload are not traced for the SFTTrainer"
    if placement.dp > 1 and placement.effective_strategy not in TRL_STRATEGIES:
        return (f"strategy {placement.effective_strategy}: the SFTTrainer is traced under accelerate's "
                f"{', '.join(TRL_STRATEGIES)} (ZeRO: --framework deepspeed)")
    if arch.family in REMOTE_CODE:
        return f"{arch.family} is hub remote code (no transformers class to trace)"
    if arch.model_type == "granitemoe":  # its config asks for router logits by default
        return ("TRL 1.16's fused LM head adds the MoE aux loss with config.num_experts (trl/trainer/utils.py "
                "_fused_forward), which GraniteMoeConfig does not have: the SFTTrainer raises AttributeError")
    return None


def deepspeed_unsupported(job: Job, placement: Placement, arch: Architecture) -> str | None:
    """Why DeepSpeed's ZeRO engine cannot be traced for this job (None: it can)."""
    if job.method == "qlora":
        return "QLoRA (bitsandbytes' 4-bit Params4bit in ZeRO's flat partitions) is not traced"
    if job.optimizer != "adamw":
        return f"the engine is traced with the Trainer's torch AdamW; {job.optimizer} is not"
    if job.dora and job.method != "full":
        return "DoRA is not traced by the engine driver"
    if job.effective_loss_kernel != "hf":
        return f"the engine is traced with the model's own loss; the {job.effective_loss_kernel} kernel is not"
    if placement.tp > 1 or placement.pp > 1 or placement.offload != "none" or job.sequence_parallel > 1:
        return "ZeRO with tensor/pipeline/sequence parallelism or offload is not traced"
    if arch.family in REMOTE_CODE:
        return f"{arch.family} is hub remote code (no transformers class to trace)"
    return None
