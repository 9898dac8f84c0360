"""The avoid-OOM recommender over candidate placements (IBM ado-autoconf's name; the throughput objective is the
layout search of recommend/fastest.py).

* **avoid OOM** (``avoid_oom_batch``): the per-device batch is kept; the requested GPU count is kept
  when the job fits there (``oom_risk ≤ max_oom_risk``), else the fewest GPUs above it that fit
  (candidates of ``search.candidate_gpus``; the global batch grows with the GPUs, as in ado-autoconf).

All candidates of all jobs go into one ``Estimator.memory_batch`` call and one vectorised theory
throughput call (``theory.throughput_grid``); the choice per job is numpy. For theory, candidates that
share their memory (same micro-batch and GPU count; GPUs differ only in capacity) are computed once.
The tokens/s reported at the chosen placement is the estimator's own (``annotate``: the hybrid scales
theory by its learned ratio).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.estimators.contract import Estimator
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory.throughput_grid import job_constants, tokens_per_second
from autoconf.estimators.theory.vector import MemoryBatch, capacities, gpu_groups, theory_batch
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import GIB, Job, Placement


@dataclass
class Candidates:
    """Candidate rows: owner job, GPUs, accumulation steps, global batch, in each job's search order."""

    owner: np.ndarray
    gpus: np.ndarray
    accumulation: np.ndarray
    batch: np.ndarray

    def __len__(self) -> int:
        return len(self.owner)


@dataclass
class Choice:
    """Per job: the chosen candidate row (-1 = none), the reason when none, and the evaluated batch."""

    row: np.ndarray
    reasons: list[str]
    candidates: Candidates
    memory: MemoryBatch
    tokens_per_second: np.ndarray  # theory tokens/s of every candidate row
    evaluated: int  # candidate placements evaluated (memory + throughput)


def _rows(spec: list[list[tuple[int, int, int]]]) -> Candidates:
    owner = np.repeat(np.arange(len(spec)), [len(s) for s in spec])
    flat = np.array([c for s in spec for c in s], dtype=np.int64).reshape(-1, 3)
    return Candidates(owner=owner, gpus=flat[:, 0], accumulation=flat[:, 1], batch=flat[:, 2])


def avoid_oom_candidates(per_device: Sequence[int], requested: Sequence[int], max_gpus: int,
                         gpus_per_node: int) -> Candidates:
    """The requested GPU count first, then every larger candidate count; global batch = per-device × n."""
    counts = list(candidate_gpus(max_gpus, gpus_per_node))
    spec = [[(n, 1, b * n) for n in [r, *(c for c in counts if c > r)]] for b, r in zip(per_device, requested,
                                                                                       strict=True)]
    return _rows(spec)


def sequence_parallel_fits(jobs: Sequence[Job], cand: Candidates) -> Candidates:
    """The rows whose GPU count the job's sequence-parallel degree divides (the searches place no tp/pp, so
    every GPU is data-parallel: theory/memory.py micro_batch refuses the others)."""
    sp = np.array([j.sequence_parallel for j in jobs], dtype=np.int64)
    keep = cand.gpus % sp[cand.owner] == 0
    if keep.all():
        return cand
    return Candidates(owner=cand.owner[keep], gpus=cand.gpus[keep], accumulation=cand.accumulation[keep],
                      batch=cand.batch[keep])


def row_job(jobs: Sequence[Job], cand: Candidates, r: int) -> Job:
    """The job of candidate row ``r``: its owner's job at the row's global batch and accumulation."""
    return jobs[int(cand.owner[r])].model_copy(
        update={"batch_size": int(cand.batch[r]), "gradient_accumulation_steps": int(cand.accumulation[r])})


def row_placement(gpu_models: Sequence[str], cand: Candidates, r: int, gpus_per_node: int) -> Placement:
    n = int(cand.gpus[r])
    return Placement(gpu_model=gpu_models[int(cand.owner[r])], number_gpus=n, gpus_per_worker=min(n, gpus_per_node))


def evaluate(jobs: Sequence[Job], gpu_models: Sequence[str], cand: Candidates, estimator: Estimator,
             gpus_per_node: int) -> tuple[MemoryBatch, np.ndarray]:
    """Memory (one memory_batch call) and theory tokens/s (one numpy pass) of every candidate row."""
    seq = np.array([j.tokens_per_sample for j in jobs], dtype=float)
    tps = tokens_per_second(job_constants(jobs, gpu_models), cand.owner, seq, cand.batch, cand.gpus,
                            cand.accumulation, gpus_per_node)
    if estimator.name != "theory":
        rows = range(len(cand))
        return estimator.memory_batch([row_job(jobs, cand, r) for r in rows],
                                      [row_placement(gpu_models, cand, r, gpus_per_node) for r in rows]), tps
    return _theory_memory(estimator, jobs, gpu_models, cand, gpus_per_node), tps


def _theory_memory(estimator: Estimator, jobs: Sequence[Job], gpu_models: Sequence[str], cand: Candidates,
                   gpus_per_node: int) -> MemoryBatch:
    """memory_batch of the distinct (job at its micro-batch, GPU, count) rows only, spread back to all rows.

    Theory memory with one pipeline stage reads the global batch and the accumulation only through the
    micro-batch B / (n·g) (theory/memory.py micro_batch), so rows equal in it share their memory (learned
    models read B and g as features: ``evaluate`` gives them every row).
    """
    ids: dict[tuple[Job, str], int] = {}
    base = np.array([ids.setdefault((j.model_copy(update={"batch_size": 1, "gradient_accumulation_steps": 1}), g),
                                    len(ids)) for j, g in zip(jobs, gpu_models, strict=True)], dtype=np.int64)
    micro = cand.batch // (cand.gpus * cand.accumulation)
    keys = np.stack([base[cand.owner], micro, cand.gpus], axis=1)
    _, first, index = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    reps = [int(r) for r in first]
    unique_jobs = [jobs[int(cand.owner[r])].model_copy(update={"batch_size": int(micro[r] * cand.gpus[r]),
                                                                "gradient_accumulation_steps": 1}) for r in reps]
    unique_places = [row_placement(gpu_models, cand, r, gpus_per_node) for r in reps]
    return take(_across_gpus(estimator, unique_jobs, unique_places), index.reshape(-1))


def _across_gpus(estimator: Estimator, jobs: list[Job], places: list[Placement]) -> MemoryBatch:
    """Theory memory once per group of rows that differ only in the GPU (theory/vector.py gpu_groups: no
    phase formula reads the GPU); capacity and oom_risk (estimators/risk.py oom_probability) per row."""
    groups = gpu_groups(jobs, places) if getattr(estimator, "calibration", None) is None else None
    if groups is None:
        return estimator.memory_batch(jobs, places)
    firsts, inverse = groups
    one = take(theory_batch([jobs[i] for i in firsts], [places[i] for i in firsts], risk=False), inverse)
    ok = one.ok
    capacity = np.where(ok, capacities(places), np.nan)
    risk = np.full(len(jobs), np.nan)
    need = one.peak - one.releasable_or_zero()  # theory's risk (estimators/risk.py): free cached blocks are released
    methods = np.array([jobs[i].method for i in np.flatnonzero(ok).tolist()], dtype=object).astype(str)
    risk[ok] = oom_probability(need[ok], capacity[ok], method=methods)
    return MemoryBatch(parts=one.parts, allocated=one.allocated, reserved=one.reserved, peak=one.peak,
                       phase=one.phase, capacity=capacity, oom_risk=risk, micro_batch=one.micro_batch,
                       errors=one.errors, releasable=one.releasable)


def take(batch: MemoryBatch, index: np.ndarray) -> MemoryBatch:
    """Rows ``index`` of a MemoryBatch (repeats allowed)."""
    idx = index.tolist()
    return MemoryBatch(parts={k: v[index] for k, v in batch.parts.items()}, allocated=batch.allocated[index],
                       reserved=batch.reserved[index], peak=batch.peak[index], phase=[batch.phase[i] for i in idx],
                       capacity=batch.capacity[index],
                       oom_risk=batch.oom_risk[index], micro_batch=batch.micro_batch[index],
                       errors=[batch.errors[i] for i in idx],
                       releasable=None if batch.releasable is None else batch.releasable[index])


def _first_per_owner(owner: np.ndarray, mask: np.ndarray, jobs: int) -> np.ndarray:
    """First row of each owner where ``mask`` holds (-1 where none); rows are grouped by owner in order."""
    rows = np.flatnonzero(mask)
    chosen = np.full(jobs, -1, dtype=np.int64)
    owners, first = np.unique(owner[rows], return_index=True)
    chosen[owners] = rows[first]
    return chosen


def _refusals(cand: Candidates, memory: MemoryBatch, chosen: np.ndarray, max_oom_risk: float, what: str) -> list[str]:
    reasons = [""] * len(chosen)
    if not (chosen < 0).any():
        return reasons
    starts = np.searchsorted(cand.owner, np.arange(len(chosen) + 1))
    for i in np.flatnonzero(chosen < 0).tolist():
        rows = np.arange(starts[i], starts[i + 1])
        errors = [memory.errors[r] for r in rows if memory.errors[r]]
        if errors:
            reasons[i] = str(errors[0])
        elif not len(rows):
            reasons[i] = f"no candidate {what}"
        else:
            best = rows[np.nanargmin(memory.oom_risk[rows])]
            reasons[i] = (f"nothing fits with oom_risk ≤ {max_oom_risk} (best: {memory.peak[best] / GIB:.1f} GiB per "
                          f"GPU at {cand.gpus[best]} GPUs, capacity {memory.capacity[best] / GIB:.1f} GiB)")
    return reasons


def avoid_oom_batch(jobs: Sequence[Job], gpu_models: Sequence[str], requested: Sequence[int], estimator: Estimator,
                    *, max_gpus: int = MAX_GPUS, gpus_per_node: int = GPUS_PER_NODE,
                    max_oom_risk: float = MAX_OOM_RISK) -> Choice:
    """Keep ``requested[i]`` GPUs (per-device batch = jobs[i].batch_size) if the job fits there, else the fewest
    more."""
    cand = sequence_parallel_fits(jobs, avoid_oom_candidates([j.batch_size for j in jobs], requested, max_gpus,
                                                             gpus_per_node))
    memory, tps = evaluate(jobs, gpu_models, cand, estimator, gpus_per_node)
    fits = memory.ok & (memory.oom_risk <= max_oom_risk)
    chosen = _first_per_owner(cand.owner, fits, len(jobs))
    return Choice(chosen, _refusals(cand, memory, chosen, max_oom_risk, f"GPU count ≤ {max_gpus}"), cand, memory,
                  tps, len(cand))


@dataclass
class Chosen:
    """The chosen candidate of one job, with the estimator's own memory and tokens/s there."""

    number_gpus: int
    gradient_accumulation_steps: int
    batch_size: int  # global batch per optimizer step
    per_device_batch_size: int  # micro-batch per GPU per forward pass
    peak_gib: float
    oom_risk: float
    tokens_per_second: float | None
    notes: tuple[str, ...]


def chosen(choice: Choice, jobs: Sequence[Job], gpu_models: Sequence[str], estimator: Estimator,
           gpus_per_node: int) -> list[Chosen | None]:
    """Per job its Chosen (None when nothing was chosen): one memory_batch + annotate call over the chosen rows."""
    rows = [int(r) for r in choice.row if r >= 0]
    cand = choice.candidates
    picked = [row_job(jobs, cand, r) for r in rows]
    places = [row_placement(gpu_models, cand, r, gpus_per_node) for r in rows]
    batch = estimator.memory_batch(picked, places) if rows else None
    notes, tputs = estimator.annotate(picked, places, batch, np.ones(len(rows), dtype=bool)) if batch else ([], [])
    out: list[Chosen | None] = [None] * len(jobs)
    for k, r in enumerate(rows):
        n, g, b = int(cand.gpus[r]), int(cand.accumulation[r]), int(cand.batch[r])
        tput = tputs[k]
        out[int(cand.owner[r])] = Chosen(
            number_gpus=n, gradient_accumulation_steps=g, batch_size=b, per_device_batch_size=b // (n * g),
            peak_gib=float(batch.peak[k]) / GIB, oom_risk=float(np.clip(batch.oom_risk[k], 0.0, 1.0)),  # type: ignore[union-attr]
            tokens_per_second=tput.tokens_per_second if tput is not None else None, notes=tuple(notes[k]))
    return out
