"""Framework profiles: what each training stack does that changes memory (and speed), with sources.

A profile is data: the values a stack uses for the settings that ``Job`` exposes as overrides
(``fsdp_cpu_ram_efficient_loading``, ``double_quant``, ``quantize_lm_head``, the loss kernel,
``optimizer_in_backward``, ``activation_offloading``, ``expandable_segments``), plus behaviours that
are not user settings (the adapter dtype, whether 4-bit matmuls keep their input, where a rank's
checkpoint copy lands at load, what the traced estimator follows of its loop and sharding, and — for the
one stack we have device-level measurements of — the fitted CUDA-side overhead). ``resolve(job)`` merges the
Job's explicit values over its profile.
docs/frameworks.md is the readable form of this table, with the version range and a source per claim.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.estimators.theory.stack_profile import DeviceFit, Profile
from autoconf.schema import GIB, Job

# fms-hf-tuning on A100-80GB: least squares over the 1,092 fixed-length fms-acceleration rows that carry
# both torch and nvidia-smi peaks: nvidia_smi ≈ 1.08·torch_allocated + 3.1 GiB (+ 2.3 GiB on > 1 GPU).
FMS_FIT = DeviceFit(context_bytes=3.1 * GIB, nccl_bytes=2.3 * GIB, fragmentation=0.08)

_HF = "transformers 5.23 / peft 0.21 / accelerate 1.15 source (installed)"
_PEFT_FP32 = "peft tuners_utils.py: autocast_adapter_dtype=True casts LoRA weights to fp32"
_BNB_HEAD = "transformers quantizers/base.py get_keys_to_not_convert: the output embedding stays unquantised"
_BNB_DQ = "transformers BitsAndBytesConfig: bnb_4bit_use_double_quant defaults to False"
_BNB_SAVE = "bitsandbytes autograd/_functions.py MatMul4Bit.forward keeps A (the input) when any input needs grad"
_TP_GATHER = ("transformers 5.24 LlamaForCausalLM _tp_plan {'lm_head': 'colwise_gather_output'} (every *ForCausalLM "
              "the same): ColwiseParallel with Replicate output (distributed/tensor_parallel.py), so each TP rank "
              "holds the whole vocabulary's logits and ForCausalLMLoss runs on them (traced: tp 2 ranks hold the "
              "unsplit V-wide bytes per token)")
_ACC_LOAD = "accelerate FullyShardedDataParallelPlugin: cpu_ram_efficient_loading defaults to False"
_TRAINER_NO_MOVE = "transformers Trainer does not move an FSDP model to the GPU before accelerate wraps it"
_FP32_OUT = ("accelerate utils/operations.py ConvertOutputsToFp32, wrapped around the forward by "
             "Accelerator.prepare_model under the HF Trainer's bf16=True")
_FMS_FSDP1 = ("fms-acceleration's benchmark accelerate.yaml: `accelerate launch` with an FSDP config of "
              "fsdp_version 1, FULL_SHARD (fsdp1.py)")
_PEFT_FSDP1_QLORA = ("the peft profile's only multi-GPU rows are fms-acceleration's baseline-peft-bnb (fms-hf-tuning "
                     "and TRL's SFTTrainer under its benchmark's accelerate.yaml, FSDP1), loaded by its bitsandbytes "
                     "plugin with bnb_4bit_quant_storage set to the model dtype under FSDP (framework_plugin_bnb.py "
                     "model_loader)")
_QLORA_OUTPUT = ("train.py binds output = model(...) and drops it only after optimizer.step() (\"Delete the output so "
                 "more memory frees up before the next forward pass\", 4cd6923 and cd4a1b5)")
_QLORA_STATES = ("train.py load_and_quantize quantises on the GPU and moves only the packed data to cpu/meta "
                 "(param.__dict__ kept); the quant state is no parameter, so FSDP neither shards nor offloads it "
                 "(docs/traced_vs_theory.md finding 23.6)")
_QLORA_FSDP1 = "train.py wraps the model in torch FullyShardedDataParallel itself, as accelerate's FSDP1 (fsdp1.py)"
_ACC_RANKS = ("transformers Trainer prepares the model with accelerate's Accelerator.prepare_model: FSDP2 "
              "fsdp2_prepare_model (fully_shard per decoder layer) or DistributedDataParallel (traced/wrap.py)")
_KBIT = ("peft utils/other.py prepare_model_for_kbit_training casts every fp16/bf16 parameter that is not Params4bit "
         "to fp32; TRL SFTTrainer calls it for a 4-bit model unless the QLoRA is sharded (FSDP, Params4bit on CPU)")


def _hf_like(name: str, versions: str, **changes: object) -> Profile:
    base: dict[str, object] = dict(
        name=name, versions=versions, efficient_loading=False, full_copy_on_gpu=False, adapter_bytes=4,
        double_quant=False, quantize_lm_head=False, quant_saves_input=True, optimizer_in_backward=False,
        activation_offloading=False, expandable_segments=False,
        sources={"load": f"{_ACC_LOAD}; {_TRAINER_NO_MOVE}", "adapter": _PEFT_FP32, "lm_head": _BNB_HEAD,
                 "double_quant": _BNB_DQ, "quant_input": _BNB_SAVE, "tensor_parallel": _TP_GATHER,
                 "loss": "transformers ForCausalLMLoss upcasts logits to fp32 (traced: 12·V bytes per token, "
                 "theory_notes)", "versions": _HF},
    )
    sources: dict[str, str] = {**base["sources"], **changes.pop("sources", {})}  # type: ignore[dict-item]
    return Profile(**{**base, **changes, "sources": sources})  # type: ignore[arg-type]


PROFILES: dict[str, Profile] = {
    "hf-trainer": _hf_like("hf-trainer", "transformers 4.46–5.x, TRL SFTTrainer, accelerate ≥ 1.0", kbit_upcast=True,
                           fp32_outputs=True, accelerate_ranks=True,
                           sources={"kbit_upcast": _KBIT, "fp32_outputs": _FP32_OUT, "accelerate_ranks": _ACC_RANKS}),
    "peft": _hf_like("peft", "peft 0.12–0.21 under transformers Trainer", kbit_upcast=True, fp32_outputs=True,
                     fsdp1_qlora=True, accelerate_ranks=True,
                     sources={"kbit_upcast": f"{_KBIT} (the peft QLoRA recipe calls it itself)",
                              "fp32_outputs": _FP32_OUT, "fsdp1_qlora": _PEFT_FSDP1_QLORA,
                              "accelerate_ranks": f"{_ACC_RANKS}; peft's model under that Trainer"}),
    "fms-hf-tuning": _hf_like(
        "fms-hf-tuning", "fms-hf-tuning 2.x with fms-acceleration (the ado SFTTrainer stack)",
        efficient_loading=True, quant_saves_input=False, device_fit=FMS_FIT, fp32_outputs=True, fsdp1=True,
        sources={"load": "fms-hf-tuning's FSDP config sets fsdp_cpu_ram_efficient_loading: true", "fsdp1": _FMS_FSDP1,
                 "quant_input": "fms-acceleration QLoRA runs GPTQ/fused Triton kernels with their own autograd; "
                 "kept as fitted on its rows (not verified separately)",
                 "device": "device overhead fitted on 1,092 fms-acceleration A100-80GB rows (in-sample)"}),
    "axolotl": _hf_like(
        "axolotl", "axolotl 0.4–0.8 (HF Trainer underneath)", double_quant=True,
        sources={"double_quant": "axolotl's model loader builds BitsAndBytesConfig with "
                 "bnb_4bit_use_double_quant=True for load_in_4bit"}),
    "llama-factory": _hf_like(
        "llama-factory", "LLaMA-Factory 0.8–0.9 (HF Trainer underneath)", double_quant=True,
        sources={"double_quant": "LLaMA-Factory ModelArguments.double_quantization defaults to True"}),
    "ms-swift": _hf_like(
        "ms-swift", "ms-swift 2.x–3.x (HF Trainer underneath)", double_quant=True, loss_segment_bytes_per_vocab=24,
        sources={"double_quant": "ms-swift bnb_4bit_use_double_quant defaults to True",
                 "loss_segments": "24 = the V-wide bytes per token one step of the HF loss allocates under the "
                 "Trainer's bf16 autocast (activations.py, LOSS_SEGMENT_NOTE); checked on the swift benchmark's "
                 "torch_reserved rows (unpacked cls-fudan-news-zh samples, docs/frameworks.md [11])"}),
    "deepspeed": _hf_like(
        "deepspeed", "DeepSpeed 0.14+ through HF Trainer / accelerate", efficient_loading=True, hf_replica_fallback=True,
        sources={"load": "ZeRO-3 zero.Init partitions parameters as the model is built",
                 "hf_replica_fallback": "the HF Trainer builds the model and runs the step (transformers "
                 "integrations/deepspeed.py hands it to deepspeed.initialize): outside its engine the step is the "
                 "HF Trainer's, as for --framework hf-trainer with a ZeRO strategy"}),
    "unsloth": _hf_like(
        "unsloth", "Unsloth 2024.10–2025.x", own_model_code=True, double_quant=True, activation_offloading=True,
        expandable_segments=True,
        sources={"double_quant": "Unsloth's pre-quantised *-bnb-4bit checkpoints use double quantisation",
                 "activation_offloading": "use_gradient_checkpointing='unsloth' offloads checkpointed layer "
                 "inputs to CPU RAM", "expandable_segments": "unsloth sets PYTORCH_CUDA_ALLOC_CONF "
                 "expandable_segments:True on import",
                 "loss": "Unsloth's Triton cross-entropy works on bf16 logits chunk-wise"}),
    "litgpt": _hf_like(
        "litgpt", "LitGPT 0.4–0.5 (Lightning Fabric)", own_model_code=True, efficient_loading=True, adapter_bytes=2,
        sources={"load": "Fabric init_module(empty_init=True) builds on the meta device under FSDP",
                 "adapter": "LoRA weights follow the model precision (bf16-true)",
                 "loss": "chunked_cross_entropy over lm_head chunks of 128 tokens, bf16 logits"}),
    "torchtune": _hf_like(
        "torchtune", "torchtune 0.3–0.6", own_model_code=True, efficient_loading=True, adapter_bytes=2, double_quant=True,
        sources={"load": "recipes build the model on the meta device and load a sharded state dict",
                 "adapter": "LoRA parameters in the model dtype (bf16)",
                 "double_quant": "torchao NF4Tensor quantises its scalers again (8-bit, blocks of 256)",
                 "loss": "CEWithChunkedOutputLoss: 8 chunks, each upcast to fp32 separately"}),
    "torchtitan": _hf_like(
        "torchtitan", "torchtitan 0.3 (pre-training / full fine-tuning, FSDP2 + TP)", efficient_loading=True,
        vocab_parallel_loss=True,
        sources={"load": "trainer.py builds the model on the meta device, parallelize_llama shards it, to_empty + "
                 "init_weights materialise each rank's shards",
                 "adapter": "components/lora.py builds lora_a / lora_b as Linear under the trainer's default dtype "
                 "(training.dtype, float32 by default; FSDP2 mixed precision computes in bf16)",
                 "loss": "components/loss.py cross_entropy_loss upcasts the logits to fp32 (loss-parallel under TP)",
                 "tensor_parallel": "models/llama3/infra/parallelize.py apply_tp: the output projection ColwiseParallel "
                 "with Shard(-1) output when loss_parallel (parallelism.disable_loss_parallel defaults to False), the "
                 "loss under torch.distributed.tensor.parallel.loss_parallel: V / tp logits per rank",
                 "versions": "pytorch/torchtitan 0.3.0 (PyPI)"}),
    "trl": _hf_like(
        "trl", "TRL 1.16 SFTTrainer (transformers 5.24 Trainer, accelerate 1.15, peft 0.21)",
        sources={"kbit_upcast": "none: trl/trainer/sft_trainer.py 1.16 never calls peft's prepare_model_for_kbit_training "
                 "(only the experimental ORPO / CPO trainers do), so QLoRA keeps bf16 norms and embeddings",
                 "loss": "trl/trainer/utils.py add_fused_lm_head: the LM head is projected in "
                 "[4096, 32768] tiles over the valid tokens only (trl/kernels/chunked_logprob.py), no full logits",
                 "versions": "trl 1.16.0 (PyPI)"}),
    "fsdp-qlora": _hf_like(
        "fsdp-qlora", "Answer.AI fsdp_qlora train.py (2024)", efficient_loading=True, double_quant=True,
        adapter_bytes=2, peft_model_dtype_adapters=True, fsdp1_device_load=True,
        sources={"load": "low_memory=True (default): rank 0 loads, other ranks build on meta",
                 "adapter": "peft 0.7.1-0.11.1 tuners/lora/layer.py update_layer moves new adapters to the base "
                 "weight's dtype when it is floating: train.py's Params4bit in quant_storage=torch_dtype (bf16) for "
                 "qlora, the bf16 model for lora; its own custom_qlora layers use compute_dtype (bf16). train.py calls "
                 "FSDP itself (no accelerate upcast), and its last revision (05ed9f2, 2024-06-13) predates peft 0.12's "
                 "autocast_adapter_dtype (fp32 adapters)",
                 "fsdp1_device_load": "train.py FSDP(..., device_id=torch.cuda.current_device(), sync_module_states="
                 "args['low_memory'], param_init_fn=to_empty(device=cuda) on the meta ranks); low_memory defaults to "
                 "True (65d22a0, 3afe102, 4cd6923)",
                 "double_quant": "train.py replace_linear(model.model, Linear4bit, compute_dtype=..., "
                 "quant_type='nf4', quant_storage=...) leaves bitsandbytes Linear4bit(compress_statistics=True) "
                 "(299f51a, cd4a1b5, 4cd6923)",
                 "holds_output": _QLORA_OUTPUT, "quant_states": _QLORA_STATES, "fsdp1": _QLORA_FSDP1,
                 "fsdp1_qlora": "train.py replace_linear(..., Linear4bit, quant_storage=torch_dtype): bf16-stored "
                 "Params4bit that its FSDP(use_orig_params=False) flattens (3afe102, 4cd6923)",
                 "ddp_is_fsdp1_no_shard": "train.py sharding_strategy = ShardingStrategy.NO_SHARD for --use_ddp "
                 "(65d22a0) and --sharding_strategy ddp (3afe102, 4cd6923)"},
        holds_output=True, whole_quant_states=True, fsdp1=True, fsdp1_qlora=True, ddp_is_fsdp1_no_shard=True),
    "llm-foundry": _hf_like(
        "llm-foundry", "llm-foundry 0.4–0.10 (Composer + PyTorch FSDP1), MPT and HF models",
        own_model_code=True, efficient_loading=True,
        fused_ce_bytes_per_vocab=4,
        sources={"load": "MPT yamls set model.init_device: meta; Composer materialises each FSDP shard on its rank",
                 "loss": "ComposerMPTCausalLM loss_fn defaults to 'fused_crossentropy' = flash_attn "
                 "losses.cross_entropy.CrossEntropyLoss(ignore_index=-100) (inplace_backward left False): fused softmax + "
                 "loss over the logits as MPTForCausalLM returns them (the bf16 unembedding output, never upcast); it saves "
                 "them and an fp32 logsumexp per row, and backward writes a new gradient of the logits' dtype: 2·V + 2·V "
                 "bytes per token (Composer's state.outputs holds the same logits through backward)",
                 "optimizer": "decoupled_adamw = Composer DecoupledAdamW, whose adamw() updates one parameter "
                 "at a time (for-loop)",
                 "strategy": "fsdp_config.sharding_strategy FULL_SHARD (ZeRO-3-like) in the MPT yamls; "
                 "activation_checkpointing and mixed_precision (PURE / DEFAULT) set per yaml; precision amp_bf16",
                 "versions": "github.com/mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml, "
                 "llmfoundry/models/mpt/modeling_mpt.py (ComposerMPTCausalLM)"}),
}


@dataclass(frozen=True)
class Resolved:
    """The settings a Job runs with: its explicit values, else its framework's."""

    profile: Profile
    efficient_loading: bool
    double_quant: bool
    quantize_lm_head: bool
    optimizer_in_backward: bool
    activation_offloading: bool
    expandable_segments: bool
    adapter_bytes: int
    kbit_upcast: bool
    vocab_parallel_loss: bool


def _pick(value: bool | None, default: bool) -> bool:
    return default if value is None else bool(value)


def resolve(job: Job) -> Resolved:
    profile = PROFILES[job.framework]
    return Resolved(
        profile=profile,
        efficient_loading=_pick(job.fsdp_cpu_ram_efficient_loading, profile.efficient_loading),
        double_quant=_pick(job.double_quant, profile.double_quant),
        quantize_lm_head=_pick(job.quantize_lm_head, profile.quantize_lm_head),
        optimizer_in_backward=_pick(job.optimizer_in_backward, profile.optimizer_in_backward),
        activation_offloading=_pick(job.activation_offloading, profile.activation_offloading),
        expandable_segments=_pick(job.expandable_segments, profile.expandable_segments),
        adapter_bytes=profile.adapter_bytes,
        kbit_upcast=_pick(job.kbit_prepare, profile.kbit_upcast),
        vocab_parallel_loss=_pick(job.vocab_parallel_loss, profile.vocab_parallel_loss),
    )
