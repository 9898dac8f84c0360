"""IBM ado-autoconf's ``autoconf.min_gpu_recommender``: ``load_model``, ``min_gpu_recommender``,
``avoid_oom_recommender``, with IBM's signatures, defaults and return shapes.

Direct calls return IBM's dict: ``{"can_recommend": True, "gpus": g, "workers": w}`` or
``{"can_recommend": False}`` (an error inside ``avoid_oom_recommender`` gives IBM's ``gpus = workers =
-1``). When autoconf's estimators answer, ``peak_memory_gib``, ``oom_risk``, ``tokens_per_second``,
``reason`` and ``answered_by`` stand beside them. The search is IBM's: GPU counts are powers of two up to
``max_gpus``, the global batch must split evenly over them, and a count is accepted when the classifier
says the job runs there. Differences from IBM's internals: docs/dialects.md §3.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
from pydantic import ValidationError

from autoconf.defaults import GPUS_PER_NODE, IBM_AVOID_OOM_MAX_GPUS, IBM_MAX_GPUS
from autoconf.errors import describe
from autoconf.interfaces.ado.ibm import model_paths
from autoconf.interfaces.ado.ibm.engine import EnginePredictor, version_note
from autoconf.interfaces.ado.ibm.model_paths import MODEL_VERSION
from autoconf.interfaces.ado.ibm.utils.config_mapper import map_valid_model_name
from autoconf.interfaces.ado.ibm.utils.pydantic_models import JobConfig
from autoconf.interfaces.ado.ibm.utils.recommender import (
    NoRecommendationError,
    get_model_prediction_and_metadata,
    recommend_min_gpu,
)

__all__ = ["GPUsAndWorkers", "NoRecommendationError", "avoid_oom_recommender", "load_model", "min_gpu_recommender"]
logger = logging.getLogger(__name__)


class GPUsAndWorkers(NamedTuple):
    gpus: int
    workers: int


@functools.cache
def load_model(model_version: str, model_root: Path | None = None) -> Any:  # noqa: ANN401
    """The classifier behind the recommenders: IBM's own when one was trained into ``model_root`` (default
    ``model_paths.DEFAULT_MODEL_ROOT``) with IBM's tools, else autoconf's estimators.

    Any IBM version name (1.0.0 ... 4.1.0) or autoconf version is accepted; another raises ValueError.
    Nothing is downloaded or trained here (IBM's trains a classifier on demand from its Hugging Face data).
    """
    ours, note = version_note(model_version)
    trained = model_paths.model_path(model_root)
    if model_version == MODEL_VERSION and trained.is_dir():
        from autogluon.tabular import TabularPredictor

        return TabularPredictor.load(str(trained), require_py_version_match=False)
    return EnginePredictor(model_version=ours, note=note)


def split(total: int, gpus_per_worker: int) -> GPUsAndWorkers:
    """IBM's layout: the fewest workers of at most ``gpus_per_worker`` GPUs, GPUs spread evenly over them."""
    workers = math.ceil(total / gpus_per_worker)
    return GPUsAndWorkers(gpus=math.ceil(total / workers), workers=workers)


def _details(predictor: Any, row: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN401
    """Our estimate at the chosen placement, when our estimators are the classifier."""
    if not isinstance(predictor, EnginePredictor):
        return {}
    found = predictor.assess(pd.DataFrame([row])).iloc[0].to_dict()
    found.pop("fits")
    return {k: v for k, v in found.items() if not (isinstance(v, float) and math.isnan(v))}


def _why(predictor: Any, row: dict[str, Any], reason: str) -> dict[str, Any]:  # noqa: ANN401
    """``reason`` (+ our peak and risk at the largest count tried, when our estimators answered)."""
    details = _details(predictor, row)
    if "peak_memory_gib" in details:
        reason += (f" (at {row['number_gpus']} GPUs: peak {details['peak_memory_gib']:.1f} GiB per GPU, "
                   f"oom_risk {details.get('oom_risk', 1.0):.3f})")
    return {"reason": "; ".join(filter(None, [reason, details.get("reason", "")]))} | (
        {"answered_by": details["answered_by"]} if "answered_by" in details else {})


def _positive(**values: Any) -> None:  # noqa: ANN401
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
            raise ValueError(f"{name} must be a number >= 1; got {value!r}")


def min_gpu_recommender(model_name: str, method: str, gpu_model: str, tokens_per_sample: int, batch_size: int,
                        model_version: str, gpus_per_worker: int = GPUS_PER_NODE, max_gpus: int = IBM_MAX_GPUS) -> dict[str, Any]:
    """The fewest GPUs (a power of two up to ``max_gpus``) on which the job runs, as gpus per worker x workers."""
    try:
        _positive(gpus_per_worker=gpus_per_worker, max_gpus=max_gpus)
        predictor = load_model(model_version=model_version)
        config = JobConfig.model_validate({"model_name": model_name, "gpu_model": gpu_model, "method": method,
                                           "tokens_per_sample": tokens_per_sample, "batch_size": batch_size})
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        logger.warning("min_gpu_recommender cannot recommend for %s: %s", model_name, exc)
        return {"can_recommend": False, "reason": describe(exc)}
    counts = [2**i for i in range(int(math.log2(max_gpus)) + 1)]
    total, metadata = recommend_min_gpu(config, predictor=predictor, valid_n_gpu_list=counts)
    if total < 1:
        logger.warning("min_gpu_recommender: %s", NoRecommendationError(str(metadata)))
        row = {**config.model_dump(), "number_gpus": counts[-1]}
        return {"can_recommend": False, **_why(predictor, row, f"nothing runs on up to max_gpus={max_gpus} GPUs "
                                                               "(powers of two)")}
    layout = split(total, int(gpus_per_worker))
    return {"can_recommend": True, "gpus": layout.gpus, "workers": layout.workers,
            **_details(predictor, {**config.model_dump(), "number_gpus": total})}


def avoid_oom_recommender(model_name: str, method: str, gpu_model: str, tokens_per_sample: int,
                          per_device_train_batch_size: int, number_gpus: int = 1, gpus_per_worker: int = GPUS_PER_NODE,
                          max_gpus: int = IBM_AVOID_OOM_MAX_GPUS, model_version: str = MODEL_VERSION) -> dict[str, Any]:
    """Keep ``number_gpus`` if the job runs there (per-device batch kept), else the fewest powers of two above
    it, up to ``max_gpus``, on which it runs. ``number_gpus`` defaults to 1 (IBM's requires it; its consumer
    fm-training-estimator calls without it, which IBM's answers with an error)."""
    try:
        _positive(tokens_per_sample=tokens_per_sample, per_device_train_batch_size=per_device_train_batch_size,
                  number_gpus=number_gpus, gpus_per_worker=gpus_per_worker, max_gpus=max_gpus)
        predictor = load_model(model_version)
        name = map_valid_model_name(model_name) if isinstance(model_name, str) else model_name
        base = {"model_name": name, "method": method, "gpu_model": gpu_model,
                "tokens_per_sample": int(tokens_per_sample)}
        counts = [int(number_gpus)] + [2**i for i in range(int(math.log2(max_gpus)) + 1) if 2**i > number_gpus]
        for total in counts:
            row = {**base, "batch_size": per_device_train_batch_size * total, "number_gpus": total}
            runs, _ = get_model_prediction_and_metadata(row, predictor=predictor)
            if runs == 1:
                layout = split(total, int(gpus_per_worker))
                return {"can_recommend": True, "gpus": layout.gpus, "workers": layout.workers,
                        **_details(predictor, row)}
        return {"can_recommend": False, **_why(predictor, row, f"no GPU count from {number_gpus} up to "
                                                                 f"max_gpus={max_gpus} runs")}
    except (ValueError, TypeError, ValidationError, OverflowError) as exc:
        logger.error("avoid_oom_recommender: %s", exc)
        return {"can_recommend": False, "gpus": -1, "workers": -1, "reason": describe(exc)}
