"""Fit the throughput theory's efficiency constants (theory/throughput.EfficiencyFit) on measured tokens/s.

``throughput_rows`` turns the measured rows of data/measurements.csv into fit rows (the Job and Placement,
the features of the efficiency formula, the implied efficiency); ``fit_efficiency`` fits the constants on
any subset of them (all rows: the shipped FITTED; all but one source: a leave-one-source-out fit);
``predict`` answers tokens/s with given constants. The efficiency formula and the meaning of each constant
are in autoconf/estimators/theory/throughput.py. bench/throughput_accuracy.py reports the errors and prints
the FITTED block (``--fit``).

Interconnect: a row whose campaign names its node-to-node link ("1600 Gbps node-node interconnect", the
llm-foundry A100 sections) is estimated with that bandwidth (Gbps / 8 per node); other rows with the
estimator's default (throughput.INTER_NODE_BANDWIDTH_GBPS).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.catalog import get_architecture, get_gpu
from autoconf.errors import AutoconfError
from autoconf.estimators.theory import throughput as tp
from autoconf.evaluation.data import row_to_inputs

X0_GRID = [0.0] + [float(v) for v in np.geomspace(50, 50_000, 61)]  # tokens per micro-batch
K_GRID = [0.0] + [float(v) for v in np.geomspace(0.05, 50, 31)]  # memory-bound coefficient
A_GRID = [0.0] + [float(v) for v in np.geomspace(0.02, 5, 25)]  # attention extra cost
METHODS = ("full", "lora", "qlora")
_LINK = re.compile(r"(\d+(?:\.\d+)?)\s*Gbps node-node", re.IGNORECASE)


@dataclass(frozen=True)
class Shape:
    """Which terms a fit has: a base efficiency per (GPU architecture, method) or per method only, and K."""

    by_generation: bool = False
    memory_term: bool = True
    attention_term: bool = True

    @property
    def label(self) -> str:
        base = "E per GPU architecture × method" if self.by_generation else "E per method"
        return (base + (", K·R/w" if self.memory_term else "") + (", α·attention share" if self.attention_term else "")
                + ", X0, F, M")


SHIPPED = Shape()
VARIANTS = (Shape(True, False, False), Shape(True, True, True), Shape(False, True, False), Shape(False, True, True))


def inter_node_gbps(campaign: str) -> float:
    """GB/s per node of a campaign that states its node-to-node link, else the estimator's default."""
    found = _LINK.search(campaign or "")
    return float(found.group(1)) / 8 if found else tp.INTER_NODE_BANDWIDTH_GBPS


def throughput_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Ok, non-duplicate rows with tokens/s, a resolvable model and a GPU with a peak, with the fit features.

    ``implied`` is NaN where the row is communication-bound under our model (it is still scored, not fitted);
    ``attrs['skipped']`` counts the rows left out, by reason and source.
    """
    dup = frame["duplicate_of"].fillna("").astype(str).str.len() > 0
    ok = frame[(frame["status"] == "ok") & frame["tokens_per_second"].notna() & ~dup]
    records, skipped = [], Counter[str]()
    for _, row in ok.iterrows():
        try:
            job, place = row_to_inputs(row)
            arch, gpu = get_architecture(job.model), get_gpu(place.gpu_model)
            tp.peak_flops(gpu, job.dtype)
        except (AutoconfError, ValueError) as exc:
            skipped[f"{row['source']}: {_field(exc)} not answerable"] += 1
            continue
        link = inter_node_gbps(str(row.get("campaign", "")))
        implied = tp.implied_efficiency(job, place, float(row["tokens_per_second"]), link)
        records.append({
            "source": row["source"], "framework": job.framework, "gpu": gpu.name, "model": job.model,
            "method": job.method, "job": job, "placement": place, "family": gpu.architecture,
            "fused": tp.fused_kernels(job), "moe": arch.is_moe, "x": tp.micro_batch_tokens(job, place),
            "q": tp.ridge_over_hidden(job, gpu, arch), "a": tp.attention_share(job, arch), "link": link,
            "implied": implied if implied is not None else math.nan, "measured": float(row["tokens_per_second"]),
        })
    out = pd.DataFrame.from_records(records)
    out.attrs["skipped"] = dict(skipped)
    return out


def _field(exc: Exception) -> str:
    """The input a refusal names: AutoconfError.field, or the first location of a pydantic error."""
    if isinstance(exc, ValidationError) and exc.errors():
        return str(exc.errors()[0]["loc"][0])
    return str(getattr(exc, "field", "") or type(exc).__name__)


def _groups(rows: pd.DataFrame, shape: Shape) -> list[tuple[str, str]]:
    keys = zip(rows["family"], rows["method"], strict=True) if shape.by_generation else (("*", m) for m in rows["method"])
    return sorted(set(keys))


def _design(rows: pd.DataFrame, groups: list[tuple[str, str]], shape: Shape) -> np.ndarray:
    keys = list(zip(rows["family"] if shape.by_generation else ["*"] * len(rows), rows["method"], strict=True))
    onehot = np.array([[1.0 if k == g else 0.0 for g in groups] for k in keys]).reshape(len(rows), len(groups))
    extra = [rows[c].astype(float).to_numpy() for c in ("fused", "moe") if rows[c].any()]
    return np.column_stack([onehot, *extra]) if extra else onehot


def fit_efficiency(rows: pd.DataFrame, shape: Shape = SHIPPED, fitted_on: str = "") -> tp.EfficiencyFit:
    """Least squares in log space on the implied efficiency of ``rows`` (comm-bound rows skipped); X0, K by grid."""
    rows = rows[rows["implied"].notna()]
    groups = _groups(rows, shape)
    design = _design(rows, groups, shape)
    log_implied = np.log(rows["implied"].to_numpy())
    x, q, a = rows["x"].to_numpy(), rows["q"].to_numpy(), rows["a"].to_numpy()
    pinv = np.linalg.pinv(design)
    best: tuple[float, float, float, float, np.ndarray] | None = None
    for k in K_GRID if shape.memory_term else [0.0]:
        for alpha in A_GRID if shape.attention_term else [0.0]:
            terms = log_implied + np.log1p(k * q) + np.log1p(alpha * a)
            for x0 in X0_GRID:
                target = terms - np.log(x / (x + x0))
                coef = pinv @ target
                sse = float(np.sum((design @ coef - target) ** 2))
                if best is None or sse < best[0]:
                    best = (sse, x0, k, alpha, coef)
    assert best is not None
    _, x0, k, alpha, coef = best
    values = {g: float(math.exp(c)) for g, c in zip(groups, coef[:len(groups)], strict=True)}
    extras = iter(coef[len(groups):])
    fused = float(math.exp(next(extras))) if rows["fused"].any() else 1.0
    moe = float(math.exp(next(extras))) if rows["moe"].any() else 1.0
    counts = Counter(zip(rows["family"] if shape.by_generation else ["*"] * len(rows), rows["method"], strict=True))
    by_method = {}
    for method in METHODS:  # pooled (count-weighted geometric mean); a method with no rows: all groups' mean
        items = [(values[g], counts[g]) for g in groups if g[1] == method]
        pooled = [(e, n) for e, n in items] or [(e, 1) for e in values.values()]
        by_method[method] = math.exp(sum(n * math.log(e) for e, n in pooled) / sum(n for _, n in pooled))
    by_group = {g: v for g, v in values.items() if shape.by_generation}
    return tp.EfficiencyFit(by_group, by_method, x0, fused, moe, len(rows), k, alpha, fitted_on)


def predict(rows: pd.DataFrame, params: tp.EfficiencyFit) -> np.ndarray:
    """Whole-job tokens/s of each row with the given constants (the row's interconnect)."""
    return np.array([
        tp.estimate_throughput(job, place, fit=params, inter_node_gbps=link).tokens_per_second
        for job, place, link in zip(rows["job"], rows["placement"], rows["link"], strict=True)
    ])


def held_out_predictions(rows: pd.DataFrame, by: str, shape: Shape = SHIPPED) -> np.ndarray:
    """Leave one value of column ``by`` out: refit on the other rows, predict this value's rows."""
    out = np.full(len(rows), np.nan)
    for value in rows[by].unique():
        test = (rows[by] == value).to_numpy()
        params = fit_efficiency(rows[~test], shape)
        out[test] = predict(rows[test], params)
    return out


def fitted_block(params: tp.EfficiencyFit) -> str:
    """The FITTED assignment for autoconf/estimators/theory/throughput.py."""
    groups = ", ".join(f"{k!r}: {v:.4f}" for k, v in sorted(params.by_group.items()))
    methods = ", ".join(f"{k!r}: {v:.4f}" for k, v in params.by_method.items())
    return (
        "FITTED = EfficiencyFit(\n"
        f"    by_group={{{groups}}},\n"
        f"    by_method={{{methods}}},\n"
        f"    microbatch_tokens={params.microbatch_tokens:.1f}, fused_loss_factor={params.fused_loss_factor:.4f}, "
        f"moe_factor={params.moe_factor:.4f}, rows={params.rows},\n"
        f"    memory_bound={params.memory_bound:.4f}, attention_cost={params.attention_cost:.4f},\n"
        f"    fitted_on={params.fitted_on!r},\n)"
    )
