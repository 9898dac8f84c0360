"""IBM ado-autoconf's rule-based classifier: a job is invalid when its global batch does not split evenly
over its GPUs (fms-hf-tuning then refuses it before launch)."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

logger = logging.getLogger(__name__)


def to_series(x: pd.Series | pd.DataFrame | dict[str, Any]) -> pd.Series:
    """One configuration as a Series (a one-row frame or a non-empty dict)."""
    if isinstance(x, pd.Series):
        return x
    if isinstance(x, pd.DataFrame):
        if len(x) != 1:
            raise ValueError(f"DataFrame must have exactly 1 row, got {len(x)}")
        return x.iloc[0]
    if isinstance(x, dict):
        if not x:
            raise ValueError("Config from dict cannot be empty")
        return pd.Series(x)
    raise TypeError(f"Expected Series, DataFrame, or dict, got {type(x).__name__}")


def is_row_valid(config: pd.Series | pd.DataFrame | dict[str, Any],
                 err_prefix: str = "Rule-based classifier error: ") -> tuple[bool, list[str]]:
    """(valid, errors): invalid without number_gpus, or when batch_size % number_gpus != 0."""
    row = to_series(config)
    try:
        uneven = row["batch_size"] % row["number_gpus"] != 0
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        logger.info("%s: the batch divisibility rule needs batch_size and number_gpus", exc)
        return False, []
    errors = [err_prefix + "batch_size must be evenly divisible by number_gpus."] if uneven else []
    return not errors, errors
