"""The memory gate of every layout: theory's own memory formulas over the layouts as columns, in one call.

Every layout of a search is one row of theory's column form (estimators/theory/rows.py): the job's fields repeated,
with the layout's global batch, accumulation and checkpointing; the layout's GPUs, node size, tensor and pipeline
degrees and sharding as the placement columns. ``memory.theory_rows`` then runs the same code as
``memory.estimate_memory`` on one row (phases, CUDA peaks, releasable blocks) for all of them at once: the gate
reads the bytes theory states its OOM risk on (device peak less releasable, ``oom_risk ≤ max_oom_risk`` ⇔ that is
≤ risk.need_threshold), and the chosen layouts read their device peak and risk from the same arrays.

Estimators other than theory (learned, hybrid) get one ``memory_batch`` call over every layout instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.contract import Estimator
from autoconf.estimators.risk import need_threshold, oom_probability
from autoconf.estimators.theory.cuda import GpuColumns
from autoconf.estimators.theory.layout_grid import STRATEGIES
from autoconf.estimators.theory.memory import theory_rows
from autoconf.estimators.theory.rows import STRATEGY_NAMES, JobColumns, PlacementColumns
from autoconf.recommend.layout_space import Space
from autoconf.schema import Calibration, Job, Placement

_STRATEGY_CODES = np.array([STRATEGY_NAMES.index(s) for s in STRATEGIES], dtype=np.int8)  # STRATEGIES -> codes


@dataclass(frozen=True)
class Gate:
    """Per layout: the bytes the OOM risk is stated on (NaN on error rows), whether it passes the gate, and the
    first error text of a refused layout (None if none). Theory's gate also keeps every layout's device peak and
    the GPU's capacity, from which the chosen layouts' memory is read (``memory``)."""

    need: np.ndarray
    fits: np.ndarray
    error: str | None
    peak: np.ndarray | None = None
    capacity: float = float("nan")
    method: str = ""

    def memory(self, rows: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """(device peak, OOM risk) of ``rows`` as theory states them (None: not a theory gate)."""
        if self.peak is None:
            return None
        risk = oom_probability(self.need[rows], np.full(len(rows), self.capacity), method=self.method)  # one σ
        return self.peak[rows], np.asarray(risk, dtype=float)


def columns(job: Job, space: Space) -> tuple[JobColumns, PlacementColumns]:
    """Theory's columns of every layout: ``job`` with each layout's batch, accumulation and checkpointing, on each
    layout's placement (offload none, as recommend/layout.py row_inputs builds it)."""
    rows, n = space.rows, len(space)
    # the job's one row broadcast over every layout, then the three fields a layout sets (no column JobColumns
    # derives reads them; the gate equals theory_batch on each layout's own Job and Placement: tests/test_layout.py)
    jobs = JobColumns.broadcast(job, n)
    for name, column in (("batch_size", rows.batch), ("gradient_accumulation_steps", rows.accumulation),
                         ("gradient_checkpointing", rows.checkpointing.astype(bool))):
        setattr(jobs, name, column)
    # offload "none" on every layout: one Python string, so the formulas' offload branches are Python ``if``s
    places = PlacementColumns(rows.gpus, rows.gpus_per_worker, rows.tp, rows.pp, "none", None,
                              _STRATEGY_CODES[rows.strategy])
    return jobs, places


def theory_gate(job: Job, gpu_model: str, space: Space, max_oom_risk: float,
                calibration: Calibration | None = None) -> Gate:
    """The gate of every layout of ``space`` from one theory_rows call (theory with ``calibration``)."""
    gpu = get_gpu(gpu_model)
    jobs, places = columns(job, space)
    found = theory_rows(jobs, places, get_architecture(job.model), GpuColumns.one(gpu), calibration, risk=False,
                        parts=False)
    need = found.peak - found.releasable
    limit = need_threshold(float(gpu.memory_bytes), max_oom_risk, job.method)
    fits = np.isfinite(need) & (need <= limit)
    error = str(found.errors[min(found.errors)]) if found.errors else None
    return Gate(need, fits, error, found.peak, float(gpu.memory_bytes), job.method)


def estimator_gate(estimator: Estimator, jobs: list[Job], places: list[Placement], max_oom_risk: float) -> Gate:
    """The gate from one ``memory_batch`` call over every layout (any estimator)."""
    batch = estimator.memory_batch(jobs, places)
    ok = batch.ok
    need = np.where(ok, batch.peak - batch.releasable_or_zero(), np.nan)
    fits = ok & (batch.oom_risk <= max_oom_risk)
    return Gate(need, fits, next((e for e in batch.errors if e is not None), None))
