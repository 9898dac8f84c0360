"""What the estimators say: memory by component, throughput, time, cost, and the recommendation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from autoconf.schema.job import Job
from autoconf.schema.kinds import GIB, EstimatorName, Phase
from autoconf.schema.placement import Placement
from autoconf.schema.words import _Strict


class Calibration(_Strict):
    """Explicit overrides of theory constants (seed-style VRAM-budget CLI factors)."""

    grad_ckpt_reduction: float | None = Field(
        None, gt=0, le=1, description="Fraction of per-layer activations kept with checkpointing."
    )
    attn_act_factor_flash: float | None = Field(None, ge=0,
                                                description="Attention activation factor (× s·b·h) with flash/SDPA.")
    attn_act_factor_eager: float | None = Field(None, ge=0, description="Extra eager activation factor (× a·s²·b).")
    mlp_act_factor: float | None = Field(None, ge=0, description="MLP activation factor (× s·b·h).")
    logits_factor: float | None = Field(
        None, ge=0, description="Loss-peak bytes per token per vocabulary entry (× 0.2 with fused loss)."
    )
    fragmentation_gib: float | None = Field(None, ge=0, description="Allocator fragmentation, GiB.")
    misc_overhead_gib: float | None = Field(None, ge=0, description="CUDA context + workspaces, GiB.")


class PeakViews:
    """The allocated and reserved peaks with their fallbacks, for every model that carries the three peaks
    (MemoryEstimate, Answer): estimators that do not split the device peak leave those two None."""

    if TYPE_CHECKING:  # the fields of the models this is mixed into
        peak_bytes: float
        overhead_bytes: float
        peak_allocated_bytes: float | None
        peak_reserved_bytes: float | None

    @property
    def allocated_bytes(self) -> float:
        """Allocator peak; estimators that do not split it give peak - overhead."""
        found = self.peak_allocated_bytes
        return found if found is not None else self.peak_bytes - self.overhead_bytes

    @property
    def reserved_bytes(self) -> float:
        """Reserved peak (between the allocated and the device peak); the allocated one where not given."""
        found = self.peak_reserved_bytes
        return found if found is not None else self.allocated_bytes


class MemoryEstimate(_Strict, PeakViews):
    """Per-GPU memory, by component, at the phase of the step where the peak occurs."""

    weights_bytes: float = Field(ge=0, description="Parameters resident on the GPU.")
    gradients_bytes: float = Field(ge=0, description="Gradients resident at the end of backward.")
    optimizer_bytes: float = Field(ge=0, description="Optimizer states (and fp32 master weights).")
    activations_bytes: float = Field(ge=0, description="Saved activations at the peak phase.")
    logits_bytes: float = Field(ge=0, description="Logits / loss tensors at the peak phase.")
    vision_weights_bytes: float = Field(0.0, ge=0, description="Vision tower + projector weights (VLMs; 0 otherwise).")
    vision_gradients_bytes: float = Field(0.0, ge=0, description="Gradients of the unfrozen vision parts.")
    vision_optimizer_bytes: float = Field(0.0, ge=0, description="Optimizer states of the unfrozen vision parts.")
    vision_activations_bytes: float = Field(0.0, ge=0, description="Vision tower / projector saved activations.")
    overhead_bytes: float = Field(ge=0, description="CUDA context, workspaces, buffers, fragmentation.")
    peak_bytes: float = Field(ge=0, description="Peak per-GPU device memory (nvidia-smi scale; the max over phases).")
    peak_allocated_bytes: float | None = Field(
        None, ge=0, description="Peak of torch.cuda.max_memory_allocated (tensors only).")
    peak_reserved_bytes: float | None = Field(
        None, ge=0, description="Peak of torch.cuda.max_memory_reserved (allocator segments incl. fragmentation).")
    releasable_bytes: float = Field(
        0.0, ge=0, description="Of the reserved and device peaks: free blocks torch keeps cached (FSDP side-stream "
        "pools, loss segments of shorter batches), released before an allocation fails; oom_risk is on the "
        "device peak minus these.")
    peak_phase: Phase = Field(description="Phase of the training step at which the peak happens.")
    capacity_bytes: float = Field(ge=0, description="Usable memory of one GPU.")
    fits: bool = Field(description="peak_bytes (device peak) <= capacity_bytes (see oom_risk for the risk).")
    oom_risk: float = Field(ge=0, le=1, description="Probability of out-of-memory, 0-1 (of the device peak less "
                            "releasable_bytes exceeding capacity_bytes).")
    estimator: EstimatorName = Field(description="Which estimator produced this.")
    notes: tuple[str, ...] = Field((), description="Assumptions and fall-backs worth knowing.")

    def gib(self, name: str) -> float:
        return float(getattr(self, f"{name}_bytes")) / GIB

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB


    @property
    def capacity_gib(self) -> float:
        return self.capacity_bytes / GIB


class ThroughputEstimate(_Strict):
    tokens_per_second: float = Field(ge=0, description="Training tokens per second, whole job (all GPUs).")
    tokens_per_second_per_gpu: float = Field(ge=0, description="tokens_per_second / number_gpus.")
    flops_per_token: float = Field(ge=0, description="Training FLOPs per token (forward + backward [+ recompute]).")
    mfu: float = Field(ge=0, le=1, description="Model FLOPs utilisation assumed.")
    step_seconds: float = Field(ge=0, description="Seconds per optimizer step.")
    compute_seconds: float = Field(ge=0, description="Compute part of a step.")
    communication_seconds: float = Field(ge=0, description="Exposed communication part of a step.")
    estimator: EstimatorName = "theory"


class TimeEstimate(_Strict):
    total_seconds: float = Field(ge=0, description="Wall time of the job.")
    train_seconds: float = Field(ge=0, description="Time spent in training steps.")
    load_seconds: float = Field(ge=0, description="Model load / start-up time.")
    checkpoint_seconds: float = Field(ge=0, description="Time spent writing checkpoints.")
    tokens: float = Field(ge=0, description="Tokens processed (after padding/packing, × epochs).")


class CostEstimate(_Strict):
    cost_usd: float = Field(ge=0, description="GPU-hours × price per GPU-hour.")
    gpu_hours: float = Field(ge=0)
    price_per_gpu_hour_usd: float = Field(ge=0)
    price_source: str = Field(description="Where the price comes from, with its date, or 'user'.")


class Estimate(_Strict):
    """Everything one estimator says about one (job, placement)."""

    job: Job
    placement: Placement
    memory: MemoryEstimate
    throughput: ThroughputEstimate | None = None
    estimator: EstimatorName = "theory"
    model_version: str | None = Field(None, description="Learned-model version used, if any.")


class Recommendation(_Strict):
    can_recommend: int = Field(ge=0, le=1, description="1 if a placement was found, else 0.")
    gpus: int = Field(ge=0, description="GPUs per worker at the recommended placement (0 if none).")
    workers: int = Field(ge=0, description="Workers (nodes) at the recommended placement (0 if none).")
    number_gpus: int = Field(ge=0, description="gpus × workers.")
    reason: str = Field("", description="Why nothing could be recommended, or notes on the answer.")
    estimate: Estimate | None = Field(None, description="Estimates at the recommended placement.")
    estimator: EstimatorName = "hybrid"
    model_version: str | None = None
