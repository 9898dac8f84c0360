"""Throughput profiles of training stacks: which kernels a stack runs and which collectives it overlaps.

A stack is named by ``Job.framework`` (HF-based stacks) or, for the pre-training stacks the measurements come
from (NeMo / Megatron-Core, InternEvo, IBM fms-fsdp, the FlashAttention repository's trainer), by the data's
``framework`` column; ``stack_for`` maps any name to a profile (unknown names: the HF Trainer profile).
The profile says *what* a stack does, with a source per claim; *how much* each behaviour is worth is fitted
(throughput.EfficiencyFit: ``stack_factor`` for the fused kernel set, ``compile_factor`` for torch.compile).

- fused_kernels: fused norm / activation / rotary / bias-dropout-add kernels around the GEMMs (Transformer
  Engine in Megatron-Core, flash_attn's ops in InternEvo and the FlashAttention trainer). The fused loss is a
  separate feature (Job.loss_kernel).
- overlap_param_gather: the sharded-optimizer parameter all-gather runs during the next forward instead of
  after the step (Megatron-Core ``--overlap-param-gather``; InternEvo HybridZeroOptimizer overlap_sync_param).
- overlap_grad_reduce: the gradient reduce-scatter / all-reduce runs bucket by bucket during backward (DDP
  buckets, FSDP, Megatron ``--overlap-grad-reduce``). Every profile here does but nanotron's benchmark, which runs
  with CUDA_DEVICE_MAX_CONNECTIONS=1: its DDP buckets' all-reduces are issued during backward and still run
  exposed.
- tp_overlap: tensor-parallel collectives overlapped with the GEMMs (Transformer Engine userbuffers,
  ``tp_comm_overlap`` in NeMo's performance recipes); without it they are exposed.
- bucket_params / bucket_params_per_rank: gradient bucket size in parameters (each bucket is one collective call,
  so one latency α: theory/collectives.py); 0 = the HF defaults (PyTorch DDP ``bucket_cap_mb=25``; DeepSpeed
  ZeRO-1/2 ``reduce_bucket_size`` = ``allgather_bucket_size`` = 5e8 elements).
- attention_kernel: "cudnn" for Transformer Engine's cuDNN fused attention (NeMo / Megatron-Core recipes), whose
  Hopper kernels are of FlashAttention-3's kind; "triton" for FlashAttention written in Triton (llm-foundry's
  ``attn_impl: triton``); "fa2" for FlashAttention-2 and PyTorch SDPA (everything else).
- tp_exposed_share: the share of the TP collectives that tp_overlap does not hide (nanotron overlaps the column-
  parallel linears' all-gather with the local shard's GEMM, not the row-parallel linears' reduce-scatter: 0.5).
- grad_reduce_bytes: bytes per gradient element in the data-parallel reduction when it is not the training dtype
  (nanotron ``accumulate_grad_in_fp32``: fp32 gradient buckets, 4).
- overlap_p2p: the pipeline's point-to-point sends overlap compute when the schedule is interleaved (Megatron-Core
  ``overlap_p2p_comm``, which NeMo's comm-overlap callback sets at virtual pipeline size > 1); otherwise they sit
  on the 1F1B critical path (communication.pipeline_seconds).
- param_broadcast: the sharded optimizer's updated parameters reach the other ranks as one broadcast per rank
  (InternEvo ``HybridZeroOptimizer.broadcast_params``) instead of bucketed all-gathers.
- param_gather_calls: the sharded optimizer gathers the updated parameters in this many calls (nanotron: 1,
  ``ZeroDistributedOptimizer._all_gather_params`` flattens every shard into one ``all_gather_coalesced``); 0 = one
  call per gradient bucket (DeepSpeed ``allgather_bucket_size``, Megatron's per-bucket gathers).
- fused_qkv: the stack builds one fused QKV projection per layer (InternEvo's ``Wqkv``): it sets how many parameter
  tensors a ZeRO that partitions whole tensors spreads over its ranks (communication.parameter_tensors).
- zero1_reduce_after_backward: ZeRO-1 runs without a DDP wrapper, so nothing reduces gradients during backward: the
  whole gradient buffer is all-reduced in one call after the last backward, exposed (nanotron until 2025-06 with
  ``accumulate_grad_in_fp32``: trainer.py ``make_ddp``).
- nccl: the NCCL release whose latency constants price the stack's collective calls (collectives.NCCL_RELEASES;
  "2.8" unless the stack's runs say which; nanotron's benchmark: "2.18").
- cost_based_stages: the stack splits the pipeline as nanotron's build_model does (theory/pipeline_stages.py) and
  lays its ranks out (pp, dp, tp), tp innermost (nanotron parallel/context.py ``_init_parallel_groups``): a pipeline
  send between nodes runs at the sending GPUs' share of the node's network, and the LM head's logits cross a stage
  boundary where the split puts the head, its fp32 cast and the loss on different stages
  (communication.pipeline_seconds).
- slowest_stage: with cost_based_stages, 1F1B runs at the slowest stage of that split (throughput.compute_seconds).
  Off in the ``nanotron`` profile: measured in bench/layout_vs_nanotron.py, not priced (docs/layouts.md).
- peft_profile: the profile a LoRA / QLoRA job of this stack runs with, when the stack's PEFT recipes differ ("" =
  the same). NeMo's LoRA performance recipes keep the tensor-parallel collectives on the critical path: ``llama3_70b``
  ``finetune_performance_optimizations`` adds ``MegatronCommOverlapCallback(tp_comm_overlap=False)`` for a PEFT scheme
  (TP 2, PP 4; full SFT: ``tp_comm_overlap=True``), which DGX Cloud's ft_llama3 recipe runs (dgxc-benchmarking
  ``ft_llama3/llama3_finetune.py``: ``finetune_recipe(peft_scheme=..., performance_mode=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stack:
    name: str
    fused_kernels: bool
    overlap_param_gather: bool
    tp_overlap: bool
    overlap_grad_reduce: bool = True
    source: str = ""
    bucket_params: float = 0.0
    bucket_params_per_rank: float = 0.0
    param_broadcast: bool = False
    attention_kernel: str = "fa2"  # throughput.ATTENTION_EFFICIENCY: "fa2" (FlashAttention-2 / SDPA), "cudnn", "triton"
    tp_exposed_share: float = 0.0  # with tp_overlap: the share of the TP collectives that still runs exposed
    grad_reduce_bytes: int = 0  # bytes per gradient element reduced across data-parallel ranks (0: the dtype's)
    overlap_p2p: bool = False  # pipeline sends overlap compute under the interleaved schedule (virtual_pp > 1)
    param_gather_calls: int = 0  # ZeRO parameter all-gather calls after the step (0: one per gradient bucket)
    fused_qkv: bool = False  # one fused QKV projection per layer (InternEvo's Wqkv): fewer parameter tensors
    nccl: str = "2.8"  # collectives.latency_seconds: the NCCL release of the stack's runs
    zero1_reduce_after_backward: bool = False  # ZeRO-1's gradients all-reduced once after backward, exposed
    peft_profile: str = ""  # the profile of this stack's LoRA / QLoRA recipes ("" = this one)
    cost_based_stages: bool = False  # nanotron's pipeline split and rank order set its sends (pipeline_stages.py)
    slowest_stage: bool = False  # the 1F1B step runs at the slowest of those stages (needs cost_based_stages)


DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
DEEPSPEED_BUCKET_PARAMS = 5e8  # DeepSpeed ZeRO config reduce_bucket_size / allgather_bucket_size defaults


def bucket_params(stack: Stack, strategy: str, dp: int, width: int) -> float:
    """Parameters per gradient bucket (one collective call each) of a stack under a data-parallel strategy."""
    if stack.bucket_params or stack.bucket_params_per_rank:
        return max(stack.bucket_params, stack.bucket_params_per_rank * dp)
    return DEEPSPEED_BUCKET_PARAMS if strategy.startswith("zero") and strategy != "zero0" else DDP_BUCKET_BYTES / width


_HF = Stack("hf", fused_kernels=False, overlap_param_gather=False, tp_overlap=False,
            source="transformers Trainer / accelerate: eager PyTorch modules (RMSNorm, SiLU, RoPE unfused); DDP "
                   "buckets and FSDP prefetch overlap gradient reduction with backward")
_MEGATRON = Stack("megatron", fused_kernels=True, overlap_param_gather=True, tp_overlap=True,
                  source="NVIDIA/NeMo performance recipes and dgxc-benchmarking configs: Transformer Engine layers, "
                         "distributed optimizer with overlap_grad_reduce / overlap_param_gather, tp_comm_overlap; "
                         "Megatron-Core DistributedDataParallel bucket_size default max(4e7, 1e6 · dp) parameters",
                  bucket_params=4e7, bucket_params_per_rank=1e6, attention_kernel="cudnn", overlap_p2p=True)
STACKS: dict[str, Stack] = {
    "hf": _HF,
    "megatron": _MEGATRON,
    "nemo": Stack("nemo", True, True, True, source=_MEGATRON.source, bucket_params=4e7, bucket_params_per_rank=1e6,
                  attention_kernel="cudnn", overlap_p2p=True, peft_profile="nemo-peft"),
    # NeMo 24.07's performance tables ran from the NeMo 1.0 launcher (NeMo-Framework-Launcher), whose PEFT configs we
    # have not read: its LoRA rows keep NeMo's overlapped TP (no PEFT profile)
    "nemo-launcher": Stack("nemo-launcher", True, True, True,
                           source=_MEGATRON.source + "; NeMo 24.07 performance tables (NeMo-Framework-Launcher)",
                           bucket_params=4e7, bucket_params_per_rank=1e6, attention_kernel="cudnn", overlap_p2p=True),
    "nemo-peft": Stack("nemo-peft", True, True, tp_overlap=False,
                       source="NVIDIA/NeMo nemo/collections/llm/recipes/llama3_70b.py finetune_performance_optimizations: "
                              "a PEFT scheme gets MegatronCommOverlapCallback(tp_comm_overlap=False) (the TP "
                              "all-gathers / reduce-scatters run exposed); otherwise as nemo",
                       bucket_params=4e7, bucket_params_per_rank=1e6, attention_kernel="cudnn", overlap_p2p=True),
    "internevo": Stack("internevo", fused_kernels=True, overlap_param_gather=False, tp_overlap=False,
                       source="InternLM/InternEvo configs/7B_sft.py and doc/en/train_performance.md: flash_attn "
                              "fused RMSNorm / rotary / MLP kernels (use_flash_attn=True); hybrid_zero_optimizer "
                              "overlap_sync_grad=True, overlap_sync_param=False (the parameter all-gather after the "
                              "step is exposed), reduce_bucket_size=512·1024·1024; broadcast_params: one broadcast "
                              "per ZeRO rank that owns parameters (internlm/solver/optimizer/hybrid_zero_optim.py); "
                              "internlm/model/multi_head_attention.py: one fused Wqkv projection",
                       bucket_params=512 * 1024 * 1024, param_broadcast=True, fused_qkv=True),
    "flash-attention": Stack("flash-attention", fused_kernels=True, overlap_param_gather=False, tp_overlap=False,
                             source="Dao-AILab/flash-attention training/README.md: FlashAttention plus fused MLP, "
                                    "dropout-add-LayerNorm, cross-entropy and rotary kernels; DDP"),
    "nanotron": Stack("nanotron", fused_kernels=True, overlap_param_gather=False, tp_overlap=True,
                      source="huggingface/nanotron src/nanotron/models/llama.py: flash_attn attention and rotary "
                             "kernels, TritonRMSNorm, sharded_cross_entropy; slurm_launcher.py: 1f1b pipeline engine, "
                             "tp_mode REDUCE_SCATTER with tp_linear_async_communication=True (the TP all-gathers "
                             "overlap the linears); src/nanotron/optim/zero.py: ZeRO-1 all-gathers the updated "
                             "parameters after the step (exposed); src/nanotron/helpers.py registers get_fp32_accum_hook "
                             "(optim/gradient_accumulator.py) on torch DDP: fp32 gradient buckets reduced during "
                             "backward; parallel/tensor_parallel/functional.py _ColumnLinearAsyncCommunication: "
                             "the all-gather overlaps the local shard's matmul, row_linear's reduce-scatter does not; "
                             "config.py ddp_bucket_cap_mb=25: the fp32 hook reduces each torch DDP bucket (25 MiB of "
                             "the bf16 gradients) in one all_reduce_coalesced call (ZeRO-0); ZeRO-1 with "
                             "accumulate_grad_in_fp32 builds no DDP wrapper (trainer.py make_ddp at v0.5 and at the "
                             "benchmark commit c2528430, until 7bc99232 of 2025-06-23), so training_step calls "
                             "sync_gradients_across_dp after the pipeline engine: FP32GradientAccumulator's one "
                             "all_reduce of the whole fp32 gradient buffer (reduce_scatter=False, 'too memory hungry'); "
                             "optim/zero.py _all_gather_params: one all_gather_coalesced of all shards; "
                             "the benchmark's launcher (run_multinode.sh at 67c5ebb6, scripts/scaling_benchmarks.py's "
                             "base script) activates the conda env 2-1-cu121 (PyTorch 2.1, CUDA 12.1; the README of "
                             "the benchmark commit c2528430 names torch 2.1.2 as the fallback install): PyTorch 2.1 "
                             "ships NCCL 2.18.1 (torch.cuda.nccl.version() of 2.1.2+cu121, NVIDIA/nccl#1142; the 2.1 "
                             "binary build matrix, pytorch/pytorch#111677); the launcher exports "
                             "CUDA_DEVICE_MAX_CONNECTIONS=1 (run_multinode.sh line 41 at 67c5ebb6, as nanotron's README "
                             "asks for its async TP): with one hardware queue the kernels of other streams wait for a "
                             "data-parallel collective to finish, so the DDP hook's bucket all-reduces do not overlap "
                             "backward (alibaba/Megatron-LLaMA#26 and #43, from traces; raised for nanotron in #236); "
                             "models/base.py build_model at c2528430 splits the pipeline by get_block_compute_costs "
                             "(models/llama.py) and parallel/context.py lays ranks out (pp, dp, tp): "
                             "theory/pipeline_stages.py",
                      # DDP sizes its buckets on the model's bf16 gradients (2 bytes each), whatever the hook reduces
                      tp_exposed_share=0.5, grad_reduce_bytes=4, bucket_params=DDP_BUCKET_BYTES / 2,
                      param_gather_calls=1, nccl="2.18", zero1_reduce_after_backward=True,
                      overlap_grad_reduce=False, cost_based_stages=True),
    "llm-foundry-triton": Stack("llm-foundry-triton", fused_kernels=False, overlap_param_gather=False, tp_overlap=False,
                                source="mosaicml/llm-foundry at 5e85bd62d (the commit of its benchmark tables): MPT "
                                       "with attn_impl 'triton' (scripts/train/benchmarking/submit_benchmarks.py "
                                       "--attn_impl default, which sweep.sh keeps), i.e. "
                                       "llmfoundry/models/layers/flash_attn_triton.py, FlashAttention written in "
                                       "Triton (copied from HazyResearch/flash-attention flash_attn_triton.py); "
                                       "Composer FSDP; eager norms and GELU",
                                attention_kernel="triton"),
    "fms-fsdp": Stack("fms-fsdp", fused_kernels=False, overlap_param_gather=False, tp_overlap=False,
                      source="foundation-model-stack/fms-fsdp README: PyTorch FSDP / HSDP with SDPA flash attention; "
                             "torch.compile in the newest table (Job.torch_compile)"),
}


def stack_for(name: str | None, method: str = "full") -> Stack:
    """The profile of a stack name (for a LoRA / QLoRA ``method``, the stack's PEFT profile if it has one); HF-based
    frameworks (and anything unknown) use the HF Trainer profile."""
    profile = STACKS.get(str(name or "hf"), _HF)
    return STACKS[profile.peft_profile] if method != "full" and profile.peft_profile else profile
