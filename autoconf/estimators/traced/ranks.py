"""One GPU of a multi-GPU job from a trace of its rank (autoconf/estimators/traced/dist.py).

Which jobs' ranks are traced and with which spec (``rank_unsupported``, ``rank_plan``), and their memory from the
traces (rank_cache.py runs and caches them; no torch here). From the summary: allocated = the traced per-rank peak
(every phase: load, first and steady step, clipping, checkpoint save); reserved = the peak of the trace's
allocations replayed through the caching allocator (autoconf/estimators/traced/allocator.py) on this GPU, whose
room is its memory less the CUDA context, NCCL and the cuBLAS workspaces (so a cache release and retry happen where
they would), plus the workspaces; device = reserved + CUDA context + NCCL communicators (theory/cuda.py's constants).
"""

from __future__ import annotations

from typing import Any

from autoconf.catalog import Architecture, get_gpu
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory.frameworks import PROFILES, resolve
from autoconf.estimators.traced.rank_cache import reserved_peak, trace_ranks
from autoconf.schema import Job, MemoryEstimate, Phase, Placement

STRATEGIES = ("ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")  # data-parallel dist.STRATEGIES (+ "tp")
# Data parallelism around tensor parallelism (hf_parallel.DP_STRATEGIES: transformers' DistributedConfig sizes)
TP_DP_STRATEGIES = ("fsdp", "ddp", "fsdp-hybrid")
FSDP1_VERSION = 5  # bump when the FSDP1 rank trace changes meaning (its cache keys only); 5: streams tagged
# Job.dtype -> bnb_4bit_quant_storage under FSDP: the model's torch_dtype (the weights' dtype; fp32 under amp-*)
QUANT_STORAGE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "amp-bf16": "float32",
                 "amp-fp16": "float32"}
# rank_step.PHASES -> schema Phase: clipping is part of the optimizer phase; a checkpoint save happens between
# steps with the states live, theory's "static" phase.
PHASE: dict[str, Phase] = {"forward": "forward", "loss": "loss", "backward": "backward", "optimizer": "optimizer",
         "clip": "optimizer", "load": "load", "save": "static"}
PHASE_TEXT = {"clip": "gradient clipping", "save": "checkpoint save (full state dict)", "load": "model load"}


def rank_unsupported(job: Job, placement: Placement) -> str | None:
    """Why this job's ranks cannot be traced one by one (None: they can)."""
    strategy = placement.effective_strategy
    if placement.pp > 1:
        return "pipeline parallel splits"
    if placement.tp > 1:
        if placement.dp > 1 and strategy not in TP_DP_STRATEGIES:
            return (f"tensor parallel with data-parallel strategy {strategy} "
                    f"(traced with tensor parallel: {', '.join(TP_DP_STRATEGIES)})")
        if strategy == "fsdp-hybrid" and placement.dp > 1 and placement.dp % placement.workers:
            return f"fsdp-hybrid over {placement.workers} node(s) of {placement.dp}-way data parallel (needs equal nodes)"
    elif strategy not in STRATEGIES:
        return f"strategy {strategy} (rank traces cover {', '.join(STRATEGIES)})"
    if strategy == "fsdp-hybrid" and (placement.workers < 2 or placement.number_gpus % placement.workers):
        return f"fsdp-hybrid over {placement.workers} node(s) of {placement.number_gpus} GPUs (needs >= 2 equal nodes)"
    qlora_fsdp1 = job.method == "qlora" and resolve(job).profile.fsdp1_qlora and fsdp1_job(job, placement)
    if (job.method == "qlora" and not qlora_fsdp1) or job.effective_loss_kernel != "hf" or job.optimizer == "adamw-8bit":
        return "QLoRA, loss kernels and 8-bit AdamW (traced on one replica only)"
    if placement.offload != "none" and not (fsdp1_job(job, placement) and placement.offload == "optimizer+params"):
        return f"offload {placement.offload} (rank traces offload FSDP1's parameters: optimizer+params)"
    if fsdp1_job(job, placement):
        no_shard = strategy == "ddp" and resolve(job).profile.ddp_is_fsdp1_no_shard  # its DDP: FSDP1's NO_SHARD
        return None if strategy == "fsdp" or no_shard else (
            f"{job.framework} with {strategy} (its FSDP1 ranks are traced for fsdp)")
    if not resolve(job).profile.accelerate_ranks:  # the HF Trainer's step through accelerate (frameworks.Profile)
        followed = ", ".join(name for name, profile in PROFILES.items() if profile.accelerate_ranks)
        return f"{job.framework} wraps its model its own way (rank traces follow {followed})"
    return None


def fsdp1_job(job: Job, placement: Placement) -> bool:
    """The job's ranks run FSDP1 (frameworks.Profile ``fsdp1``; QLoRA of ``fsdp1_qlora``), without tensor
    parallelism."""
    profile = resolve(job).profile
    stack = profile.fsdp1 or (job.method == "qlora" and profile.fsdp1_qlora)
    return stack and placement.tp == 1


def fsdp1_settings(job: Job) -> dict[str, Any]:
    """The rank-spec keys of an FSDP1 stack's job (``fsdp1_job``): the strategy, the version (part of the
    cache key) and, for fms-hf-tuning LoRA with checkpointing, transformers 4.x's reentrant checkpoint around each
    FSDP unit under bf16 autocast (fsdp1.py; every fms-acceleration campaign pins a 4.x release)."""
    settings: dict[str, Any] = {"strategy": "fsdp1", "fsdp1_version": FSDP1_VERSION}
    if job.framework == "fms-hf-tuning":  # `accelerate launch` exports FSDP_USE_ORIG_PARAMS=true unless told (fsdp1.py)
        settings["use_orig_params"] = True
    if job.framework == "fms-hf-tuning" and job.method == "lora" and job.gradient_checkpointing:
        settings["hf4_checkpointing"] = True
    if resolve(job).profile.fsdp1_device_load:  # the constructor's copies to the device and broadcast buckets
        settings["device_load"] = True
    if job.method == "qlora" and resolve(job).profile.fsdp1_qlora:
        # 4-bit weights stored in the model dtype and no kbit preparation: fms-acceleration's bnb plugin sets the
        # storage dtype and TRL's SFTTrainer skips peft's prepare_model_for_kbit_training for sharded QLoRA
        # (``is_sharded_qlora``); Answer.AI's train.py builds ``Linear4bit(quant_storage=torch_dtype)`` itself
        settings.update(kbit_upcast=False, quant_storage=QUANT_STORAGE[job.dtype])
        if resolve(job).profile.accelerate_ranks:
            # fms-hf-tuning / TRL under `accelerate launch` (its 4.x campaigns, as for LoRA above): original
            # parameters, and 4.x's reentrant checkpoint around each unit (with checkpointing TRL calls
            # ``enable_input_require_grads``). Its adapters are built in the storage dtype (``autocast_adapter_dtype
            # =False`` for sharded QLoRA, trl 0.9.6-0.13 sft_trainer.py), but accelerate (from 0.30, #2674) upcasts
            # every trainable FSDP1 flat parameter to fp32 under mixed precision (accelerator.py ``prepare_model``):
            # fp32 adapters, as peft's default gives them. train.py wraps FSDP1 itself (``use_orig_params=False``,
            # FSDP's checkpoint wrapper inside each unit), so it takes neither
            settings["use_orig_params"] = True
            if job.gradient_checkpointing:
                settings["hf4_checkpointing"] = True
    return settings


def uneven(spec: dict[str, Any], world: int) -> bool:
    """Some sharded dimension-0 does not divide by ``world``: the last rank's shards are shorter (FSDP2 pads
    them, but the optimizer states follow the unpadded shard and the padding is copied at load)."""
    arch = spec["arch"]
    rows = [arch["hidden_size"], arch["intermediate_size"], arch["vocab_size"], arch["num_heads"] * arch["head_dim"],
            arch["num_kv_heads"] * arch["head_dim"]]
    if spec["method"] == "lora":
        rows.append(spec["lora_r"])
    return any(r % world for r in rows if r)


def rank_memory(job: Job, placement: Placement, arch: Architecture, spec: dict[str, Any],
                batch: int) -> tuple[MemoryEstimate, dict[str, Any]]:
    """Per-GPU memory of ``job`` from its rank traces (``spec``: the replica's trace spec): rank 0 and, when
    the shards are uneven, the last rank; the largest of them."""
    rank_spec, ranks = rank_plan(job, placement, spec, batch)
    summaries = [trace_ranks({**rank_spec, "rank": r} if r else rank_spec) for r in ranks]
    return largest_rank(job, placement, ranks, summaries, resolve(job).expandable_segments)


def rank_plan(job: Job, placement: Placement, spec: dict[str, Any], batch: int) -> tuple[dict[str, Any], list[int]]:
    """The rank trace's spec for ``job`` (``spec``: the replica's) and the ranks to trace."""
    world, strategy = placement.dp, str(placement.effective_strategy)
    rank_spec = {**spec, "world": world, "strategy": strategy, "shape": [batch, job.tokens_per_sample],
                 "expandable_segments": resolve(job).expandable_segments}
    shards = world
    if strategy == "fsdp-hybrid":
        rank_spec["replicas"] = placement.workers
        shards = world // placement.workers
    ranks = [0, shards - 1] if strategy != "ddp" and uneven(spec, shards) else [0]
    if fsdp1_job(job, placement):  # FSDP1: every rank's flat shard is padded alike
        rank_spec.update(fsdp1_settings(job))
        if strategy == "ddp":  # the stack's DDP is FSDP1's NO_SHARD (refusal above)
            rank_spec["fsdp1_sharding"] = "no_shard"
        if placement.offload == "optimizer+params":  # CPUOffload(offload_params=True): fsdp1_offload.py
            rank_spec["cpu_offload"] = True
        if rank_spec.get("hf4_checkpointing"):  # 4.x's checkpoint around each unit replaces the step's own
            rank_spec.pop("reentrant", None)
        ranks = [0]
    if placement.tp > 1:  # a (dp_replicate, fsdp, tp) mesh, tp innermost: world is the tp degree (hf_parallel.py)
        rank_spec.update(world=placement.tp, strategy="tp")
        ranks = [0]
        if placement.dp > 1:
            rank_spec.update(dp=placement.dp, dp_strategy=strategy)
            sharded = shards if strategy != "ddp" else 1
            # FSDP2 pads uneven shards: the last rank's states are shorter, its load copies the padding
            ranks = [0, placement.tp * placement.dp - 1] if sharded > 1 and uneven(spec, sharded * placement.tp) else [0]
    return rank_spec, ranks


def largest_rank(job: Job, placement: Placement, ranks: list[int], summaries: list[dict[str, Any]],
                 expandable: bool) -> tuple[MemoryEstimate, dict[str, Any]]:
    """The memory of the traced rank whose allocator replay reserves most (``summaries``: one per rank of
    ``ranks``, each with its events file), on ``placement``'s GPU; its summary with the peak phase and replay."""
    gpu = get_gpu(placement.gpu_model)
    context = cuda.CONTEXT_BYTES.get(gpu.architecture, cuda.DEFAULT_CONTEXT_BYTES)
    outside = context + cuda.communicators(placement, job) * cuda.NCCL_COMMUNICATOR_BYTES
    workspace = cuda.workspace_bytes(gpu)
    # what the caching allocator may reserve for tensors: the GPU less what lives outside it and the workspaces
    room = int(max(0.0, gpu.memory_bytes - outside - workspace))
    sims = [reserved_peak(s["events_path"], room, expandable) for s in summaries]
    worst = max(range(len(ranks)), key=lambda i: (sims[i].max_reserved, summaries[i]["allocated_peak"]))
    summary, sim = summaries[worst], sims[worst]
    top = max(summary["phases"], key=lambda p: p["peak"])
    allocated = float(max(s["allocated_peak"] for s in summaries))
    # Out of memory: the replay stops at the allocation that fails; what the job would need is the replay
    # without a capacity (the worker's), which is what the answer reports (fits is then false).
    needed = max(sim.max_reserved, summary["reserved_peak"]) if sim.out_of_memory else sim.max_reserved
    reserved = float(needed) + workspace
    device = reserved + outside
    fit = resolve(job).profile.device_fit
    if fit is not None:  # a stack with a measured device line: device from it, as theory/cuda.py peaks and the step do
        nccl = fit.nccl_bytes if placement.number_gpus > 1 else 0.0
        device = allocated * (1 + fit.fragmentation) + fit.context_bytes + nccl
        reserved = min(reserved, device)
    w, g, o, a, lg = (float(v) for v in top["parts"])
    memory = MemoryEstimate(
        weights_bytes=w, gradients_bytes=g, optimizer_bytes=o, activations_bytes=a, logits_bytes=lg,
        overhead_bytes=device - allocated, peak_bytes=device, peak_allocated_bytes=allocated,
        peak_reserved_bytes=reserved, peak_phase=PHASE[top["phase"]],
        capacity_bytes=gpu.memory_bytes, fits=device <= gpu.memory_bytes, oom_risk=0.0, estimator="traced")
    return memory, {**summary, "peak": top, "replay": sim, "ranks": ranks, "rank": ranks[worst]}
