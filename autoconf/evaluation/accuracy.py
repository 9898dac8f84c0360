"""Score an estimator against measured runs: per-row errors, grouped summaries, worst rows.

Pure functions over arrays and frames; any estimator of the registry (theory, learned, hybrid,
traced) is scored the same way, so every bench section reports the same statistics:

* error % = 100 · (predicted − measured) / measured, per row (positive = over-prediction);
* ``median_abs_error_pct`` and ``p90_abs_error_pct`` of |error %|, ``bias_pct`` = median signed
  error %, ``n`` = rows scored.

Rows scored: ``status == ok``, a catalogued ``model_name``, a value in the metric's column, and
(by default) no ``duplicate_of``: later versions of a benchmark file often carry the very same
measured numbers as an earlier one, and counting a copy twice would weight it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.errors import AutoconfError
from autoconf.estimators.contract import get_estimator
from autoconf.evaluation.data import METRIC_COLUMNS, row_to_inputs
from autoconf.schema import Estimate

logger = logging.getLogger(__name__)

# Row columns carried into per-row results so that summaries can group by them.
CONTEXT_COLUMNS = (
    "source", "source_ref", "campaign", "framework", "gpu_model", "model_name", "method", "strategy", "number_gpus",
    "tokens_per_sample", "batch_size", "per_device_batch_size", "gradient_checkpointing", "kernels", "fused_loss",
    "variable_length", "dtype",
)
STAT_COLUMNS = ("n", "median_abs_error_pct", "p90_abs_error_pct", "bias_pct")
# What each measured metric is compared with: the estimate's peak of the same kind (like with like).
# torch max_memory_allocated ↔ peak_allocated_bytes, max_memory_reserved ↔ peak_reserved_bytes, nvidia-smi
# and a share of the device (converted to bytes) ↔ peak_bytes (the device peak). An author's "it used N GB"
# is read as what nvidia-smi showed (the number a user sees), so it is compared with the device peak too.
PREDICTED_FOR_METRIC: dict[str, Callable[[Estimate], float]] = {
    "torch_allocated": lambda e: e.memory.allocated_bytes,
    "torch_reserved": lambda e: e.memory.reserved_bytes,
    "nvidia_smi": lambda e: e.memory.peak_bytes,
    "percent_of_device": lambda e: e.memory.peak_bytes,
    "stated": lambda e: e.memory.peak_bytes,
}


def percent_errors(measured: Sequence[float] | np.ndarray, predicted: Sequence[float] | np.ndarray) -> np.ndarray:
    """Signed error in % of the measured value (positive = the estimate is too high)."""
    meas = np.asarray(measured, dtype=float)
    pred = np.asarray(predicted, dtype=float)
    if meas.shape != pred.shape:
        raise ValueError(f"measured and predicted must have the same shape; got {meas.shape} and {pred.shape}")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(meas > 0, 100.0 * (pred - meas) / meas, np.nan)


def error_stats(measured: Sequence[float] | np.ndarray, predicted: Sequence[float] | np.ndarray) -> dict[str, float]:
    """n, median and p90 absolute % error, and the median signed % error (bias), ignoring NaNs."""
    err = percent_errors(measured, predicted)
    return stats_of(err)


def stats_of(errors: Sequence[float] | np.ndarray) -> dict[str, float]:
    err = np.asarray(errors, dtype=float)
    err = err[np.isfinite(err)]
    if err.size == 0:
        return {"n": 0, "median_abs_error_pct": np.nan, "p90_abs_error_pct": np.nan, "bias_pct": np.nan}
    return {
        "n": int(err.size),
        "median_abs_error_pct": float(np.median(np.abs(err))),
        "p90_abs_error_pct": float(np.percentile(np.abs(err), 90)),
        "bias_pct": float(np.median(err)),
    }


def summarise(results: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Error statistics of per-row results (column ``error_pct``), overall or per group."""
    if not by:
        return pd.DataFrame([stats_of(results["error_pct"])], columns=list(STAT_COLUMNS))
    rows = []
    for key, group in results.groupby(list(by), dropna=False, sort=True):
        keys = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, keys, strict=True)), **stats_of(group["error_pct"])})
    return pd.DataFrame(rows, columns=[*by, *STAT_COLUMNS])


def worst_rows(results: pd.DataFrame, k: int = 10) -> pd.DataFrame:
    """The k rows with the largest absolute % error."""
    scored = results[np.isfinite(results["error_pct"].astype(float))]
    return scored.reindex(scored["error_pct"].abs().sort_values(ascending=False).index).head(k)


def scorable(frame: pd.DataFrame, unique: bool = True, statuses: Sequence[str] = ("ok",)) -> pd.DataFrame:
    """Rows with a status in ``statuses``, a catalogued model, ``scored`` = 1 and (``unique``) no duplicate_of.

    ``scored`` (data/README.md) is 0 where the row's setup cannot be expressed as a Job (a Megatron layout,
    an author's statement, an unknown sequence length): those rows are kept in the table, never scored.
    """
    keep = frame["status"].isin(list(statuses)) & (frame["model_name"] != "")
    if "scored" in frame:  # duplicates have scored = 0 for that reason alone: ``unique`` decides for them
        keep &= (frame["scored"].fillna(1).astype(int) == 1) | (frame.get("duplicate_of", "") != "")
    if unique and "duplicate_of" in frame:
        keep &= frame["duplicate_of"] == ""
    return frame[keep]


def measured_metric(rows: pd.DataFrame, metric: str) -> pd.Series:
    """The rows' measured bytes of ``metric`` (NaN where they have none): a dedicated column for the torch and
    nvidia-smi metrics, ``peak_memory_bytes`` of the rows whose ``memory_metric`` is ``stated`` or
    ``percent_of_device``."""
    column = METRIC_COLUMNS[metric]
    if column not in rows:
        return pd.Series(np.nan, index=rows.index)
    values = rows[column].astype("Float64").astype(float)
    if column == "peak_memory_bytes":
        values = values.where(rows.get("memory_metric", pd.Series("", index=rows.index)) == metric)
    return values


def estimate_rows(estimator_name: str, frame: pd.DataFrame, model_version: str | None = None) -> list[Estimate | str]:
    """One Estimate per row, or the one-line error message where the estimator refuses the row."""
    estimator = get_estimator(estimator_name, model_version)
    answers: list[Estimate | str] = []
    for _, row in frame.iterrows():
        try:
            answers.append(estimator.estimate(*row_to_inputs(row)))
        except (AutoconfError, ValidationError) as exc:
            logger.debug("%s refused %s: %s", estimator_name, row.get("source_ref", "?"), exc)
            answers.append(str(exc).splitlines()[0])
    return answers


def _score(frame: pd.DataFrame, answers: list[Estimate | str], measured: pd.Series,
           predict: Callable[[Estimate], float | None], estimator_name: str, metric: str) -> pd.DataFrame:
    out = frame[[c for c in CONTEXT_COLUMNS if c in frame]].copy()
    values = [None if isinstance(a, str) else predict(a) for a in answers]
    out["estimator"] = estimator_name
    out["metric"] = metric
    out["measured"] = measured.astype(float).to_numpy()
    out["predicted"] = np.array([np.nan if v is None else v for v in values], dtype=float)
    out["error_pct"] = percent_errors(out["measured"], out["predicted"])
    out["error"] = [a if isinstance(a, str) else "" for a in answers]
    return out


def score_memory(estimator_name: str, frame: pd.DataFrame, model_version: str | None = None,
                 unique: bool = True) -> pd.DataFrame:
    """Per-row peak-memory errors, one row per (measured run, memory metric present).

    Each metric the run logged is compared with its counterpart (``PREDICTED_FOR_METRIC``): torch
    ``max_memory_allocated`` with the allocated peak, ``max_memory_reserved`` with the reserved peak,
    nvidia-smi (and stated / share-of-device figures) with the device peak; the ``metric`` column keeps them apart.
    """
    rows = scorable(frame, unique=unique)
    answers = estimate_rows(estimator_name, rows, model_version)
    parts = []
    for metric in METRIC_COLUMNS:
        measured = measured_metric(rows, metric)
        has = measured.notna().to_numpy()
        if not has.any():
            continue
        picked = [a for a, h in zip(answers, has, strict=True) if h]
        parts.append(_score(rows[has], picked, measured[has], PREDICTED_FOR_METRIC[metric], estimator_name, metric))
    if not parts:
        columns = [*CONTEXT_COLUMNS, "estimator", "metric", "measured", "predicted", "error_pct", "error"]
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)


def score_throughput(estimator_name: str, frame: pd.DataFrame, model_version: str | None = None,
                     unique: bool = True) -> pd.DataFrame:
    """Per-row whole-job tokens/s errors (NaN prediction where the estimator gives no throughput)."""
    rows = scorable(frame, unique=unique)
    rows = rows[rows["tokens_per_second"].notna()]
    answers = estimate_rows(estimator_name, rows, model_version)

    def tokens(estimate: Estimate) -> float | None:
        return estimate.throughput.tokens_per_second if estimate.throughput else None

    return _score(rows, answers, rows["tokens_per_second"], tokens, estimator_name, "tokens_per_second")


def oom_check(estimator_name: str, frame: pd.DataFrame, model_version: str | None = None,
              unique: bool = True) -> pd.DataFrame:
    """For ok and oom rows: did the estimator say ``fits``? (missed OOMs and false alarms)."""
    rows = scorable(frame, unique=unique, statuses=("ok", "oom"))
    answers = estimate_rows(estimator_name, rows, model_version)
    out = rows[[c for c in CONTEXT_COLUMNS if c in rows] + ["status", "nvidia_smi_bytes"]].copy()
    out["predicted_peak"] = [np.nan if isinstance(a, str) else a.memory.peak_bytes for a in answers]
    # what must fit: the device peak less the free cached blocks the allocator releases before it fails
    out["predicted_need"] = [np.nan if isinstance(a, str) else a.memory.peak_bytes - a.memory.releasable_bytes
                             for a in answers]
    out["capacity"] = [np.nan if isinstance(a, str) else a.memory.capacity_bytes for a in answers]
    out["predicted_fits"] = [None if isinstance(a, str) else a.memory.fits for a in answers]
    out["oom_risk"] = [np.nan if isinstance(a, str) else a.memory.oom_risk for a in answers]
    out["error"] = [a if isinstance(a, str) else "" for a in answers]
    return out


# ----------------------------------------------------------------------------- report (Markdown)
GIB = 2**30
WORST_COLUMNS = ("source_ref", "metric", "model_name", "method", "strategy", "number_gpus", "tokens_per_sample",
                 "per_device_batch_size", "kernels", "measured_gib", "predicted_gib", "error_pct")


def markdown_table(frame: pd.DataFrame, digits: int = 1) -> str:
    """A GitHub Markdown table (floats rounded to ``digits``)."""
    def cell(value: object) -> str:
        if isinstance(value, float | np.floating):
            return "" if np.isnan(value) else f"{value:.{digits}f}"
        return str(value).replace("|", "\\|")
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def distinct_worst(results: pd.DataFrame, k: int = 10) -> pd.DataFrame:
    """The k worst rows, one per configuration (re-measurements of a setting show once)."""
    config = ["metric", "model_name", "method", "number_gpus", "tokens_per_sample", "per_device_batch_size", "kernels"]
    ranked = worst_rows(results, k=len(results))
    table = ranked.drop_duplicates(subset=[c for c in config if c in ranked]).head(k).copy()
    table["measured_gib"] = table["measured"] / GIB
    table["predicted_gib"] = table["predicted"] / GIB
    return table[[c for c in WORST_COLUMNS if c in table]]


def oom_summary(check: pd.DataFrame) -> dict[str, int]:
    """Counts of missed OOMs (oom rows said to fit) and false alarms (ok rows said not to fit)."""
    answered = check[check["error"] == ""]
    fits = answered["predicted_fits"].astype(bool)
    return {
        "oom_rows": int((answered["status"] == "oom").sum()),
        "oom_said_fit": int(((answered["status"] == "oom") & fits).sum()),
        "ok_rows": int((answered["status"] == "ok").sum()),
        "ok_said_no_fit": int(((answered["status"] == "ok") & ~fits).sum()),
        "refused": int((check["error"] != "").sum()),
    }


def memory_report(estimator_name: str, frame: pd.DataFrame, command: str, k: int = 10,
                  model_version: str | None = None) -> str:
    """The Markdown section of docs/accuracy.md for one estimator's peak-memory accuracy."""
    scored = score_memory(estimator_name, frame, model_version)
    ooms = oom_summary(oom_check(estimator_name, frame, model_version))
    results = scored[scored["error"] == ""]
    refused = scored[scored["error"] != ""].drop_duplicates(["source_ref"])
    torch = results[results["metric"] == "torch_allocated"]
    refusals = "; ".join(f"{model}: {n}" for model, n in refused.groupby("model_name").size().items())
    parts = [
        f"## Peak memory: `{estimator_name}` vs measured runs",
        f"Regenerate: `{command}`. Data: `data/measurements.csv` ({len(frame)} rows; "
        f"{len(scorable(frame))} unique `ok` rows with a catalogued model). "
        "Error % = 100·(predicted − measured)/measured; "
        "bias = median signed error (negative = under-predicted). Each metric is compared with the estimate's "
        "peak of the same kind: `torch_allocated` (torch's max_memory_allocated on rank 0) with "
        "`peak_allocated_bytes`, `torch_reserved` with `peak_reserved_bytes`, `nvidia_smi` (device peak "
        "averaged over the GPUs: adds the CUDA context, NCCL buffers and the allocator's cache) with "
        "`peak_bytes`. Where an estimator's constants were fitted on this table "
        "(see their comments), these errors are in-sample."
        + (f" Runs the estimator refused (not scored): {len(refused)} ({refusals}); first reason: "
           f"{refused['error'].iloc[0]}" if len(refused) else ""),
        "### Headline: fixed-length runs by method (torch_allocated)",
        "The estimator's input is the padded sequence length; for variable-length runs (no packing, or "
        "padding-free) only the mean length was logged while the peak follows the longest batch, so the "
        "headline scores the runs whose length is known. All rows are scored in the tables below.",
        markdown_table(summarise(torch[torch["variable_length"] == 0], ["method"])),
        "### Overall", markdown_table(summarise(results, ["metric"])),
        "### By method and strategy", markdown_table(summarise(results, ["metric", "method", "strategy"])),
        "### By model (torch_allocated)",
        markdown_table(summarise(torch, ["model_name", "method"])),
        "### By framework config, fixed-length runs (torch_allocated)",
        markdown_table(summarise(torch[torch["variable_length"] == 0], ["method", "kernels"])),
        "### Fixed vs variable sequence length (torch_allocated)",
        "Variable-length rows (no packing, or padding-free) carry the measured mean tokens/sample, so their "
        "error mixes formula and input uncertainty.",
        markdown_table(summarise(torch, ["variable_length", "method"])),
        f"### {k} worst rows, torch_allocated (distinct configurations)",
        markdown_table(distinct_worst(results[results["metric"] == "torch_allocated"], k)),
        f"### {k // 2} worst rows, nvidia_smi (distinct configurations)",
        markdown_table(distinct_worst(results[results["metric"] == "nvidia_smi"], k // 2)),
        "### Out-of-memory runs",
        f"Of {ooms['oom_rows']} unique runs that ran out of memory (no result, nvidia-smi ≥ 90 % of the board), "
        f"`{estimator_name}` says **{ooms['oom_said_fit']} fit** (missed OOMs); of {ooms['ok_rows']} runs that "
        f"completed, it says {ooms['ok_said_no_fit']} do not fit (false alarms).",
    ]
    return "\n\n".join(parts) + "\n"
