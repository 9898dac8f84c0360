"""IBM ado-autoconf's recommender core: the rule-based check, then the classifier, per GPU count.

``predictor`` is anything with IBM's classifier contract, ``predict(frame) -> 1 (runs) / 0 (OOM)`` per
row: autoconf's estimators (``engine.EnginePredictor``, the default of ``load_model``), a classifier
trained with IBM's tools, or a test double.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from autoconf.interfaces.ado.ibm.utils import rule_based_classifier
from autoconf.interfaces.ado.ibm.utils.pydantic_models import JobConfig

logger = logging.getLogger(__name__)

# GPU counts tried when the caller names none (IBM's list).
VALID_N_GPUS = [1, 2, 4, 8, 16, 32]
RULE_ERROR = "Rule-Based Classifier error"
MODEL_ERROR = "Predictive Model Classifier error"


def _load(predictor: Any) -> Any:  # noqa: ANN401
    """A path is an IBM-format AutoGluon classifier on disk."""
    if isinstance(predictor, str):
        from autogluon.tabular import TabularPredictor

        return TabularPredictor.load(predictor, require_py_version_match=False)
    return predictor


def get_model_prediction_and_metadata(config: pd.DataFrame | dict[str, Any] | JobConfig,
                                      predictor: Any) -> tuple[int, dict[str, Any]]:  # noqa: ANN401
    """(prediction, metadata): 1 when the rule passes and the classifier says the job runs, else its
    prediction or 0; metadata holds both classifiers' errors."""
    if isinstance(config, JobConfig):
        config = config.model_dump()
    frame = pd.DataFrame(config, index=[0]) if isinstance(config, dict) else config
    valid, rule_errors = rule_based_classifier.is_row_valid(frame)
    prediction, model_error = None, None
    if valid:
        try:
            prediction = np.asarray(predictor.predict(frame))[0]
        except Exception as exc:  # noqa: BLE001  # IBM's contract: a classifier failure is metadata, not a raise
            model_error = str(exc)
    metadata = {RULE_ERROR: " ".join(rule_errors), MODEL_ERROR: model_error}
    return (int(prediction) if prediction else 0), metadata


def recommend_min_gpu(job_config: JobConfig, predictor: Any,  # noqa: ANN401
                      valid_n_gpu_list: list[int] | None = None) -> tuple[int, dict[str, Any]]:
    """(fewest GPU count of the list that the predictor says runs, metadata); -1 when none does."""
    predictor = _load(predictor)
    metadata: dict[str, Any] = {"default": "User config was not provided"}
    for count in sorted(valid_n_gpu_list if valid_n_gpu_list is not None else VALID_N_GPUS):
        runs, found = get_model_prediction_and_metadata(job_config.model_copy(update={"number_gpus": count}),
                                                        predictor)
        if count != job_config.number_gpus:
            metadata = found
        logger.debug("number_gpus=%d: prediction %s", count, runs)
        if runs == 1:
            return count, metadata
    return -1, metadata


class MinGpuRecommender:
    """recommend_min_gpu with a fixed predictor and GPU list; ``predict`` answers many configurations."""

    def __init__(self, predictor: Any, valid_n_gpu: list[int] | None = None) -> None:  # noqa: ANN401
        self.valid_n_gpu = valid_n_gpu or list(VALID_N_GPUS)
        self.predictor = _load(predictor)

    def recommend_min_gpu(self, job_config: JobConfig) -> tuple[int, dict[str, Any]]:
        return recommend_min_gpu(job_config, self.predictor, self.valid_n_gpu)

    def predict(self, job_config: JobConfig | pd.DataFrame) -> list[int]:
        configs = ([JobConfig.model_validate(row.dropna().to_dict()) for _, row in job_config.iterrows()]
                   if isinstance(job_config, pd.DataFrame) else [job_config])
        return [self.recommend_min_gpu(config)[0] for config in configs]


class NoRecommendationError(ValueError):
    """No GPU count of the list avoids an out-of-memory failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"Unable to recommend minimum number of GPUs to avoid GPU OOM: {self.reason}"
