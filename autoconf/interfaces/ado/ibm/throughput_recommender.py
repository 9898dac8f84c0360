"""IBM ado-autoconf's ``autoconf.throughput_recommender``: the feasible batch x GPU layout with the most
predicted dataset tokens per second, with IBM's candidate grid, selection rule and return shape.

Candidates (IBM's, for its throughput model 4.1.0): per-device batches 1-256 and total GPU counts 1, 2, 4, 8,
16 (within ``max_nodes x gpus_per_node``; above one node only whole nodes), global batches powers of two
that split evenly. The classifier screens them and the regressor ranks the survivors; the first of equal
best wins. Both are autoconf's estimators (``engine.py``) unless the caller trained IBM's regressor into
``regressor_path()`` (``build_regressor`` does that from a local CSV: nothing is downloaded).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoconf.catalog import list_models
from autoconf.defaults import GPUS_PER_NODE
from autoconf.interfaces.ado.ibm import model_paths
from autoconf.interfaces.ado.ibm.engine import EnginePredictor, EngineRegressor, version_note
from autoconf.interfaces.ado.ibm.min_gpu_recommender import load_model
from autoconf.interfaces.ado.ibm.model_paths import MODEL_VERSION, THROUGHPUT_MODEL_VERSION
from autoconf.interfaces.ado.ibm.utils.config_mapper import map_valid_model_name

REGRESSOR_DIRECTORY = "v4-1-0-regressor"
KNOWN_MODELS_FILE = "known_model_names.json"
TARGET = "dataset_tokens_per_second"
FEATURE_COLUMNS = ["model_name", "method", "number_gpus", "gpu_model", "tokens_per_sample", "batch_size"]
REGRESSION_COLUMNS = [*FEATURE_COLUMNS, TARGET]
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]  # per-device
GPU_COUNTS = [1, 2, 4, 8, 16]  # total
DEFAULT_FILE_NAME = "dataset.csv"
DEFAULT_DATA_ROOT_DIR = Path(__file__).parent / "data"


def regressor_path(model_root: Path | None = None) -> Path:
    return (model_root or model_paths.DEFAULT_MODEL_ROOT) / REGRESSOR_DIRECTORY


def candidate_combinations(max_nodes: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """(global batch, total GPUs) pairs, batch-major, that the node limits allow and that split evenly."""
    if max_nodes < 1 or gpus_per_node < 1:
        raise ValueError("max_nodes and gpus_per_node must be positive integers")
    capacity = max_nodes * gpus_per_node
    counts = [n for n in GPU_COUNTS if n <= capacity and (n <= gpus_per_node or n % gpus_per_node == 0)]
    largest = BATCH_SIZES[-1] * min(GPU_COUNTS[-1], capacity)
    batches = [2**k for k in range(int(math.log2(largest)) + 1)]
    return [(b, n) for b, n in itertools.product(batches, counts) if b % n == 0 and b // n <= BATCH_SIZES[-1]]


def prepare_regression_data(df: pd.DataFrame) -> pd.DataFrame:
    """The rows a regressor may learn from: completed, evenly split, with a positive finite throughput."""
    missing = sorted({*REGRESSION_COLUMNS, "is_valid"} - set(df.columns))
    if missing:
        raise ValueError(f"Regression dataset is missing required columns: {missing}")
    num = df.copy()
    for column in ("number_gpus", "batch_size", TARGET):
        num[column] = pd.to_numeric(num[column], errors="coerce")
    keep = ((num["number_gpus"] > 0) & (num["batch_size"] % num["number_gpus"] == 0) & (num["is_valid"] == 1)
            & np.isfinite(num[TARGET]) & (num[TARGET] > 0))
    out = num.loc[keep, REGRESSION_COLUMNS].drop_duplicates()
    if out.empty:
        raise ValueError("Regression dataset has no valid positive throughput measurements")
    return out


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """IBM's label rule for its public CSV: without is_valid, a run that recorded a runtime completed."""
    if "is_valid" in df:
        return df
    if "train_runtime" not in df:
        raise ValueError("Dataset must contain either 'is_valid' or 'train_runtime'")
    return df.assign(is_valid=df["train_runtime"].notna().astype(int))


def build_regressor(model_root: Path | None = None, data_root_dir: Path = DEFAULT_DATA_ROOT_DIR,
                    file_name: str = DEFAULT_FILE_NAME, fit_options: dict[str, Any] | None = None) -> Path:
    """Train IBM's AutoGluon throughput regressor on the local CSV ``data_root_dir / file_name`` and publish
    it at ``regressor_path(model_root)`` in one rename (a failed build leaves nothing; a published one is
    kept). Unlike IBM's, nothing is downloaded: a missing CSV raises FileNotFoundError."""
    from autogluon.tabular import TabularDataset, TabularPredictor
    from filelock import FileLock

    root = model_root or model_paths.DEFAULT_MODEL_ROOT
    root.mkdir(parents=True, exist_ok=True)
    destination = regressor_path(root)
    with FileLock(f"{destination}.lock"):
        if destination.exists():
            return destination
        data_path = data_root_dir / file_name
        if not data_path.is_file():
            raise FileNotFoundError(f"no measurements at {data_path}: the regressor is trained from a local CSV")
        data = prepare_regression_data(_labelled(pd.read_csv(data_path)))
        options = fit_options or {"presets": "good", "excluded_model_types": ["GBM"], "time_limit": 900,
                                  "num_bag_folds": 5}
        staging = Path(f"{destination}.staging")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with tempfile.TemporaryDirectory(dir=root, prefix="autoconf-regression-") as work:
                fitted = TabularPredictor(label=TARGET, problem_type="regression", eval_metric="root_mean_squared_error",
                                          path=str(Path(work) / "model")).fit(TabularDataset(data), **options)
                fitted.clone_for_deployment(path=str(staging))
            names = sorted(data["model_name"].dropna().unique().tolist())
            (staging / KNOWN_MODELS_FILE).write_text(json.dumps(names), encoding="utf-8")
            os.rename(staging, destination)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return destination


@functools.cache
def load_regressor(model_version: str = THROUGHPUT_MODEL_VERSION,
                   model_root: Path | None = None) -> tuple[Any, frozenset[str]]:
    """(regressor, model names it knows): IBM's trained regressor when one is at ``regressor_path``, else
    autoconf's estimators (which know every catalogue model)."""
    if model_version != THROUGHPUT_MODEL_VERSION:
        raise ValueError(f"Unknown throughput model_version: {model_version}")
    path = regressor_path(model_root)
    if path.is_dir():
        from autogluon.tabular import TabularPredictor

        known = frozenset(json.loads((path / KNOWN_MODELS_FILE).read_text(encoding="utf-8")))
        return TabularPredictor.load(str(path), require_py_version_match=False), known
    ours, note = version_note(model_version)
    return EngineRegressor(EnginePredictor(model_version=ours, note=note)), frozenset(list_models())


def warn_if_unknown_model(model_name: str, known_models: frozenset[str]) -> None:
    """A UserWarning when the regressor never saw ``model_name``: its estimate is unvalidated."""
    if model_name not in known_models:
        warnings.warn(f"Model {model_name!r} was absent from the regressor's training data; its throughput "
                      "estimate is unvalidated.", UserWarning, stacklevel=3)


def select_best_candidate(candidates: pd.DataFrame, valid_predictions: pd.Series, throughput_predictions: pd.Series,
                          gpus_per_node: int = GPUS_PER_NODE) -> dict[str, Any]:
    """The first valid candidate with the highest finite throughput; predictions pair with the valid rows
    by position."""
    valid = candidates.loc[np.asarray(valid_predictions) == 1].copy()
    if valid.empty:
        return {"can_recommend": False}
    valid["estimated_throughput"] = np.asarray(throughput_predictions, dtype=float)
    valid = valid.loc[np.isfinite(valid["estimated_throughput"])]
    if valid.empty:
        return {"can_recommend": False}
    best = valid.loc[valid["estimated_throughput"].idxmax()]
    batch, total = int(best["batch_size"]), int(best["number_gpus"])
    workers = math.ceil(total / gpus_per_node)
    return {"can_recommend": True, "gpus": total // workers, "workers": workers, "effective_batch_size": batch,
            "per_device_batch_size": batch // total, "estimated_throughput": float(best["estimated_throughput"])}


def recommend_throughput(model_name: str, method: str, gpu_model: str, tokens_per_sample: int, max_nodes: int,
                         gpus_per_node: int, classifier: Any, regressor: Any,  # noqa: ANN401
                         known_models: frozenset[str]) -> dict[str, Any]:
    """Screen every candidate with ``classifier``, rank the survivors with ``regressor``."""
    name = map_valid_model_name(model_name)
    warn_if_unknown_model(name, known_models)
    candidates = pd.DataFrame([{"model_name": name, "method": method, "number_gpus": n, "gpu_model": gpu_model,
                                "tokens_per_sample": tokens_per_sample, "batch_size": b}
                               for b, n in candidate_combinations(max_nodes, gpus_per_node)], columns=FEATURE_COLUMNS)
    valid = classifier.predict(candidates)
    mask = np.asarray(valid) == 1
    speed = regressor.predict(candidates.loc[mask]) if mask.any() else pd.Series(dtype=float)
    return select_best_candidate(candidates, valid, speed, gpus_per_node)


def throughput_recommender(model_name: str, method: str, gpu_model: str, tokens_per_sample: int, max_nodes: int = 1,
                           gpus_per_node: int = GPUS_PER_NODE, model_version: str = THROUGHPUT_MODEL_VERSION) -> dict[str, Any]:
    """The fastest feasible (global batch, GPUs) for the job; ``{"can_recommend": False}`` when none fits.
    Any IBM or autoconf version name is answered (an IBM one by autoconf's newest, said in ``reason``)."""
    ours, note = version_note(model_version)
    if ours == model_version:  # one of autoconf's versions, asked for by name
        classifier: Any = EnginePredictor(model_version=ours)
        regressor, known = EngineRegressor(classifier), frozenset(list_models())
    else:
        classifier = load_model(MODEL_VERSION)
        regressor, known = load_regressor(THROUGHPUT_MODEL_VERSION)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = recommend_throughput(model_name, method, gpu_model, tokens_per_sample, max_nodes, gpus_per_node,
                                   classifier, regressor, known)
    notes = [str(w.message) for w in caught]
    for message in notes:
        warnings.warn(message, UserWarning, stacklevel=2)
    if any([*notes, note]):
        out["reason"] = "; ".join(filter(None, [*notes, note]))
    return out
