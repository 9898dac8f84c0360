"""Batch columns (design §8) with the recommendation: input rows in, estimates + recommendation out.

The batch form of autoconf/recommend/search.py used by ``autoconf-gpu sweep`` and the estimators'
``estimate_frame``: rows are searched in chunks with ``recommend_batch``; rows that give
``number_gpus`` also get the memory columns of that placement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.errors import AutoconfError, describe
from autoconf.estimators.contract import Estimator
from autoconf.estimators.frame import MEMORY_COLUMNS, OUTPUT_COLUMNS, VISION_COLUMNS, row_inputs
from autoconf.estimators.theory.vector import MemoryBatch
from autoconf.recommend.search import BatchSearch, new_search, recommend_batch
from autoconf.schema import Job, Placement, sweep_arrays

Progress = Callable[[int, int], None]
FRAME_CHUNK = 1000  # jobs per batch call in recommend_frame: bounds memory, paces the progress bar


def _frame_inputs(frame: pd.DataFrame) -> tuple[list[Job | None], list[Placement | None], list[bool], list[str | None]]:
    """Job and placement per row (number_gpus given or not), or the row's error."""
    jobs: list[Job | None] = []
    places: list[Placement | None] = []
    given: list[bool] = []
    errors: list[str | None] = []
    for row in frame.to_dict(orient="records"):
        try:
            job, place = row_inputs(row, default_gpus=1)
        except (AutoconfError, ValidationError, TypeError, ValueError, OverflowError) as exc:
            jobs.append(None)
            places.append(None)
            given.append(False)
            errors.append(describe(exc, with_input=False))
            continue
        n = row.get("number_gpus")
        jobs.append(job)
        places.append(place)
        errors.append(None)
        given.append(n is not None and not (isinstance(n, float) and np.isnan(n)))
    return jobs, places, given, errors


def _given_columns(estimator: Estimator, jobs: list[Job], places: list[Placement]) -> tuple[MemoryBatch, np.ndarray]:
    batch = estimator.memory_batch(jobs, places)
    ok = np.array([e is None for e in batch.errors], dtype=bool)
    out = np.full(len(jobs), np.nan)
    if ok.any():
        out[ok] = estimator.annotate_rows(jobs, places, batch, ok)[1]
    return batch, out


def _concat(parts: list[BatchSearch]) -> BatchSearch:
    if not parts:
        return new_search(0)
    return BatchSearch(
        number_gpus=np.concatenate([p.number_gpus for p in parts]), reasons=sum((p.reasons for p in parts), []),
        errors=sum((p.errors for p in parts), []), placements=sum((p.placements for p in parts), []),
        memory={k: np.concatenate([p.memory[k] for p in parts]) for k in parts[0].memory},
        phase=sum((p.phase for p in parts), []), notes=sum((p.notes for p in parts), []),
        throughput=sum((p.throughput for p in parts), []),
        tokens_per_second=np.concatenate([p.tokens_per_second for p in parts]))


def _figures(mem: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The memory arrays under the Answer's field names (bytes), the risk bounded to [0, 1] as Answer bounds it."""
    named = {"peak": "peak_bytes", "capacity": "capacity_bytes", "allocated": "peak_allocated_bytes",
             "reserved": "peak_reserved_bytes"}
    out = {named.get(key, f"{key}_bytes"): value for key, value in mem.items() if key != "oom_risk"}
    return out | {"oom_risk": np.clip(mem["oom_risk"], 0.0, 1.0)}


def recommend_frame(frame: pd.DataFrame, estimator: Estimator, *, max_gpus: int = MAX_GPUS,
                    gpus_per_node: int = GPUS_PER_NODE, max_oom_risk: float = MAX_OOM_RISK, strict: bool = False,
                    progress: Progress | None = None) -> pd.DataFrame:
    """Batch columns of design §8: input columns + estimates + the recommendation, one row per input row.

    With ``number_gpus`` in a row the memory columns are for that placement; without it, for the
    recommended one (or the largest tried when nothing fits). A bad row gets its ``error``.
    """
    jobs, places, given, errors = _frame_inputs(frame)
    ok_jobs = {i: j for i, j in enumerate(jobs) if j is not None}
    ok_places = {i: p for i, p in enumerate(places) if p is not None}
    valid = list(ok_jobs)
    parts = []
    for start in range(0, len(valid), FRAME_CHUNK):
        chunk = valid[start:start + FRAME_CHUNK]
        parts.append(recommend_batch(
            [ok_jobs[i] for i in chunk], [ok_places[i].gpu_model for i in chunk], estimator,
            max_gpus=max_gpus, gpus_per_node=gpus_per_node, max_oom_risk=max_oom_risk, strict=strict,
            strategies=[ok_places[i].strategy for i in chunk], detail=False))
        if progress:
            progress(start + len(chunk), len(valid))
    search = _concat(parts)
    n = len(frame)
    out: dict[str, Any] = {c: [None] * n for c in OUTPUT_COLUMNS}
    columns = (*MEMORY_COLUMNS, *VISION_COLUMNS)
    mem = {k: np.full(n, np.nan) for k in (*columns, "allocated", "reserved", "peak", "capacity", "oom_risk")}
    tput = np.full(n, np.nan)
    for k, i in enumerate(valid):
        for key in mem:
            mem[key][i] = search.memory[key][k]
        tput[i] = search.tokens_per_second[k]
        chosen = int(search.number_gpus[k])
        workers = -(-chosen // gpus_per_node) if chosen else 0
        out["can_recommend"][i], out["workers"][i] = int(bool(chosen)), workers
        out["gpus"][i] = chosen // workers if chosen else 0
        out["reason"][i], errors[i] = search.reasons[k], search.errors[k]
    fixed = [i for i in valid if given[i] and errors[i] is None]
    if fixed:
        batch, tputs = _given_columns(estimator, [ok_jobs[i] for i in fixed], [ok_places[i] for i in fixed])
        for k, i in enumerate(fixed):
            for part in columns:
                mem[part][i] = batch.parts[part][k]
            mem["peak"][i], mem["capacity"][i], mem["oom_risk"][i] = batch.peak[k], batch.capacity[k], batch.oom_risk[k]
            mem["allocated"][i], mem["reserved"][i] = batch.allocated[k], batch.reserved[k]
            tput[i], errors[i] = tputs[k], batch.errors[k]
    has = np.isfinite(mem["peak"])
    out |= sweep_arrays(_figures(mem), np.round)  # the Answer's sweep columns (schema/answer.py metadata)
    out["fits"] = np.where(has, mem["peak"] <= mem["capacity"], np.array(None, dtype=object))
    out["tokens_per_second"] = [None if math.isnan(t) else round(t, 2) for t in tput.tolist()]
    out["estimator"], out["model_version"], out["error"] = [estimator.name] * n, [estimator.model_version] * n, errors
    extra = [c for c in frame.columns if c not in OUTPUT_COLUMNS]
    return pd.concat([frame[extra].reset_index(drop=True), pd.DataFrame(out)[list(OUTPUT_COLUMNS)]], axis=1)
