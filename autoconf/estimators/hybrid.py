"""The hybrid estimator (the default, design §4): theory × learned correction where it is trusted.

Inside the version's correction domain (a method and block family it was trained on, within 2× of
the measured parameter, micro-batch-token and GPU-count ranges: ``learned/domain.py``) the hybrid
multiplies theory by the learned ratios that beat theory on held-out data for the row's training stack
(card.json ``hybrid.corrections``: one decision per framework profile in 2.x); elsewhere it answers with
theory. ``oom_risk`` (card ``hybrid.risk_model``): 2.x states theory's risk — log-normal, σ per method fitted on
leave-one-source-out residuals (theory/risk_table.py) — of the larger of the hybrid's and theory's peak less
theory's releasable cached blocks (a correction may lower the peak, never the risk); 1.x is split-conformal: the
fraction of held-out device peaks that the same prediction under-estimated by more than the headroom
log(capacity / predicted peak), among runs whose predicted peak was as near to the capacity. A model whose
architecture is only approximate (catalogue verification ``approximate``) is always outside: nothing was
measured on its real shape. Outside the domain the spread (σ, or theory's residuals) is widened by the card's
``out_of_domain_residual_scale`` (nothing measured there).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from autoconf.estimators.learned.estimator import CorrectedBatch, LearnedEstimator
from autoconf.estimators.learned.features import FeatureTable
from autoconf.estimators.learned.model import band, conformal_risk
from autoconf.estimators.risk import sigma_risk
from autoconf.estimators.theory.vector import MemoryBatch
from autoconf.schema import EstimatorName


class HybridEstimator(LearnedEstimator):
    """Theory, corrected by a learned model version inside its domain, with a stated OOM risk."""

    name: ClassVar[EstimatorName] = "hybrid"

    def _inside(self, cols: FeatureTable) -> np.ndarray:
        return self.model_.correction.contains(cols)

    def _trusted(self, approximate: np.ndarray) -> np.ndarray:
        """An approximate architecture is outside the correction domain: theory, with the wider margin."""
        trusted: np.ndarray = approximate == ""
        return trusted

    def _row_weights(self, target: str, frameworks: np.ndarray) -> np.ndarray:
        """The card's decision for each row's framework (hybrid.corrections; 0 = theory), shrinkage included."""
        return self.model_.gate_weights(target, frameworks)

    def _risk(self, cols: FeatureTable, peak: np.ndarray, th: MemoryBatch, inside: np.ndarray,
              applied: np.ndarray, methods: np.ndarray) -> np.ndarray:
        """2.x ("theory-sigma"): theory's risk (log-normal, σ per method from leave-one-source-out residuals) of the
        larger of this peak and theory's, less theory's releasable cached blocks; 1.x ("conformal"): split-conformal
        P(device peak > capacity) from held-out device residuals of runs in the same band."""
        capacity = th.capacity
        if self.model_.risk_model == "theory-sigma":
            return sigma_risk(np.fmax(peak, th.peak) - th.releasable_or_zero(), capacity, methods, inside,
                              self.model_.out_of_domain_scale)
        with np.errstate(invalid="ignore", divide="ignore"):
            headroom = np.log(capacity / peak)
        risk = np.full(len(peak), np.nan)
        ok = np.isfinite(headroom)
        labels = band(peak, capacity)
        scale = self.model_.out_of_domain_scale
        # corrected rows: the hybrid's residuals; theory inside the domain: theory's; outside: theory's, widened
        for mask, pool, widen in ((ok & inside & applied, "hybrid_device", 1.0),
                                  (ok & inside & ~applied, "theory_device", 1.0), (ok & ~inside, "theory_device", scale)):
            for label in set(labels[mask].tolist()):
                rows = mask & (labels == label)
                risk[rows] = conformal_risk(self.model_.pool(pool, label), headroom[rows], widen)
        return risk

    def notes(self, batch: CorrectedBatch, i: int) -> tuple[str, ...]:
        first = f"micro-batch {batch.micro_batch[i]} per GPU"
        sigma = self.model_.risk_model == "theory-sigma"
        if batch.inside[i] and batch.applied[i]:
            source = ("theory's (σ per method, held-out residuals), of the larger of this peak and theory's" if sigma
                      else f"from {len(self.model_.residuals['hybrid_device'])} held-out residuals")
            return (first,
                    f"hybrid {self.model_version}: peak = theory × {batch.ratio_peak[i]:.3f} (learned correction); "
                    f"oom_risk {source}")
        if batch.inside[i]:
            return (first, f"hybrid {self.model_version}: theory (no learned correction beat theory on held-out "
                    f"{batch.frameworks[i]} rows); oom_risk from theory's held-out residuals")
        return (first, f"hybrid {self.model_version}: outside the learned correction domain, theory with a "
                f"{self.model_.out_of_domain_scale:g}× wider residual margin")
