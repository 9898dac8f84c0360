"""Theory memory of many (job, placement) rows: the formulas of memory.py over columns, grouped by model.

``theory_batch`` turns the rows into columns once (rows.py: Job and Placement fields, framework profiles and GPUs
resolved per distinct value), and for each distinct model runs ``memory.phase_parts`` and ``cuda.peaks`` on the
columns of its rows: numpy over rows, Python per model only. ``memory.estimate_memory`` is the same code on one row
(``theory_rows``). Errors are per row, never raised, with the message one estimate raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from autoconf.catalog import Architecture, GPUSpec, get_architecture, get_gpu
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.theory import memory as mem
from autoconf.estimators.theory.cuda import GpuColumns
from autoconf.estimators.theory.memory import ALLOCATOR_PARTS, Found, _empty, theory_rows
from autoconf.estimators.theory.rows import Codes, JobColumns, PlacementColumns
from autoconf.schema import Calibration, Job, Placement

TEXT_PARTS = mem.TEXT_PARTS
__all__ = ["ALLOCATOR_PARTS", "TEXT_PARTS", "Found", "MemoryBatch", "as_batch", "capacities", "gpu_groups",
           "theory_batch", "theory_columns", "theory_rows"]


@dataclass(frozen=True)
class MemoryBatch:
    """Theory memory of n rows: arrays of length n, NaN (phase "") where ``errors[i]`` is set."""

    parts: dict[str, np.ndarray]  # ALLOCATOR_PARTS + "overhead", bytes per GPU
    allocated: np.ndarray  # allocator peak (torch max_memory_allocated scale)
    reserved: np.ndarray  # torch max_memory_reserved scale
    peak: np.ndarray  # device peak (nvidia-smi scale) = phases' tensors + overhead
    phase: list[str]
    capacity: np.ndarray
    oom_risk: np.ndarray
    micro_batch: np.ndarray  # samples per GPU per forward pass (0 on error rows)
    errors: list[str | None]
    # of reserved and peak: free cached blocks released before an allocation fails (cuda.Peaks.releasable); theory
    # states oom_risk on peak − releasable. None (estimators that state their own risk on the device peak) = 0.
    releasable: np.ndarray | None = None
    # theory only: bytes of cached loss-sized segments (memory.loss_segment_cache), for the notes of chosen rows
    cached: np.ndarray | None = None

    def releasable_or_zero(self) -> np.ndarray:
        return np.zeros(len(self.errors)) if self.releasable is None else self.releasable

    def __len__(self) -> int:
        return len(self.errors)

    @property
    def ok(self) -> np.ndarray:
        return np.array([e is None for e in self.errors], dtype=bool)


@lru_cache(maxsize=64)
def _gpu(name: str) -> GPUSpec | str:
    try:
        return get_gpu(name)
    except AutoconfError as exc:
        return str(exc)


@lru_cache(maxsize=4096)
def _arch(name: str) -> Architecture | str:
    try:
        return get_architecture(name)
    except (AutoconfError, ValueError) as exc:
        return str(exc)


def _gpu_error(job: Job, gpu: GPUSpec) -> str | None:
    if job.dtype in ("bf16", "amp-bf16") and gpu.bf16_tflops is None and gpu.architecture == "Volta":
        return str(InvalidInputError("dtype", f"bf16 is not supported on {gpu.name}; use fp16 or fp32"))
    return None


def theory_columns(job: JobColumns, place: PlacementColumns, models: Codes | np.ndarray, gpu_models: Codes | np.ndarray,
                   calibration: Calibration | None = None, risk: bool = True) -> tuple[Found, dict[int, str]]:
    """Theory memory of rows given as columns (``models``, ``gpu_models``: the names per row, or their Codes),
    grouped by model; a refused row gets its error text (rows not in ``errors`` are answered)."""
    n = job.size
    out = _empty(n)
    errors: dict[int, str] = {}
    if not n:
        return out, errors
    gpu_codes = gpu_models if isinstance(gpu_models, Codes) else Codes.of(gpu_models.tolist())
    found = [_gpu(str(g)) for g in gpu_codes.table]
    known = np.array([not isinstance(g, str) for g in found])[gpu_codes.codes]
    specs = [g for g in found if not isinstance(g, str)] or [get_gpu("A100")]
    slot = np.cumsum([not isinstance(g, str) for g in found]) - 1
    gpus = GpuColumns(specs).take(np.maximum(slot[gpu_codes.codes], 0))
    model_codes = models if isinstance(models, Codes) else Codes.of(models.tolist())
    order = np.argsort(model_codes.codes, kind="stable")  # each model's rows become one slice: views, not copies
    sorted_codes = model_codes.codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    if (order != np.arange(n)).any():  # rows not yet grouped by model (the sweep's are)
        job, place, gpus, known = job.take(order), place.take(order), gpus.take(order), known[order]
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), n], strict=True):
        rows = order[a:b]
        arch = _arch(str(model_codes.table[sorted_codes[a]]))
        if isinstance(arch, str):
            for i in rows.tolist():
                errors[i] = arch
            continue
        for i in rows[~known[a:b]].tolist():
            errors[i] = str(found[gpu_codes.codes[i]])
        if known[a:b].all():
            part = theory_rows(job.take(slice(a, b)), place.take(slice(a, b)), arch, gpus.take(slice(a, b)),
                               calibration, risk)
        else:
            sub = a + np.flatnonzero(known[a:b])
            rows = order[sub]
            if not len(rows):
                continue
            part = theory_rows(job.take(sub), place.take(sub), arch, gpus.take(sub), calibration, risk)
        _fill(out, part, rows)
        for k, exc in part.errors.items():
            errors[int(rows[k])] = str(exc)
    return out, errors


def theory_batch(jobs: Sequence[Job], placements: Sequence[Placement], calibration: Calibration | None = None,
                 risk: bool = True) -> MemoryBatch:
    """Theory memory of ``jobs[i]`` on ``placements[i]`` for every i; a refused row gets its error.

    ``risk=False`` leaves ``oom_risk`` NaN (for callers that state their own risk, such as the hybrid).
    """
    models = np.array([j.model for j in jobs], dtype=object)
    gpu_models = np.array([p.gpu_model for p in placements], dtype=object)
    out, errors = theory_columns(JobColumns.of(jobs), PlacementColumns.of(placements), models, gpu_models,
                                 calibration, risk)
    return as_batch(out, errors)


def as_batch(out: Found, refused: dict[int, str]) -> MemoryBatch:
    errors: list[str | None] = [None] * len(out.peak)
    for i, text in refused.items():
        errors[i] = text
    return MemoryBatch(
        parts=out.parts, allocated=out.allocated, reserved=out.reserved, peak=out.peak, phase=phase_names(out.phase),
        capacity=out.capacity, oom_risk=out.oom_risk, micro_batch=out.micro_batch, errors=errors,
        releasable=out.releasable, cached=out.cached)


def phase_names(codes: np.ndarray) -> list[str]:
    """The phase of each row ("" where refused) from Found's indices into memory.PHASES."""
    return np.array(("", *mem.PHASES))[codes + 1].tolist()  # type: ignore[no-any-return]


def _fill(out: Found, part: Found, rows: np.ndarray) -> None:
    for key, values in part.parts.items():
        out.parts[key][rows] = values
    for name in ("allocated", "reserved", "peak", "releasable", "capacity", "oom_risk", "micro_batch", "cached",
                 "phase"):
        getattr(out, name)[rows] = getattr(part, name)


def gpu_groups(jobs: Sequence[Job], placements: Sequence[Placement]) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows that differ only in a (valid) GPU of the same generation and memory size share all of their memory
    (the CUDA side reads the generation: context and cuBLAS workspace; and the capacity: how much of FSDP's
    cached side-stream pools and loss segments stays on the GPU, cuda.py).

    Returns (first row of each group, group of each row), or None when no two rows share a group.
    A GPU that theory refuses for the row (unknown, or bf16 on Volta) keeps its own group.
    """
    groups: dict[tuple[Any, ...], int] = {}
    keys: dict[int, tuple[Any, ...]] = {}
    inverse = np.empty(len(jobs), dtype=np.int64)
    firsts: list[int] = []
    for i, (job, place) in enumerate(zip(jobs, placements, strict=True)):
        place_key = keys.get(id(place))
        if place_key is None:
            place_key = keys[id(place)] = tuple(v for k, v in place.__dict__.items() if k != "gpu_model")
        gpu = _gpu(place.gpu_model)
        refused = isinstance(gpu, str) or _gpu_error(job, gpu) is not None
        generation = None if refused else (gpu.architecture, gpu.memory_bytes)  # type: ignore[union-attr]
        key = (job, place_key, place.gpu_model if refused else generation)
        group = groups.setdefault(key, len(firsts))
        if group == len(firsts):
            firsts.append(i)
        inverse[i] = group
    return None if len(firsts) == len(jobs) else (np.array(firsts, dtype=np.int64), inverse)


def capacities(placements: Sequence[Placement]) -> np.ndarray:
    """Memory of each row's GPU in bytes (NaN for a GPU the catalogue does not know)."""
    found = [_gpu(p.gpu_model) for p in placements]
    return np.array([np.nan if isinstance(g, str) else float(g.memory_bytes) for g in found])
