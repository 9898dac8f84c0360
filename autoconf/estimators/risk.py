"""``oom_risk``, computed here once for every estimator and the layout search's gate.

The model: the true device peak is log-normal around the predicted one, log(actual / predicted) ~ Normal(0, σ), so
P(OOM) = P(actual > capacity) = ½·erfc(log(capacity / need) / (σ·√2)). ``need`` is the predicted device peak less
the cached blocks the allocator releases before it fails (PyTorch's caching allocator frees its cached blocks and
retries when cudaMalloc fails). σ is theory's per training method, fitted on held-out residuals (risk_table.py,
``python bench/theory_risk.py --write``), unless an estimator states its own (traced: a fixed spread; hybrid 2.x:
theory's, widened outside its correction domain). The hybrid's 1.x split-conformal risk is a different model and
stays in learned/model.py.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from autoconf.estimators.theory.risk_table import SIGMA
from autoconf.estimators.theory.rows import Num, Table, lookup

__all__ = ["need_threshold", "oom_probability", "sigma_risk", "theory_sigma"]

_ERFC = np.frompyfunc(math.erfc, 1, 1)
_SIGMAS = Table({m: s for m, (s, _) in SIGMA.items()}, SIGMA["*"][0])


def theory_sigma(method: object = None) -> Num:
    """Theory's σ of log(actual / predicted) peak for ``method`` (one name, or a column of them); ``*`` for the
    methods risk_table.py does not name."""
    name = method if isinstance(method, np.ndarray) else method or "*"
    return lookup(name, _SIGMAS)


def oom_probability(peak: Num, capacity: Num, rel_sigma: Num | None = None, method: object = None) -> Num:
    """P(actual > capacity) if log(actual / peak) ~ Normal(0, σ): σ = ``rel_sigma`` where given (one, or one per
    row), else theory's σ of ``method``. 1 where the capacity is not positive. A float for one row, an array for
    columns."""
    sigma = rel_sigma if rel_sigma is not None else theory_sigma(method)
    if not any(isinstance(v, np.ndarray) for v in (peak, capacity, sigma)):
        if capacity <= 0:
            return 1.0
        z = math.log(capacity / max(peak, 1.0)) / sigma
        return float(min(1.0, max(0.0, 0.5 * math.erfc(z / math.sqrt(2)))))
    room = np.asarray(capacity, dtype=float)
    z = np.log(np.where(room > 0, room, 1.0) / np.maximum(peak, 1.0)) / sigma
    risk = np.clip(0.5 * _ERFC(z / math.sqrt(2)).astype(float), 0.0, 1.0)
    return np.where(room > 0, risk, 1.0)


def sigma_risk(need: np.ndarray, capacity: np.ndarray, methods: np.ndarray, inside: np.ndarray,
               scale: float) -> np.ndarray:
    """The hybrid's 2.x risk ("theory-sigma"): theory's risk of ``need`` bytes on ``capacity``, σ × ``scale`` for
    rows outside the correction domain (``inside`` False). NaN where either is unknown."""
    known = np.isfinite(need) & np.isfinite(capacity)
    if not known.any():
        return np.full(len(need), np.nan)
    sigma = np.asarray(theory_sigma(np.asarray(methods).astype(str)), dtype=float)
    sigma = np.where(inside, sigma, sigma * scale)
    risk = np.full(len(need), np.nan)
    risk[known] = oom_probability(need[known], capacity[known], rel_sigma=sigma[known])
    return risk


def need_threshold(capacity: float, max_oom_risk: float, method: str) -> float:
    """The largest need whose theory risk (``oom_probability``) is ≤ ``max_oom_risk`` on ``capacity``, the layout
    gate's bound: risk = P(N(0, σ) > log(capacity / need)) ≤ r ⇔ need ≤ capacity · exp(−σ · Φ⁻¹(1 − r))."""
    if max_oom_risk >= 1:
        return math.inf
    if max_oom_risk <= 0:
        return 0.0
    sigma = float(theory_sigma(method))
    return float(capacity * np.exp(-sigma * NormalDist().inv_cdf(1 - max_oom_risk)))
