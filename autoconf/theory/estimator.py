"""The theory estimator: the contract of autoconf/estimators.py over the pure formulas."""

from __future__ import annotations


import pandas as pd

from autoconf.frame import estimate_rows
from autoconf.schema import Calibration, Estimate, Job, Placement
from autoconf.theory.memory import estimate_memory
from autoconf.theory.throughput import throughput_or_none


class TheoryEstimator:
    """Formulas only: answers for every catalogued architecture and GPU, in microseconds."""

    name = "theory"
    model_version: str | None = None

    def __init__(self, calibration: Calibration | None = None) -> None:
        self.calibration = calibration

    def estimate(self, job: Job, placement: Placement) -> Estimate:
        memory = estimate_memory(job, placement, calibration=self.calibration)
        throughput = throughput_or_none(job, placement)  # None where the GPU has no peak for the dtype
        return Estimate(job=job, placement=placement, memory=memory, throughput=throughput, estimator="theory")

    def estimate_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return estimate_rows(self.estimate, frame)
