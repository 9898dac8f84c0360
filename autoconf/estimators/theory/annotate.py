"""Notes and tokens/s of chosen rows of a theory batch, read from the batch instead of estimating each row again.

The notes are ``memory.memory_notes`` of the row's micro-batch and cached loss-segment bytes (both in the batch).
Tokens/s: rows at a placement ``throughput_grid`` covers (one pipeline stage, no tensor parallelism, the default
data-parallel strategy, no bandwidth overrides: the recommender's placements) come from one numpy pass of
``throughput_grid.tokens_per_second``; any other row from ``throughput.throughput_or_none``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autoconf.catalog import get_architecture
from autoconf.defaults import GPUS_PER_NODE
from autoconf.estimators.theory import throughput_grid as grid
from autoconf.estimators.theory.memory import memory_notes
from autoconf.estimators.theory.rows import Flag, Num, is_in, not_
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import MemoryBatch
from autoconf.schema import Job, Placement

_VARYING = ("batch_size", "gradient_accumulation_steps")  # the grid's per-job constants ignore these


def notes(jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
          rows: Sequence[int]) -> list[tuple[str, ...]]:
    """memory_notes of each selected (answered) row."""
    cached = batch.cached if batch.cached is not None else np.zeros(len(batch))
    return [memory_notes(int(batch.micro_batch[i]), jobs[i].tokens_per_sample, float(cached[i]),
                         jobs[i].method == "qlora", placements[i].offload, get_architecture(jobs[i].model))
            for i in rows]


def covered(number_gpus: Num, strategy: Any, tp: Num, pp: Num, virtual_pp: Num, bandwidth_set: Flag) -> Flag:  # noqa: ANN401
    """Placements whose tokens/s throughput_grid computes exactly as throughput.estimate_throughput does: one stage,
    no tensor parallelism, one GPU or FSDP full shard / ZeRO-3 (``strategy``: the effective one), no bandwidth
    override. One placement's fields, or columns of them."""
    return ((tp == 1) & (pp == 1) & (virtual_pp == 1) & not_(bandwidth_set)
            & ((number_gpus == 1) | is_in(strategy, ("fsdp", "zero3"))))


def grid_covers(place: Placement) -> bool:
    return bool(covered(place.number_gpus, place.effective_strategy, place.tp, place.pp, place.virtual_pp,
                        place.intra_node_gbps is not None or place.inter_node_gbps is not None))


def _job_key(job: Job) -> tuple[object, ...]:
    return tuple(v for k, v in job.__dict__.items() if k not in _VARYING)


def tokens_per_second(jobs: Sequence[Job], placements: Sequence[Placement], rows: Sequence[int]) -> np.ndarray:
    """Theory tokens/s of each selected row (NaN where the GPU has no peak for the dtype)."""
    out = np.full(len(rows), np.nan)
    fast = [k for k, i in enumerate(rows) if grid_covers(placements[i])]
    slow = sorted(set(range(len(rows))) - set(fast))
    for k in slow:
        found = throughput_or_none(jobs[rows[k]], placements[rows[k]])
        out[k] = np.nan if found is None else found.tokens_per_second
    if not fast:
        return out
    picked = [rows[k] for k in fast]
    owners: dict[tuple[object, ...], int] = {}
    owner = np.empty(len(picked), dtype=np.int64)
    firsts: list[int] = []
    for r, i in enumerate(picked):
        key = (_job_key(jobs[i]), placements[i].gpu_model)
        got = owners.setdefault(key, len(firsts))
        if got == len(firsts):
            firsts.append(i)
        owner[r] = got
    constants = grid.job_constants([jobs[i] for i in firsts], [placements[i].gpu_model for i in firsts])
    per_node = np.array([placements[i].gpus_per_worker or GPUS_PER_NODE for i in picked])
    args = (np.array([jobs[i].tokens_per_sample for i in firsts], dtype=float),
            np.array([jobs[i].batch_size for i in picked]), np.array([placements[i].number_gpus for i in picked]),
            np.array([jobs[i].gradient_accumulation_steps for i in picked]))
    values = np.full(len(picked), np.nan)
    for node in np.unique(per_node).tolist():  # the grid takes one node size per call
        sel = per_node == node
        values[sel] = grid.tokens_per_second(constants, owner[sel], args[0], args[1][sel], args[2][sel],
                                             args[3][sel], int(node))
    out[fast] = values
    return out
