"""The learned estimator: theory × AutoGluon-predicted ratios, everywhere, OOM risk from the classifier.

``LearnedEstimator`` and ``autoconf.estimators.hybrid.HybridEstimator`` share everything here; they differ in
their policy (``_inside``, ``_row_weights``, ``_risk``): learned applies every learned correction to every
row and states the OOM classifier's probability as ``oom_risk``; hybrid applies only the corrections
that beat theory on held-out architectures, only inside the version's correction domain, and states
a split-conformal risk.
Both work on batches of rows given as columns (``memory_columns``; ``memory_batch`` is the same on Job lists, one
estimate a batch of one): theory over the columns, features from them, one tree evaluation per batch, never per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import ClassVar

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.catalog import approximation_note
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.estimators.contract import Annotations, Estimator
from autoconf.estimators.learned import model as M
from autoconf.estimators.learned.features import FeatureTable, feature_columns
from autoconf.estimators.theory.memory import Found, estimate_memory
from autoconf.estimators.theory.rows import Codes, JobColumns, PlacementColumns
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import ALLOCATOR_PARTS, MemoryBatch, as_batch, theory_columns
from autoconf.schema import Estimate, EstimatorName, Job, MemoryEstimate, Placement, ThroughputEstimate

MEMORY_TARGETS = ("memory_allocated", "memory_reserved", "memory_device")  # one predictor per memory metric (2.x)


@dataclass(frozen=True)
class CorrectedBatch(MemoryBatch):
    """A MemoryBatch after the learned correction; ``inside``: the correction was applied."""

    inside: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    ratio_peak: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cols: FeatureTable | None = None
    theory_peak: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per row: "approximate architecture: <reason>" or ""
    approximate: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    frameworks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    applied: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # a memory correction applied

    @property
    def fits(self) -> np.ndarray:
        return self.peak <= self.capacity


def corrected_peaks(theory: MemoryBatch, ratio: dict[str, np.ndarray],
                    weight: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Allocated, reserved and device peaks: theory × ratio**weight per metric (weight 0 = not applied).

    A metric with a predictor whose correction is not applied to a row keeps theory's peak; a metric without
    a predictor (1.x: reserved) follows the allocator's ratio (the cache sits on top of the tensors).
    Always reserved ∈ [allocated, peak] and peak ≥ allocated.
    """
    n = len(theory.peak)

    def r(name: str, fallback: np.ndarray) -> np.ndarray:
        if name not in ratio:
            return fallback
        w = weight.get(name, np.zeros(n))
        with np.errstate(invalid="ignore"):
            return np.where(w > 0, ratio[name] ** w, 1.0)

    r_alloc = r("memory_allocated", np.ones(n))
    allocated = theory.allocated * r_alloc
    peak = np.maximum(theory.peak * r("memory_device", r_alloc), allocated)
    reserved = np.minimum(np.maximum(theory.reserved * r("memory_reserved", r_alloc), allocated), peak)
    return allocated, reserved, peak


@lru_cache(maxsize=65536)
def _theory_throughput(job: Job, placement: Placement) -> ThroughputEstimate | None:
    try:
        return throughput_or_none(job, placement)
    except (AutoconfError, ValidationError, ValueError):
        return None


class LearnedEstimator(Estimator):
    """theory × learned ratios (memory per metric, tokens/s) of an AutoGluonModels version."""

    name: ClassVar[EstimatorName] = "learned"

    def __init__(self, model_version: str | None = None, backend: str | None = None) -> None:
        self.model_ = M.load(model_version, backend)
        self.model_version: str | None = self.model_.version

    # ---- policy (overridden by the hybrid) ---------------------------------------------------
    def _inside(self, cols: FeatureTable) -> np.ndarray:
        finite: np.ndarray = np.isfinite(cols["params_b"])
        return finite

    def _row_weights(self, target: str, frameworks: np.ndarray) -> np.ndarray:
        """Exponent on the learned ratio per row (0 = not applied): the learned estimator applies it whole."""
        return np.ones(len(frameworks)) if target in self.model_.forests else np.zeros(len(frameworks))

    def _trusted(self, approximate: np.ndarray) -> np.ndarray:
        """Rows whose architecture the correction may be applied to: learned applies it everywhere."""
        return np.ones(len(approximate), dtype=bool)

    def _risk(self, cols: FeatureTable, peak: np.ndarray, th: MemoryBatch, inside: np.ndarray,
              applied: np.ndarray, methods: np.ndarray) -> np.ndarray:
        risk = np.full(len(peak), np.nan)
        ok = np.isfinite(peak)
        if ok.any():
            risk[ok] = self.model_.predict("oom", cols, ok)
        return risk

    # ---- batch API -----------------------------------------------------------------------------
    def _weights(self, target: str, frameworks: np.ndarray, inside: np.ndarray) -> np.ndarray:
        return np.where(inside, self._row_weights(target, frameworks), 0.0)

    def _ratio(self, target: str, cols: FeatureTable, weight: np.ndarray) -> np.ndarray:
        """The learned ratio where ``weight`` > 0 (1 elsewhere; the weight is applied by the caller)."""
        ratio = np.ones(len(weight))
        use = weight > 0
        if use.any():
            ratio[use] = self.model_.predict(target, cols, use)
        return ratio

    def memory_batch(self, jobs: Sequence[Job], placements: Sequence[Placement]) -> CorrectedBatch:
        """Corrected per-GPU memory of every row (errors per row, as theory_batch): ``memory_columns`` of their
        columns."""
        return self.memory_columns(JobColumns.of(jobs), PlacementColumns.of(placements),
                                   Codes.of([j.model for j in jobs]), Codes.of([p.gpu_model for p in placements]))[2]

    def memory_columns(self, job: JobColumns, place: PlacementColumns, models: Codes,
                       gpus: Codes) -> tuple[Found, dict[int, str], CorrectedBatch]:
        """Theory of rows given as columns (vector.theory_columns), times the learned ratios this estimator applies;
        the stated risk. Returns theory's Found with the corrected figures, the refused rows, and the batch."""
        found, errors = theory_columns(job, place, models, gpus, risk=False)
        th = as_batch(found, errors)
        cols = feature_columns(job, place, models, gpus, th)
        notes = np.full(len(models.table), "", dtype=object)
        for k in np.unique(models.codes[th.ok]).tolist():  # a refused row's model may not resolve at all
            notes[k] = approximation_note(str(models.table[k]))
        batch = self._correct(th, cols, notes[models.codes], job.framework, job.method)
        corrected = replace(found, parts=batch.parts, allocated=batch.allocated, reserved=batch.reserved,
                            peak=batch.peak, oom_risk=batch.oom_risk)
        return corrected, errors, batch

    def _correct(self, th: MemoryBatch, cols: FeatureTable, approximate: np.ndarray, frameworks: np.ndarray,
                 methods: np.ndarray) -> CorrectedBatch:
        """Theory × the learned ratios this estimator applies, per row; the stated risk."""
        inside = self._inside(cols) & th.ok & self._trusted(approximate)
        weight = {t: self._weights(t, frameworks, inside) for t in MEMORY_TARGETS if t in self.model_.forests}
        ratio = {t: self._ratio(t, cols, w) for t, w in weight.items()}
        allocated, reserved, peak = corrected_peaks(th, ratio, weight)
        applied = np.zeros(len(th), dtype=bool)
        for w in weight.values():
            applied |= w > 0
        parts = {p: th.parts[p] * np.where(th.allocated > 0, allocated / th.allocated, 1.0) for p in ALLOCATOR_PARTS}
        parts["overhead"] = peak - allocated
        risk = self._risk(cols, peak, th, inside, applied, methods)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio_peak = peak / th.peak
        return CorrectedBatch(parts=parts, allocated=allocated, reserved=reserved, peak=peak, phase=th.phase,
                              capacity=th.capacity, oom_risk=risk, micro_batch=th.micro_batch, errors=th.errors,
                              releasable=th.releasable, inside=inside, applied=applied, ratio_peak=ratio_peak, cols=cols,
                              theory_peak=th.peak, approximate=approximate, frameworks=frameworks)

    def tokens_per_second(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: CorrectedBatch,
                          rows: np.ndarray) -> list[ThroughputEstimate | None]:
        """Throughput of the selected rows: theory's, times the learned ratio where it applies."""
        idx = np.flatnonzero(rows)
        theory = [_theory_throughput(jobs[i], placements[i]) for i in idx.tolist()]
        per_gpu = np.array([t.tokens_per_second_per_gpu if t else np.nan for t in theory])
        ratio = self.throughput_ratio(batch, idx, per_gpu)
        return [None if t is None else _scaled(t, float(r), self.name) for t, r in zip(theory, ratio, strict=True)]

    def throughput_ratio(self, batch: CorrectedBatch, idx: np.ndarray, per_gpu: np.ndarray) -> np.ndarray:
        """The learned tokens/s ratio of rows ``idx`` of ``batch`` (1 where not applied), given theory's tokens/s
        per GPU of those rows (NaN where theory has none)."""
        assert batch.cols is not None
        cols = batch.cols.rows(idx)
        cols.set("theory_tokens_per_second_per_gpu", per_gpu)
        weight = self._weights("throughput", batch.frameworks[idx], batch.inside[idx] & np.isfinite(per_gpu))
        return self._ratio("throughput", cols, weight)

    def tokens_columns(self, batch: CorrectedBatch, idx: np.ndarray, theory: np.ndarray,
                       number_gpus: np.ndarray) -> np.ndarray:
        """Tokens/s of rows ``idx`` of ``batch`` from theory's tokens/s of them on ``number_gpus`` GPUs (the columns
        form of ``tokens_per_second``: ThroughputEstimate.tokens_per_second_per_gpu is tokens/s ÷ GPUs)."""
        ratio = self.throughput_ratio(batch, idx, theory / number_gpus)
        out: np.ndarray = theory * ratio
        return out

    def reasons(self, batch: CorrectedBatch, idx: np.ndarray) -> list[str]:
        """"; ".join of ``row_notes`` after the first (a sweep's reason column) for rows ``idx``: the notes are made
        once per distinct (correction state, framework, ratio as written, approximation) and shared."""
        if not len(idx):
            return []
        key = pd.DataFrame({"inside": batch.inside[idx], "applied": batch.applied[idx],
                            "framework": batch.frameworks[idx], "flag": batch.approximate[idx],
                            "ratio": np.char.mod("%.3f", batch.ratio_peak[idx])})
        group = key.groupby(list(key.columns), sort=False).ngroup().to_numpy()
        firsts = np.unique(group, return_index=True)[1]
        said = ["; ".join(self.row_notes(batch, int(i))[1:]) for i in idx[firsts].tolist()]
        return [said[g] for g in group.tolist()]

    # ---- contract ------------------------------------------------------------------------------
    def estimate(self, job: Job, placement: Placement) -> Estimate:
        batch = self.memory_batch([job], [placement])
        if batch.errors[0] is not None:
            estimate_memory(job, placement)  # raises the theory's typed error for this input
            raise InvalidInputError("input", batch.errors[0])
        throughput = self.tokens_per_second([job], [placement], batch, np.array([True]))[0]
        return Estimate(job=job, placement=placement, memory=self.memory_estimate(batch, 0), throughput=throughput,
                        estimator=self.name, model_version=self.model_version)

    def memory_estimate(self, batch: CorrectedBatch, i: int) -> MemoryEstimate:
        return MemoryEstimate(
            **{f"{p}_bytes": float(batch.parts[p][i]) for p in (*ALLOCATOR_PARTS, "overhead")},
            peak_bytes=float(batch.peak[i]), peak_allocated_bytes=float(batch.allocated[i]),
            peak_reserved_bytes=float(batch.reserved[i]), peak_phase=batch.phase[i],
            releasable_bytes=float(np.nan_to_num(batch.releasable_or_zero()[i])),
            capacity_bytes=float(batch.capacity[i]),
            fits=bool(batch.peak[i] <= batch.capacity[i]), oom_risk=float(np.clip(batch.oom_risk[i], 0.0, 1.0)),
            estimator=self.name, notes=self.row_notes(batch, i),
        )

    def row_notes(self, batch: CorrectedBatch, i: int) -> tuple[str, ...]:
        """``notes`` plus, for an approximate architecture, its reason (never silent)."""
        flag = batch.approximate[i] if i < len(batch.approximate) else ""
        return self.notes(batch, i) + ((flag,) if flag else ())

    def notes(self, batch: CorrectedBatch, i: int) -> tuple[str, ...]:
        return (f"micro-batch {batch.micro_batch[i]} per GPU",
                f"learned {self.model_version}: peak = theory × {batch.ratio_peak[i]:.3f}; "
                "oom_risk from the OOM classifier")

    def annotate(self, jobs: Sequence[Job], placements: Sequence[Placement], batch: MemoryBatch,
                 rows: np.ndarray) -> Annotations:
        assert isinstance(batch, CorrectedBatch)
        idx = np.flatnonzero(rows)
        return [self.row_notes(batch, i) for i in idx.tolist()], self.tokens_per_second(jobs, placements, batch, rows)

    def training_domain(self, job: Job, gpu_model: str) -> tuple[bool, str]:
        inside, why = super().training_domain(job, gpu_model)  # an approximate architecture first
        return self.model_.training.check(job, gpu_model) if inside else (inside, why)


def _scaled(t: ThroughputEstimate, ratio: float, name: EstimatorName) -> ThroughputEstimate:
    """A theory throughput sped up (ratio > 1) or slowed down by the learned ratio."""
    return ThroughputEstimate(
        tokens_per_second=t.tokens_per_second * ratio, tokens_per_second_per_gpu=t.tokens_per_second_per_gpu * ratio,
        flops_per_token=t.flops_per_token, mfu=min(1.0, t.mfu * ratio), step_seconds=t.step_seconds / ratio,
        compute_seconds=t.compute_seconds / ratio, communication_seconds=t.communication_seconds / ratio,
        estimator=name,
    )
