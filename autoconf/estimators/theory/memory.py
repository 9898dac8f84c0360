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

The phases and the refusals are phases.py's; ``theory_rows`` runs them and the CUDA side on the columns of many rows
of one architecture (rows.py; vector.py groups a batch by model). ``estimate_memory`` is a batch of one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoconf.catalog import Architecture, GPUSpec, get_architecture, get_gpu
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory.cuda import GpuColumns
from autoconf.estimators.theory.frameworks import FMS_FIT
from autoconf.estimators.theory.phases import (
    PHASES,
    SIDE_STREAM_STRATEGIES,
    TEXT_PARTS,
    VISION_PARTS,
    check_parallelism,
    fsdp_like,
    loss_segment_cache,
    micro_batch,
    phase_parts,
    refusals,
    side_stream_bytes,
)
from autoconf.estimators.theory.rows import JobColumns, PlacementColumns, settings_of
from autoconf.estimators.theory.states import model_states
from autoconf.schema import GIB, Calibration, Job, MemoryEstimate, Placement

__all__ = [  # the names callers import from here (several live in phases.py)
    "ALLOCATOR_PARTS", "CUDA_CONTEXT_BYTES", "FRAGMENTATION", "NCCL_BYTES", "PHASES", "SIDE_STREAM_STRATEGIES",
    "TEXT_PARTS", "VISION_PARTS", "Found", "check_parallelism", "estimate_memory", "fsdp_like", "loss_segment_cache",
    "memory_notes", "micro_batch", "overhead_bytes", "phase_parts", "refusals",
    "side_stream_bytes", "theory_rows",
]

# The fms-hf-tuning device line (frameworks.FMS_FIT), kept under its old names for callers that read them.
CUDA_CONTEXT_BYTES = FMS_FIT.context_bytes
NCCL_BYTES = FMS_FIT.nccl_bytes
FRAGMENTATION = FMS_FIT.fragmentation


def overhead_bytes(allocated_peak: float, placement: Placement, calib: Calibration | None = None) -> float:
    """The fms-hf-tuning device line's overhead (used by the traced estimator; theory uses cuda.peaks)."""
    context = CUDA_CONTEXT_BYTES if calib is None or calib.misc_overhead_gib is None else calib.misc_overhead_gib * GIB
    nccl = NCCL_BYTES if placement.number_gpus > 1 else 0.0
    frag = (FRAGMENTATION * allocated_peak if calib is None or calib.fragmentation_gib is None
            else calib.fragmentation_gib * GIB)
    return context + nccl + frag


def memory_notes(micro: int, tokens: int, cached: float, qlora: bool, offload: str,
                 arch: Architecture) -> tuple[str, ...]:
    """The assumptions an estimate states: micro-batch, cached loss segments, QLoRA, offload, approximation."""
    notes = [f"micro-batch {micro} × {tokens} tokens per GPU"]
    if cached:
        notes.append(f"samples vary in length: {cached / GIB:.1f} GiB of loss-sized segments of shorter batches stay "
                     "cached (reserved and device peaks; released before an allocation fails)")
    if qlora:
        notes.append("QLoRA: NF4 base (0.5 B + absmax per 64), adapters per the framework profile")
    if offload != "none":
        notes.append(f"offload={offload}: optimizer states in CPU RAM (not counted here)")
    if arch.approximate:  # never silent: the shape is inferred, so is every number from it
        notes.append(f"approximate architecture: {arch.approximation_reason or arch.verification}")
    return tuple(notes)


ALLOCATOR_PARTS = (*TEXT_PARTS, *VISION_PARTS)  # the vision parts are 0.0 for text models


@dataclass
class Found:
    """theory_rows' answer: MemoryBatch's arrays (NaN on refused rows) and the refusals as exceptions."""

    parts: dict[str, np.ndarray]
    allocated: np.ndarray
    reserved: np.ndarray
    peak: np.ndarray
    releasable: np.ndarray
    phase: np.ndarray  # index into PHASES of the peak phase (-1: refused)
    capacity: np.ndarray
    oom_risk: np.ndarray
    micro_batch: np.ndarray
    cached: np.ndarray
    errors: dict[int, Exception]  # the refused rows


def _empty(n: int, parts: bool = True) -> Found:
    def nan() -> np.ndarray:
        return np.full(n, np.nan)

    return Found({k: nan() for k in (*ALLOCATOR_PARTS, "overhead")} if parts else {}, nan(), nan(), nan(), nan(),
                 np.full(n, -1, dtype=np.int64), nan(),
                 nan(), np.zeros(n, dtype=np.int64), np.zeros(n), {})


def theory_rows(job: JobColumns, place: PlacementColumns, arch: Architecture, gpu: GpuColumns,
                calib: Calibration | None, risk: bool = True, parts: bool = True) -> Found:
    """Theory memory of rows that share ``arch`` (each with its own GPU); refused rows get their exception.

    ``job`` and ``gpu`` may hold one value for every row (JobColumns.broadcast, GpuColumns.one);
    ``risk=False`` leaves ``oom_risk`` NaN; ``parts=False`` leaves ``parts`` empty and fills only ``peak``,
    ``releasable`` (and ``oom_risk``) of the answered rows: the layout gate's totals."""
    out = _empty(job.size, parts)
    out.errors = refusals(job, place, arch, gpu.no_bf16, gpu.name)
    answered = np.ones(job.size, dtype=bool)
    answered[list(out.errors)] = False
    rows = np.flatnonzero(answered)
    if not len(rows):
        return out
    # the answered rows: a slice where every row is (assignments into a slice cost less than by index)
    idx: np.ndarray | slice = rows if len(rows) < job.size else slice(None)
    if len(rows) < job.size:
        one_gpu = not isinstance(gpu.memory_bytes, np.ndarray)  # GpuColumns.one: the same GPU on every row
        job, place, gpu = job.take(rows), place.take(rows), gpu if one_gpu else gpu.take(rows)
    st = model_states(job, arch, place)
    samples = micro_batch(job, place)
    phases, has_load = phase_parts(job, arch, place, st, calib, samples)
    totals = []
    for name in PHASES:  # left to right, as sum() over a phase's parts
        total = np.zeros(len(rows)) + phases[name][ALLOCATOR_PARTS[0]]
        for part in ALLOCATOR_PARTS[1:]:
            value = phases[name][part]
            if not (isinstance(value, float) and value == 0.0):  # x + 0.0 is x: a part the phase does not hold
                total = total + value
        totals.append(total)
    sums = dict(zip(PHASES, totals, strict=True))  # side_stream_bytes's sums of the phases' parts
    totals[0] = np.where(has_load, totals[0], -np.inf)  # a row without a load phase never peaks there
    best = np.argmax(np.stack(totals, axis=1), axis=1)  # the first maximum, in PHASES order
    allocated = np.choose(best, totals)
    side = side_stream_bytes(phases, st, place, has_load, sums)
    cached = loss_segment_cache(job, arch, place, samples)
    peaks = cuda.peaks(allocated, st.outside, job, place, gpu, settings_of(job), calib, side, cached)
    if not parts:  # the totals only (the layout gate): allocated, reserved, phase, micro-batch... stay unset
        out.peak[idx], out.releasable[idx] = peaks.device, peaks.releasable
        if risk:
            out.oom_risk[idx] = oom_probability(peaks.device - peaks.releasable, gpu.memory_bytes, method=job.method)
        return out
    for part in ALLOCATOR_PARTS:
        out.parts[part][idx] = np.choose(best, [np.broadcast_to(phases[name][part], best.shape) for name in PHASES])
    out.parts["overhead"][idx] = peaks.overhead
    out.allocated[idx], out.reserved[idx], out.peak[idx] = peaks.allocated, peaks.reserved, peaks.device
    out.releasable[idx] = peaks.releasable
    out.capacity[idx] = gpu.memory_bytes
    if risk:
        out.oom_risk[idx] = oom_probability(peaks.device - peaks.releasable, gpu.memory_bytes, method=job.method)
    out.micro_batch[idx] = samples
    out.cached[idx] = cached
    out.phase[idx] = best
    return out


def estimate_memory(
    job: Job,
    placement: Placement,
    arch: Architecture | None = None,
    gpu: GPUSpec | None = None,
    calibration: Calibration | None = None,
) -> MemoryEstimate:
    """Theory estimate of per-GPU memory for ``job`` on ``placement``: a batch of one row (vector.theory_rows)."""
    arch = arch or get_architecture(job.model)
    gpu = gpu or get_gpu(placement.gpu_model)
    found = theory_rows(JobColumns.of([job]), PlacementColumns.of([placement]), arch, GpuColumns([gpu]), calibration)
    if 0 in found.errors:
        raise found.errors[0]
    parts = {k: float(v[0]) for k, v in found.parts.items()}
    peak, releasable = float(found.peak[0]), float(found.releasable[0])
    notes = memory_notes(int(found.micro_batch[0]), job.tokens_per_sample, float(found.cached[0]), job.method == "qlora",
                         placement.offload, arch)
    return MemoryEstimate(
        weights_bytes=parts["weights"], gradients_bytes=parts["gradients"], optimizer_bytes=parts["optimizer"],
        activations_bytes=parts["activations"], logits_bytes=parts["logits"], overhead_bytes=parts["overhead"],
        vision_weights_bytes=parts["vision_weights"], vision_gradients_bytes=parts["vision_gradients"],
        vision_optimizer_bytes=parts["vision_optimizer"], vision_activations_bytes=parts["vision_activations"],
        peak_bytes=peak, peak_allocated_bytes=float(found.allocated[0]), peak_reserved_bytes=float(found.reserved[0]),
        peak_phase=PHASES[found.phase[0]], releasable_bytes=releasable, capacity_bytes=gpu.memory_bytes,
        fits=peak <= gpu.memory_bytes, oom_risk=float(found.oom_risk[0]), estimator="theory", notes=notes,
    )
