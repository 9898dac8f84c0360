"""CUDA-side memory: from the allocator's peak to torch reserved and to what nvidia-smi shows.

Three peaks per GPU (design §3; the accuracy report compares each measurement with its own):

* **allocated** — ``torch.cuda.max_memory_allocated``: the tensors the phases of ``memory.py`` count;
  optimizer states of bitsandbytes *paged* optimizers live in CUDA unified memory, outside torch's
  allocator, so they are not in it.
* **reserved** — ``max_memory_reserved``: allocated × (1 + fragmentation) + cuBLAS workspaces (allocated
  through the caching allocator by ``CublasHandlePool``, one per handle and stream), plus the free blocks torch
  FSDP's side-stream pools keep cached while the compute stream peaks (memory.side_stream_bytes) and the loss-sized
  segments shorter batches left when samples vary in length (memory.loss_segment_cache), up to capacity.
* **device** — nvidia-smi: reserved + the CUDA context + NCCL communicator buffers + paged optimizer
  states. ``MemoryEstimate.peak_bytes`` and ``fits`` use this one.

A stack with device-level measurements (fms-hf-tuning, ``frameworks.FMS_FIT``) uses its fitted line
for the device peak instead of the component sum: measured beats modelled where we have it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoconf.catalog import GPUSpec
from autoconf.estimators.theory.frameworks import Resolved
from autoconf.estimators.theory.rows import (
    AnyJob,
    AnyPlacement,
    Flag,
    FlatColumns,
    Num,
    ResolvedColumns,
    Table,
    lookup,
    maximum,
    minimum,
    strategy_in,
    where,
)
from autoconf.schema import GIB, Calibration

MIB = 2**20
# CUDA context of a PyTorch process with lazy module loading (CUDA >= 11.7, PyTorch's default): ≈ 300 MB
# (pytorch/pytorch#107667, ptrblck: "> 1000 MB before 11.7"), ≈ 400 MB (pytorch/pytorch#109888), 426 MiB
# on an RTX 6000 Ada with torch 2.10 + CUDA 13 (unslothai/unsloth-zoo#1053). A training step loads more
# kernels (cuBLAS, flash-attention, NCCL) than a bare context; 0.5 GiB covers those reports' upper end.
# No Hopper- or Blackwell-specific measurement was found: the same value is used for them.
CONTEXT_BYTES = {"Volta": 0.5 * GIB, "Turing": 0.5 * GIB, "Ampere": 0.5 * GIB, "Ada Lovelace": 0.5 * GIB,
                 "Hopper": 0.5 * GIB, "Blackwell": 0.5 * GIB}
DEFAULT_CONTEXT_BYTES = 0.5 * GIB
# cuBLAS workspace per handle/stream: 4 MiB before Hopper, 32 MiB on Hopper and later (cuBLAS docs,
# cublasSetWorkspace recommendations); PyTorch keeps one per (handle, stream): compute + one side stream.
CUBLAS_WORKSPACE_BYTES = {"Hopper": 32 * MIB, "Blackwell": 32 * MIB}
DEFAULT_CUBLAS_WORKSPACE_BYTES = 4 * MIB
CUBLAS_STREAMS = 2
# One NCCL communicator after its first collective: ≈ 1.6 GB per process with one communicator and an
# all-reduce (NVIDIA/nccl#864), of which ≈ 0.5 GB is the CUDA context above; memory is linear in the
# channels and a ring keeps 2 connections at any scale (NVIDIA/nccl#986), so it does not grow with the
# world size beyond 2 ranks. 1.0 GiB per communicator.
NCCL_COMMUNICATOR_BYTES = 1.0 * GIB
# Caching-allocator fragmentation (reserved − allocated) as a share of allocated: 8 % is the slope of the
# fms-acceleration A100 fit (nvidia_smi ≈ 1.08·allocated + c); theory_notes report "a few % to > 10 %".
# expandable_segments maps pages into one growing segment, so only 2 MiB page rounding remains: 2 % is an
# assumption, not a measurement.
FRAGMENTATION = 0.08
FRAGMENTATION_EXPANDABLE = 0.02


@dataclass(frozen=True)
class Peaks:
    """The three per-GPU peaks, in bytes; ``overhead``: what the device peak adds to the phases' tensors;
    ``releasable``: the free cached blocks (side-stream pools, loss segments) counted in reserved and device,
    which the allocator releases before an allocation fails (so the OOM risk is on device − releasable).
    Floats for one row, arrays for a batch."""

    allocated: Num
    reserved: Num
    device: Num
    overhead: Num
    releasable: Num = 0.0


class GpuColumns(FlatColumns):
    """The GPU fields the CUDA side reads, one entry per row (from one GPUSpec per distinct GPU)."""

    def __init__(self, gpus: Sequence[GPUSpec]) -> None:
        self.name = np.array([g.name for g in gpus], dtype=str)
        self.architecture = np.array([g.architecture for g in gpus], dtype=str)
        self.memory_bytes = np.array([g.memory_bytes for g in gpus], dtype=float)
        # theory refuses bf16 on a Volta GPU without a bf16 peak (memory.refusals)
        self.no_bf16 = np.array([g.bf16_tflops is None and g.architecture == "Volta" for g in gpus], dtype=bool)

    @classmethod
    def one(cls, gpu: GPUSpec) -> GpuColumns:
        """One GPU for every row of a batch: its fields as Python scalars (memory.theory_rows keeps them)."""
        out = cls([gpu])
        for name, value in list(out.__dict__.items()):
            setattr(out, name, value.item())
        return out


AnyGpu = GPUSpec | GpuColumns


def communicators(placement: AnyPlacement, job: AnyJob) -> Num:
    """NCCL communicators a rank joins: data parallel (two for hybrid sharding), TP, PP, sequence parallel."""
    many = placement.dp > 1
    count = where(many, 1, 0) + where(strategy_in(placement, ("fsdp-hybrid",)) & many, 1, 0)
    count = count + (placement.tp > 1) + (placement.pp > 1) + (job.sequence_parallel > 1)
    return where(placement.number_gpus == 1, 0, count)


def workspace_bytes(gpu: AnyGpu) -> Num:
    return CUBLAS_STREAMS * lookup(gpu.architecture, _WORKSPACES)


def _fit(settings: Resolved | ResolvedColumns) -> tuple[Flag, Num, Num, Num]:
    """(has a measured device line, its context, NCCL and fragmentation terms) of each row's stack."""
    if isinstance(settings, Resolved):
        fit = settings.profile.device_fit
        return (False, 0.0, 0.0, 0.0) if fit is None else (True, fit.context_bytes, fit.nccl_bytes, fit.fragmentation)
    p = settings.profile
    return p.has_fit, p.fit_context, p.fit_nccl, p.fit_fragmentation


def peaks(allocated: Num, outside: Num, job: AnyJob, placement: AnyPlacement, gpu: AnyGpu,
          settings: Resolved | ResolvedColumns, calib: Calibration | None = None, side: Num = 0.0,
          cached: Num = 0.0) -> Peaks:
    """Allocated, reserved and device peaks from the allocator peak ``allocated`` (all tensors counted by the
    phases), ``outside`` (the part of it held outside torch's allocator: paged optimizer states), ``side``
    (free blocks other streams' pools keep cached at that peak: memory.side_stream_bytes) and ``cached`` (free
    loss-sized segments of shorter batches: memory.loss_segment_cache; whole segments, so not fragmented further).

    Both are free blocks: when cudaMalloc fails, the caching allocator releases cached free segments and
    retries (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc: release_available_cached_blocks,
    then release_cached_blocks), so they fill the GPU up to its capacity and never make a run fail."""
    torch_alloc = allocated - outside
    frag = where(settings.expandable_segments, FRAGMENTATION_EXPANDABLE, FRAGMENTATION)
    cache = frag * torch_alloc if calib is None or calib.fragmentation_gib is None else calib.fragmentation_gib * GIB
    reserved = torch_alloc + cache + workspace_bytes(gpu)
    cached_side = side * (1 + frag)  # the side pools fragment like the compute pool
    misc = None if calib is None else calib.misc_overhead_gib
    # a stack with a measured line (same arithmetic as before the component model)
    has_fit, fit_context, fit_nccl, fit_frag = _fit(settings)
    frag_gib = None if calib is None else calib.fragmentation_gib
    fitted = fit_frag * allocated if frag_gib is None else frag_gib * GIB
    overhead_fit = (fit_context if misc is None else misc * GIB) + where(placement.number_gpus > 1, fit_nccl,
                                                                         0.0) + fitted
    device_fit = allocated + overhead_fit
    reserved_fit = minimum(reserved + cached_side + cached, device_fit)
    # the component model
    context = lookup(gpu.architecture, _CONTEXTS) if misc is None else misc * GIB
    device = reserved + context + communicators(placement, job) * NCCL_COMMUNICATOR_BYTES + outside
    kept = minimum(cached_side, maximum(0.0, gpu.memory_bytes - device))  # what of the side pools stays cached
    # and of the loss segments (only where there are any: the sums stay bit-identical where there are none)
    kept = where(cached != 0, kept + minimum(cached, maximum(0.0, gpu.memory_bytes - device - kept)), kept)
    return Peaks(torch_alloc, where(has_fit, reserved_fit, reserved + kept), where(has_fit, device_fit, device + kept),
                 where(has_fit, overhead_fit, device + kept - allocated), where(has_fit, 0.0, kept))


_CONTEXTS = Table(CONTEXT_BYTES, DEFAULT_CONTEXT_BYTES)
_WORKSPACES = Table(CUBLAS_WORKSPACE_BYTES, DEFAULT_CUBLAS_WORKSPACE_BYTES)
