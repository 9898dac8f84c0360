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
QLoRA runs bitsandbytes' own 4-bit layers and AdamW8bit on fake tensors (their registered fakes); torchtune's
chunked loss runs as plain torch, Liger's fused linear CE as an allocation-faithful stand-in (kernels.py).
What cannot be traced (FOAK's fused CE, other optimizers, pipeline parallelism, a stack's combination its code does
not run) is refused with a one-line error saying why (traced/refusal.py; the table in docs/traced.md); a trace that
fails at run time is answered by the theory with a note.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np

from autoconf.catalog import Architecture, get_architecture, get_gpu
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.memory import estimate_memory, loss_segment_cache, micro_batch
from autoconf.estimators.theory.states import model_states
from autoconf.estimators.theory.throughput import estimate_throughput
from autoconf.estimators.theory.weights import quant_state_bytes
from autoconf.estimators.traced.cache import get_fit
from autoconf.estimators.traced.fit import PHASE_NAMES, Fit, TraceFailed, regime_of
from autoconf.estimators.traced.job_spec import lora_targets, masked_sdpa, trace_spec
from autoconf.estimators.traced.ranks import PHASE_TEXT, fsdp1_job, rank_memory, rank_unsupported
from autoconf.estimators.traced.refusal import decide
from autoconf.estimators.traced.stacks.memory import stack_memory
from autoconf.schema import Estimate, EstimatorName, Job, MemoryEstimate, Placement

logger = logging.getLogger(__name__)

# Relative spread for oom_risk. The trace counts tensor bytes exactly for the HF + torch step; what
# remains uncertain is outside it: allocator fragmentation (5–15 % reserved/allocated, theory_notes
# "Overheads") and GPU-only kernels' workspaces. Half of the 0.12 spread theory assumed before its risk was
# fitted (theory/risk_table.py), as an assumption; read as the σ of log(actual / predicted) peak.
TRACED_REL_SIGMA = 0.06
WEIGHTS, GRADIENTS, OPTIMIZER = range(3)


def sharding(job: Job, arch: Architecture, placement: Placement) -> tuple[np.ndarray, np.ndarray]:
    """Per-phase category scales and additions that turn one replica's trace into one GPU's memory.

    The static categories are scaled as the theory shards them (its per-GPU states over its
    single-GPU states: FSDP/ZeRO degrees, offload, DeepSpeed's fp32 master copies); the gathered
    FSDP/ZeRO-3 units and ZeRO buckets are added to the weights outside the optimizer step; DDP and
    DeepSpeed keep gradients allocated through forward and backward; the quant states of a
    QLoRA sharded over several GPUs by a stack that keeps them whole (frameworks.Profile.whole_quant_states) stay
    whole, unscaled.
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
    if resolve(job).profile.whole_quant_states and placement.dp > 1:
        # the trace's weights hold the quant states whole; scaled with them, put back what the scale took
        states = quant_state_bytes(job, arch)
        add[:, WEIGHTS] += states * (1.0 - scale[:, WEIGHTS])
    return scale, add


def _regime(job: Job, batch: int) -> str:
    """Traced at the job's own shape where the op sequence changes with it: Liger's chunks (kernels.liger_chunk_size),
    SDPA past a sliding window (``masked_sdpa``; the fit's short design shapes stay below the window) and Mamba's
    chunked scan."""
    arch = get_architecture(job.model)
    # Mamba layers scan in chunks (transformers' torch path of the SSD scan: the number of chunks is the length over
    # chunk_size), so their op sequence changes with the length too
    exact = job.effective_loss_kernel == "fused-linear-ce" or masked_sdpa(job, arch) or arch.mamba is not None
    return regime_of(batch, job.tokens_per_sample, exact=exact)


class TracedEstimator(Estimator):
    """The estimator contract (``autoconf.estimators.contract``) over cached fake-tensor traces."""

    name: ClassVar[EstimatorName] = "traced"

    def __init__(self, model_version: str | None = None, verify: bool = True) -> None:
        self.model_version = model_version
        self.verify = verify

    def estimate(self, job: Job, placement: Placement) -> Estimate:
        arch = get_architecture(job.model)
        decision = decide(job, placement, arch)
        if decision.refusal is not None:  # a property of the job: say so, never answer it under the traced name
            raise InvalidInputError("estimator", f"traced cannot run this job ({job.framework}): {decision.refusal}; "
                                    "use --estimator theory")
        if decision.stack:  # the stack's own training code (traced/stacks/)
            return self._stack_estimate(job, placement, arch)
        memory, reason = None, None
        try:
            memory = self._traced_memory(job, placement, arch)
        except TraceFailed as exc:  # the worker failed on a job it should run: theory, with the reason
            logger.warning("trace failed for %s: %s", job.model, exc)
            reason = f"trace failed: {exc}"
        if memory is None:
            theory = estimate_memory(job, placement, arch=arch)
            memory = theory.model_copy(update={"notes": (*theory.notes, f"traced: {reason}; theory estimate")})
        if decision.note is not None:  # the stack's driver does not run this job, or is not installed
            memory = memory.model_copy(update={"notes": (*memory.notes, decision.note)})
        return Estimate(job=job, placement=placement, memory=memory, throughput=self._throughput(job, placement),
                        estimator="traced", model_version=self.model_version)

    def _stack_estimate(self, job: Job, placement: Placement, arch: Architecture) -> Estimate:
        # estimate() has refused what the stack's code cannot run (refusal.decide)
        try:
            memory = stack_memory(job, placement, arch, micro_batch(job, placement))
            memory = memory.model_copy(update={
                "oom_risk": oom_probability(memory.peak_bytes, memory.capacity_bytes, TRACED_REL_SIGMA)})
        except TraceFailed as exc:  # the driver failed on a job it should run: theory, with the reason
            logger.warning("%s trace failed for %s: %s", job.framework, job.model, exc)
            theory = estimate_memory(job, placement, arch=arch)
            note = f"traced: {job.framework}: trace failed: {exc}; theory estimate"
            memory = theory.model_copy(update={"notes": (*theory.notes, note)})
        return Estimate(job=job, placement=placement, memory=memory, throughput=self._throughput(job, placement),
                        estimator="traced", model_version=self.model_version)

    def fit(self, job: Job, batch: int) -> Fit:
        """The cached (or new) fit of ``job``'s trace for micro-batch ``batch``."""
        arch = get_architecture(job.model)
        return get_fit(trace_spec(job, arch), _regime(job, batch), self.verify)

    def _traced_memory(self, job: Job, placement: Placement, arch: Architecture) -> MemoryEstimate:
        batch = micro_batch(job, placement)
        split = placement.dp > 1 or placement.tp > 1
        why = rank_unsupported(job, placement) if split else None
        if split and why is None:
            return self._rank_memory(job, placement, arch, batch)
        fit = get_fit(trace_spec(job, arch), _regime(job, batch), self.verify)
        scale, add = sharding(job, arch, placement)
        allocated, phase, parts = fit.peak(batch, job.tokens_per_sample, scale, add)
        gpu = get_gpu(placement.gpu_model)
        # reserved and device from the traced allocated peak as theory derives its own (theory/cuda.py peaks:
        # fragmentation, cuBLAS workspaces, CUDA context, NCCL, cached loss segments of varying lengths)
        outside = model_states(job, arch, placement).outside
        peaks = cuda.peaks(allocated, outside, job, placement, gpu, resolve(job),
                           cached=loss_segment_cache(job, arch, placement))
        peak, overhead, capacity = peaks.device, peaks.overhead, gpu.memory_bytes
        notes = [
            f"traced: HF training step on fake CPU tensors (torch {fit.meta['versions']['torch']}, "
            f"transformers {fit.meta['versions']['transformers']}), "
            f"micro-batch {batch} × {job.tokens_per_sample} per GPU",
            "reserved and device (fragmentation, workspaces, CUDA context, NCCL) and sharding from theory",
        ]
        if why is not None:
            notes.append(f"traced: one replica, sharded by theory; ranks are not traced for {why}")
        if resolve(job).profile.own_model_code:
            notes.append(f"traced: the transformers model with {job.framework}'s loss ({job.effective_loss_kernel}); "
                         f"{job.framework}'s own model code is not traced")
        if job.method == "lora" and lora_targets(job, arch) != tuple(sorted(job.lora_target_modules)):
            notes.append(f"LoRA targets {', '.join(lora_targets(job, arch))} (peft's default for {arch.model_type})")
        if job.dtype.startswith("amp"):
            notes.append("amp traced with torch's CPU autocast op lists (CUDA autocast casts a few ops differently)")
        if arch.approximate:
            notes.append(f"approximate architecture: {arch.approximation_reason or arch.verification}")
        return MemoryEstimate(
            weights_bytes=parts[0], gradients_bytes=parts[1], optimizer_bytes=parts[2],
            activations_bytes=parts[3], logits_bytes=parts[4], overhead_bytes=overhead, peak_bytes=peak,
            peak_allocated_bytes=peaks.allocated, peak_reserved_bytes=peaks.reserved,
            releasable_bytes=peaks.releasable, peak_phase=phase, capacity_bytes=capacity, fits=peak <= capacity,
            oom_risk=oom_probability(peak - peaks.releasable, capacity, TRACED_REL_SIGMA), estimator="traced",
            notes=tuple(notes),
        )

    def _rank_memory(self, job: Job, placement: Placement, arch: Architecture, batch: int) -> MemoryEstimate:
        """The largest rank of the job's world, traced with its strategy."""
        memory, summary = rank_memory(job, placement, arch, trace_spec(job, arch), batch)
        peak = summary["peak"]
        phase = PHASE_TEXT.get(peak["phase"], peak["phase"])
        strategy: str = f"{placement.effective_strategy} as the HF Trainer wraps it"
        if fsdp1_job(job, placement):
            # a stack that builds FSDP1 on the GPU itself (fsdp_qlora's train.py), or accelerate for the HF Trainer
            wrapper = f"{job.framework} wraps" if resolve(job).profile.fsdp1_device_load else "accelerate wraps"
            strategy = f"FSDP1 (FullyShardedDataParallel) as {wrapper} it; no checkpoint save (sharded)"
            if placement.offload == "optimizer+params":
                strategy += "; parameters, gradients and the optimizer offloaded to the host (CPUOffload)"
        if placement.tp > 1:
            strategy = (f"{placement.tp}-way tensor parallel" + (f" × {placement.dp}-way {placement.effective_strategy}"
                        if placement.dp > 1 else "") + " as transformers shards it at load")
        notes = [
            f"traced: rank {summary['rank']} of {placement.number_gpus} on a fake process group (ranks traced: "
            f"{', '.join(map(str, summary['ranks']))}; the largest), {strategy} (torch "
            f"{summary['versions']['torch']}, transformers {summary['versions']['transformers']}), "
            f"micro-batch {batch} × {job.tokens_per_sample}; peak in "
            f"step {peak['step']} {phase}" if peak["step"] in (1, 2) else
            f"traced: rank {summary['rank']} of {placement.number_gpus}, {strategy}; peak in the {phase}",
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

