"""Held-out predictions of a build: theory vs learned vs hybrid, residual pools and the OOM risk.

Two splits, each fold refitting every predictor without the held-out group:

* **leave one model out** (group = model name, across sources): each model's rows are predicted by
  predictors trained on the other models only, with the correction domain of that fold: what the
  estimators do on an architecture they never saw, on a training stack they did see;
* **leave one source out** (group = source): each source's rows are predicted without any row of that
  source: what they do on a stack (and a campaign) they never saw.

Which correction the hybrid applies where is decided in ``gate.py`` from these predictions. The risk is
split-conformal and cross-fitted: a row's risk comes from the residuals of the *other* groups only.
Statistics reuse ``autoconf.evaluation.accuracy`` (error % = 100·(predicted − measured)/measured).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoconf.estimators.learned import train as T
from autoconf.estimators.learned.domain import CorrectionDomain
from autoconf.estimators.learned.estimator import MEMORY_TARGETS, corrected_peaks
from autoconf.estimators.learned.model import MIN_STRATUM_ROWS, band, conformal_risk
from autoconf.estimators.risk import sigma_risk
from autoconf.evaluation.accuracy import error_stats
from autoconf.evaluation.risk import normal_risk, robust_sigma

log = logging.getLogger(__name__)

OUT_OF_DOMAIN_SCALE = 2.0  # outside the correction domain theory's residuals count double (stated assumption)
RISK_BINS = (0.0, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0000001)
# measured metric -> (its predictor, its column in data/measurements.csv, the key of its predicted peak)
METRICS = {"torch_allocated": ("memory_allocated", "torch_allocated_bytes", "allocated"),
           "torch_reserved": ("memory_reserved", "torch_reserved_bytes", "reserved"),
           "nvidia_smi": ("memory_device", "nvidia_smi_bytes", "peak")}
POOL_KEYS = {"torch_allocated": "allocated", "torch_reserved": "reserved", "nvidia_smi": "device"}


def strata(kind: str, table: T.Table, peak: np.ndarray) -> np.ndarray:
    """The conformal stratum of each row: ``band`` (near/far from capacity, as the hybrid), ``method``, ``all``."""
    if kind == "band":
        return band(peak, table.theory.capacity)
    if kind == "method":
        return np.asarray(table.rows["method"].to_numpy(), dtype=object)
    return np.full(len(table), "all", dtype=object)


@dataclass
class GroupedPredictions:
    """Out-of-fold ratios/probabilities per target, the fold's correction-domain mask, the grouping used."""

    oof: dict[str, np.ndarray]
    inside: np.ndarray
    groups: np.ndarray


def _cols(table: T.Table, mask: np.ndarray) -> dict[str, np.ndarray]:
    return {c: table.x[c].to_numpy()[mask] for c in table.x.columns}


def grouped_predictions(table: T.Table, workdir: Path, groups: np.ndarray | None = None) -> GroupedPredictions:
    """Predictions of every target for every row by predictors trained without the row's group
    (default: its model). A fold with too few rows of a target leaves that target NaN there."""
    groups = table.groups if groups is None else groups
    oof = {name: np.full(len(table), np.nan) for name in table.targets}
    inside = np.zeros(len(table), dtype=bool)
    for k, group in enumerate(sorted(set(groups))):
        test, train = groups == group, groups != group
        if train.any():
            inside[test] = CorrectionDomain.from_features(_cols(table, train)).contains(_cols(table, test))
        for name, target in table.targets.items():
            frame = T.training_frame(table, target, train)
            if len(frame) < T.MIN_TRAINING_ROWS or frame["label"].nunique() < 2:
                continue
            predictor = T.fit(frame, target, workdir / f"fold{k}-{name}")
            oof[name][test] = T.predict(predictor, table.x[test], target)
        log.info("held-out fold %s done", group)
    return GroupedPredictions(oof=oof, inside=inside, groups=groups)


def measured(table: T.Table, column: str) -> np.ndarray:
    ok = (table.rows["status"] == "ok").to_numpy()
    if column not in table.rows:
        return np.full(len(table), np.nan)
    return np.where(ok, table.rows[column].astype(float).to_numpy(), np.nan)


def stats(meas: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    keep = np.isfinite(meas) & np.isfinite(predicted)
    return {k: (round(v, 3) if isinstance(v, float) else v) for k,
            v in error_stats(meas[keep], predicted[keep]).items()}


def theory_tokens(table: T.Table) -> np.ndarray:
    tps: np.ndarray = table.x["theory_tokens_per_second_per_gpu"].to_numpy() * table.x["number_gpus"].to_numpy()
    return tps


def estimate(table: T.Table, gp: GroupedPredictions, weight: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Allocated, reserved and device peaks and tokens/s of theory × out-of-fold ratio**weight per row."""
    ratio = {t: gp.oof[t] for t in MEMORY_TARGETS if t in gp.oof}
    w = {t: np.where(np.isfinite(gp.oof[t]), weight.get(t, 0.0), 0.0) for t in ratio}
    allocated, reserved, peak = corrected_peaks(table.theory, ratio, w)
    w_tps = np.where(np.isfinite(gp.oof["throughput"]), weight.get("throughput", 0.0), 0.0)
    with np.errstate(invalid="ignore"):
        tokens = theory_tokens(table) * np.where(w_tps > 0, gp.oof["throughput"] ** w_tps, 1.0)
    return {"allocated": allocated, "reserved": reserved, "peak": peak, "tokens": tokens}


def predictions(table: T.Table, gp: GroupedPredictions,
                hybrid_weight: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Held-out peaks and tokens/s of theory, learned (every ratio, every row) and hybrid (its gate's weights)."""
    finite = np.isfinite(table.theory.peak).astype(float)
    learned = estimate(table, gp, {t: finite for t in table.targets})
    for key, target in (("allocated", "memory_allocated"), ("reserved", "memory_reserved"),
                        ("peak", "memory_device"), ("tokens", "throughput")):  # no fold predictor: no answer
        learned[key] = np.where(np.isfinite(gp.oof.get(target, np.full(len(table), np.nan))), learned[key], np.nan)
    return {
        "theory": {"allocated": table.theory.allocated, "reserved": table.theory.reserved, "peak": table.theory.peak,
                   "tokens": theory_tokens(table)},
        "learned": learned,
        "hybrid": estimate(table, gp, hybrid_weight),
    }


def applied_rows(hybrid_weight: dict[str, np.ndarray], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    for t in MEMORY_TARGETS:
        out |= np.asarray(hybrid_weight.get(t, np.zeros(n))) > 0
    return out


def residual_pools(table: T.Table, preds: dict[str, dict[str, np.ndarray]], applied: np.ndarray,
                   stratum: np.ndarray) -> dict[str, np.ndarray]:
    """log(measured / predicted) per metric: the hybrid's on its corrected rows, theory's on every row; each
    also per stratum (``<pool>__<stratum>``)."""
    pools: dict[str, np.ndarray] = {}
    for metric, (_, column, key) in METRICS.items():
        meas = measured(table, column)
        with np.errstate(invalid="ignore", divide="ignore"):
            hybrid = np.where(applied, np.log(meas / preds["hybrid"][key]), np.nan)
            theory = np.log(meas / preds["theory"][key])
        for name, values in ((f"hybrid_{POOL_KEYS[metric]}", hybrid), (f"theory_{POOL_KEYS[metric]}", theory)):
            pools[name] = values
            for label in sorted(set(stratum.tolist())):
                pools[f"{name}__{label}"] = np.where(stratum == label, values, np.nan)
    return pools


def _pool(pools: dict[str, np.ndarray], name: str, label: str, keep: np.ndarray) -> np.ndarray:
    stratum = pools.get(f"{name}__{label}", np.zeros(0))[keep] if f"{name}__{label}" in pools else np.zeros(0)
    stratum = stratum[np.isfinite(stratum)]
    if len(stratum) >= MIN_STRATUM_ROWS:
        return np.sort(stratum)
    whole = pools[name][keep]
    return np.sort(whole[np.isfinite(whole)])


def hybrid_risk(table: T.Table, peak: np.ndarray, pools: dict[str, np.ndarray], inside: np.ndarray,
                applied: np.ndarray, groups: np.ndarray, stratum: np.ndarray, model: str = "conformal") -> np.ndarray:
    """Cross-fitted conformal risk: each row's from the residuals of the *other* groups only (as hybrid._risk),
    of the row's stratum where the other groups have enough of them."""
    with np.errstate(invalid="ignore", divide="ignore"):
        headroom = np.log(table.theory.capacity / peak)
    risk = np.full(len(table), np.nan)
    for group in set(groups):
        g, other = groups == group, groups != group
        for mask, name, widen in ((inside & applied, "hybrid_device", 1.0), (inside & ~applied, "theory_device", 1.0),
                                  (~inside, "theory_device", OUT_OF_DOMAIN_SCALE)):
            for label in set(stratum[g & mask].tolist()):
                rows = g & mask & (stratum == label)
                pool = _pool(pools, name, label, other)
                risk[rows] = (lognormal_risk if model == "lognormal" else conformal_risk)(pool, headroom[rows], widen)
    return risk


def lognormal_risk(residuals: np.ndarray, threshold: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """A variant reported beside the shipped risk: theory's model (log-normal, σ = 1.4826 · MAD:
    evaluation/risk.py) fitted on the hybrid's own held-out residuals (finite, as ``_pool`` gives them), σ × ``scale``;
    1 where there are none."""
    if not len(residuals):
        return np.ones(len(threshold))
    return normal_risk(threshold, robust_sigma(residuals) * scale)


def theory_sigma_risk(table: T.Table, peak: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """The hybrid's risk as 2.x states it (hybrid.py, risk_model "theory-sigma"): theory's log-normal σ per method
    (risk_table.py, fitted on leave-one-source-out residuals) over the larger of the hybrid's and theory's peak, less
    theory's releasable cached blocks; σ widened outside the correction domain."""
    need = np.fmax(peak, table.theory.peak) - table.theory.releasable_or_zero()
    return sigma_risk(need, table.theory.capacity, table.rows["method"].to_numpy(dtype=object), inside,
                      OUT_OF_DOMAIN_SCALE)


def calibration_table(risk: np.ndarray, oom: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for lo, hi in zip(RISK_BINS[:-1], RISK_BINS[1:], strict=True):
        b = (risk >= lo) & (risk < hi)
        rows.append({"risk_from": lo, "risk_to": min(hi, 1.0), "rows": int(b.sum()),
                     "mean_risk": round(float(risk[b].mean()), 4) if b.any() else None,
                     "observed_oom_rate": round(float(oom[b].mean()), 4) if b.any() else None})
    return rows


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U over average ranks)."""
    ranks = pd.Series(score).rank().to_numpy()
    pos = label.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
