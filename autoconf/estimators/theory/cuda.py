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

from dataclasses import dataclass

from autoconf.catalog import GPUSpec
from autoconf.estimators.theory.frameworks import Resolved
from autoconf.schema import GIB, Calibration, Job, Placement

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
    which the allocator releases before an allocation fails (so the OOM risk is on device − releasable)."""

    allocated: float
    reserved: float
    device: float
    overhead: float
    releasable: float = 0.0


def communicators(placement: Placement, job: Job) -> int:
    """NCCL communicators a rank joins: data parallel (two for hybrid sharding), TP, PP, sequence parallel."""
    if placement.number_gpus == 1:
        return 0
    count = 1 if placement.dp > 1 else 0
    count += 1 if placement.effective_strategy == "fsdp-hybrid" and placement.dp > 1 else 0
    count += (placement.tp > 1) + (placement.pp > 1) + (job.sequence_parallel > 1)
    return count


def workspace_bytes(gpu: GPUSpec) -> float:
    return CUBLAS_STREAMS * CUBLAS_WORKSPACE_BYTES.get(gpu.architecture, DEFAULT_CUBLAS_WORKSPACE_BYTES)


def peaks(allocated: float, outside: float, job: Job, placement: Placement, gpu: GPUSpec, settings: Resolved,
          calib: Calibration | None = None, side: float = 0.0, cached: float = 0.0) -> Peaks:
    """Allocated, reserved and device peaks from the allocator peak ``allocated`` (all tensors counted by the
    phases), ``outside`` (the part of it held outside torch's allocator: paged optimizer states), ``side``
    (free blocks other streams' pools keep cached at that peak: memory.side_stream_bytes) and ``cached`` (free
    loss-sized segments of shorter batches: memory.loss_segment_cache; whole segments, so not fragmented further).

    Both are free blocks: when cudaMalloc fails, the caching allocator releases cached free segments and
    retries (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc: release_available_cached_blocks,
    then release_cached_blocks), so they fill the GPU up to its capacity and never make a run fail."""
    torch_alloc = allocated - outside
    frag = FRAGMENTATION_EXPANDABLE if settings.expandable_segments else FRAGMENTATION
    cache = frag * torch_alloc if calib is None or calib.fragmentation_gib is None else calib.fragmentation_gib * GIB
    reserved = torch_alloc + cache + workspace_bytes(gpu)
    cached_side = side * (1 + frag)  # the side pools fragment like the compute pool
    fit = settings.profile.device_fit
    if fit is not None:  # measured line of this stack (same arithmetic as before the component model)
        misc = None if calib is None else calib.misc_overhead_gib
        context = fit.context_bytes if misc is None else misc * GIB
        nccl = fit.nccl_bytes if placement.number_gpus > 1 else 0.0
        frag_gib = None if calib is None else calib.fragmentation_gib
        fitted = fit.fragmentation * allocated if frag_gib is None else frag_gib * GIB
        overhead = context + nccl + fitted
        device = allocated + overhead
        return Peaks(torch_alloc, min(reserved + cached_side + cached, device), device, overhead)
    context = CONTEXT_BYTES.get(gpu.architecture, DEFAULT_CONTEXT_BYTES)
    if calib is not None and calib.misc_overhead_gib is not None:
        context = calib.misc_overhead_gib * GIB
    device = reserved + context + communicators(placement, job) * NCCL_COMMUNICATOR_BYTES + outside
    kept = min(cached_side, max(0.0, gpu.memory_bytes - device))  # what of the side pools stays cached
    if cached:  # and of the loss segments (an `if`: the sums stay bit-identical where there are none)
        kept = kept + min(cached, max(0.0, gpu.memory_bytes - device - kept))
    return Peaks(torch_alloc, reserved + kept, device + kept, device + kept - allocated, kept)
