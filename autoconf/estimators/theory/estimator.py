"""The theory estimator: the contract of ``autoconf.estimators.contract`` over the pure formulas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from autoconf.estimators.contract import Annotations, Estimator
from autoconf.estimators.theory import annotate
from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import MemoryBatch, theory_batch
from autoconf.schema import Calibration, Estimate, EstimatorName, Job, Placement


class TheoryEstimator(Estimator):
    """Formulas only: answers for every catalogued architecture and GPU, in microseconds."""

    name: ClassVar[EstimatorName] = "theory"

    def __init__(self, calibration: Calibration | None = None) -> None:
        self.calibration = calibration

    def estimate(self, job: Job, placement: Placement) -> Estimate:
        memory = estimate_memory(job, placement, calibration=self.calibration)
        throughput = throughput_or_none(job, placement)  # None where the GPU has no peak for the dtype
        return Estimate(job=job, placement=placement, memory=memory, throughput=throughput, estimator="theory")

    def memory_batch(self, jobs: Sequence[Job], placements: Sequence[Placement]) -> MemoryBatch:
        return theory_batch(jobs, placements, calibration=self.calibration)

    def annotate(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
                 rows: np.ndarray) -> Annotations:
        """Notes from the batch (no second estimate); throughput per selected row."""
        picked = np.flatnonzero(rows).tolist()
        return annotate.notes(jobs, placements, batch, picked), [throughput_or_none(jobs[i], placements[i])
                                                                  for i in picked]

    def annotate_rows(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
                      rows: np.ndarray) -> tuple[list[tuple[str, ...]], np.ndarray]:
        picked = np.flatnonzero(rows).tolist()
        return annotate.notes(jobs, placements, batch, picked), annotate.tokens_per_second(jobs, placements, picked)
