"""Minimum-GPU / workers recommendation: a search over placements on top of any estimator (design §5).

Candidates are 1, 2, 4, 8 GPUs (powers of two within one worker), then whole workers of
``gpus_per_node`` GPUs up to ``max_gpus``; a candidate is skipped when the global batch does not split
evenly over its GPUs (ado's SFTTrainer rejects those points too); the first candidate whose
``oom_risk`` is at most ``max_oom_risk`` wins. "Nothing fits" is an answer (``can_recommend = 0`` with
a reason), as are an unknown model or GPU.

The search runs on batches (``recommend_batch``): candidate placements of many jobs go together
into calls of the estimator's batch memory function, so a sweep of thousands of jobs costs a dozen
vectorised calls, not thousands of scalar ones, and one recommendation costs one call. ``recommend_frame``
(sweeps, every ``estimate_frame``) builds the batch columns of design §8 on top of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoconf.catalog import approximation_note
from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.estimators.contract import Estimator, get_estimator
from autoconf.estimators.theory.vector import ALLOCATOR_PARTS, MemoryBatch
from autoconf.schema import GIB, Estimate, Job, MemoryEstimate, Placement, Recommendation, Strategy

log = logging.getLogger(__name__)

# From this many jobs on, recommend_batch evaluates one candidate per job per wave (rows saved beat the
# ~0.5 ms of a batch call); below it every candidate goes into a single call.
WAVE_MIN_JOBS = 64


def candidate_gpus(max_gpus: int = MAX_GPUS, gpus_per_node: int = GPUS_PER_NODE) -> Iterator[int]:
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
    tokens_per_second: np.ndarray = field(default_factory=lambda: np.zeros(0))  # at the chosen placement, else NaN


def new_search(n: int) -> BatchSearch:
    keys = (*ALLOCATOR_PARTS, "overhead", "allocated", "reserved", "peak", "releasable", "capacity", "oom_risk")
    return BatchSearch(number_gpus=np.zeros(n, dtype=np.int64), reasons=[""] * n, errors=[None] * n,
                       placements=[None] * n, memory={k: np.full(n, np.nan) for k in keys}, phase=[""] * n,
                       notes=[()] * n, throughput=[None] * n, tokens_per_second=np.full(n, np.nan))


def _store(search: BatchSearch, rows: np.ndarray, batch: MemoryBatch, sel: np.ndarray) -> None:
    for key in (*ALLOCATOR_PARTS, "overhead"):
        search.memory[key][rows] = batch.parts[key][sel]
    search.memory["peak"][rows], search.memory["capacity"][rows] = batch.peak[sel], batch.capacity[sel]
    search.memory["allocated"][rows], search.memory["reserved"][rows] = batch.allocated[sel], batch.reserved[sel]
    search.memory["oom_risk"][rows], search.memory["releasable"][rows] = batch.oom_risk[sel], batch.releasable_or_zero()[sel]
    for r, s in zip(rows.tolist(), sel.tolist(), strict=True):
        search.phase[r] = batch.phase[s]


def _candidates(jobs: Sequence[Job], pending: np.ndarray, max_gpus: int, gpus_per_node: int) -> dict[int, list[int]]:
    """The GPU counts each pending job may use, in search order: the sequence-parallel degree divides the GPUs
    (the search places no tp/pp, so they are all data-parallel) and the global batch splits evenly over the
    data-parallel groups (memory.micro_batch's rule)."""
    counts = list(candidate_gpus(max_gpus, gpus_per_node))
    out = {}
    for i in np.flatnonzero(pending).tolist():
        job = jobs[i]
        sp = job.sequence_parallel
        out[int(i)] = [n for n in counts
                       if n % sp == 0 and job.batch_size % (n // sp * job.gradient_accumulation_steps) == 0]
    return out


def recommend_batch(
    jobs: Sequence[Job], gpu_models: Sequence[str], estimator: Estimator, *, max_gpus: int = MAX_GPUS,
    gpus_per_node: int = GPUS_PER_NODE, max_oom_risk: float = MAX_OOM_RISK, strict: bool = False,
    strategies: Sequence[Strategy | None] | None = None, detail: bool = True,
) -> BatchSearch:
    """recommend() for many jobs at once, in waves of batch calls.

    ``detail=False`` (batch columns) keeps tokens/s of the chosen placements as an array and builds no
    ThroughputEstimate objects (``Estimator.annotate_rows``).

    Few jobs: one wave holds every candidate of every job (one call). Many jobs: each wave holds the
    next candidate of every undecided job, so a job that fits on 1 GPU costs one row, not eleven.
    Per job, candidates are read in search order: an error refuses the job, the first candidate with
    ``oom_risk <= max_oom_risk`` is the answer, as in the scalar search.
    """
    n = len(jobs)
    search = new_search(n)
    strategies = strategies or [None] * n
    pending = np.ones(n, dtype=bool)
    if strict:
        for i, (job, gpu) in enumerate(zip(jobs, gpu_models, strict=True)):
            inside, why = estimator.training_domain(job, gpu)
            if not inside:
                search.reasons[i] = f"outside the training domain of model version {estimator.model_version}: {why}"
                pending[i] = False
    todo = _candidates(jobs, pending, max_gpus, gpus_per_node)
    per_wave = max(map(len, todo.values()), default=0) if n < WAVE_MIN_JOBS else 1
    tried = np.zeros(n, dtype=bool)
    cache: dict[tuple[str, int, str | None], Placement] = {}
    while todo:
        who = [i for i, left in todo.items() for _ in left[:per_wave]]
        counts = [c for left in todo.values() for c in left[:per_wave]]
        places = [cache.get(key) or cache.setdefault(key, _placement(key[0], c, gpus_per_node, key[2]))
                  for i, c in zip(who, counts, strict=True) for key in [(gpu_models[i], c, strategies[i])]]
        pair_jobs = [jobs[i] for i in who]
        _wave(search, estimator, estimator.memory_batch(pair_jobs, places), who, counts, places, pair_jobs, tried,
              max_oom_risk, detail)
        still = _still(todo, search)
        todo = {i: left[per_wave:] for i, left in todo.items() if i in still and left[per_wave:]}
    for i in range(n):
        if not (search.number_gpus[i] or search.errors[i] is not None or search.reasons[i]):
            search.reasons[i] = _nothing_fits(search, i, max_gpus, max_oom_risk) if tried[i] else (
                f"batch_size {jobs[i].batch_size} does not split evenly over any candidate GPU count ≤ {max_gpus}"
                + (f" that sequence_parallel {jobs[i].sequence_parallel} divides" if jobs[i].sequence_parallel > 1 else ""))
        flag = approximation_note(jobs[i].model)  # every answer about an approximate architecture says so
        if flag and flag not in search.reasons[i]:
            search.reasons[i] = "; ".join(filter(None, [search.reasons[i], flag]))
    return search


def _still(todo: dict[int, list[int]], search: BatchSearch) -> set[int]:
    """Jobs of ``todo`` neither answered nor refused."""
    return {i for i in todo if not search.number_gpus[i] and search.errors[i] is None}


def _wave(search: BatchSearch, estimator: Estimator, batch: MemoryBatch, who: list[int], counts: list[int],
          places: list[Placement], pair_jobs: list[Job], tried: np.ndarray, max_oom_risk: float,
          detail: bool = True) -> None:
    """Read one wave's candidates in order; store memory at the chosen (else last tried) placement."""
    last: dict[int, int] = {}
    chosen = np.zeros(len(who), dtype=bool)
    done: set[int] = set()
    for k, i in enumerate(who):
        if i in done:
            continue
        error = batch.errors[k]
        if error is not None:
            search.errors[i] = search.reasons[i] = error
            done.add(i)
            continue
        last[i], tried[i] = k, True
        if batch.oom_risk[k] <= max_oom_risk:
            chosen[k] = True
            done.add(i)
            search.number_gpus[i] = counts[k]
    rows = np.array(list(last), dtype=np.int64)
    if len(rows):
        sel = np.array([last[i] for i in rows], dtype=np.int64)
        _store(search, rows, batch, sel)
        for i, k in zip(rows.tolist(), sel.tolist(), strict=True):
            search.placements[i] = places[k]
    if not chosen.any():
        return
    picked = np.flatnonzero(chosen).tolist()
    if detail:
        notes, tputs = estimator.annotate(pair_jobs, places, batch, chosen)
        speed = [np.nan if t is None else t.tokens_per_second for t in tputs]
    else:
        notes, values = estimator.annotate_rows(pair_jobs, places, batch, chosen)
        tputs, speed = [None] * len(picked), values.tolist()
    for k, note, tput, tps in zip(picked, notes, tputs, speed, strict=True):
        i = who[k]
        search.notes[i], search.throughput[i], search.reasons[i] = note, tput, "; ".join(note[1:])
        search.tokens_per_second[i] = tps


def _nothing_fits(search: BatchSearch, i: int, max_gpus: int, max_oom_risk: float) -> str:
    place = search.placements[i]
    best = f"{search.memory['peak'][i] / GIB:.1f} GiB per GPU at {place.number_gpus if place else 0} GPUs"
    return (f"nothing fits up to {max_gpus} GPUs with oom_risk ≤ {max_oom_risk} (best: {best}, "
            f"capacity {search.memory['capacity'][i] / GIB:.1f} GiB)")


def _memory_estimate(search: BatchSearch, i: int, estimator: Estimator) -> MemoryEstimate:
    m = search.memory
    return MemoryEstimate(
        **{f"{p}_bytes": float(m[p][i]) for p in (*ALLOCATOR_PARTS, "overhead")}, peak_bytes=float(m["peak"][i]),
        peak_allocated_bytes=float(m["allocated"][i]), peak_reserved_bytes=float(m["reserved"][i]),
        releasable_bytes=float(np.nan_to_num(m["releasable"][i])), peak_phase=search.phase[i],
        capacity_bytes=float(m["capacity"][i]), fits=bool(m["peak"][i] <= m["capacity"][i]),
        oom_risk=float(np.clip(m["oom_risk"][i], 0.0, 1.0)), estimator=estimator.name, notes=search.notes[i],
    )


def recommend(
    job: Job,
    gpu_model: str,
    estimator: Estimator | None = None,
    *,
    max_gpus: int = MAX_GPUS,
    gpus_per_node: int = GPUS_PER_NODE,
    max_oom_risk: float = MAX_OOM_RISK,
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
    est = Estimate(job=job, placement=place, memory=_memory_estimate(search, 0, estimator),
                   throughput=search.throughput[0],
                   estimator=estimator.name, model_version=estimator.model_version)
    workers = -(-n // gpus_per_node)
    return Recommendation(can_recommend=1, gpus=n // workers, workers=workers, number_gpus=n, estimate=est, **common)
