"""The traced estimator: memory of one real transformers training step, counted on fake CPU tensors.

For a job it builds the Hugging Face model from the catalogue architecture on the meta device,
materialises it under ``FakeTensorMode`` (no weights, no GPU, no download), applies LoRA with peft,
runs a warm-up step and then traced steps (forward with the model's own loss, backward, optimizer
step) and counts live tensor bytes op by op (autoconf/estimators/traced/step.py). A few traces per
(architecture, method, checkpointing, attention, dtype, optimizer) are fitted exactly as affine
functions of the micro-batch shape and cached on disk (autoconf/estimators/traced/fit.py), so a sweep over batch
sizes and sequence lengths needs no new trace.

A job on several GPUs with DDP or FSDP under the HF Trainer is answered from a trace of its rank on a
fake process group (autoconf/estimators/traced/ranks.py, dist.py; allocator replay for reserved).
Otherwise a trace is one unsharded data-parallel replica at the per-GPU micro-batch: sharding (ZeRO),
offload, gathered units, framework buckets and everything outside torch's tensors (CUDA context,
NCCL buffers, allocator fragmentation) come from the theory (autoconf/estimators/theory/), as does throughput.
What cannot run on fake CPU tensors (QLoRA, 8-bit AdamW, fused cross-entropy kernels, tensor and
pipeline parallelism) is answered by the theory with a note saying so.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar

import numpy as np

from autoconf.catalog import Architecture, get_architecture, get_gpu
from autoconf.catalog.families import REMOTE_CODE
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.estimators.theory.memory import estimate_memory, micro_batch, oom_probability, overhead_bytes
from autoconf.estimators.theory.states import model_states
from autoconf.estimators.theory.throughput import estimate_throughput
from autoconf.estimators.traced.cache import get_fit
from autoconf.estimators.traced.fit import PHASE_NAMES, Fit, TraceFailed, regime_of
from autoconf.estimators.traced.ranks import PHASE_TEXT, rank_memory, rank_unsupported
from autoconf.estimators.traced.stacks.memory import missing, routes, stack_memory, stack_unsupported
from autoconf.schema import DEFAULT_LORA_TARGETS, Estimate, EstimatorName, Job, MemoryEstimate, Placement

logger = logging.getLogger(__name__)

# Relative spread for oom_risk. The trace counts tensor bytes exactly for the HF + torch step; what
# remains uncertain is outside it: allocator fragmentation (5–15 % reserved/allocated, theory_notes
# "Overheads") and GPU-only kernels' workspaces. Half of the 0.12 spread theory assumed before its risk was
# fitted (theory/risk_table.py), as an assumption; read as the σ of log(actual / predicted) peak.
TRACED_REL_SIGMA = 0.06
# Architecture fields that do not change the model (kept out of the cache key).
_NON_STRUCTURAL = ("source", "verification", "answerable", "aliases")
WEIGHTS, GRADIENTS, OPTIMIZER = range(3)


def untraceable_reason(job: Job, placement: Placement) -> str | None:
    """Why this job cannot be traced on fake CPU tensors, or None."""
    if job.method == "qlora":
        return "QLoRA: bitsandbytes 4-bit layers cannot run on fake CPU tensors"
    if job.optimizer == "adamw-8bit":
        return "8-bit AdamW (bitsandbytes) cannot run on fake CPU tensors"
    if job.effective_loss_kernel != "hf":
        return f"the {job.effective_loss_kernel} loss kernel (Liger, FOAK; Triton) has no fake CPU implementation"
    if job.optimizer_state_dtype == "fp32" and job.method == "full" and job.dtype in ("bf16", "fp16"):
        return "torch optimizers keep states in the parameter dtype; fp32 states with bf16/fp16 weights are not traced"
    if placement.tp > 1 or placement.pp > 1:
        return "a trace is one data-parallel replica; tensor/pipeline parallel splits are not traced"
    return None


# peft's own default targets for model types without q_proj/v_proj (peft.utils.constants,
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: gpt_bigcode -> c_attn), used when the job keeps
# the default q_proj,v_proj, as peft does when no targets are given.
PEFT_DEFAULT_TARGETS = {"gpt_bigcode": ("c_attn",)}


def lora_targets(job: Job, arch: Architecture) -> tuple[str, ...]:
    """The job's LoRA targets as modules of this architecture (peft's default for the default)."""
    if tuple(job.lora_target_modules) == DEFAULT_LORA_TARGETS and arch.model_type in PEFT_DEFAULT_TARGETS:
        return PEFT_DEFAULT_TARGETS[arch.model_type]
    if arch.lora_targets(job.lora_target_modules):
        return tuple(sorted(job.lora_target_modules))
    names = ", ".join(lin.name for lin in arch.layer_linears if lin.name != "router")
    raise InvalidInputError(
        "lora_target_modules",
        f"must name linear modules of {arch.name} ({names}) or all-linear; got {', '.join(job.lora_target_modules)}"
    )


def trace_spec(job: Job, arch: Architecture) -> dict[str, Any]:
    """Everything the trace depends on besides the micro-batch shape (also the cache key)."""
    arch_fields = {k: v for k, v in dataclasses.asdict(arch).items() if k not in _NON_STRUCTURAL}
    if arch.model_type != "gpt_bigcode":  # rotary models size no tensor by the context length
        arch_fields["max_position_embeddings"] = 0
    spec: dict[str, Any] = {
        "arch": arch_fields, "method": job.method, "dtype": job.dtype,
        # flash and sdpa both run SDPA; on fake CPU it takes the flash route (out + logsumexp saved, no s²)
        "attention": "eager" if job.attention == "eager" else "sdpa",
        "optimizer": job.optimizer, "optimizer_impl": job.optimizer_impl,
        "gradient_checkpointing": job.gradient_checkpointing,
    }
    if job.method == "lora":
        spec.update(lora_r=job.lora_r, lora_alpha=job.lora_alpha, lora_dropout=job.lora_dropout,
                    lora_target_modules=list(lora_targets(job, arch)))
    return spec


def sharding(job: Job, arch: Architecture, placement: Placement) -> tuple[np.ndarray, np.ndarray]:
    """Per-phase category scales and additions that turn one replica's trace into one GPU's memory.

    The static categories are scaled as the theory shards them (its per-GPU states over its
    single-GPU states: FSDP/ZeRO degrees, offload, DeepSpeed's fp32 master copies); the gathered
    FSDP/ZeRO-3 units and ZeRO buckets are added to the weights outside the optimizer step; DDP and
    DeepSpeed keep gradients allocated through forward and backward.
    """
    one = model_states(job, arch, Placement(gpu_model=placement.gpu_model, number_gpus=1))
    many = model_states(job, arch, placement)
    scale = np.ones((len(PHASE_NAMES), 5))
    add = np.zeros((len(PHASE_NAMES), 5))
    for cat, name in ((WEIGHTS, "weights"), (GRADIENTS, "gradients"), (OPTIMIZER, "optimizer")):
        ref = getattr(one, name)
        # theory counts nothing here (e.g. adapters it does not see): keep the replica's traced bytes
        scale[:, cat] = getattr(many, name) / ref if ref else 1.0
    stepping = PHASE_NAMES.index("optimizer")
    for phase in range(len(PHASE_NAMES)):
        if phase != stepping:
            add[phase, WEIGHTS] = many.gathered + many.buffers
            if many.grads_persist:
                scale[phase, GRADIENTS] = 0.0
                add[phase, GRADIENTS] = many.gradients
    return scale, add


class TracedEstimator(Estimator):
    """The estimator contract (``autoconf.estimators.contract``) over cached fake-tensor traces."""

    name: ClassVar[EstimatorName] = "traced"

    def __init__(self, model_version: str | None = None, verify: bool = True) -> None:
        self.model_version = model_version
        self.verify = verify

    def estimate(self, job: Job, placement: Placement) -> Estimate:
        arch = get_architecture(job.model)
        if routes(job, placement):  # the stack's own training code (autoconf/estimators/traced/stacks/)
            return self._stack_estimate(job, placement, arch)
        reason = untraceable_reason(job, placement)
        if reason is None and arch.family in REMOTE_CODE:
            reason = f"{arch.family} is hub remote code (no transformers class to trace)"
        memory = None
        if reason is None:
            try:
                memory = self._traced_memory(job, placement, arch)
            except TraceFailed as exc:
                logger.warning("trace failed for %s: %s", job.model, exc)
                reason = f"trace failed: {exc}"
        if memory is None:
            theory = estimate_memory(job, placement, arch=arch)
            memory = theory.model_copy(update={"notes": (*theory.notes, f"traced: {reason}; theory estimate")})
        absent = missing(job, placement)  # a stack driver that would apply is not installed
        if absent is not None:
            memory = memory.model_copy(update={"notes": (*memory.notes, absent)})
        return Estimate(job=job, placement=placement, memory=memory, throughput=self._throughput(job, placement),
                        estimator="traced", model_version=self.model_version)

    def _stack_estimate(self, job: Job, placement: Placement, arch: Architecture) -> Estimate:
        reason = stack_unsupported(job, placement, arch)
        memory = None
        if reason is None:
            try:
                memory = stack_memory(job, placement, arch, micro_batch(job, placement))
                memory = memory.model_copy(update={
                    "oom_risk": oom_probability(memory.peak_bytes, memory.capacity_bytes, TRACED_REL_SIGMA)})
            except TraceFailed as exc:
                logger.warning("%s trace failed for %s: %s", job.framework, job.model, exc)
                reason = f"trace failed: {exc}"
        if memory is None:
            theory = estimate_memory(job, placement, arch=arch)
            note = f"traced: {job.framework}: {reason}; theory estimate"
            memory = theory.model_copy(update={"notes": (*theory.notes, note)})
        return Estimate(job=job, placement=placement, memory=memory, throughput=self._throughput(job, placement),
                        estimator="traced", model_version=self.model_version)

    def fit(self, job: Job, batch: int) -> Fit:
        """The cached (or new) fit of ``job``'s trace for micro-batch ``batch``."""
        arch = get_architecture(job.model)
        return get_fit(trace_spec(job, arch), regime_of(batch), self.verify)

    def _traced_memory(self, job: Job, placement: Placement, arch: Architecture) -> MemoryEstimate:
        batch = micro_batch(job, placement)
        why = rank_unsupported(job, placement) if placement.dp > 1 else None
        if placement.dp > 1 and why is None:
            return self._rank_memory(job, placement, arch, batch)
        fit = get_fit(trace_spec(job, arch), regime_of(batch), self.verify)
        scale, add = sharding(job, arch, placement)
        allocated, phase, parts = fit.peak(batch, job.tokens_per_sample, scale, add)
        overhead = overhead_bytes(allocated, placement)
        peak = allocated + overhead
        capacity = get_gpu(placement.gpu_model).memory_bytes
        notes = [
            f"traced: HF training step on fake CPU tensors (torch {fit.meta['versions']['torch']}, "
            f"transformers {fit.meta['versions']['transformers']}), "
            f"micro-batch {batch} × {job.tokens_per_sample} per GPU",
            "overhead (CUDA context, NCCL, fragmentation) and sharding from theory",
        ]
        if why is not None:
            notes.append(f"traced: one replica, sharded by theory; ranks are not traced for {why}")
        if job.method == "lora" and lora_targets(job, arch) != tuple(sorted(job.lora_target_modules)):
            notes.append(f"LoRA targets {', '.join(lora_targets(job, arch))} (peft's default for {arch.model_type})")
        if job.dtype.startswith("amp"):
            notes.append("amp traced with torch's CPU autocast op lists (CUDA autocast casts a few ops differently)")
        if arch.approximate:
            notes.append(f"approximate architecture: {arch.approximation_reason or arch.verification}")
        return MemoryEstimate(
            weights_bytes=parts[0], gradients_bytes=parts[1], optimizer_bytes=parts[2],
            activations_bytes=parts[3], logits_bytes=parts[4], overhead_bytes=overhead, peak_bytes=peak,
            peak_phase=phase, capacity_bytes=capacity, fits=peak <= capacity,
            oom_risk=oom_probability(peak, capacity, TRACED_REL_SIGMA), estimator="traced", notes=tuple(notes),
        )

    def _rank_memory(self, job: Job, placement: Placement, arch: Architecture, batch: int) -> MemoryEstimate:
        """The largest rank of the job's world, traced with its strategy."""
        memory, summary = rank_memory(job, placement, arch, trace_spec(job, arch), batch)
        peak = summary["peak"]
        phase = PHASE_TEXT.get(peak["phase"], peak["phase"])
        notes = [
            f"traced: rank {summary['rank']} of {placement.dp} on a fake process group (ranks traced: "
            f"{', '.join(map(str, summary['ranks']))}; the largest), {placement.effective_strategy} as the HF "
            f"Trainer wraps it (torch {summary['versions']['torch']}, transformers "
            f"{summary['versions']['transformers']}), micro-batch {batch} × {job.tokens_per_sample}; peak in "
            f"step {peak['step']} {phase}" if peak["step"] in (1, 2) else
            f"traced: rank {summary['rank']} of {placement.dp}, {placement.effective_strategy}; peak in the {phase}",
            "reserved: the traced allocations replayed through a model of the CUDA caching allocator; device adds "
            "the CUDA context, cuBLAS workspaces and NCCL buffers",
        ]
        if summary["replay"].out_of_memory:
            notes.append("traced: the allocator replay runs out of memory on this GPU even after releasing its cache")
        if job.dtype.startswith("amp"):
            notes.append("amp traced with torch's CPU autocast op lists (CUDA autocast casts a few ops differently)")
        if arch.approximate:
            notes.append(f"approximate architecture: {arch.approximation_reason or arch.verification}")
        risk = oom_probability(memory.peak_bytes, memory.capacity_bytes, TRACED_REL_SIGMA)
        return memory.model_copy(update={"oom_risk": risk, "notes": tuple(notes)})

    @staticmethod
    def _throughput(job: Job, placement: Placement) -> Any:
        try:
            return estimate_throughput(job, placement)
        except AutoconfError as exc:
            logger.info("no throughput for %s on %s: %s", job.model, placement.gpu_model, exc)
            return None

