"""Out-of-memory gate scoring, and theory's oom_risk calibrated on held-out residuals.

Gate scoring (any estimator): over ``ok`` and ``oom`` rows with a stated risk, at the recommender's gate
(``defaults.MAX_OOM_RISK``) a run is *passed* when risk ≤ gate. *dangerous* = passed but it ran out of memory;
*refused* = not passed but it completed; "said fits" = the estimate's ``fits`` (device peak ≤ capacity).
The calibration curve bins the stated risk and compares each bin's mean with the observed OOM rate.

Theory's risk model: log(actual device peak / predicted device peak) ~ Normal(0, σ_method), so
risk = P(log residual > log(capacity / predicted peak)). σ_method = 1.4826 · MAD (the normal-consistent
median absolute deviation) of the leave-one-source-out log residuals log(measured / predicted) of the
metrics in ``RISK_METRICS`` of runs whose peak batch length is known, per method with at least ``MIN_ROWS``
rows, else pooled (key ``*``).
``cross_fit_risk`` states each row's risk from σ fitted without the row's (source, model) group, so the
confusion and calibration curve reported with it are held out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from autoconf.defaults import MAX_OOM_RISK

# torch's allocated peak and nvidia-smi's device peak: the two metrics measured on enough rows; the reserved
# peak (4 rows) is left out. Both are read as the spread of the true need around the prediction.
RISK_METRICS = ("torch_allocated", "nvidia_smi")
MIN_ROWS = 100  # a method gets its own σ from at least this many residuals (MAD's standard error ≈ 8 % of σ)
MAD_TO_SIGMA = 1.4826  # 1 / Φ⁻¹(0.75): MAD of a normal sample × this = its standard deviation
GROUP = ("source", "model_name")  # cross-fitting holds out one model of one source at a time
CALIBRATION_EDGES = (0.0, 0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)


def log_residuals(scored: pd.DataFrame, metrics: Sequence[str] = RISK_METRICS) -> pd.DataFrame:
    """Rows of a per-row score (``accuracy.score_memory``) with a prediction, of ``metrics``, and
    ``residual`` = log(measured / predicted)."""
    keep = (scored["error"] == "") & scored["metric"].isin(list(metrics))
    # Only runs whose peak batch length is known: a variable-length row states the mean sample length, so its
    # residual measures that input (the peak batch is longer), not theory's error on a job stated at its padded
    # length, which is what a user states. On the shipped data these 307 rows widened σ_full from 0.050 to 0.092.
    if "variable_length" in scored:
        keep &= pd.to_numeric(scored["variable_length"], errors="coerce").fillna(0) == 0
    keep &= (scored["measured"].astype(float) > 0) & (scored["predicted"].astype(float) > 0)
    out = scored[keep].copy()
    out["residual"] = np.log(out["measured"].astype(float) / out["predicted"].astype(float))
    return out


def robust_sigma(residuals: Sequence[float] | np.ndarray) -> float:
    """1.4826 · median |r − median(r)|: a standard deviation that outlying rows cannot inflate."""
    r = np.asarray(residuals, dtype=float)
    return float(MAD_TO_SIGMA * np.median(np.abs(r - np.median(r))))


def fit_sigmas(residuals: pd.DataFrame, min_rows: int = MIN_ROWS) -> dict[str, tuple[float, int]]:
    """{method: (σ, rows)} for methods with ≥ ``min_rows`` residuals, plus ``*`` over all rows."""
    table = {"*": (robust_sigma(residuals["residual"]), len(residuals))}
    for method, group in residuals.groupby("method", sort=True):
        if len(group) >= min_rows:
            table[str(method)] = (robust_sigma(group["residual"]), len(group))
    return table


def normal_risk(headroom: np.ndarray | float, sigma: float) -> np.ndarray:
    """P(Normal(0, σ) > headroom), headroom = log(capacity / predicted peak); 1 where σ is not positive."""
    h = np.atleast_1d(np.asarray(headroom, dtype=float))
    if not sigma > 0:
        return np.where(h > 0, 0.0, 1.0)
    return np.array([0.5 * math.erfc(x / (sigma * math.sqrt(2))) for x in h.tolist()])


def headroom(check: pd.DataFrame) -> pd.Series:
    """log(capacity / predicted need) of ``accuracy.oom_check`` rows (NaN where refused): the need is the device
    peak less its releasable cached blocks (``predicted_need``, as theory states its risk), else the device peak."""
    need = check["predicted_need"] if "predicted_need" in check else check["predicted_peak"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(check["capacity"].astype(float) / need.astype(float))


def risk_from(table: dict[str, tuple[float, int]], methods: pd.Series, room: pd.Series) -> pd.Series:
    """Each row's risk from its method's σ (pooled ``*`` for a method without its own)."""
    risk = pd.Series(np.nan, index=room.index)
    for method, index in methods.groupby(methods).groups.items():
        sigma = table.get(str(method), table["*"])[0]
        risk[index] = normal_risk(room[index].to_numpy(), sigma)
    return risk


def cross_fit_risk(check: pd.DataFrame, residuals: pd.DataFrame, group: Sequence[str] = GROUP) -> pd.Series:
    """Held-out risk: each (source, model) group of ``check`` scored with σ fitted on the other groups' residuals."""
    room = headroom(check)
    risk = pd.Series(np.nan, index=check.index)
    keys = check[list(group)].astype(str).agg("/".join, axis=1)
    res_keys = residuals[list(group)].astype(str).agg("/".join, axis=1)
    for key in keys.unique():
        rows = keys == key
        table = fit_sigmas(residuals[res_keys != key])
        risk[rows] = risk_from(table, check.loc[rows, "method"], room[rows])
    return risk


def gate_confusion(check: pd.DataFrame, by: Sequence[str] = (), gate: float = MAX_OOM_RISK,
                   risk_column: str = "oom_risk") -> pd.DataFrame:
    """OOM confusion at ``gate`` over answered ok/oom rows, overall or per group (see the module docstring)."""
    answered = check[(check["error"] == "") & check["status"].isin(["ok", "oom"]) & check[risk_column].notna()]
    groups = answered.groupby(list(by), sort=True) if by else [((), answered)]
    rows = []
    for key, g in groups:
        keys = key if isinstance(key, tuple) else (key,)
        oom, ok = g["status"] == "oom", g["status"] == "ok"
        passed = g[risk_column].astype(float) <= gate
        fits = g["predicted_fits"].astype(bool)
        refused = int((ok & ~passed).sum())
        rows.append({**dict(zip(by, keys, strict=True)), "oom_rows": int(oom.sum()),
                     "dangerous": int((oom & passed).sum()), "oom_said_fits": int((oom & fits).sum()),
                     "ok_rows": int(ok.sum()), "refused": refused, "ok_said_no_fit": int((ok & ~fits).sum()),
                     "refused_pct": 100.0 * refused / ok.sum() if ok.any() else np.nan})
    return pd.DataFrame(rows, columns=[*by, "oom_rows", "dangerous", "oom_said_fits", "ok_rows", "refused",
                                       "ok_said_no_fit", "refused_pct"])


def calibration_curve(risk: Sequence[float] | np.ndarray, is_oom: Sequence[bool] | np.ndarray,
                      edges: Sequence[float] = CALIBRATION_EDGES) -> pd.DataFrame:
    """Per bin of stated risk [lo, hi) (the last bin closed): rows, mean stated risk, observed OOM rate."""
    r = np.asarray(risk, dtype=float)
    y = np.asarray(is_oom, dtype=bool)
    keep = np.isfinite(r)
    r, y = r[keep], y[keep]
    rows = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        inside = (r >= lo) & ((r < hi) if i < len(edges) - 2 else (r <= hi))
        n = int(inside.sum())
        rows.append({"stated_risk": f"[{lo:g}, {hi:g}" + (")" if i < len(edges) - 2 else "]"), "rows": n,
                     "mean_stated_pct": 100.0 * float(r[inside].mean()) if n else np.nan,
                     "oom_rows": int(y[inside].sum()), "observed_oom_pct": 100.0 * float(y[inside].mean()) if n else np.nan})
    return pd.DataFrame(rows)
