"""Batch columns (design §8) with the recommendation: input rows in, estimates + recommendation out.

The batch form of autoconf/recommend/search.py used by ``autoconf-gpu sweep`` and the estimators'
``estimate_frame``: rows are searched in chunks with ``recommend_batch``; rows that give
``number_gpus`` also get the memory columns of that placement.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.errors import AutoconfError, describe
from autoconf.estimators.columns import frame_columns
from autoconf.estimators.contract import Estimator
from autoconf.estimators.frame import MEMORY_COLUMNS, OUTPUT_COLUMNS, VISION_COLUMNS, row_inputs
from autoconf.estimators.theory.estimator import TheoryEstimator
from autoconf.estimators.theory.rows import PlacementColumns
from autoconf.estimators.theory.vector import MemoryBatch, as_batch
from autoconf.recommend.columns import memory, theory_search, tokens_per_second
from autoconf.recommend.search import BatchSearch, new_search, recommend_batch
from autoconf.schema import Job, Placement, sweep_arrays

if TYPE_CHECKING:
    from autoconf.estimators.learned.estimator import LearnedEstimator

Progress = Callable[[int, int], None]
FRAME_CHUNK = 1000  # jobs per batch call in recommend_frame: bounds memory, paces the progress bar
THEORY_ROWS = 200_000  # input rows per theory pass (recommend/columns.py): bounds the memory of a large sweep


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
    recommended one (or the largest tried when nothing fits). A bad row gets its ``error``. The theory, learned
    and hybrid estimators read the rows as columns (recommend/columns.py); the others (traced, a calibrated
    theory subclass) row by row.
    """
    search_args = dict(max_gpus=max_gpus, gpus_per_node=gpus_per_node, max_oom_risk=max_oom_risk, strict=strict)
    if _on_columns(estimator):  # rows are independent: THEORY_ROWS at a time bounds the memory
        parts = []
        for start in range(0, len(frame), THEORY_ROWS):
            parts.append(_theory_frame(frame.iloc[start:start + THEORY_ROWS], estimator, gpus_per_node, search_args))
            if progress:
                progress(min(start + THEORY_ROWS, len(frame)), len(frame))
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return _theory_frame(frame, estimator, gpus_per_node, search_args)
        with warnings.catch_warnings():  # a chunk whose error column is all empty: its dtype is not the others'
            warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)
            return pd.concat(parts, ignore_index=True)
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
    fixed = [i for i in valid if given[i] and errors[i] is None]
    given_out = _given_columns(estimator, [ok_jobs[i] for i in fixed], [ok_places[i] for i in fixed]) if fixed else None
    return _columns(frame, estimator, np.array(valid, dtype=np.int64), search, errors, fixed, given_out, gpus_per_node)


def _on_columns(estimator: Estimator) -> bool:
    """Theory (not a subclass), learned and hybrid read a frame as columns. A learned or hybrid estimator's module
    is loaded when one exists, so a theory sweep never imports it."""
    if type(estimator) is TheoryEstimator:
        return True
    learned = sys.modules.get("autoconf.estimators.learned.estimator")
    return learned is not None and isinstance(estimator, learned.LearnedEstimator)


def _theory_frame(frame: pd.DataFrame, estimator: Estimator, gpus_per_node: int,
                  search_args: dict[str, Any]) -> pd.DataFrame:
    """recommend_frame for the estimators ``_on_columns``: rows read as columns, every candidate in one batch."""
    cols = frame_columns(frame)
    theory = isinstance(estimator, TheoryEstimator)
    learned = None if theory else cast("LearnedEstimator", estimator)
    calib = estimator.calibration if isinstance(estimator, TheoryEstimator) else None
    search = theory_search(cols, calib, learned=learned, **search_args)
    valid = np.flatnonzero(cols.ok)
    fixed = np.flatnonzero(cols.ok & cols.given)
    given_out = None
    if len(fixed):
        p = cols.place
        place = PlacementColumns(p["number_gpus"][fixed], p["gpus_per_worker"][fixed], p["tp"][fixed], p["pp"][fixed],
                                 p["offload"][fixed], p["strategy"][fixed])
        found, errs, corrected = memory(cols, fixed, place, calib, learned)
        ok = np.ones(len(fixed), dtype=bool)
        ok[list(errs)] = False
        tputs = np.full(len(fixed), np.nan)
        if ok.any():
            at = np.flatnonzero(ok)
            tputs[ok] = tokens_per_second(cols, fixed[ok], place.number_gpus[ok], place.gpus_per_worker[ok],
                                          GPUS_PER_NODE, place.take(at))
            if learned is not None and corrected is not None:
                tputs[ok] = learned.tokens_columns(corrected, at, tputs[ok], place.number_gpus[ok])
        given_out = as_batch(found, errs), tputs
    return _columns(frame, estimator, valid, search, list(cols.errors), fixed.tolist(), given_out, gpus_per_node)


def _columns(frame: pd.DataFrame, estimator: Estimator, valid: np.ndarray, search: BatchSearch,
             errors: list[str | None], fixed: list[int], given_out: tuple[MemoryBatch, np.ndarray] | None,
             gpus_per_node: int) -> pd.DataFrame:
    """The output columns from the search over the ``valid`` rows and the memory of the ``fixed`` rows."""
    n = len(frame)
    out: dict[str, Any] = {c: [None] * n for c in OUTPUT_COLUMNS}
    columns = (*MEMORY_COLUMNS, *VISION_COLUMNS)
    mem = {k: np.full(n, np.nan) for k in (*columns, "allocated", "reserved", "peak", "capacity", "oom_risk")}
    tput = np.full(n, np.nan)
    for key in mem:
        mem[key][valid] = search.memory[key]
    tput[valid] = search.tokens_per_second
    chosen = search.number_gpus
    workers = np.where(chosen > 0, -(-chosen // gpus_per_node), 0)
    for name, values in (("can_recommend", (chosen > 0).astype(int)), ("workers", workers),
                         ("gpus", np.where(chosen > 0, chosen // np.maximum(workers, 1), 0))):
        column = np.full(n, None, dtype=object)
        column[valid] = values.tolist()  # Python ints, as the object path writes them
        out[name] = column.tolist()
    reasons = np.full(n, None, dtype=object)
    reasons[valid] = search.reasons
    out["reason"] = reasons.tolist()
    found = np.array(errors, dtype=object)
    found[valid] = search.errors
    errors = found.tolist()
    if given_out is not None:
        batch, tputs = given_out
        at = np.array(fixed, dtype=np.int64)
        for part in columns:
            mem[part][at] = batch.parts[part]
        for key, values in (("peak", batch.peak), ("capacity", batch.capacity), ("oom_risk", batch.oom_risk),
                            ("allocated", batch.allocated), ("reserved", batch.reserved)):
            mem[key][at] = values
        tput[at] = tputs
        for k, i in enumerate(fixed):
            errors[i] = batch.errors[k]
    has = np.isfinite(mem["peak"])
    out |= sweep_arrays(_figures(mem), np.round)  # the Answer's sweep columns (schema/answer.py metadata)
    out["fits"] = np.where(has, mem["peak"] <= mem["capacity"], np.array(None, dtype=object))
    out["tokens_per_second"] = [None if t != t else round(t, 2) for t in tput.tolist()]  # t != t: NaN
    out["estimator"], out["model_version"], out["error"] = [estimator.name] * n, [estimator.model_version] * n, errors
    extra = [c for c in frame.columns if c not in OUTPUT_COLUMNS]
    return pd.concat([frame[extra].reset_index(drop=True), pd.DataFrame(out)[list(OUTPUT_COLUMNS)]], axis=1)
