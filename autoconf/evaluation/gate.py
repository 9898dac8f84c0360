"""The hybrid's gate: which learned correction is applied to which training stack, decided on held-out rows.

For every (target, framework profile) the build records one decision in card.json
(``hybrid.corrections.<target>.frameworks.<framework>``), read by the hybrid at prediction time:

* a framework with training rows of the target ("trained"): the correction (theory × ratio**w, w among
  ``SHRINK_WEIGHTS``) is applied iff, on the leave-one-model-out rows of that framework, it beats theory's
  median absolute % error on *every* source of that framework; w is the one with the lowest error there;
* a framework without training rows ("unseen", also any profile added later: ``unseen``): iff, on the
  leave-one-source-out rows, it beats theory on every held-out source (at least two sources with
  predictions: one source gives no held-out evidence about a stack it never saw).

A source may hold several stacks (fms-acceleration: fms-hf-tuning and peft), and medians do not add up: each
stack's correction can win on its own rows while the source's median gets worse. So after the stacks of a target
are decided, while the leave-one-model-out median of a source is above theory's, the applied correction of that
source's stack that gained least is revoked (``why`` says so). So on held-out data the hybrid is never worse than
theory on any source, or theory is what it answers there.
w and the decisions are chosen on the same held-out rows that are reported (five values of w, one bit per
(target, framework)); docs/accuracy.md says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoconf.estimators.learned import train as T
from autoconf.estimators.theory.frameworks import PROFILES
from autoconf.evaluation import learned as E

# Shrinkage weights tried for each memory correction: the hybrid uses theory × ratio**w; w = 0 is theory.
SHRINK_WEIGHTS = (0.25, 0.5, 0.75, 1.0)
# target -> (measured column, predicted key) of the metric it corrects
GATED = {"memory_allocated": ("torch_allocated_bytes", "allocated"),
         "memory_reserved": ("torch_reserved_bytes", "reserved"),
         "memory_device": ("nvidia_smi_bytes", "peak"), "throughput": ("tokens_per_second", "tokens")}
MIN_SOURCES_UNSEEN = 2


def _median(meas: np.ndarray, pred: np.ndarray, rows: np.ndarray) -> float:
    return float(E.stats(meas[rows], pred[rows])["median_abs_error_pct"])


def _trial(table: T.Table, gp: E.GroupedPredictions, weight: dict[str, np.ndarray], target: str, rows: np.ndarray,
           w: float) -> dict[str, np.ndarray]:
    """Predictions with ``target``'s weight set to ``w`` on ``rows`` inside the fold's correction domain."""
    trial = {**weight, target: np.where(rows & gp.inside, w, weight.get(target, np.zeros(len(table))))}
    return E.estimate(table, gp, trial)


def _per_source(meas: np.ndarray, theory: np.ndarray, pred: np.ndarray, rows: np.ndarray,
                sources: np.ndarray) -> dict[str, tuple[float, float, int]]:
    out = {}
    for source in sorted(set(sources[rows].tolist())):
        r = rows & (sources == source)
        out[source] = (_median(meas, theory, r), _median(meas, pred, r), int(r.sum()))
    return out


def _choose(table: T.Table, gp: E.GroupedPredictions, weight: dict[str, np.ndarray], target: str,
            rows: np.ndarray, min_sources: int) -> dict[str, Any]:
    """The best w > 0 that beats theory on every source of ``rows`` (held-out), or not applied."""
    column, key = GATED[target]
    meas = E.measured(table, column)
    theory = E.predictions(table, gp, {})["theory"][key]
    # every measured row of ``rows`` is scored: outside the domain both answers are theory's (as in the report)
    scored = rows & np.isfinite(meas) & np.isfinite(theory)
    if not (scored & gp.inside & np.isfinite(gp.oof[target])).any():
        scored = scored & False
    sources = table.sources
    best: dict[str, Any] = {"applied": False, "weight": 0.0, "rows": int(scored.sum()),
                            "theory_median_abs_error_pct": round(_median(meas, theory, scored), 3)
                            if scored.any() else None}
    if len(set(sources[scored].tolist())) < min_sources:
        best["why"] = f"held-out predictions on {len(set(sources[scored].tolist()))} source(s); {min_sources} needed"
        return best
    for w in SHRINK_WEIGHTS if target != "throughput" else (1.0,):
        pred = _trial(table, gp, weight, target, scored, w)[key]
        per = _per_source(meas, theory, pred, scored, sources)
        wins = all(c < t for t, c, _ in per.values())
        error = _median(meas, pred, scored)
        if wins and (not best["applied"] or error <= best["corrected_median_abs_error_pct"]):
            best.update(applied=True, weight=w, corrected_median_abs_error_pct=round(error, 3))
        if w == SHRINK_WEIGHTS[-1] or target == "throughput":
            best["by_source"] = {s: {"theory": round(t, 3), "corrected_w1": round(c, 3), "n": n}
                                 for s, (t, c, n) in per.items()}
    if not best["applied"]:
        best["why"] = "no weight beat theory on every held-out source"
    return best


def _assign(table: T.Table, splits: tuple[E.GroupedPredictions, E.GroupedPredictions],
            weights: tuple[dict[str, np.ndarray], dict[str, np.ndarray]], target: str, name: str, d: dict[str, Any],
            unseen: dict[str, Any]) -> None:
    """Set the per-row weights of stack ``name`` for ``target`` under both splits from its decision ``d``."""
    (lomo, loso), (w_lomo, w_loso) = splits, weights
    frameworks, sources = table.frameworks, table.sources
    has_rows = np.isfinite(table.y[target].to_numpy())
    rows = frameworks == name
    w_lomo[target][rows & lomo.inside] = d["weight"] if d["applied"] else 0.0
    # held out by source, a stack is unseen unless another source measured it
    other = np.array([bool((has_rows & rows & (sources != s)).any()) for s in sources])
    seen_w = np.where(other, d["weight"] if d["applied"] else 0.0, unseen["weight"] if unseen["applied"] else 0.0)
    w_loso[target] = np.where(rows & loso.inside, seen_w, w_loso[target])


def _revoke_for_worse_source(table: T.Table, lomo: E.GroupedPredictions, weight: dict[str, np.ndarray], target: str,
                             by: dict[str, Any]) -> str | None:
    """Revoke (in ``by``) the least-gaining applied correction of the first source whose leave-one-model-out
    median the hybrid makes worse than theory's; the stack revoked, or None when no source is worse."""
    column, key = GATED[target]
    meas = E.measured(table, column)
    theory = E.predictions(table, lomo, {})["theory"][key]
    hybrid = E.estimate(table, lomo, weight)[key]
    has = np.isfinite(meas)
    for source in sorted(set(table.sources[has].tolist())):
        rows = has & (table.sources == source)
        if not _median(meas, hybrid, rows) > _median(meas, theory, rows):
            continue
        stacks = set(table.frameworks[rows].tolist())
        gains = sorted((by[n]["theory_median_abs_error_pct"] - by[n]["corrected_median_abs_error_pct"], n)
                       for n in stacks if by[n]["applied"] and "corrected_median_abs_error_pct" in by[n])
        if not gains:
            return None
        name: str = gains[0][1]
        by[name].update(applied=False, weight=0.0, why=f"revoked: it won on its own rows, but with it the hybrid's "
                        f"median on held-out source {source} (several stacks) was above theory's")
        return name
    return None


def decide(table: T.Table, lomo: E.GroupedPredictions,
           loso: E.GroupedPredictions) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Card decisions per (target, framework) and the hybrid's per-row weights under each split.

    Returns (corrections, weights for the leave-one-model-out rows, weights for the leave-one-source-out rows).
    Targets are decided in order (allocated, reserved, device, throughput); each trial keeps the earlier ones.
    """
    n = len(table)
    frameworks = table.frameworks
    names = sorted(set(PROFILES) | set(frameworks.tolist()))
    corrections: dict[str, Any] = {}
    w_lomo: dict[str, np.ndarray] = {}
    w_loso: dict[str, np.ndarray] = {}
    for target in (t for t in GATED if t in table.targets):
        has_rows = np.isfinite(table.y[target].to_numpy())
        unseen = _choose(table, loso, w_loso, target, np.ones(n, dtype=bool), MIN_SOURCES_UNSEEN)
        unseen["rule"] = "no training rows: leave-one-source-out, must beat theory on every held-out source"
        by: dict[str, Any] = {}
        w_lomo[target], w_loso[target] = np.zeros(n), np.zeros(n)
        for name in names:
            rows = frameworks == name
            if (has_rows & rows).any():
                d = _choose(table, lomo, w_lomo, target, rows, 1)
                d["rule"] = "trained: leave-one-model-out, must beat theory on every source of the framework"
            else:
                d = {"applied": unseen["applied"], "weight": unseen["weight"], "rule": "unseen (as `unseen`)"}
            by[name] = d
            _assign(table, (lomo, loso), (w_lomo, w_loso), target, name, d, unseen)
        while (revoked := _revoke_for_worse_source(table, lomo, w_lomo, target, by)) is not None:
            _assign(table, (lomo, loso), (w_lomo, w_loso), target, revoked, by[revoked], unseen)
        corrections[target] = {"applied": any(d["applied"] for d in by.values()), "frameworks": by, "unseen": unseen}
    corrections["oom"] = {"applied": False, "why": "the hybrid states a conformal risk; the classifier is the "
                          "learned estimator's"}
    return corrections, w_lomo, w_loso
