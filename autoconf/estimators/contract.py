"""One estimator contract for theory, learned, hybrid and traced (design §4), and the registry.

Every estimator derives from ``Estimator`` and so answers all of it:

* ``estimate(job, placement) -> Estimate``: memory by component and throughput at one placement;
* ``memory_batch(jobs, placements) -> MemoryBatch``: the same memory for many rows at once (vectorised
  where the estimator allows; a bad row gets its error, the others are answered);
* ``annotate(jobs, placements, batch, rows)``: notes and throughput of the selected rows of a batch
  (``annotate_rows``: the same with tokens/s as an array);
* ``training_domain(job, gpu_model) -> (inside, why)``: whether the job lies where the estimator was fitted
  (strict mode refuses outside it; an approximate architecture is outside every estimator's);
* ``estimate_frame(frame) -> frame``: the batch columns of design §8 at each row's own placement
  (``number_gpus``, 1 if unset). It never recommends: ``autoconf.recommend.recommend_frame`` does.

The recommender calls these methods only. Implementations are imported lazily by ``get_estimator``, so
importing this module pulls in no AutoGluon or torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import ValidationError

from autoconf.catalog import approximation_note
from autoconf.defaults import ESTIMATOR
from autoconf.errors import AutoconfError, InvalidInputError, describe
from autoconf.estimators.theory.vector import ALLOCATOR_PARTS, MemoryBatch
from autoconf.schema import Estimate, EstimatorName, Job, MemoryEstimate, Placement, ThroughputEstimate

if TYPE_CHECKING:
    import pandas as pd

ESTIMATORS: dict[str, str] = {
    "theory": "autoconf.estimators.theory.estimator:TheoryEstimator",
    "learned": "autoconf.estimators.learned.estimator:LearnedEstimator",
    "hybrid": "autoconf.estimators.hybrid:HybridEstimator",
    "traced": "autoconf.estimators.traced.estimator:TracedEstimator",
}
DEFAULT_ESTIMATOR = ESTIMATOR
Annotations = tuple[list[tuple[str, ...]], list[ThroughputEstimate | None]]


class Estimator:
    """The contract. Subclasses implement ``estimate`` and override the batch methods where faster."""

    name: ClassVar[EstimatorName]
    model_version: str | None = None

    def estimate(self, job: Job, placement: Placement) -> Estimate:
        raise NotImplementedError

    def memory_batch(self, jobs: Sequence[Job], placements: Sequence[Placement]) -> MemoryBatch:
        """Row by row through ``estimate``: correct for every estimator, overridden where vectorised."""
        rows: list[MemoryEstimate | str] = []
        for job, place in zip(jobs, placements, strict=True):
            try:
                rows.append(self.estimate(job, place).memory)
            except (AutoconfError, ValidationError, ValueError) as exc:
                rows.append(describe(exc, with_input=False))
        return _batch_of(rows)

    def annotate(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
                 rows: np.ndarray) -> Annotations:
        """Notes and throughput of ``batch``'s rows selected by the boolean mask ``rows``."""
        answers = [self.estimate(jobs[i], placements[i]) for i in np.flatnonzero(rows).tolist()]
        return [a.memory.notes for a in answers], [a.throughput for a in answers]

    def annotate_rows(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
                      rows: np.ndarray) -> tuple[list[tuple[str, ...]], np.ndarray]:
        """``annotate`` with tokens/s as an array (NaN where there is no throughput), for batch columns."""
        notes, tputs = self.annotate(jobs, placements, batch, rows)
        return notes, np.array([np.nan if t is None else t.tokens_per_second for t in tputs], dtype=float)

    def training_domain(self, job: Job, gpu_model: str) -> tuple[bool, str]:
        """Inside the domain the estimator was fitted on; formulas have no such limit, but no estimator is
        exact on an approximate architecture, so strict mode refuses one with its reason."""
        note = approximation_note(job.model)
        return not note, note

    def estimate_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        from autoconf.estimators.frame import estimate_rows

        return estimate_rows(self.estimate, frame)


def _batch_of(rows: list[MemoryEstimate | str]) -> MemoryBatch:
    """A MemoryBatch from per-row memory estimates (a string is that row's error)."""
    def col(name: str) -> np.ndarray:
        return np.array([np.nan if isinstance(m, str) else float(getattr(m, name)) for m in rows])

    parts = {p: col(f"{p}_bytes") for p in (*ALLOCATOR_PARTS, "overhead")}
    return MemoryBatch(parts=parts, allocated=col("allocated_bytes"), reserved=col("reserved_bytes"),
                       peak=col("peak_bytes"),
                       phase=["" if isinstance(m, str) else m.peak_phase for m in rows], capacity=col("capacity_bytes"),
                       oom_risk=col("oom_risk"), micro_batch=np.zeros(len(rows), dtype=np.int64),
                       errors=[m if isinstance(m, str) else None for m in rows], releasable=col("releasable_bytes"))


@lru_cache(maxsize=16)
def get_estimator(name: str = DEFAULT_ESTIMATOR, model_version: str | None = None) -> Estimator:
    """Cached estimator instance by name (and learned-model version, where it applies)."""
    if name not in ESTIMATORS:
        raise InvalidInputError("estimator", f"must be one of {', '.join(ESTIMATORS)}; got '{name}'")
    module_name, cls_name = ESTIMATORS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    estimator: Estimator = cls() if name == "theory" else cls(model_version=model_version)
    return estimator
