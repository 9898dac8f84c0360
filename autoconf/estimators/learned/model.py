"""One loaded learned-model version: its predictors, domains, residuals, and the hybrid arithmetic.

Loading verifies ``MANIFEST.sha256`` first (versions.verify), then reads the numpy copies of the
trees (``fastpath/<target>.npz``) and the held-out residuals (``residuals.npz``); nothing here
unpickles. The AutoGluon backend (``backend="autogluon"`` or ``$AUTOCONF_LEARNED_BACKEND``) loads
the ``TabularPredictor`` pickles instead; if they cannot be loaded in this environment (another
AutoGluon or Python version), it says so and rebuilds the version from ``data/`` into a cache folder.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from autoconf.errors import NotBuiltError
from autoconf.estimators.learned import versions as V
from autoconf.estimators.learned.domain import CorrectionDomain, TrainingDomain
from autoconf.estimators.learned.fastpath import Forest
from autoconf.estimators.learned.features import ALL_FEATURES, FeatureTable
from autoconf.estimators.theory.rows import Table, lookup

log = logging.getLogger(__name__)

BACKEND_ENV = "AUTOCONF_LEARNED_BACKEND"
CACHE_ENV = "AUTOCONF_MODELS_CACHE"
TARGETS = ("memory_allocated", "memory_reserved", "memory_device", "oom", "throughput")  # 1.x: no memory_reserved
# 2.x states the risk from the residuals of runs in the same band of predicted use (``<pool>__near`` /
# ``__far``): near capacity the caching allocator gives its cached blocks back and retries before an OOM
# (PyTorch CUDA caching allocator: cached blocks are freed and the allocation retried when cudaMalloc fails), so
# the device residuals of runs far below capacity (cache kept) overstate the risk of runs close to it.
# NEAR_CAPACITY: predicted device peak ≥ half the GPU. Chosen among pooled / per method / bands 0.5, 0.6, 0.7 on
# the cross-fitted held-out rows that docs/accuracy.md reports (disclosed there).
NEAR_CAPACITY = 0.5
# A stratum's pool is used from this many held-out rows on, else the pool of every row (a conformal quantile
# at 0.05 needs ≥ 19 rows to mean anything; 50 keeps its 1/(n+1) floor at 2 %). An assumption.
MIN_STRATUM_ROWS = 50


def band(peak: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """``near`` where the predicted device peak is at least NEAR_CAPACITY of the GPU, else ``far``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(peak >= NEAR_CAPACITY * capacity, "near", "far").astype(object)
# Ratios are clipped to a sane band: no measured row lies outside 0.3-3× of theory, and a tree never
# predicts beyond its leaves anyway; the clip guards against a corrupted or degenerate version.
RATIO_BOUNDS = (0.3, 3.0)


def conformal_risk(residuals: np.ndarray, threshold: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Split-conformal P(residual · scale > threshold) with the (n + 1) finite-sample correction.

    ``residuals`` are sorted held-out log(measured / predicted) peaks; ``threshold`` is
    log(capacity / predicted peak) per row, so the result is the probability that the true peak
    exceeds the capacity, never below 1 / (n + 1) (what n held-out rows can vouch for).
    """
    n = len(residuals)
    exceed = n - np.searchsorted(residuals * scale, threshold, side="right")
    return (exceed + 1.0) / (n + 1.0)


@dataclass
class VersionModel:
    version: str
    folder: Path
    card: dict[str, Any]
    forests: dict[str, Forest]
    residuals: dict[str, np.ndarray]
    backend: str = "fast"
    _predictors: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def training(self) -> TrainingDomain:
        return TrainingDomain.from_json(self.card["training_domain"])

    @cached_property
    def correction(self) -> CorrectionDomain:
        return CorrectionDomain.from_json(self.card["correction_domain"])

    @cached_property
    def applied(self) -> dict[str, bool]:
        """Which corrections the hybrid applies to some stack (each beat theory on held-out rows)."""
        return {k: bool(v["applied"]) for k, v in self.card["hybrid"]["corrections"].items()}

    def gate_weights(self, target: str, frameworks: np.ndarray) -> np.ndarray:
        """Exponent of ``target``'s ratio per row (0 = theory): the card's decision for the row's framework.

        1.x cards hold one decision for every row; 2.x cards one per framework profile
        (``corrections.<target>.frameworks``) and one for any stack not listed (``unseen``).
        """
        card = self.card["hybrid"]["corrections"].get(target)
        if card is None or target not in self.forests:
            return np.zeros(len(frameworks))
        if "frameworks" not in card:
            return np.full(len(frameworks), _weight(card))
        table = {name: _weight(d) for name, d in card["frameworks"].items()}
        default = _weight(card.get("unseen", {"applied": False}))
        weights: np.ndarray = lookup(np.asarray(frameworks), Table(table, default))  # a mask per listed stack
        return weights

    def pool(self, name: str, label: str) -> np.ndarray:
        """Held-out residuals ``name`` (e.g. hybrid_device) of stratum ``label`` if there are enough, else all."""
        stratum = self.residuals.get(f"{name}__{label}")
        return stratum if stratum is not None and len(stratum) >= MIN_STRATUM_ROWS else self.residuals[name]

    @cached_property
    def risk_model(self) -> str:
        """How the hybrid states oom_risk: "conformal" (1.x: held-out residual pools) or "theory-sigma" (2.x)."""
        return str(self.card["hybrid"].get("risk_model", "conformal"))

    @cached_property
    def out_of_domain_scale(self) -> float:
        return float(self.card["hybrid"]["out_of_domain_residual_scale"])

    def predict(self, target: str, table: FeatureTable, rows: np.ndarray | None = None) -> np.ndarray:
        """Ratio (or OOM probability) of ``target`` for the rows selected by ``rows`` (all if None)."""
        x = table.x if rows is None else table.x[rows]
        if self.backend == "autogluon":
            return self._predict_autogluon(target, FeatureTable(x))
        out = self.forests[target].predict(x)
        return out if target == "oom" else np.clip(out, *RATIO_BOUNDS)

    def _predict_autogluon(self, target: str, table: FeatureTable) -> np.ndarray:
        predictor = self._predictors[target]
        frame = table.frame(list(predictor.features()))
        if target == "oom":
            proba: np.ndarray = predictor.predict_proba(frame)[1].to_numpy(dtype=float)
            return proba
        ratio: np.ndarray = np.clip(predictor.predict(frame).to_numpy(dtype=float), *RATIO_BOUNDS)
        return ratio


def _weight(decision: dict[str, Any]) -> float:
    """A decision's exponent: 0 if not applied, else its shrinkage weight (1 = whole; throughput has none)."""
    return float(decision.get("weight", 1.0)) if decision.get("applied") else 0.0


def _load_fast(version: str, folder: Path, backend: str) -> VersionModel:
    V.verify(folder)
    card = json.loads((folder / V.CARD).read_text(encoding="utf-8"))
    # the predictors the version has (a 1.x version has no memory_reserved; a target with too few rows is absent)
    forests = {t: Forest.load(folder / "fastpath" / f"{t}.npz").bind(ALL_FEATURES) for t in TARGETS
               if t in card["features"]}
    with np.load(folder / "residuals.npz", allow_pickle=False) as z:
        residuals = {k: np.sort(z[k]) for k in z.files}
    return VersionModel(version=version, folder=folder, card=card, forests=forests, residuals=residuals,
                        backend=backend)


def _attach_autogluon(model: VersionModel) -> None:
    from autogluon.tabular import TabularPredictor

    V.verify_pinned(model.folder)  # the manifest is not signed: unpickle only a pinned or trusted one
    for target in model.forests:
        path = model.folder / "autogluon" / target
        predictor = TabularPredictor.load(str(path), verbosity=0)
        predictor.persist(models="all")  # unpickle the LightGBM model now, not at the first prediction
        model._predictors[target] = predictor


@lru_cache(maxsize=8)
def load(version: str | None = None, backend: str | None = None) -> VersionModel:
    """The installed version (newest if None), manifest-verified; cached per process."""
    backend = backend or os.environ.get(BACKEND_ENV, "fast")
    if backend not in ("fast", "autogluon"):
        raise NotBuiltError(f"{BACKEND_ENV} must be 'fast' or 'autogluon'; got '{backend}'")
    resolved = V.resolve(version)
    model = _load_fast(resolved, V.version_dir(resolved), backend)
    if backend == "autogluon":
        try:
            _attach_autogluon(model)
        except V.IntegrityError:
            raise
        except Exception as exc:  # any unpickling failure means "cannot be loaded in this environment"
            raise NotBuiltError(
                f"the AutoGluon predictors of version {resolved} cannot be loaded here ({type(exc).__name__}); "
                f"rebuild them with `autoconf-gpu models build {resolved} --force`, or use the default "
                f"{BACKEND_ENV}=fast backend, which needs no unpickling"
            ) from exc
    return model
