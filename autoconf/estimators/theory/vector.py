"""Batch companion of ``theory.memory.estimate_memory``: many (job, placement) rows as numpy arrays.

The sweep and the recommender evaluate thousands of placements. Building a ``MemoryEstimate`` per
row costs more than the formulas, so here the per-phase byte counts come from the very functions
``estimate_memory`` uses (``memory._phases`` over ``states.model_states``), memoised per distinct
(job, placement without the GPU name: no formula of a phase reads it), and the rest of
``estimate_memory`` (phase choice, the CUDA side of ``cuda.peaks``, capacity, fit, risk) runs over all
rows at once. Every number equals the scalar path's bit for bit (tests/test_estimator_contract.py checks
it on random rows); errors are per row, never raised, with the scalar path's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import ValidationError

from autoconf.catalog import Architecture, GPUSpec, get_architecture, get_gpu
from autoconf.defaults import STATE_PARTS
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory import memory as mem
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.states import States, model_states
from autoconf.schema import Calibration, Job, Phase, Placement

TEXT_PARTS = STATE_PARTS
ALLOCATOR_PARTS = (*TEXT_PARTS, *mem.VISION_PARTS)  # the vision parts are 0.0 for text models
_CACHE_LIMIT = 500_000  # memoised phase tables (~1 KB each); cleared when full
# (phase names, bytes[phase, part], bytes outside the allocator, side-stream bytes, cached loss-segment bytes)
PhaseTable = tuple[tuple[Phase, ...], np.ndarray, float, float, float]
_PHASES: dict[tuple[Any, ...], PhaseTable | str] = {}
_STATES: dict[tuple[Any, ...], States] = {}


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


def _states(job: Job, arch: Architecture, placement: Placement, place_key: tuple[Any, ...]) -> States:
    """model_states, memoised: it does not read the batch size (nor the GPU), so jobs differing only
    in batch share it."""
    key = (tuple(v for k, v in job.__dict__.items() if k != "batch_size"), place_key)
    found = _STATES.get(key)
    if found is None:
        if len(_STATES) >= _CACHE_LIMIT:
            _STATES.clear()
        found = _STATES[key] = model_states(job, arch, placement)
    return found


def _compute(job: Job, placement: Placement, place_key: tuple[Any, ...],
             calib: Calibration | None) -> PhaseTable:
    """estimate_memory's checks and phase table for one row (raises as the scalar path does)."""
    arch = get_architecture(job.model)
    st = _states(job, arch, placement, place_key)
    phases = mem._phases(job, arch, placement, st, calib)
    names = tuple(phases)
    table = np.array([[phases[p][c] for c in ALLOCATOR_PARTS] for p in names], dtype=float)
    return names, table, st.outside, mem.side_stream_bytes(phases, st, placement), mem.loss_segment_cache(
        job, arch, placement)


def phase_table(job: Job, placement: Placement,
                calib: Calibration | None = None) -> PhaseTable | str:
    """(phase names, bytes[phase, part], bytes outside the allocator, side-stream bytes, cached loss-segment bytes)
    of one row, memoised; the error text if the row is refused."""
    place_key = tuple(v for k, v in placement.__dict__.items() if k != "gpu_model")
    key = (job, place_key, calib)
    found = _PHASES.get(key)
    if found is None:
        try:
            found = _compute(job, placement, place_key, calib)
        except (AutoconfError, ValidationError, ValueError) as exc:
            found = str(exc)
        if len(_PHASES) >= _CACHE_LIMIT:
            _PHASES.clear()
        _PHASES[key] = found
    return found


def _gpu_error(job: Job, gpu: GPUSpec) -> str | None:
    if job.dtype in ("bf16", "amp-bf16") and gpu.bf16_tflops is None and gpu.architecture == "Volta":
        return str(InvalidInputError("dtype", f"bf16 is not supported on {gpu.name}; use fp16 or fp32"))
    return None


def _row(job: Job, placement: Placement,
         calib: Calibration | None) -> tuple[PhaseTable | str, GPUSpec | None]:
    """The phase table (or error text) of a row, with the model/GPU errors in the scalar order."""
    try:
        arch = get_architecture(job.model)
        gpu = _gpu(placement.gpu_model)
        if isinstance(gpu, str):
            return gpu, None
        mem.check_parallelism(arch, placement)
    except (AutoconfError, ValueError) as exc:
        return str(exc), None
    error = _gpu_error(job, gpu)
    if error is not None:
        return error, None
    return phase_table(job, placement, calib), gpu


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


def _peaks(allocated: np.ndarray, outside: list[tuple[float, float, float]], jobs: Sequence[Job],
           placements: Sequence[Placement], gpus: list[GPUSpec], calib: Calibration | None) -> np.ndarray:
    """cuda.peaks per row (``outside``: bytes outside the allocator, side-stream bytes and cached loss-segment
    bytes): columns allocated, reserved, device, overhead, releasable."""
    rows = [cuda.peaks(a, o, j, p, g, resolve(j), calib, side, cached)
            for a, (o, side, cached), j, p, g in zip(allocated.tolist(), outside, jobs, placements, gpus, strict=True)]
    return np.array([[r.allocated, r.reserved, r.device, r.overhead, r.releasable] for r in rows],
                    dtype=float).reshape(-1, 5)


def theory_batch(jobs: Sequence[Job], placements: Sequence[Placement], calibration: Calibration | None = None,
                 risk: bool = True) -> MemoryBatch:
    """Theory memory of ``jobs[i]`` on ``placements[i]`` for every i; a refused row gets its error.

    ``risk=False`` leaves ``oom_risk`` NaN (for callers that state their own risk, such as the hybrid).
    """
    n = len(jobs)
    errors: list[str | None] = [None] * n
    tables: list[np.ndarray] = []
    names: list[tuple[Phase, ...]] = []
    outside: list[tuple[float, float, float]] = []
    gpus: list[GPUSpec] = []
    good: list[int] = []
    capacity = np.full(n, np.nan)
    for i, (job, place) in enumerate(zip(jobs, placements, strict=True)):
        found, gpu = _row(job, place, calibration)
        if isinstance(found, str):
            errors[i] = found
            continue
        assert gpu is not None  # a phase table comes with its GPU
        names.append(found[0])
        tables.append(found[1])
        outside.append((found[2], found[3], found[4]))
        gpus.append(gpu)
        capacity[i] = float(gpu.memory_bytes)
        good.append(i)
    keys = (*ALLOCATOR_PARTS, "overhead", "allocated", "reserved", "peak", "releasable", "oom_risk")
    out = {k: np.full(n, np.nan) for k in keys}
    phase = [""] * n
    micro = np.zeros(n, dtype=np.int64)
    cached = np.zeros(n)
    if good:
        sel = np.array(good)
        width = max(t.shape[0] for t in tables)  # a "load" phase makes some tables one row longer
        table = np.stack([np.vstack([np.full((width - t.shape[0], t.shape[1]), -np.inf), t]) for t in tables])
        names = [("load",) * (width - len(nm)) + nm for nm in names]  # padding rows never win: -inf
        totals = table[:, :, 0]
        for j in range(1, table.shape[2]):  # left to right, as sum() over the phase dict
            totals = totals + table[:, :, j]
        best = np.argmax(totals, axis=1)  # first maximum, as max() over the dict
        rows = np.arange(len(good))
        for j, part in enumerate(ALLOCATOR_PARTS):
            out[part][sel] = table[rows, best, j]
        peaks = _peaks(totals[rows, best], outside, [jobs[i] for i in good], [placements[i] for i in good], gpus,
                       calibration)
        out["allocated"][sel], out["reserved"][sel] = peaks[:, 0], peaks[:, 1]
        out["peak"][sel], out["overhead"][sel], out["releasable"][sel] = peaks[:, 2], peaks[:, 3], peaks[:, 4]
        if risk:
            need = (out["peak"][sel] - out["releasable"][sel]).tolist()
            out["oom_risk"][sel] = [mem.oom_probability(p, c, method=jobs[i].method) for p, c, i in
                                    zip(need, capacity[sel].tolist(), good, strict=True)]
        cached[sel] = [o[2] for o in outside]
        for k, i in enumerate(good):
            phase[i] = names[k][best[k]]
            micro[i] = mem.micro_batch(jobs[i], placements[i])
    return MemoryBatch(
        parts={k: out[k] for k in (*ALLOCATOR_PARTS, "overhead")}, allocated=out["allocated"],
        reserved=out["reserved"], peak=out["peak"],
        phase=phase, capacity=capacity, oom_risk=out["oom_risk"], micro_batch=micro, errors=errors,
        releasable=out["releasable"], cached=cached,
    )
