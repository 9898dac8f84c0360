"""Minimum-GPU / workers recommendation: a search over placements on top of any estimator (design §5).

Candidates are 1, 2, 4, 8 GPUs (powers of two within one worker), then whole workers of
``gpus_per_node`` GPUs up to ``max_gpus``; a candidate is skipped when the global batch does not split
evenly over its GPUs (ado's SFTTrainer rejects those points too); the first candidate whose
``oom_risk`` is at most ``max_oom_risk`` wins. "Nothing fits" is an answer (``can_recommend = 0`` with
a reason), as are an unknown model or GPU.

The search runs on batches (``recommend_batch``): each candidate GPU count is one call of the
estimator's batch memory function over every job still undecided, so a sweep of thousands of jobs
costs a dozen vectorised calls, not thousands of scalar ones. ``recommend_frame`` (sweeps, every
``estimate_frame``) builds the batch columns of design §8 on top of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.errors import AutoconfError
from autoconf.estimators import Estimator, get_estimator
from autoconf.frame import MEMORY_COLUMNS, OUTPUT_COLUMNS, error_text, row_inputs
from autoconf.schema import GIB, Estimate, Job, MemoryEstimate, Placement, Recommendation, Strategy
from autoconf.theory.vector import ALLOCATOR_PARTS, MemoryBatch, theory_batch

log = logging.getLogger(__name__)

BatchFn = Callable[[Sequence[Job], Sequence[Placement]], MemoryBatch]
Progress = Callable[[int, int], None]


def candidate_gpus(max_gpus: int = 64, gpus_per_node: int = 8) -> Iterator[int]:
    """1, 2, 4, ... up to one node, then 2, 3, ... whole nodes, all ≤ max_gpus."""
    n = 1
    while n < gpus_per_node and n <= max_gpus:
        yield n
        n *= 2
    workers = 1
    while workers * gpus_per_node <= max_gpus:
        yield workers * gpus_per_node
        workers += 1


def _placement(gpu_model: str, n: int, gpus_per_node: int, strategy: Strategy | None) -> Placement:
    return Placement(gpu_model=gpu_model, number_gpus=n, gpus_per_worker=min(n, gpus_per_node), strategy=strategy)


def _scalar_batch(estimator: Estimator, jobs: Sequence[Job], placements: Sequence[Placement]) -> MemoryBatch:
    """A MemoryBatch from per-row estimate() calls, for estimators without a batch function."""
    rows: list[MemoryEstimate | str] = []
    for job, place in zip(jobs, placements):
        try:
            rows.append(estimator.estimate(job, place).memory)
        except (AutoconfError, ValidationError, ValueError) as exc:
            rows.append(error_text(exc))
    def col(name: str) -> np.ndarray:
        return np.array([np.nan if isinstance(m, str) else float(getattr(m, name)) for m in rows])
    parts = {p: col(f"{p}_bytes") for p in (*ALLOCATOR_PARTS, "overhead")}
    return MemoryBatch(parts=parts, allocated=col("peak_bytes") - parts["overhead"], peak=col("peak_bytes"),
                       phase=["" if isinstance(m, str) else m.peak_phase for m in rows], capacity=col("capacity_bytes"),
                       oom_risk=col("oom_risk"), micro_batch=np.zeros(len(rows), dtype=np.int64),
                       errors=[m if isinstance(m, str) else None for m in rows])


def batch_function(estimator: Estimator) -> BatchFn:
    """The estimator's vectorised memory function (theory's from theory.vector)."""
    if hasattr(estimator, "memory_batch"):
        return estimator.memory_batch  # type: ignore[no-any-return]
    if estimator.name == "theory":
        return partial(theory_batch, calibration=getattr(estimator, "calibration", None))
    return partial(_scalar_batch, estimator)


@dataclass
class BatchSearch:
    """Per job: the chosen GPU count (0 = none), the refusal reason, and memory at the chosen/last placement."""

    number_gpus: np.ndarray
    reasons: list[str]
    errors: list[str | None]
    placements: list[Placement | None]
    memory: dict[str, np.ndarray]  # parts, peak, capacity, oom_risk: chosen placement, else the last one tried
    phase: list[str]
    notes: list[tuple[str, ...]] = field(default_factory=list)
    throughput: list[Any] = field(default_factory=list)  # ThroughputEstimate | None at the chosen placement


def _new_search(n: int) -> BatchSearch:
    keys = (*ALLOCATOR_PARTS, "overhead", "peak", "capacity", "oom_risk")
    return BatchSearch(number_gpus=np.zeros(n, dtype=np.int64), reasons=[""] * n, errors=[None] * n,
                       placements=[None] * n, memory={k: np.full(n, np.nan) for k in keys}, phase=[""] * n,
                       notes=[()] * n, throughput=[None] * n)


def _store(search: BatchSearch, rows: np.ndarray, batch: MemoryBatch, sel: np.ndarray) -> None:
    for key in (*ALLOCATOR_PARTS, "overhead"):
        search.memory[key][rows] = batch.parts[key][sel]
    search.memory["peak"][rows], search.memory["capacity"][rows] = batch.peak[sel], batch.capacity[sel]
    search.memory["oom_risk"][rows] = batch.oom_risk[sel]
    for r, s in zip(rows.tolist(), sel.tolist()):
        search.phase[r] = batch.phase[s]


def _notes_and_throughput(estimator: Estimator, jobs: list[Job], places: list[Placement], batch: MemoryBatch,
                          chosen: np.ndarray) -> tuple[list[tuple[str, ...]], list[Any]]:
    """Notes and throughput of the chosen rows of one level: batched where the estimator can."""
    idx = np.flatnonzero(chosen)
    if hasattr(estimator, "tokens_per_second") and hasattr(estimator, "notes"):
        return [estimator.notes(batch, i) for i in idx], estimator.tokens_per_second(jobs, places, batch, chosen)
    answers = [estimator.estimate(jobs[i], places[i]) for i in idx]  # same memory as the batch, plus notes
    return [a.memory.notes for a in answers], [a.throughput for a in answers]


def recommend_batch(
    jobs: Sequence[Job], gpu_models: Sequence[str], estimator: Estimator, *, max_gpus: int = 64,
    gpus_per_node: int = 8, max_oom_risk: float = 0.05, strict: bool = False,
    strategies: Sequence[Strategy | None] | None = None, progress: Progress | None = None,
) -> BatchSearch:
    """recommend() for many jobs at once: one batch memory call per candidate GPU count."""
    n = len(jobs)
    search, fn = _new_search(n), batch_function(estimator)
    strategies = strategies or [None] * n
    pending = np.ones(n, dtype=bool)
    if strict and hasattr(estimator, "in_training_domain"):
        for i, (job, gpu) in enumerate(zip(jobs, gpu_models)):
            inside, why = estimator.in_training_domain(job, gpu)
            if not inside:
                search.reasons[i] = f"outside the training domain of model version {estimator.model_version}: {why}"
                pending[i] = False
    tried = np.zeros(n, dtype=bool)
    batch_sizes = np.array([j.batch_size for j in jobs], dtype=np.int64)
    accum = np.array([j.gradient_accumulation_steps for j in jobs], dtype=np.int64)
    cache: dict[tuple, Placement] = {}
    for gpus in candidate_gpus(max_gpus, gpus_per_node):
        rows = np.flatnonzero(pending & (batch_sizes % (gpus * accum) == 0))
        if not len(rows):
            continue
        level_jobs = [jobs[i] for i in rows]
        level_places = [cache.setdefault((gpu_models[i], gpus, strategies[i]),
                                         _placement(gpu_models[i], gpus, gpus_per_node, strategies[i])) for i in rows]
        batch = fn(level_jobs, level_places)
        failed = np.array([e is not None for e in batch.errors])
        for k in np.flatnonzero(failed):
            search.errors[rows[k]] = batch.errors[k]
            search.reasons[rows[k]] = batch.errors[k]  # type: ignore[assignment]
        good = ~failed
        _store(search, rows[good], batch, np.flatnonzero(good))
        tried[rows[good]] = True
        chosen = good & (batch.oom_risk <= max_oom_risk)
        for k in np.flatnonzero(good):
            search.placements[rows[k]] = level_places[k]
        notes, tputs = _notes_and_throughput(estimator, level_jobs, level_places, batch, chosen)
        for k, note, tput in zip(np.flatnonzero(chosen), notes, tputs):
            search.number_gpus[rows[k]], search.notes[rows[k]], search.throughput[rows[k]] = gpus, note, tput
            search.reasons[rows[k]] = "; ".join(note[1:])
        pending[rows[failed | chosen]] = False
        if progress:
            progress(int(n - pending.sum()), n)
    for i in np.flatnonzero(pending):
        search.reasons[i] = _nothing_fits(search, i, max_gpus, max_oom_risk) if tried[i] else (
            f"batch_size {jobs[i].batch_size} does not split evenly over any candidate GPU count ≤ {max_gpus}")
    return search


def _nothing_fits(search: BatchSearch, i: int, max_gpus: int, max_oom_risk: float) -> str:
    place = search.placements[i]
    best = f"{search.memory['peak'][i] / GIB:.1f} GiB per GPU at {place.number_gpus if place else 0} GPUs"
    return (f"nothing fits up to {max_gpus} GPUs with oom_risk ≤ {max_oom_risk} (best: {best}, "
            f"capacity {search.memory['capacity'][i] / GIB:.1f} GiB)")


def _memory_estimate(search: BatchSearch, i: int, estimator: Estimator) -> MemoryEstimate:
    m = search.memory
    return MemoryEstimate(
        **{f"{p}_bytes": float(m[p][i]) for p in (*ALLOCATOR_PARTS, "overhead")}, peak_bytes=float(m["peak"][i]),
        peak_phase=search.phase[i], capacity_bytes=float(m["capacity"][i]), fits=bool(m["peak"][i] <= m["capacity"][i]),
        oom_risk=float(np.clip(m["oom_risk"][i], 0.0, 1.0)), estimator=estimator.name, notes=search.notes[i],
    )


def recommend(
    job: Job,
    gpu_model: str,
    estimator: Estimator | None = None,
    *,
    max_gpus: int = 64,
    gpus_per_node: int = 8,
    max_oom_risk: float = 0.05,
    strict: bool = False,
    strategy: Strategy | None = None,
) -> Recommendation:
    """Smallest placement of ``job`` on ``gpu_model`` whose out-of-memory risk is acceptable."""
    estimator = estimator or get_estimator()
    search = recommend_batch([job], [gpu_model], estimator, max_gpus=max_gpus, gpus_per_node=gpus_per_node,
                             max_oom_risk=max_oom_risk, strict=strict, strategies=[strategy])
    n = int(search.number_gpus[0])
    common = {"estimator": estimator.name, "model_version": estimator.model_version, "reason": search.reasons[0]}
    if not n:
        return Recommendation(can_recommend=0, gpus=0, workers=0, number_gpus=0, **common)
    place = search.placements[0]
    assert place is not None
    est = Estimate(job=job, placement=place, memory=_memory_estimate(search, 0, estimator), throughput=search.throughput[0],
                   estimator=estimator.name, model_version=estimator.model_version)
    workers = -(-n // gpus_per_node)
    return Recommendation(can_recommend=1, gpus=n // workers, workers=workers, number_gpus=n, estimate=est, **common)


def _frame_inputs(frame: pd.DataFrame) -> tuple[list[Job | None], list[Placement | None], list[bool], list[str | None]]:
    """Job and placement per row (number_gpus given or not), or the row's error."""
    jobs: list[Job | None] = []
    places: list[Placement | None] = []
    given: list[bool] = []
    errors: list[str | None] = []
    for row in frame.to_dict(orient="records"):
        try:
            job, place = row_inputs(row, default_gpus=1)
        except (AutoconfError, ValidationError, TypeError, ValueError) as exc:
            jobs.append(None), places.append(None), given.append(False), errors.append(error_text(exc))
            continue
        n = row.get("number_gpus")
        jobs.append(job), places.append(place), errors.append(None)
        given.append(n is not None and not (isinstance(n, float) and np.isnan(n)))
    return jobs, places, given, errors


def _given_columns(estimator: Estimator, jobs: list[Job], places: list[Placement]) -> tuple[MemoryBatch, list[Any]]:
    batch = batch_function(estimator)(jobs, places)
    ok = np.array([e is None for e in batch.errors])
    _, tputs = _notes_and_throughput(estimator, jobs, places, batch, ok) if ok.any() else ([], [])
    out: list[Any] = [None] * len(jobs)
    for k, t in zip(np.flatnonzero(ok), tputs):
        out[k] = t
    return batch, out


def recommend_frame(frame: pd.DataFrame, estimator: Estimator, *, max_gpus: int = 64, gpus_per_node: int = 8,
                    max_oom_risk: float = 0.05, strict: bool = False, progress: Progress | None = None) -> pd.DataFrame:
    """Batch columns of design §8: input columns + estimates + the recommendation, one row per input row.

    With ``number_gpus`` in a row the memory columns are for that placement; without it, for the
    recommended one (or the largest tried when nothing fits). A bad row gets its ``error``.
    """
    jobs, places, given, errors = _frame_inputs(frame)
    valid = [i for i, j in enumerate(jobs) if j is not None]
    search = recommend_batch([jobs[i] for i in valid], [places[i].gpu_model for i in valid], estimator,  # type: ignore[union-attr]
                             max_gpus=max_gpus, gpus_per_node=gpus_per_node, max_oom_risk=max_oom_risk, strict=strict,
                             strategies=[places[i].strategy for i in valid], progress=progress)  # type: ignore[union-attr]
    n = len(frame)
    out: dict[str, Any] = {c: [None] * n for c in OUTPUT_COLUMNS}
    mem = {k: np.full(n, np.nan) for k in (*MEMORY_COLUMNS, "peak", "capacity", "oom_risk")}
    tput: list[Any] = [None] * n
    for k, i in enumerate(valid):
        for key in mem:
            mem[key][i] = search.memory[key][k]
        tput[i] = search.throughput[k]
        chosen = int(search.number_gpus[k])
        workers = -(-chosen // gpus_per_node) if chosen else 0
        out["can_recommend"][i], out["workers"][i] = int(bool(chosen)), workers
        out["gpus"][i] = chosen // workers if chosen else 0
        out["reason"][i], errors[i] = search.reasons[k], search.errors[k]
    fixed = [i for i in valid if given[i] and errors[i] is None]
    if fixed:
        batch, tputs = _given_columns(estimator, [jobs[i] for i in fixed], [places[i] for i in fixed])  # type: ignore[misc]
        for k, i in enumerate(fixed):
            for part in MEMORY_COLUMNS:
                mem[part][i] = batch.parts[part][k]
            mem["peak"][i], mem["capacity"][i], mem["oom_risk"][i] = batch.peak[k], batch.capacity[k], batch.oom_risk[k]
            tput[i], errors[i] = tputs[k], batch.errors[k]
    has = np.isfinite(mem["peak"])
    for part in MEMORY_COLUMNS:
        out[f"{part}_gib"] = np.round(mem[part] / GIB, 4)
    out["peak_memory_gib"], out["capacity_gib"] = np.round(mem["peak"] / GIB, 4), np.round(mem["capacity"] / GIB, 4)
    out["fits"] = np.where(has, mem["peak"] <= mem["capacity"], None)
    out["oom_risk"] = np.round(np.clip(mem["oom_risk"], 0.0, 1.0), 4)
    out["tokens_per_second"] = [round(t.tokens_per_second, 2) if t is not None else None for t in tput]
    out["estimator"], out["model_version"], out["error"] = [estimator.name] * n, [estimator.model_version] * n, errors
    extra = [c for c in frame.columns if c not in OUTPUT_COLUMNS]
    return pd.concat([frame[extra].reset_index(drop=True), pd.DataFrame(out)[list(OUTPUT_COLUMNS)]], axis=1)
