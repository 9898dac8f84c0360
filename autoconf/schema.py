"""Pydantic types shared by every layer: the job, its placement and the estimates.

Names here are the contract of design §3: the CLI flags, REST bodies, ado properties and sweep
columns all reuse them. Units are in field names (``*_bytes``, ``*_gib``, ``*_seconds``, ``*_usd``).
"""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from autoconf import defaults

GIB = 2**30

Method = Literal["full", "lora", "qlora"]
DType = Literal["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]
Optimizer = Literal["adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd"]
OptimizerImpl = Literal["fused", "foreach", "for-loop"]
Attention = Literal["flash", "sdpa", "eager"]
Strategy = Literal[
    "ddp", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid", "zero0", "zero1", "zero2", "zero3"
]
Offload = Literal["none", "optimizer", "optimizer+params"]
EstimatorName = Literal["theory", "learned", "hybrid", "traced"]
Phase = Literal["load", "static", "forward", "loss", "backward", "optimizer"]
# Training stacks with a documented profile (autoconf/estimators/theory/frameworks.py, docs/frameworks.md).
Framework = Literal[
    "hf-trainer", "fms-hf-tuning", "peft", "litgpt", "torchtune", "unsloth", "axolotl", "llama-factory",
    "ms-swift", "deepspeed", "fsdp-qlora", "llm-foundry", "torchtitan",
]
FRAMEWORKS: tuple[str, ...] = typing.get_args(Framework)  # the one list of stack names (profiles: frameworks.py)
LossKernel = Literal["hf", "chunked", "fused-ce", "fused-linear-ce"]

DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q_proj", "v_proj")

# --- user words: the one reading of on/off and choice words, whatever the entry point ----------------
# Pydantic's own lax booleans, written out so that a CSV cell, an ado property, a CLI word and a JSON
# string all mean the same thing; anything else is an error naming these words.
TRUE_WORDS = ("true", "yes", "on", "1", "t", "y")
FALSE_WORDS = ("false", "no", "off", "0", "f", "n")


def _word_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_word", "{detail}", {"detail": message})


def read_flag(value: object) -> object:
    """A boolean from a user's word (TRUE_WORDS / FALSE_WORDS, any case), a bool or 0/1; else an error."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    word = value.strip().lower() if isinstance(value, str) else None
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise _word_error(f"must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)}; got {value!r}")


def _choices(annotation: object) -> tuple[str, ...] | None:
    """The accepted words of a Literal of strings (also inside ``X | None``), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [c for arg in typing.get_args(annotation) if (c := _choices(arg))]
        return found[0] if found else None
    if typing.get_origin(annotation) is Literal and all(isinstance(a, str) for a in typing.get_args(annotation)):
        return typing.get_args(annotation)
    return None


def is_flag(annotation: object) -> bool:
    """True for a boolean field (``bool`` or ``bool | None``)."""
    return annotation is bool or annotation == bool | None


@functools.lru_cache(maxsize=256)
def _kind(annotation: object) -> bool | tuple[str, ...] | None:
    """True for a boolean field, its words for a choice field, None for any other (cached per annotation)."""
    return True if is_flag(annotation) else _choices(annotation)


def read_word(annotation: object, value: object) -> object:
    """``value`` as the field of type ``annotation`` reads it: booleans and choices by the tables above."""
    kind = _kind(annotation)
    if kind is True:
        return read_flag(value)
    if isinstance(kind, tuple) and isinstance(value, str):
        word = value.strip().lower()
        if word not in kind:
            raise _word_error(f"must be one of {', '.join(kind)}; got {value!r}")
        return word
    return value


class Words(BaseModel):
    """Base of every model that reads a user's words: booleans and choices through ``read_word``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @field_validator("*", mode="before")
    @classmethod
    def _read_words(cls, value: object, info: ValidationInfo) -> object:
        field = cls.__pydantic_fields__.get(info.field_name or "")
        return value if field is None else read_word(field.annotation, value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class _Input(Words):
    """A user's input (Job, Placement): strict, frozen, words read by ``read_word``."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class Job(_Input):
    """What is trained and how: independent of where it runs."""

    model: str = Field(
        description="Catalogue model name or alias (e.g. 'llama3.1-8b'), a path to a local HF "
        "config.json, or a bare parameter count such as '7e9'."
    )
    framework: Framework = Field(
        defaults.FRAMEWORK,  # type: ignore[arg-type]
        description="Training stack whose behaviour the estimate follows (load path, loss, adapter dtype, "
        "quantised layers, optimizer defaults); see docs/frameworks.md.",
    )
    method: Method = Field("full", description="Fine-tuning method: full, lora or qlora.")
    dtype: DType = Field(
        "bf16",
        description="Training precision: pure bf16/fp16/fp32 weights, or amp-* (fp32 master "
        "weights with autocast to bf16/fp16).",
    )
    tokens_per_sample: int = Field(
        4096, gt=0, le=2_097_152, description="Sequence length per sample (padded), tokens."
    )
    batch_size: int = Field(
        16, gt=0, le=1_048_576,
        description="Global batch per optimizer step across all GPUs (as in ado's SFTTrainer).",
    )
    gradient_accumulation_steps: int = Field(1, ge=1, le=4096, description="Micro-steps per optimizer step.")
    lora_r: int = Field(8, gt=0, le=4096, description="LoRA rank (lora and qlora only).")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA alpha (does not change memory).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout probability.")
    lora_target_modules: tuple[str, ...] = Field(
        DEFAULT_LORA_TARGETS,
        description="Module names LoRA adapts (e.g. q_proj, v_proj), or 'all-linear'.",
    )
    optimizer: Optimizer = Field("adamw", description="Optimizer: adamw, adamw-8bit or sgd (momentum).")
    optimizer_state_dtype: Literal["param", "fp32"] = Field(
        "param",
        description="AdamW state precision: 'param' (torch default: same dtype as the parameter) or fp32.",
    )
    optimizer_impl: OptimizerImpl = Field(
        "foreach",
        description="torch AdamW implementation: foreach (HF adamw_torch on CUDA, fms-hf-tuning's default; "
        "a params-sized temporary in step()), fused (adamw_torch_fused) or for-loop.",
    )
    gradient_checkpointing: bool = Field(True, description="Full activation recomputation per decoder layer.")
    attention: Attention = Field("flash", description="Attention kernel: flash, sdpa (memory-efficient) or eager.")
    fused_loss: bool = Field(
        False, description="Chunked/fused cross-entropy (Liger, fms-acceleration FOAK): no b·s·V logits."
    )
    loss_kernel: LossKernel | None = Field(
        None,
        description="Cross-entropy implementation: hf (fp32 upcast), chunked (torchtune/LitGPT chunked CE), "
        "fused-ce (Triton CE over bf16 logits, fms-acceleration FOAK, Unsloth) or fused-linear-ce (Liger: "
        "logits never materialised). Default: fused-linear-ce when fused_loss, else the framework's.",
    )
    packing: bool = Field(False, description="Pack samples to tokens_per_sample (no padding waste).")
    samples_vary_in_length: bool = Field(
        False,
        description="Unpacked samples of different lengths, each batch padded to its longest: tokens_per_sample is "
        "then the longest batch's length (e.g. max_length). The caching allocator keeps loss-sized segments of "
        "shorter batches, so reserved and device peaks grow (framework profile; docs/frameworks.md).",
    )
    # --- vision-language models (ignored for text models, which refuse images_per_sample > 0) -------
    images_per_sample: int = Field(
        0, ge=0, le=64, description="Images per training sample (0 = text-only, even for a vision-language model).")
    image_resolution: int | None = Field(
        None, gt=0, le=16384,
        description="Longer image side in pixels (default: the model's image_size; 448 for dynamic-resolution Qwen-VL).")
    freeze_vision: bool = Field(
        True, description="Keep the vision tower frozen (the LLaVA and Qwen2-VL fine-tuning recipes' default).")
    freeze_projector: bool = Field(False, description="Keep the vision-to-text projector frozen.")
    # --- settings that frameworks differ on; None = the framework profile's value ------------------
    fsdp_cpu_ram_efficient_loading: bool | None = Field(
        None, description="FSDP: load weights on rank 0 / meta device (true) or a full copy per rank (false).")
    double_quant: bool | None = Field(None, description="QLoRA: quantise the NF4 absmax constants again (8-bit).")
    quantize_lm_head: bool | None = Field(None, description="QLoRA: quantise the output head to 4 bits as well.")
    optimizer_in_backward: bool | None = Field(
        None, description="Step each parameter in backward and free its gradient (torchtune): no full gradient set.")
    activation_offloading: bool | None = Field(
        None, description="Move checkpointed layer inputs to CPU RAM during forward (torchtune, axolotl).")
    torch_compile: bool | None = Field(None, description="torch.compile the model (memory: not modelled; speed).")
    expandable_segments: bool | None = Field(
        None, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less allocator fragmentation).")
    dora: bool = Field(False, description="DoRA (weight-decomposed LoRA): a magnitude vector per adapted module.")
    sequence_parallel: int = Field(
        1, ge=1, le=1024, description="Sequence/context-parallel degree: GPUs that split one sample's tokens.")

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: object) -> object:
        """Fields whose default depends on the framework take it from defaults.FRAMEWORK_JOB_DEFAULTS."""
        if not isinstance(data, dict):
            return data
        framework = data.get("framework") or defaults.FRAMEWORK
        name = str(framework).strip().lower()
        found = defaults.FRAMEWORK_JOB_DEFAULTS.get(name, defaults.FRAMEWORK_JOB_DEFAULT) if name in FRAMEWORKS else {}
        missing = {k: v for k, v in found.items() if data.get(k) is None}
        return {**data, **missing} if missing else data

    @property
    def effective_loss_kernel(self) -> str:
        if self.loss_kernel is not None:
            return self.loss_kernel
        if self.fused_loss:
            return "fused-linear-ce"
        return defaults.FRAMEWORK_LOSS_KERNEL.get(self.framework, "hf")

    @field_validator("lora_target_modules", mode="before")
    @classmethod
    def _split_targets(cls, value: object) -> object:
        """Accept 'q_proj,v_proj' and '[q_proj, v_proj]' as well as lists."""
        if isinstance(value, str):
            text = value.strip().strip("[]")
            return tuple(p.strip().strip("'\"") for p in text.split(",") if p.strip())
        return value

    @field_validator("model")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("model must be a catalogue name, a config.json path or a parameter count")
        return value.strip()


class Placement(_Input):
    """Where and how the job is spread: GPUs, workers, sharding and parallelism."""

    gpu_model: str = Field(description="GPU name in ado's spelling (e.g. NVIDIA-A100-80GB-PCIe) or an alias.")
    number_gpus: int = Field(1, ge=1, le=defaults.NUMBER_GPUS_LIMIT, description="Total GPUs across all workers.")
    gpus_per_worker: int | None = Field(
        None, ge=1, le=defaults.GPUS_PER_NODE, description="GPUs per worker (node); default min(number_gpus, 8)."
    )
    strategy: Strategy | None = Field(
        None,
        description="Data-parallel sharding: ddp, fsdp (full shard), fsdp-shard-grad-op, fsdp-hybrid, "
        "zero0..zero3. Default: fsdp when number_gpus > 1 (as fms-hf-tuning), else ddp.",
    )
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel degree (must divide heads).")
    pp: int = Field(1, ge=1, le=256, description="Pipeline-parallel degree (must divide layers).")
    offload: Offload = Field("none", description="CPU offload: none, optimizer, or optimizer+params.")
    virtual_pp: int = Field(
        1, ge=1, le=64, description="Interleaved pipeline stages per GPU (Megatron virtual pipeline size); "
        "divides the pipeline bubble.")
    intra_node_gbps: float | None = Field(
        None, gt=0, le=10_000, description="GPU-to-GPU bandwidth inside a node, GB/s per GPU one direction "
        "(default: the GPU's NVLink / PCIe figure in the catalogue).")
    inter_node_gbps: float | None = Field(
        None, gt=0, le=10_000, description="Network bandwidth between nodes, GB/s per node one direction "
        "(default 25: two 100 Gb/s Ethernet NICs; DGX H100 InfiniBand 8 x 400 Gb/s = 400).")

    @model_validator(mode="after")
    def _check_degrees(self) -> Placement:
        if self.number_gpus % (self.tp * self.pp) != 0:
            raise ValueError(
                f"number_gpus must be a multiple of tp*pp = {self.tp * self.pp}; got {self.number_gpus}"
            )
        return self

    @property
    def effective_strategy(self) -> Strategy:
        if self.strategy is not None:
            return self.strategy
        return "fsdp" if self.dp > 1 else "ddp"

    @property
    def dp(self) -> int:
        """Data-parallel degree: GPUs that each hold a different micro-batch."""
        return self.number_gpus // (self.tp * self.pp)

    @property
    def workers(self) -> int:
        per = self.gpus_per_worker or min(self.number_gpus, defaults.GPUS_PER_NODE)
        return -(-self.number_gpus // per)


# Other spellings of Job and Placement words, one table for every entry point that reads a mapping of words
# (sweep rows, ado points, REST bodies): the ado/data-table name of the model, and the VRAM-budget CLI's names
# (docs/dialects.md). A canonical name given beside its alias wins.
ALIASES: dict[str, str] = {
    "model_name": "model", "seq_len": "tokens_per_sample", "grad_accum": "gradient_accumulation_steps",
    "lora_rank": "lora_r", "grad_checkpoint": "gradient_checkpointing",
}
PER_DEVICE_BATCH = "per_device_batch_size"  # batch_size = this × number_gpus × gradient_accumulation_steps


def _plain(value: Any) -> Any:  # noqa: ANN401 - any cell of a table or body
    """numpy scalars -> Python; an empty cell (None, NaN) -> None."""
    item = getattr(value, "item", None)
    value = item() if callable(item) and not isinstance(value, (str, bytes)) else value
    return None if isinstance(value, float) and math.isnan(value) else value


def canonical_words(words: Mapping[str, Any], default_gpus: int = 1) -> dict[str, Any]:
    """``words`` with empty cells dropped, aliases renamed and a per-device batch turned into batch_size."""
    data = {key: v for key, value in words.items() if (v := _plain(value)) is not None}
    for alias, name in ALIASES.items():
        if alias in data:
            data.setdefault(name, data.pop(alias))
    if data.get("model") is not None and not isinstance(data["model"], str):
        data["model"] = str(data["model"])  # a bare parameter count read as a number
    if data.get(PER_DEVICE_BATCH) is not None and data.get("batch_size") is None:
        gpus = int(data.get("number_gpus") or default_gpus)
        data["batch_size"] = int(data[PER_DEVICE_BATCH]) * gpus * int(data.get("gradient_accumulation_steps") or 1)
    return data


def job_of_words(words: Mapping[str, Any]) -> Job:
    """The Job in a mapping of a user's words; words that are no Job field are left to the caller."""
    data = canonical_words(words)
    return Job(**{k: v for k, v in data.items() if k in Job.model_fields})


def job_and_placement(words: Mapping[str, Any], default_gpus: int = 1) -> tuple[Job, Placement]:
    """The one way in: a mapping of a user's words (CLI flags, a REST body, an ado point, a sweep row) ->
    Job and Placement. Booleans and choices are read by ``read_word``, aliases by ``ALIASES``; a bad word
    raises pydantic's ValidationError naming the field and the accepted values. Words that are neither Job
    nor Placement fields are ignored here (the entry point decides whether they are allowed)."""
    data = canonical_words(words, default_gpus)
    data.setdefault("number_gpus", default_gpus)
    job = Job(**{k: v for k, v in data.items() if k in Job.model_fields})
    return job, Placement(**{k: v for k, v in data.items() if k in Placement.model_fields})


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


class MemoryEstimate(_Strict):
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
    def allocated_bytes(self) -> float:
        """Allocator peak; estimators that do not split it give peak - overhead."""
        found = self.peak_allocated_bytes
        return found if found is not None else self.peak_bytes - self.overhead_bytes

    @property
    def reserved_bytes(self) -> float:
        """Reserved peak; between the allocated and the device peak."""
        found = self.peak_reserved_bytes
        return found if found is not None else self.allocated_bytes

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
