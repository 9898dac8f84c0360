"""Model states per GPU: weights, gradients and optimizer states, by dtype, method and sharding.

Byte counts (Ψ = parameters, Ψ_t = trainable parameters, N = sharding degree):

* pure bf16/fp16 (HF with torch_dtype=bf16, torch AdamW): weights 2Ψ, grads 2Ψ_t, AdamW m and v
  ``zeros_like(param)`` so also 2+2 B → 8 B/param (traced in shared/theory_notes.md; confirmed by the
  fms-acceleration rows: Mistral-7B full FT ends a step with 6 B/param allocated = weights + states).
* amp (fp32 master weights + autocast): 4 + 4 + 8 = 16 B/param, plus the bf16 weight copies autocast
  caches through forward/backward (+2 B/param, transient; theory_notes "Variants").
* DeepSpeed ZeRO (bf16 mixed precision): bf16 weights 2, bf16 grads 2, and per partition fp32 grads 4,
  fp32 master 4, m and v 8 (ZeRO paper, Rajbhandari et al. 2020, §3 with fp32 grad accumulation).
* LoRA/QLoRA: peft casts adapters to fp32 (``autocast_adapter_dtype=True``), so an adapter parameter
  costs 4 + 4 + 8 = 16 B; the frozen base has no gradient or state.
* QLoRA: bitsandbytes NF4 stores 0.5 B/param for layer linears plus one fp32 absmax per 64-weight block
  (4/64 = 0.0625 B/param, HF default without double quantisation); embeddings, head and norms stay bf16.
  Double quantisation stores the absmax as 8 bits per block plus one fp32 constant per 256 blocks
  (QLoRA paper, Dettmers et al. 2023 §2: 0.127 bits/param instead of 0.5). A quantised lm_head
  (``quantize_lm_head``) costs NF4 bytes instead of 2.
* The framework profile (frameworks.py) decides the adapter dtype (peft: fp32; torchtune, LitGPT: bf16)
  and optimizer-in-backward (each parameter steps inside backward and drops its gradient at once, so at
  most the largest parameter's gradient is live and there is no step() temporary).
* bitsandbytes 32-bit optimizers (``paged-adamw``) keep fp32 m and v whatever the parameter dtype; the
  paged ones live in CUDA unified memory, outside torch's allocator (see cuda.py). DoRA adds one
  magnitude parameter per output feature of every adapted module (peft's lora_magnitude_vector).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.catalog.architecture import Architecture
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.images import trainable_vision_params
from autoconf.schema import Job, Placement

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "amp-bf16": 4, "amp-fp16": 4}
ADAPTER_BYTES = 4  # peft autocasts LoRA weights to fp32
NF4_BYTES = 0.5 + 4 / 64  # 4-bit code + fp32 absmax per block of 64 (bitsandbytes blocksize 64)
NF4_DQ_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # 8-bit absmax per 64 + fp32 constant per 256 blocks
ZERO_BUCKET_ELEMENTS = 5e8  # DeepSpeed reduce_bucket_size / allgather_bucket_size default (elements)


@dataclass(frozen=True)
class States:
    """Per-GPU bytes of the model states and the transient parts that depend on the phase."""

    weights: float
    gradients: float
    optimizer: float
    gathered: float  # unsharded parameter units live during forward/backward (FSDP/ZeRO-3)
    grads_persist: bool  # gradients live during the next forward (DDP buckets, FSDP/ZeRO shards)
    optimizer_step_temp: float  # extra bytes while optimizer.step() runs
    buffers: float  # framework buckets (ZeRO reduce/allgather)
    trainable_params: int
    outside: float = 0.0  # bytes held outside torch's allocator (paged optimizer states)


def trainable_params(job: Job, arch: Architecture) -> int:
    """Trainable parameters of the language model (a VLM's vision parts are counted by vision_states)."""
    if job.method == "full":
        return arch.text_params
    adapters = arch.lora_params(job.lora_target_modules, job.lora_r)
    if job.dora:  # one magnitude per output feature of each adapted module
        targets = arch.lora_targets(job.lora_target_modules)
        adapters += arch.num_layers * sum(lin.per_layer * lin.out_features for lin in targets)
    return adapters


def nf4_bytes(job: Job) -> float:
    return NF4_DQ_BYTES if resolve(job).double_quant else NF4_BYTES


def stage_params(arch: Architecture, placement: Placement) -> float:
    """Parameters held by the busiest pipeline stage, before tensor-parallel splitting."""
    head = arch.lm_head_params + arch.final_norm_params
    embed = arch.embedding_params + arch.position_params
    layers = -(-arch.num_layers // placement.pp) * arch.layer_params
    if placement.pp == 1:
        return embed + layers + head
    return layers + max(embed, head)


def kbit_upcast(job: Job, fsdp: bool) -> bool:
    """QLoRA whose stack runs peft's prepare_model_for_kbit_training (frameworks.Profile.kbit_upcast): the
    embeddings, norms and head (every parameter that is not 4-bit) become fp32, and so does the residual stream
    they feed. TRL skips the call for sharded QLoRA, so ``fsdp`` (sharded over > 1 GPU) turns it off."""
    return job.method == "qlora" and resolve(job).profile.kbit_upcast and not fsdp


def _quantised_params(job: Job, arch: Architecture) -> int:
    """Parameters a QLoRA stores in 4 bits: the layer linears (and the head when quantize_lm_head)."""
    return arch.num_layers * arch.linear_params_per_layer + (arch.lm_head_params if resolve(job).quantize_lm_head else 0)


def _upcast(job: Job, placement: Placement) -> bool:
    return kbit_upcast(job, placement.dp > 1 and placement.effective_strategy.startswith("fsdp"))


def upcast_bytes(job: Job, arch: Architecture, placement: Placement) -> float:
    """Bytes per GPU that kbit_upcast adds to a replica's weights: +2 B for every parameter that is not 4-bit."""
    if not _upcast(job, placement):
        return 0.0
    share = stage_params(arch, placement) / arch.total_params / placement.tp
    return share * (arch.total_params - _quantised_params(job, arch)) * 2


def _weight_bytes(job: Job, arch: Architecture, placement: Placement) -> float:
    """Resident weights of one model replica on one GPU (before data-parallel sharding)."""
    share = stage_params(arch, placement) / arch.total_params / placement.tp
    wbytes = DTYPE_BYTES[job.dtype]
    settings = resolve(job)
    if job.method == "qlora":
        linear = _quantised_params(job, arch)
        base = linear * nf4_bytes(job) + (arch.total_params - linear) * (4 if _upcast(job, placement) else 2)
    else:
        base = arch.total_params * wbytes
    adapters = 0 if job.method == "full" else trainable_params(job, arch) * settings.adapter_bytes
    return share * (base + adapters)


def optimizer_bytes_per_param(job: Job, zero: bool) -> float:
    """State bytes per trainable parameter (excluding DeepSpeed's fp32 master, added separately)."""
    amp = job.dtype.startswith("amp") or job.dtype == "fp32"
    if job.method != "full" and not (amp or zero or job.optimizer_state_dtype == "fp32"):
        state = resolve(job).adapter_bytes  # torch AdamW: zeros_like(adapter)
    else:
        state = 4 if (amp or zero or job.optimizer_state_dtype == "fp32") else DTYPE_BYTES[job.dtype]
    if job.optimizer == "adamw":
        return 2 * state
    if job.optimizer == "paged-adamw":
        return 2 * 4  # bitsandbytes 32-bit optimizer: fp32 m and v
    if job.optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return 2 * 1 + 2 * 4 / 2048  # two uint8 states + fp32 absmax per 2048-block (bitsandbytes)
    return state  # SGD with momentum: one buffer


def _shard_degree(placement: Placement) -> int:
    if placement.effective_strategy == "fsdp-hybrid":
        return min(placement.dp, placement.gpus_per_worker or min(placement.number_gpus, 8))
    return placement.dp


def model_states(job: Job, arch: Architecture, placement: Placement) -> States:
    """Weights, gradients and optimizer bytes per GPU at steady state (step >= 2)."""
    strategy = placement.effective_strategy
    n = _shard_degree(placement)
    psi_t = trainable_params(job, arch) / placement.tp / placement.pp
    full = job.method == "full"
    settings = resolve(job)
    grad_b = (DTYPE_BYTES[job.dtype] if full else settings.adapter_bytes)
    weights = _weight_bytes(job, arch, placement)
    grads = psi_t * grad_b
    zero = strategy.startswith("zero") and strategy != "zero0"
    opt = psi_t * optimizer_bytes_per_param(job, zero)
    if zero and full and not job.dtype.startswith("amp") and job.dtype != "fp32":
        # ZeRO mixed precision adds an fp32 master copy (4 B) and an fp32 gradient partition (4 B) per
        # trainable parameter; both are partitioned like the optimizer states: 2Ψ + 18Ψ/N for ZeRO-2.
        opt += psi_t * (4 + 4)
    shard_w = strategy in ("fsdp", "fsdp-hybrid", "zero3")
    shard_g = shard_w or strategy in ("fsdp-shard-grad-op", "zero2")
    shard_o = shard_g or strategy == "zero1"
    unit = _unit_bytes(job, arch, arch.layer_params) / placement.tp  # gathered in the compute dtype
    gathered = 0.0
    if shard_w and n > 1:
        weights /= n
        # FSDP (auto-wrapped per decoder layer) keeps the current and the prefetched layer unsharded, and
        # the root unit (embeddings, final norm, head) unsharded through forward and backward; ZeRO-3 the
        # largest module (DeepSpeed's own estimator counts 4·Ψ_LL = params + grads of the largest layer).
        root_bytes = min(DTYPE_BYTES[job.dtype], 2 if job.dtype.startswith("amp") else 4)
        root = (arch.embedding_params + arch.lm_head_params) * root_bytes * (1 - 1 / n)
        gathered = 2 * unit + root if strategy.startswith("fsdp") else 2 * arch.largest_layer_params * 2
    grads = grads / n if shard_g else grads
    opt = opt / n if shard_o else opt
    if placement.offload != "none":
        opt = 0.0  # optimizer (and its fp32 master) lives in CPU RAM
    if placement.offload == "optimizer+params":
        weights = 0.0
        gathered = max(gathered, 2 * unit)
    temp = _optimizer_temp(job, arch, psi_t / (n if shard_o else 1), placement)
    buffers = ZERO_BUCKET_ELEMENTS * 2 if strategy in ("zero1", "zero2") and n > 1 else 0.0
    # DDP's gradients are views of its persistent buckets and DeepSpeed keeps its gradient partitions;
    # FSDP's sharded gradients are freed by zero_grad(set_to_none=True) like a single GPU's (the
    # fms-acceleration FSDP full-FT rows peak in the optimizer step, not at the loss).
    persist = n > 1 and (strategy == "ddp" or strategy.startswith("zero"))
    if settings.optimizer_in_backward:
        # each parameter is stepped in its grad hook and its gradient freed: one parameter's gradient at a time
        largest = arch.largest_layer_params if full else max(trainable_params(job, arch) / max(arch.num_layers, 1), 1.0)
        grads, temp, persist = min(grads, largest * grad_b / placement.tp), 0.0, False
    outside = opt if job.optimizer.startswith("paged") else 0.0
    return States(weights, grads, opt, gathered, persist, temp, buffers, int(psi_t), outside)


def _unit_bytes(job: Job, arch: Architecture, params: float) -> float:
    """Bytes of ``params`` unsharded: 4-bit for QLoRA layer linears, else the weight dtype."""
    if job.method == "qlora":
        return params * nf4_bytes(job)
    return params * (2 if job.dtype.startswith("amp") else DTYPE_BYTES[job.dtype])


def _optimizer_temp(job: Job, arch: Architecture, local_trainable: float, placement: Placement) -> float:
    """Temporaries of optimizer.step().

    foreach AdamW materialises one params-sized list of intermediates (theory_notes: +1× params,
    7B: +12.5 GiB; the fms-acceleration Mistral-7B full rows peak at exactly 10 B/param = 8 + 2);
    the for-loop version needs about two copies of the largest tensor; fused needs none.
    """
    if placement.offload != "none" or job.optimizer != "adamw":
        return 0.0
    state_b = resolve(job).adapter_bytes if job.method != "full" else DTYPE_BYTES[job.dtype]
    if job.optimizer_impl == "foreach":
        return local_trainable * state_b
    if job.optimizer_impl == "for-loop":
        largest = arch.largest_layer_params if job.method == "full" else 0
        return 2 * largest * state_b / placement.tp
    return 0.0


def vision_states(job: Job, arch: Architecture, placement: Placement) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU of a VLM's vision tower and projector; 0 for text models.

    The vision parts stay bf16 under QLoRA (4-bit quantisation covers the language model's layer linears)
    and sit on the first pipeline stage. Trainable vision parts (freeze_vision / freeze_projector False) are
    plain modules in the weight dtype even under LoRA (peft modules_to_save), so their gradients cost the
    weight dtype and their optimizer states follow optimizer_bytes_per_param, sharded as the text states.
    """
    if arch.vision is None:
        return 0.0, 0.0, 0.0
    strategy, n = placement.effective_strategy, _shard_degree(placement)
    wbytes = 2 if job.method == "qlora" else DTYPE_BYTES[job.dtype]
    weights = arch.vision_params * wbytes / placement.tp
    train = trainable_vision_params(job, arch) / placement.tp
    grads = train * DTYPE_BYTES[job.dtype]
    zero = strategy.startswith("zero") and strategy != "zero0"
    opt = train * optimizer_bytes_per_param(job.model_copy(update={"method": "full"}), zero)  # states in weight dtype
    if zero and not job.dtype.startswith("amp") and job.dtype != "fp32":
        opt += train * (4 + 4)  # fp32 master + fp32 gradient partition, as for the text states
    if n > 1 and strategy in ("fsdp", "fsdp-hybrid", "zero3"):
        weights /= n
    if n > 1 and strategy in ("fsdp", "fsdp-hybrid", "zero3", "fsdp-shard-grad-op", "zero2"):
        grads /= n
    if n > 1 and strategy in ("fsdp", "fsdp-hybrid", "zero3", "fsdp-shard-grad-op", "zero2", "zero1"):
        opt /= n
    if placement.offload != "none":
        opt = 0.0
    return weights, grads, opt
