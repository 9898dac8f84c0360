"""Batch columns (design §8): rows of Job/Placement fields in, estimate columns out.

Shared by every estimator's ``estimate_frame`` and by ``autoconf-gpu sweep``. A bad row gets its
error in the ``error`` column; the other rows are still answered; unknown columns pass through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from pydantic import ValidationError

from autoconf.errors import AutoconfError, describe
from autoconf.schema import GIB, Estimate, Job, Placement

JOB_FIELDS = tuple(Job.model_fields)
PLACEMENT_FIELDS = tuple(Placement.model_fields)
MEMORY_COLUMNS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
VISION_COLUMNS = ("vision_weights", "vision_activations")  # 0 for text models
OUTPUT_COLUMNS = (
    "estimator", "model_version", *(f"{c}_gib" for c in MEMORY_COLUMNS), "peak_memory_gib", "capacity_gib",
    "fits", "oom_risk", "tokens_per_second", "can_recommend", "gpus", "workers", "reason", "error",
    "peak_allocated_gib", "peak_reserved_gib", "vision_weights_gib", "vision_activations_gib",
)
_BOOL_FIELDS = {"gradient_checkpointing", "fused_loss", "packing", "samples_vary_in_length",
                "fsdp_cpu_ram_efficient_loading", "double_quant", "quantize_lm_head", "optimizer_in_backward",
                "activation_offloading", "torch_compile", "expandable_segments", "dora"}
_INT_FIELDS = {"tokens_per_sample", "batch_size", "number_gpus", "gradient_accumulation_steps", "lora_r", "tp", "pp",
               "gpus_per_worker", "sequence_parallel"}


def _clean(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()  # numpy scalar -> python
    return value


def _coerce(name: str, value: Any) -> Any:
    if name in _BOOL_FIELDS and isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "y")
    if name in _INT_FIELDS and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def row_inputs(row: dict[str, Any], default_gpus: int | None = None) -> tuple[Job, Placement]:
    """Build (Job, Placement) from one row; ``model_name`` is accepted for ``model``."""
    data = {k: _clean(v) for k, v in row.items()}
    if data.get("model") is None and data.get("model_name") is not None:
        data["model"] = data["model_name"]
    if data.get("model") is not None:
        data["model"] = str(data["model"])
    if data.get("per_device_batch_size") is not None and data.get("batch_size") is None:
        gpus = data.get("number_gpus") or 1
        accumulation = int(data.get("gradient_accumulation_steps") or 1)
        data["batch_size"] = int(data["per_device_batch_size"]) * int(gpus) * accumulation
    job = Job(**{k: _coerce(k, data[k]) for k in JOB_FIELDS if data.get(k) is not None})
    place = {k: _coerce(k, data[k]) for k in PLACEMENT_FIELDS if data.get(k) is not None}
    if "number_gpus" not in place and default_gpus:
        place["number_gpus"] = default_gpus
    return job, Placement(**place)


def estimate_columns(est: Estimate) -> dict[str, Any]:
    mem = est.memory
    out: dict[str, Any] = {
        "estimator": est.estimator, "model_version": est.model_version,
        **{f"{c}_gib": round(getattr(mem, f"{c}_bytes") / GIB, 4) for c in MEMORY_COLUMNS},
        "peak_memory_gib": round(mem.peak_bytes / GIB, 4), "capacity_gib": round(mem.capacity_bytes / GIB, 4),
        "peak_allocated_gib": round(mem.allocated_bytes / GIB, 4),
        "peak_reserved_gib": round(mem.reserved_bytes / GIB, 4),
        "vision_weights_gib": round(mem.vision_weights_bytes / GIB, 4),
        "vision_activations_gib": round(mem.vision_activations_bytes / GIB, 4),
        "fits": bool(mem.fits), "oom_risk": round(mem.oom_risk, 4),
        "tokens_per_second": round(est.throughput.tokens_per_second, 2) if est.throughput else None,
    }
    return out


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
