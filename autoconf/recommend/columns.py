"""The placement search of search.py for the theory estimator over sweep columns: no Job or Placement per row.

Every candidate GPU count of every row is one row of a theory batch (``vector.theory_columns``, numpy per model);
per row the first candidate that is refused or whose ``oom_risk`` ≤ ``max_oom_risk`` decides, exactly as
``recommend_batch`` reads its waves. Tokens/s at the chosen placements: ``throughput_grid`` where it covers the
placement, ``throughput_or_none`` on the row's Job elsewhere. The result is a ``BatchSearch`` of the rows read
(``FrameColumns.ok``), which ``recommend_frame`` turns into batch columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autoconf.catalog import approximation_note, get_architecture
from autoconf.estimators.columns import FrameColumns
from autoconf.estimators.theory import throughput_grid as grid
from autoconf.estimators.theory.annotate import covered
from autoconf.estimators.theory.memory import ALLOCATOR_PARTS, Found, memory_notes
from autoconf.estimators.theory.rows import PlacementColumns
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import phase_names, theory_columns
from autoconf.recommend.search import BatchSearch, candidate_gpus, new_search
from autoconf.schema import GIB, Calibration, Placement

if TYPE_CHECKING:  # a theory sweep never loads the learned models' code
    from autoconf.estimators.learned.estimator import CorrectedBatch, LearnedEstimator

# words the grid's per-job constants do not read (throughput_grid.job_constants sets batch and accumulation to 1)
_VARYING = ("batch_size", "gradient_accumulation_steps", "number_gpus", "gpus_per_worker", "per_device_batch_size")
ROW_CHUNK = 50_000  # rows (with all their candidate counts) per theory batch: bounds the memory of a large sweep
# per learned/hybrid batch: each candidate also holds a row of every feature (features.ALL_FEATURES, float64)
LEARNED_ROW_CHUNK = 10_000


def _candidates(cols: FrameColumns, rows: np.ndarray, counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(row, GPU count) of every candidate in search order: sequence parallelism divides the count and the global
    batch splits evenly over the data-parallel groups (memory.micro_batch's rule)."""
    sp = cols.jobs.sequence_parallel[rows][:, None]
    per = np.array(counts)[None, :] // sp * cols.jobs.gradient_accumulation_steps[rows][:, None]
    fit = (np.array(counts)[None, :] % sp == 0) & (cols.jobs.batch_size[rows][:, None] % np.maximum(per, 1) == 0)
    r, c = np.nonzero(fit)
    return rows[r], np.array(counts, dtype=np.int64)[c]


def memory(cols: FrameColumns, who: np.ndarray, place: PlacementColumns, calib: Calibration | None,
           learned: LearnedEstimator | None = None) -> tuple[Found, dict[int, str], CorrectedBatch | None]:
    """Memory of rows ``who`` at ``place``: theory's, or the learned/hybrid estimator's correction of it."""
    jobs, models, gpus = cols.jobs.take(who), cols.model_codes.take(who), cols.gpu_codes.take(who)
    if learned is not None:
        return learned.memory_columns(jobs, place, models, gpus)
    return (*theory_columns(jobs, place, models, gpus, calib), None)


def search_placement(cols: FrameColumns, who: np.ndarray, counts: np.ndarray, gpus_per_node: int) -> PlacementColumns:
    """The candidate placements of search.py's _placement: ``counts`` GPUs, whole nodes, the row's strategy."""
    ones = np.ones(len(who), dtype=np.int64)
    return PlacementColumns(counts, np.minimum(counts, gpus_per_node), ones, ones,
                            np.full(len(who), "none"), cols.place["strategy"][who])


def theory_search(cols: FrameColumns, calib: Calibration | None, *, max_gpus: int, gpus_per_node: int,
                  max_oom_risk: float, strict: bool, learned: LearnedEstimator | None = None) -> BatchSearch:
    """recommend_batch with the theory estimator (or ``learned``: the learned or hybrid one) over the read rows of
    ``cols`` (in their order), ROW_CHUNK rows (LEARNED_ROW_CHUNK with a learned one) with all their candidates per
    batch."""
    rows = np.flatnonzero(cols.ok)
    search = new_search(len(rows))
    pos = np.full(cols.size, -1, dtype=np.int64)
    pos[rows] = np.arange(len(rows))
    notes = {m: approximation_note(str(m)) for m in set(cols.model[rows].tolist())}
    flagged = np.flatnonzero(np.isin(cols.model, [m for m, note in notes.items() if note]) & cols.ok)
    pending = cols.ok.copy()
    if strict:  # theory's training domain: every catalogued architecture that is not approximated
        version = None if learned is None else learned.model_version
        for i in flagged.tolist():
            search.reasons[pos[i]] = f"outside the training domain of model version {version}: {notes[cols.model[i]]}"
        pending[flagged] = False
        if learned is not None:  # and the learned version's: what its training data covered
            _outside_training(search, cols, pos, pending, learned)
    tried = np.zeros(cols.size, dtype=np.int64)  # GPU count of the placement stored (chosen or last tried)
    counts = list(candidate_gpus(max_gpus, gpus_per_node))
    todo = np.flatnonzero(pending)
    todo = todo[np.argsort(cols.model_codes.codes[todo], kind="stable")]  # a batch's pairs come grouped by model
    chunk = ROW_CHUNK if learned is None else LEARNED_ROW_CHUNK
    for start in range(0, len(todo), chunk):
        _search_chunk(search, cols, pos, todo[start:start + chunk], counts, calib, gpus_per_node, max_oom_risk,
                      tried, learned)
    for i in np.flatnonzero(cols.ok).tolist():
        k = pos[i]
        if search.number_gpus[k] or search.errors[k] is not None or search.reasons[k]:
            continue
        search.reasons[k] = _nothing_fits(search, k, int(tried[i]), max_gpus, max_oom_risk) if tried[i] else (
            f"batch_size {cols.jobs.batch_size[i]} does not split evenly over any candidate GPU count ≤ {max_gpus}"
            + (f" that sequence_parallel {cols.jobs.sequence_parallel[i]} divides"
               if cols.jobs.sequence_parallel[i] > 1 else ""))
    for i in flagged.tolist():  # every answer about an approximate architecture says so
        k, flag = pos[i], notes[cols.model[i]]
        if flag not in search.reasons[k]:
            search.reasons[k] = "; ".join(filter(None, [search.reasons[k], flag]))
    return search


def _outside_training(search: BatchSearch, cols: FrameColumns, pos: np.ndarray, pending: np.ndarray,
                      learned: LearnedEstimator) -> None:
    """Strict mode: rows outside the learned version's training domain are refused with its reason."""
    rows = np.flatnonzero(pending)
    gpus = cols.place["gpu_model"][rows].astype(str)
    inside, why = learned.model_.training.check_columns(cols.model[rows].astype(str), cols.jobs.method[rows], gpus,
                                                        cols.jobs.tokens_per_sample[rows], cols.jobs.batch_size[rows])
    for i, reason in zip(rows[~inside].tolist(), why, strict=True):
        search.reasons[pos[i]] = f"outside the training domain of model version {learned.model_version}: {reason}"
    pending[rows[~inside]] = False


def _search_chunk(search: BatchSearch, cols: FrameColumns, pos: np.ndarray, rows: np.ndarray, counts: list[int],
                  calib: Calibration | None, gpus_per_node: int, max_oom_risk: float, tried: np.ndarray,
                  learned: LearnedEstimator | None) -> None:
    """Every candidate of ``rows`` in one batch; per row the first refused or fitting candidate decides. (With a
    learned estimator too: waves of the next candidate of each undecided row, as recommend_batch reads them, cost
    more in per-batch overhead than its trees save on the seed sweep.)"""
    who, count = _candidates(cols, rows, counts)
    found, errors, batch = memory(cols, who, search_placement(cols, who, count, gpus_per_node), calib, learned)
    refused = np.zeros(len(who), dtype=bool)
    refused[list(errors)] = True
    first = _first(who, refused | (found.oom_risk <= max_oom_risk), cols.size)
    last = np.full(cols.size, -1, dtype=np.int64)
    ends = np.flatnonzero(np.diff(who, append=-1) != 0)  # the pairs of a row are consecutive
    last[who[ends]] = ends
    stopped = first >= 0
    error_rows = np.flatnonzero(stopped & refused[np.maximum(first, 0)])
    for i in error_rows.tolist():
        search.errors[pos[i]] = search.reasons[pos[i]] = errors[first[i]]
    pick = np.where(stopped, first, last)
    mine = np.zeros(cols.size, dtype=bool)
    mine[rows] = True
    stored = mine & (pick >= 0)
    stored[error_rows] = False
    at, pairs = pos[stored], pick[stored]
    for key in (*ALLOCATOR_PARTS, "overhead"):
        search.memory[key][at] = found.parts[key][pairs]
    for key in ("peak", "capacity", "allocated", "reserved", "oom_risk", "releasable"):
        search.memory[key][at] = getattr(found, key)[pairs]
    for k, name in zip(at.tolist(), phase_names(found.phase[pairs]), strict=True):
        search.phase[k] = name
    tried[stored] = count[pairs]
    fits = stored & stopped
    search.number_gpus[pos[fits]] = count[first[fits]]
    if batch is not None and learned is not None:
        _annotate_learned(search, cols, pos, who, count, batch, first[fits], gpus_per_node, learned)
    else:
        _annotate(search, cols, pos, who, count, found, first[fits], gpus_per_node)


def _first(who: np.ndarray, stop: np.ndarray, size: int) -> np.ndarray:
    """Per row, the first candidate (pair index) that stops the search, else -1 (pairs are in row order)."""
    out = np.full(size, -1, dtype=np.int64)
    hits = np.flatnonzero(stop)
    found, index = np.unique(who[hits], return_index=True)
    out[found] = hits[index]
    return out


def _annotate(search: BatchSearch, cols: FrameColumns, pos: np.ndarray, who: np.ndarray, count: np.ndarray,
              found: Found, pairs: np.ndarray, gpus_per_node: int) -> None:
    """Reasons (memory_notes after the first, which do not depend on the micro-batch) and tokens/s of the chosen
    placements. The notes themselves stay with single recommendations (search.recommend)."""
    said: dict[tuple[str, bool, float], str] = {}
    chosen = who[pairs]
    keys = zip(cols.model[chosen].tolist(), (cols.jobs.method[chosen] == "qlora").tolist(),
               found.cached[pairs].tolist(), strict=True)
    for k, key in zip(pos[chosen].tolist(), keys, strict=True):
        reason = said.get(key)
        if reason is None:
            note = memory_notes(0, 0, key[2], key[1], "none", get_architecture(key[0]))
            reason = said[key] = "; ".join(note[1:])
        search.reasons[k] = reason
    if len(pairs):
        search.tokens_per_second[pos[chosen]] = tokens_per_second(
            cols, chosen, count[pairs], np.minimum(count[pairs], gpus_per_node), gpus_per_node)


def _annotate_learned(search: BatchSearch, cols: FrameColumns, pos: np.ndarray, who: np.ndarray, count: np.ndarray,
                      batch: CorrectedBatch, pairs: np.ndarray, gpus_per_node: int, learned: LearnedEstimator) -> None:
    """Reasons (the estimator's notes after the first) and tokens/s (theory's × the learned ratio) of the chosen
    placements."""
    chosen = who[pairs]
    for k, reason in zip(pos[chosen].tolist(), learned.reasons(batch, pairs), strict=True):
        search.reasons[k] = reason
    if len(pairs):
        theory = tokens_per_second(cols, chosen, count[pairs], np.minimum(count[pairs], gpus_per_node), gpus_per_node)
        search.tokens_per_second[pos[chosen]] = learned.tokens_columns(batch, pairs, theory, count[pairs])


def tokens_per_second(cols: FrameColumns, who: np.ndarray, counts: np.ndarray, per_worker: np.ndarray,
                      gpus_per_node: int, place: PlacementColumns | None = None) -> np.ndarray:
    """Theory tokens/s of rows ``who`` on ``counts`` GPUs: throughput_grid where it covers the placement (one stage,
    no tensor parallelism, FSDP full shard or ZeRO-3 over > 1 GPU, no bandwidth override), else the row's Job."""
    strategy = place.effective_strategy if place is not None else np.where(
        cols.place["strategy"][who] != "", cols.place["strategy"][who], np.where(counts > 1, "fsdp", "ddp"))
    if place is None:  # the search's placements: one stage, no tensor parallelism, no bandwidth override
        on_grid = covered(counts, strategy, 1, 1, 1, False)
    else:
        on_grid = covered(counts, strategy, place.tp, place.pp, cols.place["virtual_pp"][who],
                       cols.place["bandwidth_set"][who])
    out = np.full(len(who), np.nan)
    for k in np.flatnonzero(~on_grid).tolist():
        job, given = cols.row(int(who[k]))
        at = given if place is not None else Placement(gpu_model=given.gpu_model, number_gpus=int(counts[k]),
                                                        gpus_per_worker=int(per_worker[k]), strategy=given.strategy)
        t = throughput_or_none(job, at)
        out[k] = np.nan if t is None else t.tokens_per_second
    fast = np.flatnonzero(on_grid)
    if not len(fast):
        return out
    rows = who[fast]
    key = cols.words.drop(columns=[c for c in _VARYING if c in cols.words]).iloc[rows]
    owner = key.groupby(list(key.columns), sort=False, dropna=False).ngroup().to_numpy() if len(key.columns) else \
        np.zeros(len(rows), dtype=np.int64)
    firsts = np.unique(owner, return_index=True)[1]
    jobs = cols.job_rows(rows[firsts], drop=_VARYING)
    constants = grid.job_constants(jobs, [str(cols.place["gpu_model"][rows[f]]) for f in firsts])
    owner = np.searchsorted(np.unique(owner), owner)
    tokens = np.array([j.tokens_per_sample for j in jobs], dtype=float)
    nodes = per_worker[fast] if place is None else np.where(per_worker[fast] > 0, per_worker[fast], gpus_per_node)
    values = np.full(len(fast), np.nan)
    for node in np.unique(nodes).tolist():  # the grid takes one node size per call
        sel = nodes == node
        values[sel] = grid.tokens_per_second(constants, owner[sel], tokens, cols.jobs.batch_size[rows][sel],
                                             counts[fast][sel], cols.jobs.gradient_accumulation_steps[rows][sel],
                                             int(node))
    out[fast] = values
    return out


def _nothing_fits(search: BatchSearch, k: int, gpus: int, max_gpus: int, max_oom_risk: float) -> str:
    best = f"{search.memory['peak'][k] / GIB:.1f} GiB per GPU at {gpus} GPUs"
    return (f"nothing fits up to {max_gpus} GPUs with oom_risk ≤ {max_oom_risk} (best: {best}, "
            f"capacity {search.memory['capacity'][k] / GIB:.1f} GiB)")
