"""The held-out report of a build (card.json ``held_out``): errors per split, source, framework, metric, method;
the OOM gate and the calibration of ``oom_risk``.

Every number here is computed on rows predicted without their group (``learned.py``): leave one model out
and leave one source out. Error statistics: median and p90 of |error %|, bias = median signed error %.
OOM: at the recommender's gate (``defaults.MAX_OOM_RISK``) *dangerous* = risk ≤ gate but the run ran out of
memory (must be 0), *refused* = risk > gate but the run completed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoconf.defaults import MAX_OOM_RISK
from autoconf.estimators.learned import train as T
from autoconf.evaluation import learned as E

ESTIMATORS = ("theory", "learned", "hybrid")
USE_BINS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01))  # measured device peak / capacity
REPORTED = {**{m: (c, k) for m, (_, c, k) in E.METRICS.items()}, "tokens_per_second": ("tokens_per_second", "tokens")}


def _row(meas: np.ndarray, preds: dict[str, dict[str, np.ndarray]], key: str, rows: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"n": int((rows & np.isfinite(meas)).sum())}
    for name in ESTIMATORS:
        s = E.stats(meas[rows], preds[name][key][rows])
        out.update({f"{name}_median": s["median_abs_error_pct"], f"{name}_p90": s["p90_abs_error_pct"],
                    f"{name}_bias": s["bias_pct"]})
    return out


def error_tables(table: T.Table, preds: dict[str, dict[str, np.ndarray]], weight: dict[str, np.ndarray]
                 ) -> dict[str, Any]:
    """Overall, by source, and by (source, framework, metric, method) for one split's predictions."""
    sources, frameworks = table.sources, table.frameworks
    methods = table.rows["method"].to_numpy()
    corrected = E.applied_rows(weight, len(table))
    out: dict[str, Any] = {"overall": {}, "by_source": [], "by_group": []}
    for metric, (column, key) in REPORTED.items():
        meas = E.measured(table, column)
        has = np.isfinite(meas)
        if not has.any():
            continue
        out["overall"][metric] = {name: E.stats(meas, p[key]) for name, p in preds.items()}
        target = "throughput" if key == "tokens" else E.METRICS[metric][0]
        share = np.asarray(weight.get(target, np.zeros(len(table)))) > 0 if key == "tokens" else corrected
        for source in sorted(set(sources[has].tolist())):
            rows = has & (sources == source)
            row = {"source": source, "metric": metric, **_row(meas, preds, key, rows),
                   "corrected_share": round(float(share[rows].mean()), 3)}
            row["hybrid_not_worse"] = bool(not row["hybrid_median"] > row["theory_median"])
            out["by_source"].append(row)
            for fw in sorted(set(frameworks[rows].tolist())):
                for method in sorted(set(methods[rows & (frameworks == fw)].tolist())):
                    g = rows & (frameworks == fw) & (methods == method)
                    out["by_group"].append({"source": source, "framework": fw, "metric": metric, "method": method,
                                            **_row(meas, preds, key, g)})
    return out


def by_model(table: T.Table, preds: dict[str, dict[str, np.ndarray]], inside: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for metric, (column, key) in REPORTED.items():
        meas = E.measured(table, column)
        rows = []
        for group in sorted(set(table.groups)):
            g = (table.groups == group) & np.isfinite(meas)
            if g.any():
                row: dict[str, Any] = {"model": group, "n": int(g.sum()),
                                       "in_correction_domain": round(float(inside[g].mean()), 3)}
                row.update({n: E.stats(meas[g], p[key][g])["median_abs_error_pct"] for n, p in preds.items()})
                rows.append(row)
        if rows:
            out[metric] = rows
    return out


def gate_counts(risk: np.ndarray, oom: np.ndarray, gate: float = MAX_OOM_RISK) -> dict[str, Any]:
    ok = np.isfinite(risk)
    bad, fine = ok & (oom > 0), ok & (oom == 0)
    return {"oom_rows": int(bad.sum()), "dangerous": int((bad & (risk <= gate)).sum()), "ok_rows": int(fine.sum()),
            "refused": int((fine & (risk > gate)).sum()),
            "refused_pct": round(100 * float((fine & (risk > gate)).sum()) / max(int(fine.sum()), 1), 2)}


def oom_report(table: T.Table, preds: dict[str, dict[str, np.ndarray]], lomo: E.GroupedPredictions,
               risks: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per estimator/variant: the gate counts, "fits" answers, calibration curve; the OOM classifier."""
    oom = (table.rows["status"] == "oom").to_numpy().astype(float)
    sources = table.sources
    out: dict[str, Any] = {"rows": int(len(oom)), "oom_rows": int(oom.sum()), "gate": MAX_OOM_RISK, "risks": {}}
    for name, risk in risks.items():
        ok = np.isfinite(risk)
        est = name if name in preds else name.split(":")[0]
        fits = preds[est]["peak"] <= table.theory.capacity if est in preds else np.zeros(len(oom), bool)
        out["risks"][name] = {
            **gate_counts(risk, oom), "fits_answers": int(fits[ok].sum()), "fits_but_oom": int((fits & (oom > 0))[ok].sum()),
            "by_source": {s: gate_counts(np.where(sources == s, risk, np.nan), oom) for s in sorted(set(sources))},
            "calibration": E.calibration_table(risk[ok], oom[ok]),
        }
    # why completed runs are refused: how close to the GPU's capacity they measured (nvidia-smi peak / capacity)
    used = E.measured(table, "nvidia_smi_bytes") / table.theory.capacity
    refused = (oom == 0) & (risks["hybrid"] > out["gate"])
    out["refused_by_measured_use"] = [
        {"measured_use_from": lo, "measured_use_to": hi, "completed": int(((oom == 0) & (used >= lo) & (used < hi)).sum()),
         "refused": int((refused & (used >= lo) & (used < hi)).sum())} for lo, hi in USE_BINS]
    cls = lomo.oof["oom"]
    ok = np.isfinite(cls)
    out["classifier"] = {"n": int(ok.sum()), "accuracy": round(float(((cls[ok] > 0.5) == (oom[ok] > 0)).mean()), 4),
                         "auc": round(E.auc(cls[ok], oom[ok]), 4)}
    return out
