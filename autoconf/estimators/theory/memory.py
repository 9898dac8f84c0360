"""Per-GPU peak memory of one training step, by component, at the phase where the peak occurs.

The step is a sequence of phases; each is an affine function of the micro-batch tokens T = b·s
(traced: activation and loss memory are exactly linear in b·s), and the peak is their maximum, not
a sum of everything (the additive textbook formula over-predicts full FT by up to 1.7×):

* loss:      weights + (persistent grads) + optimizer + all saved activations + logits/loss peak
* backward:  weights + (persistent grads) + optimizer + saved activations + one recomputed layer
* end of backward: weights + gradients + optimizer (+ the recomputed layer under checkpointing)
* optimizer: weights + gradients + optimizer + step temporaries (foreach: one params-sized list)

* load (only for stacks that move a full per-rank copy to the GPU before sharding): the unsharded replica

The CUDA side (cuda.py) turns the allocator peak into the reserved and the device (nvidia-smi) peaks:
fragmentation, cuBLAS workspaces, the CUDA context and NCCL communicators, and free blocks kept cached (FSDP's
side streams; loss segments of shorter batches when samples vary in length); ``peak_bytes`` is the device peak.
"""

from __future__ import annotations

import math

from autoconf.catalog import Architecture, GPUSpec, get_architecture, get_gpu
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory import cuda, images
from autoconf.estimators.theory.frameworks import FMS_FIT, resolve
from autoconf.estimators.theory.risk_table import SIGMA
from autoconf.estimators.theory.states import States, _weight_bytes, model_states, vision_states
from autoconf.schema import GIB, Calibration, Job, MemoryEstimate, Phase, Placement

# The fms-hf-tuning device line (frameworks.FMS_FIT), kept under its old names for callers that read them.
CUDA_CONTEXT_BYTES = FMS_FIT.context_bytes
NCCL_BYTES = FMS_FIT.nccl_bytes
FRAGMENTATION = FMS_FIT.fragmentation


def micro_batch(job: Job, placement: Placement) -> int:
    """Samples per forward pass of one data-parallel group: global batch / (DP groups × accumulation).

    With sequence parallelism of degree c, c GPUs share each sample (each holds s/c of its tokens)."""
    if placement.dp % job.sequence_parallel:
        raise InvalidInputError(
            "sequence_parallel", f"must divide the data-parallel degree {placement.dp}; got {job.sequence_parallel}")
    per = placement.dp // job.sequence_parallel * job.gradient_accumulation_steps
    if job.batch_size % per:
        raise InvalidInputError(
            "batch_size",
            f"must be a multiple of data-parallel GPUs × gradient_accumulation_steps = {per}; got {job.batch_size}",
        )
    return job.batch_size // per


def check_parallelism(arch: Architecture, placement: Placement) -> None:
    if arch.num_heads % placement.tp or arch.num_kv_heads % placement.tp and placement.tp % arch.num_kv_heads:
        raise InvalidInputError(
            "tp", f"must divide the attention heads ({arch.num_heads}) and KV heads ({arch.num_kv_heads}); "
            f"got {placement.tp}"
        )
    if placement.pp > arch.num_layers:
        raise InvalidInputError("pp", f"must be at most the number of layers ({arch.num_layers}); got {placement.pp}")


def _phases(job: Job, arch: Architecture, placement: Placement, st: States,
            calib: Calibration | None) -> dict[Phase, dict[str, float]]:
    images.check_images(job, arch)
    samples = micro_batch(job, placement)
    tokens: float = samples * images.text_tokens_per_sample(job, arch)  # image tokens join the text sequence
    if job.sequence_parallel > 1:
        tokens = tokens / job.sequence_parallel
    settings = resolve(job)
    layers = math.ceil(arch.num_layers / placement.pp)
    # 1F1B pipeline: the first stage holds min(micro-batches, stages) micro-batches in flight
    in_flight = min(job.gradient_accumulation_steps, placement.pp) if placement.pp > 1 else 1
    fsdp = placement.effective_strategy.startswith("fsdp") and placement.dp > 1
    if settings.activation_offloading and job.gradient_checkpointing:
        layers = min(layers, 2)  # checkpoints go to CPU RAM; one in transfer and one prefetched stay on the GPU
    stacked, largest = act.stack_bytes_per_token(job, arch, calib, fsdp, layers)
    layer = largest * tokens / placement.tp
    saved = (stacked + act.outside_layers_bytes_per_token(job, arch, fsdp)) * tokens * in_flight / placement.tp
    # the vision tower runs on the first stage, once per image of the micro-batch (sequence parallel ranks
    # share a sample's text, not its images)
    vision_act = images.activation_bytes_per_image(job, arch) * job.images_per_sample * samples * in_flight
    recompute = layer if job.gradient_checkpointing else 0.0
    loss = act.loss_bytes_per_token(job, arch, calib) * tokens / placement.tp
    head = act.loss_fixed_bytes(job, arch) / placement.tp
    if head:
        loss = loss + head
    # amp keeps bf16 copies of the weights that autocast made, alive through forward and backward
    # (FSDP mixed precision instead gathers bf16 units, already counted in st.gathered)
    autocast = st.weights / 2 if job.dtype.startswith("amp") and job.method == "full" and not fsdp else 0.0
    w = st.weights + st.gathered + st.buffers
    g_live = st.gradients if st.grads_persist else 0.0
    phases: dict[Phase, dict[str, float]] = {}
    if fsdp_like(placement) and not settings.efficient_loading and settings.profile.full_copy_on_gpu:
        # every rank moves its full checkpoint copy to the GPU before the wrapper shards it
        phases["load"] = {"weights": _weight_bytes(job, arch, placement), "gradients": 0.0, "optimizer": 0.0,
                          "activations": 0.0, "logits": 0.0}
    phases |= {
        "loss": {"weights": w + autocast, "gradients": g_live, "optimizer": st.optimizer, "activations": saved,
                 "logits": loss},
        "backward": {"weights": w + autocast, "gradients": g_live, "optimizer": st.optimizer,
                     "activations": saved + recompute, "logits": 0.0},
        "static": {"weights": w, "gradients": st.gradients, "optimizer": st.optimizer, "activations": recompute,
                   "logits": 0.0},
        "optimizer": {"weights": st.weights, "gradients": st.gradients,
                      "optimizer": st.optimizer + st.optimizer_step_temp, "activations": 0.0, "logits": 0.0},
    }
    return _with_vision(phases, vision_states(job, arch, placement), st.grads_persist, vision_act)


VISION_PARTS = ("vision_weights", "vision_gradients", "vision_optimizer", "vision_activations")


def _with_vision(phases: dict[Phase, dict[str, float]], states: tuple[float, float, float], persist: bool,
                 activations: float) -> dict[Phase, dict[str, float]]:
    """Append a VLM's vision parts to every phase (all 0.0 for a text model): the tower and projector weights
    always; their gradients where the text gradients are live; their saved activations through forward and
    backward (the loss and backward phases)."""
    w, g, o = states
    for name, parts in phases.items():
        live = name in ("static", "optimizer") or (name != "load" and persist)
        parts["vision_weights"] = w
        parts["vision_gradients"] = g if live else 0.0
        parts["vision_optimizer"] = o if name != "load" else 0.0
        parts["vision_activations"] = activations if name in ("loss", "backward") else 0.0
    return phases


# torch FSDP (FSDP1 FlatParameter and FSDP2 fully_shard) reduce-scatters every gradient into a tensor it
# allocates on its own post-backward / reduce-scatter stream, and all-gathers parameters into buffers it allocates
# on its unshard / all-gather stream (torch/distributed/fsdp/_runtime_utils.py _post_backward_hook: "for the
# sharded strategies, the gradient is produced in the post-backward stream"; _fully_shard/_fsdp_collectives.py
# foreach_reduce). The caching allocator reuses a freed block only on the stream that allocated it
# (torch Tensor.record_stream docs: "the CUDA caching allocator guarantees that the memory will only be reused
# with the same creation stream"). DeepSpeed ZeRO is not listed: its gradient partitions persist (states.py).
SIDE_STREAM_STRATEGIES = ("fsdp", "fsdp-hybrid", "fsdp-shard-grad-op")


def side_stream_bytes(phases: dict[Phase, dict[str, float]], st: States, placement: Placement) -> float:
    """Reserved bytes that torch FSDP's side streams keep cached while the compute stream peaks.

    Each stream's pool reserves its own peak, so torch reserves (at least) the sum of the three pools' peaks:
    the compute stream's (weights shard, optimizer states and temporaries, activations, logits), the
    reduce-scatter stream's (the sharded gradients, freed by zero_grad but kept cached for the next backward)
    and the all-gather stream's (the gathered units, freed after each layer but kept cached through the
    optimizer step). The result is that sum minus the allocator peak (0 for any other strategy, and nearly 0
    for LoRA, whose sharded gradients are the adapters')."""
    if placement.dp <= 1 or placement.effective_strategy not in SIDE_STREAM_STRATEGIES:
        return 0.0
    resident = st.weights + st.buffers
    peak = compute = grads = gathered = 0.0
    for name, parts in phases.items():
        total = sum(parts.values())
        g = parts["gradients"] + parts["vision_gradients"]
        u = 0.0 if name == "load" else max(0.0, parts["weights"] - resident)
        peak, compute = max(peak, total), max(compute, total - g - u)
        grads, gathered = max(grads, g), max(gathered, u)
    return max(0.0, compute + grads + gathered - peak)


def loss_segment_cache(job: Job, arch: Architecture, placement: Placement) -> float:
    """Reserved bytes of cached loss-sized segments that shorter batches left (samples of varying length;
    activations.LOSS_SEGMENT_NOTE): per token × the tokens of one micro-batch on this GPU, as the loss phase counts
    them. Free blocks: in torch reserved and the device peak, never in torch allocated (cuda.peaks)."""
    per_token = act.loss_segment_bytes_per_token(job, arch)
    if not per_token:
        return 0.0
    tokens = micro_batch(job, placement) * images.text_tokens_per_sample(job, arch) / job.sequence_parallel
    return per_token * tokens / placement.tp


def fsdp_like(placement: Placement) -> bool:
    """Weights sharded across data-parallel ranks (FSDP full/hybrid shard or ZeRO-3)."""
    return placement.dp > 1 and placement.effective_strategy in ("fsdp", "fsdp-hybrid", "zero3")


def overhead_bytes(allocated_peak: float, placement: Placement, calib: Calibration | None = None) -> float:
    """The fms-hf-tuning device line's overhead (used by the traced estimator; theory uses cuda.peaks)."""
    context = CUDA_CONTEXT_BYTES if calib is None or calib.misc_overhead_gib is None else calib.misc_overhead_gib * GIB
    nccl = NCCL_BYTES if placement.number_gpus > 1 else 0.0
    frag = (FRAGMENTATION * allocated_peak if calib is None or calib.fragmentation_gib is None
            else calib.fragmentation_gib * GIB)
    return context + nccl + frag


def oom_probability(peak: float, capacity: float, rel_sigma: float | None = None, method: str | None = None) -> float:
    """P(actual > capacity) if log(actual / peak) ~ Normal(0, σ): σ = ``rel_sigma`` where given, else theory's
    σ of ``method`` fitted on held-out residuals (risk_table.py, by ``python bench/theory_risk.py --write``)."""
    if capacity <= 0:
        return 1.0
    sigma = rel_sigma if rel_sigma is not None else SIGMA.get(method or "*", SIGMA["*"])[0]
    z = math.log(capacity / max(peak, 1.0)) / sigma
    return float(min(1.0, max(0.0, 0.5 * math.erfc(z / math.sqrt(2)))))


def memory_notes(job: Job, placement: Placement, arch: Architecture, micro: int, cached: float) -> tuple[str, ...]:
    """The assumptions an estimate states: micro-batch, cached loss segments, QLoRA, offload, approximation."""
    notes = [f"micro-batch {micro} × {job.tokens_per_sample} tokens per GPU"]
    if cached:
        notes.append(f"samples vary in length: {cached / GIB:.1f} GiB of loss-sized segments of shorter batches stay "
                     "cached (reserved and device peaks; released before an allocation fails)")
    if job.method == "qlora":
        notes.append("QLoRA: NF4 base (0.5 B + absmax per 64), adapters per the framework profile")
    if placement.offload != "none":
        notes.append(f"offload={placement.offload}: optimizer states in CPU RAM (not counted here)")
    if arch.approximate:  # never silent: the shape is inferred, so is every number from it
        notes.append(f"approximate architecture: {arch.approximation_reason or arch.verification}")
    return tuple(notes)


def estimate_memory(
    job: Job,
    placement: Placement,
    arch: Architecture | None = None,
    gpu: GPUSpec | None = None,
    calibration: Calibration | None = None,
) -> MemoryEstimate:
    """Theory estimate of per-GPU memory for ``job`` on ``placement``."""
    arch = arch or get_architecture(job.model)
    gpu = gpu or get_gpu(placement.gpu_model)
    check_parallelism(arch, placement)
    if job.dtype in ("bf16", "amp-bf16") and gpu.bf16_tflops is None and gpu.architecture == "Volta":
        raise InvalidInputError("dtype", f"bf16 is not supported on {gpu.name}; use fp16 or fp32")
    st = model_states(job, arch, placement)
    phases = _phases(job, arch, placement, st, calibration)
    phase: Phase = max(phases, key=lambda p: sum(phases[p].values()))
    parts = phases[phase]
    allocated = sum(parts.values())
    side = side_stream_bytes(phases, st, placement)
    cached = loss_segment_cache(job, arch, placement)
    peaks = cuda.peaks(allocated, st.outside, job, placement, gpu, resolve(job), calibration, side, cached)
    peak, overhead = peaks.device, peaks.overhead
    notes = memory_notes(job, placement, arch, micro_batch(job, placement), cached)
    return MemoryEstimate(
        weights_bytes=parts["weights"], gradients_bytes=parts["gradients"], optimizer_bytes=parts["optimizer"],
        activations_bytes=parts["activations"], logits_bytes=parts["logits"], overhead_bytes=overhead,
        vision_weights_bytes=parts["vision_weights"], vision_gradients_bytes=parts["vision_gradients"],
        vision_optimizer_bytes=parts["vision_optimizer"], vision_activations_bytes=parts["vision_activations"],
        peak_bytes=peak, peak_allocated_bytes=peaks.allocated, peak_reserved_bytes=peaks.reserved, peak_phase=phase,
        releasable_bytes=peaks.releasable, capacity_bytes=gpu.memory_bytes, fits=peak <= gpu.memory_bytes,
        oom_risk=oom_probability(peak - peaks.releasable, gpu.memory_bytes, method=job.method), estimator="theory",
        notes=notes,
    )
