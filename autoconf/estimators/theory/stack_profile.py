"""The shape of a framework profile (frameworks.py holds the profiles and ``resolve``): a stack's memory-relevant
behaviour, each field with what it changes, and the measured device overhead of a stack with device rows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeviceFit:
    """Measured device overhead of a stack: nvidia_smi ≈ (1 + frag)·allocated + context (+ nccl if > 1 GPU)."""

    context_bytes: float
    nccl_bytes: float
    fragmentation: float


@dataclass(frozen=True)
class Profile:
    """Memory-relevant behaviour of one training stack (the version range it describes is in ``versions``)."""

    name: str
    versions: str
    efficient_loading: bool  # FSDP: rank 0 / meta-device load (no full copy per rank)
    full_copy_on_gpu: bool  # without efficient loading, the per-rank copy is moved to the GPU before sharding
    adapter_bytes: int  # LoRA weights: 4 (fp32, peft autocast) or 2 (compute dtype)
    double_quant: bool
    quantize_lm_head: bool
    quant_saves_input: bool  # the 4-bit matmul keeps its input for backward even in frozen layers
    optimizer_in_backward: bool
    activation_offloading: bool
    expandable_segments: bool
    device_fit: DeviceFit | None = None
    kbit_upcast: bool = False  # QLoRA on one GPU: peft's prepare_model_for_kbit_training casts non-4-bit params to fp32
    # loss_kernel fused-ce: bytes per token per vocabulary entry at the loss peak; None = the FOAK figure measured on
    # HF models (loss.FUSED_CE_BYTES_PER_VOCAB)
    fused_ce_bytes_per_vocab: int | None = None
    # Jobs whose samples vary in length: bytes per token per vocabulary entry of cached loss-sized segments that
    # torch reserves beyond the allocated peak (loss.loss_segment_bytes_per_token); 0 = not modelled
    loss_segment_bytes_per_vocab: int = 0
    # the stack trains its own model classes, not transformers' (the traced estimator then traces the transformers
    # model of the same architecture and says so)
    own_model_code: bool = False
    # tensor parallel: the loss splits the vocabulary over the TP ranks (each holds V / tp of the logits); False =
    # transformers' tp_plan, whose LM head gathers its output on every rank (the whole vocabulary's logits per rank)
    vocab_parallel_loss: bool = False
    # traced: the stack's loop holds the model output (its logits) through backward and the optimizer step, where the
    # HF Trainer keeps only the loss (trace spec ``keep_output``)
    holds_output: bool = False
    # traced: the stack's sharded QLoRA keeps every 4-bit weight's quant state whole on each GPU (no parameter: FSDP
    # neither shards nor offloads it), where the replica's sharding would scale it with the weights
    whole_quant_states: bool = False
    # traced: the stack's multi-GPU jobs run the HF Trainer's model under accelerate's FSDP1 (torch
    # FullyShardedDataParallel; fsdp1.py), full shard only, and are traced as FSDP1 ranks (ranks.fsdp1_job)
    fsdp1: bool = False
    # traced: the stack's multi-GPU QLoRA runs FSDP1 with bitsandbytes' 4-bit weights in the flat parameters (traced
    # as FSDP1 ranks; other multi-GPU QLoRA is traced on one replica)
    fsdp1_qlora: bool = False
    # the stack trains through the HF Trainer, whose accelerate ``convert_outputs_to_fp32`` copies half-precision
    # logits to fp32 under bf16/fp16 mixed precision (loss.BF16_LOSS_FP32_OUTPUT_BYTES_PER_VOCAB)
    fp32_outputs: bool = False
    # LoRA through peft before 0.12, whose update_layer builds the adapters in the base weights' (floating) dtype
    # (adapter_bytes 2): lora_A keeps its input itself, one tensor per distinct input, where fp32 adapters keep a
    # cast copy per module (lora_activations.model_dtype_adapters)
    peft_model_dtype_adapters: bool = False
    # traced FSDP1 ranks: the stack builds FSDP1 with a CUDA device_id and sync_module_states, so each unit's weights
    # are copied to the GPU one by one and broadcast in 250 MiB buckets before flattening (traced/fsdp1.device_load)
    fsdp1_device_load: bool = False
    # the stack's "DDP" is FSDP1 with ShardingStrategy.NO_SHARD (a full replica per rank inside FSDP1 units)
    ddp_is_fsdp1_no_shard: bool = False
    # traced: the stack's multi-GPU step is the HF Trainer's through accelerate (FSDP2 as traced/dist.py wraps it, or
    # DDP), which the rank traces follow; other stacks' ranks are traced as FSDP1 (``fsdp1``) or not (ranks.py)
    accelerate_ranks: bool = False
    # traced: where the stack's own driver does not run a job (DeepSpeed's engine), one replica of the HF step is
    # traced and sharded by theory (a partial trace, noted) instead of a refusal (traced/refusal.py ``decide``)
    hf_replica_fallback: bool = False
    sources: dict[str, str] = field(default_factory=dict)
