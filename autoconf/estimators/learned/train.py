"""Training tables from data/ and the AutoGluon fits (AutoGluon is imported inside ``fit`` only).

Four predictors per 1.x version, five per 2.x, each a ``TabularPredictor`` restricted to one seeded, single-threaded
LightGBM model (AutoGluon's "GBM") so that a build is deterministic and its trees can be copied into
the numpy fast path:

* ``memory_allocated``: torch ``max_memory_allocated`` / theory allocator peak (peak − overhead);
* ``memory_reserved`` (2.x): torch ``max_memory_reserved`` / theory reserved peak (allocator cache included);
* ``memory_device``: nvidia-smi peak / theory peak (context and allocator cache included);
* ``oom``: P(the run ran out of memory), from the ``ok`` and ``oom`` rows;
* ``throughput``: measured tokens/s / theory tokens/s.

Rows: ``status`` ok (oom too for the classifier), a catalogued answerable model, no ``duplicate_of``
(a copied benchmark row would count twice), fixed-length samples (``variable_length = 0``: the
variable-length rows carry the *mean* tokens/sample while their peak follows the longest batch, which
no Job field can express; data/README.md), and a (Job, Placement) the theory answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from autoconf.errors import AutoconfError
from autoconf.estimators.learned import features as F
from autoconf.estimators.learned.fastpath import Forest, forest_from_dump
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.estimators.theory.vector import MemoryBatch, theory_batch
from autoconf.schema import Job, Placement

# How a measured row becomes (Job, Placement): given by the caller (evaluation.data.row_to_inputs), so
# training needs no import of the measured-data layer above it.
RowInputs = Callable[[pd.Series], tuple[Job, Placement]]
log = logging.getLogger(__name__)

SEED = 0  # LightGBM seed and AutoGluon's train/early-stopping split seed
# LightGBM settings: one thread and deterministic=True make the trees identical from run to run;
# at most 15 leaves, depth 5 and 10 rows per leaf suit ~1,000 rows of 5-6 architectures (AutoGluon's
# default of 128 leaves would memorise each campaign); learning rate 0.1 with AutoGluon's early
# stopping on its 20 % hold-out picks the number of trees, at most 200. Depth 5 and 200 trees scored
# as well as depth 13 and 400 trees on the grouped held-out split (7.99 vs 8.08 % nvidia-smi, 8.7 vs
# 8.1 % tokens/s) and make the numpy fast path 4× cheaper. Ratios are
# fitted with the L1 loss (median regression): the scores are median absolute errors, and a few
# odd campaigns should not pull the correction of every other row.
GBM_PARAMS: dict[str, Any] = {
    "num_threads": 1, "deterministic": True, "force_row_wise": True, "seed": SEED, "num_leaves": 15, "max_depth": 5,
    "min_data_in_leaf": 10, "learning_rate": 0.1, "num_boost_round": 200, "verbose": -1,
}


@dataclass(frozen=True)
class Target:
    name: str
    problem_type: str  # "regression" or "binary"
    features: tuple[str, ...]
    link: str  # fast-path output: identity (ratio) or sigmoid (probability)


# 1.x: one predictor per metric measured on fms-acceleration (allocated, nvidia-smi), no stack, no GPU for memory.
TARGETS_V1 = {
    "memory_allocated": Target("memory_allocated", "regression", F.MEMORY_FEATURES, "identity"),
    "memory_device": Target("memory_device", "regression", F.MEMORY_FEATURES, "identity"),
    "oom": Target("oom", "binary", F.OOM_FEATURES, "sigmoid"),
    "throughput": Target("throughput", "regression", F.THROUGHPUT_FEATURES, "identity"),
}
# 2.x: one predictor per memory metric (the metric picks the predictor: allocated, reserved, device), each
# reading the stack's profile behaviours and the GPU.
TARGETS_V2 = {
    "memory_allocated": Target("memory_allocated", "regression", F.MEMORY_FEATURES_V2, "identity"),
    "memory_reserved": Target("memory_reserved", "regression", F.MEMORY_FEATURES_V2, "identity"),
    "memory_device": Target("memory_device", "regression", F.MEMORY_FEATURES_V2, "identity"),
    "oom": Target("oom", "binary", F.OOM_FEATURES_V2, "sigmoid"),
    "throughput": Target("throughput", "regression", F.THROUGHPUT_FEATURES_V2, "identity"),
}
TARGETS = TARGETS_V2  # the newest major's predictors
MIN_TRAINING_ROWS = 20  # a predictor (or a held-out fold of it) is fitted only from 20 rows with a finite target


@dataclass(frozen=True)
class Table:
    """Measured rows the theory answers, with features and one target column per predictor (NaN = not used)."""

    rows: pd.DataFrame  # the measured rows kept (original columns)
    jobs: list[Job]
    placements: list[Placement]
    theory: MemoryBatch
    x: pd.DataFrame  # ALL_FEATURES
    y: pd.DataFrame  # one column per TARGETS key
    targets: dict[str, Target] = field(default_factory=lambda: dict(TARGETS))

    @property
    def groups(self) -> np.ndarray:
        groups: np.ndarray = self.rows["model_name"].to_numpy()
        return groups

    @property
    def sources(self) -> np.ndarray:
        out: np.ndarray = (self.rows["source"] if "source" in self.rows else pd.Series([""] * len(self))).to_numpy()
        return out

    @property
    def frameworks(self) -> np.ndarray:
        """The Job's framework profile of each row (the hybrid's gate is per framework)."""
        return np.array([job.framework for job in self.jobs], dtype=object)

    def __len__(self) -> int:
        return len(self.rows)


def _inputs(frame: pd.DataFrame, to_inputs: RowInputs) -> tuple[list[int], list[Job], list[Placement]]:
    keep, jobs, places = [], [], []
    for i, (_, row) in enumerate(frame.iterrows()):
        try:
            job, place = to_inputs(row)
        except (AutoconfError, ValidationError, ValueError) as exc:
            log.debug("row %s skipped: %s", row.get("source_ref"), exc)
            continue
        keep.append(i)
        jobs.append(job)
        places.append(place)
    return keep, jobs, places


def theory_tokens_per_second(jobs: list[Job], placements: list[Placement]) -> np.ndarray:
    out = np.full(len(jobs), np.nan)
    for i, (job, place) in enumerate(zip(jobs, placements, strict=True)):
        try:
            tp = throughput_or_none(job, place)
        except (AutoconfError, ValidationError, ValueError):
            tp = None
        out[i] = tp.tokens_per_second if tp else np.nan
    return out


def build_table(frame: pd.DataFrame, to_inputs: RowInputs, targets: dict[str, Target] | None = None) -> Table:
    """Features and targets of every usable measured row of ``frame`` (a load_measurements() table)."""
    usable = frame[frame["status"].isin(["ok", "oom"]) & (frame["model_name"] != "") & (frame["duplicate_of"] == "")
                   & (frame["variable_length"] == 0)]
    keep, jobs, places = _inputs(usable, to_inputs)
    rows = usable.iloc[keep].reset_index(drop=True)
    theory = theory_batch(jobs, places)
    ok = theory.ok
    rows, theory_ok = rows[ok].reset_index(drop=True), np.flatnonzero(ok)
    jobs, places = [jobs[i] for i in theory_ok], [places[i] for i in theory_ok]
    theory = theory_batch(jobs, places)
    tokens = theory_tokens_per_second(jobs, places)
    per_gpu = tokens / np.array([p.number_gpus for p in places], dtype=float)
    x = F.feature_table(jobs, places, theory, per_gpu).frame()
    is_ok = (rows["status"] == "ok").to_numpy()
    alloc = rows["torch_allocated_bytes"].astype(float).to_numpy()
    smi = rows["nvidia_smi_bytes"].astype(float).to_numpy()
    reserved = (rows["torch_reserved_bytes"].astype(float).to_numpy() if "torch_reserved_bytes" in rows
                else np.full(len(rows), np.nan))
    tps = rows["tokens_per_second"].astype(float).to_numpy()
    y = pd.DataFrame({
        "memory_allocated": np.where(is_ok, alloc / theory.allocated, np.nan),
        "memory_reserved": np.where(is_ok, reserved / theory.reserved, np.nan),
        "memory_device": np.where(is_ok, smi / theory.peak, np.nan),
        "oom": (rows["status"] == "oom").astype(float).to_numpy(),
        "throughput": np.where(is_ok, tps / tokens, np.nan),
    })
    return Table(rows=rows, jobs=jobs, placements=places, theory=theory, x=x, y=y, targets=dict(targets or TARGETS))


def training_frame(table: Table, target: Target, mask: np.ndarray | None = None) -> pd.DataFrame:
    """Feature columns + ``label`` for the rows with a finite target (and ``mask``)."""
    label = table.y[target.name].to_numpy()
    use = np.isfinite(label) & (mask if mask is not None else True)
    out = table.x.loc[use, list(target.features)].reset_index(drop=True)
    out["label"] = label[use].astype(int) if target.problem_type == "binary" else label[use]
    return out


def fit(train: pd.DataFrame, target: Target, path: Path) -> Any:
    """One seeded LightGBM TabularPredictor on ``train`` (features + label), saved under ``path``."""
    from autogluon.features.generators import IdentityFeatureGenerator
    from autogluon.tabular import TabularPredictor

    metric = "log_loss" if target.problem_type == "binary" else "mean_absolute_error"
    predictor = TabularPredictor(label="label", problem_type=target.problem_type, eval_metric=metric,
                                 path=str(path), verbosity=0)
    params = dict(GBM_PARAMS, objective="binary" if target.problem_type == "binary" else "regression_l1")
    predictor.fit(train, hyperparameters={"GBM": [params]}, feature_generator=IdentityFeatureGenerator(),
                  fit_weighted_ensemble=False, num_cpus=1, num_gpus=0, calibrate_decision_threshold=False)
    return predictor


def predict(predictor: Any, x: pd.DataFrame, target: Target) -> np.ndarray:
    """AutoGluon's prediction: the ratio, or the probability of class 1 (oom)."""
    out: np.ndarray
    if target.problem_type == "binary":
        out = predictor.predict_proba(x[list(target.features)])[1].to_numpy(dtype=float)
    else:
        out = predictor.predict(x[list(target.features)]).to_numpy(dtype=float)
    return out


def export_forest(predictor: Any, target: Target) -> Forest:
    """The LightGBM booster inside the predictor, as a numpy Forest."""
    model = predictor._trainer.load_model(predictor.model_best)  # the single LightGBM model
    forest = forest_from_dump(model.model.dump_model(), target.link)
    if not set(forest.features) <= set(target.features):
        raise ValueError(f"booster features must be a subset of {target.features}; got {forest.features}")
    return forest  # AutoGluon drops constant columns: the forest reads only the features it kept


def max_abs_difference(a: np.ndarray, b: np.ndarray) -> float:
    diff = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    return float(diff.max()) if diff.size else 0.0
