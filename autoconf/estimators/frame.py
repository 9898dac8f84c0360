"""Batch columns (design §8): rows of Job/Placement fields in, estimate columns out.

Shared by every estimator's ``estimate_frame`` and by ``autoconf-gpu sweep``. A bad row gets its
error in the ``error`` column; the other rows are still answered; unknown columns pass through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from pydantic import ValidationError

from autoconf.defaults import MEMORY_PARTS
from autoconf.errors import AutoconfError, describe
from autoconf.schema import Answer, Estimate, Job, Placement, job_and_placement, sweep_columns

JOB_FIELDS = tuple(Job.model_fields)
PLACEMENT_FIELDS = tuple(Placement.model_fields)
MEMORY_COLUMNS = MEMORY_PARTS
VISION_COLUMNS = ("vision_weights", "vision_activations")  # 0 for text models
OUTPUT_COLUMNS = sweep_columns()  # the Answer's sweep columns, in order (schema/answer.py metadata)


def row_inputs(row: dict[str, Any], default_gpus: int | None = None) -> tuple[Job, Placement]:
    """(Job, Placement) of one row, read by the one way in (``schema.job_and_placement``)."""
    return job_and_placement(row, default_gpus or 1)


def estimate_columns(est: Estimate) -> dict[str, Any]:
    """The sweep columns of one row's estimate (the recommendation's are None: estimate_frame never recommends)."""
    return Answer.of(est).columns()


def map_rows(frame: pd.DataFrame, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> pd.DataFrame:
    """Apply ``answer`` to every row; library/validation errors land in ``error``."""
    results: list[dict[str, Any]] = []
    for row in frame.to_dict(orient="records"):
        try:
            results.append({**answer(row), "error": None})
        except (AutoconfError, ValidationError, TypeError, ValueError) as exc:
            results.append({"error": describe(exc, with_input=False)})
    out = pd.DataFrame(results, index=frame.index)
    for col in OUTPUT_COLUMNS:
        if col not in out:
            out[col] = None
    extra = [c for c in frame.columns if c not in OUTPUT_COLUMNS]
    return pd.concat([frame[extra], out[list(OUTPUT_COLUMNS)]], axis=1)


def iter_inputs(frame: pd.DataFrame) -> Iterable[tuple[int, dict[str, Any]]]:
    yield from enumerate(frame.to_dict(orient="records"))


def estimate_rows(estimate: Callable[[Job, Placement], Estimate], frame: pd.DataFrame) -> pd.DataFrame:
    """``estimate_frame`` of a per-row estimator: each row's estimate at its own placement (1 GPU if unset)."""
    return map_rows(frame, lambda row: estimate_columns(estimate(*row_inputs(row, default_gpus=1))))
