"""A ``from`` column in a sweep CSV: each row may name a training config (several joined by ``+``, paths
relative to the CSV's folder); the file fills the row's empty Job / Placement cells and the row's own cells
win. Each distinct cell is read once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from autoconf import defaults
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.interfaces.configs.common import FromFile, build_inputs
from autoconf.interfaces.configs.detect import read_configs
from autoconf.schema import Job, Placement

COLUMN = "from"
PLACEMENT_CELLS = ("number_gpus", "gpus_per_worker", "strategy", "offload", "tp", "pp")


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value)


def row_fields(found: FromFile, row: dict[str, Any]) -> dict[str, Any]:
    """The Job and Placement cells the file gives a row (the row's number_gpus, when given, is the launch)."""
    overrides: dict[str, Any] = {}
    if not _empty(row.get("number_gpus")):
        overrides |= {"gpus_per_node": int(row["number_gpus"]), "nodes": 1}
    gpu = row.get("gpu_model")
    job, placement = build_inputs(found, overrides, str(gpu) if not _empty(gpu) else defaults.GPU_MODEL)
    cells = {k: v for k, v in job.model_dump().items() if k in Job.model_fields}
    if found.values.get("gpus_per_node") or found.values.get("nodes") or overrides:
        cells["number_gpus"] = placement.number_gpus
    cells |= {k: getattr(placement, k) for k in PLACEMENT_CELLS if k != "number_gpus"}
    return {k: v for k, v in cells.items() if v is not None and k in (*Job.model_fields, *Placement.model_fields)}


def expand_frame(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """The frame with each row's ``from`` file folded into its empty cells (unchanged without the column)."""
    if COLUMN not in frame.columns:
        return frame
    cache: dict[str, FromFile] = {}
    rows = []
    for number, row in enumerate(frame.to_dict(orient="records"), start=2):  # line 1 is the header
        cell = row.get(COLUMN)
        if _empty(cell):
            rows.append(row)
            continue
        key = str(cell)
        try:
            if key not in cache:
                cache[key] = read_configs([_path(folder, p) for p in key.split("+")])
            fields = row_fields(cache[key], row)
        except AutoconfError as exc:
            raise InvalidInputError(f"from (line {number})", exc.message) from None
        fields["lora_target_modules"] = ",".join(fields["lora_target_modules"])  # one CSV cell
        rows.append({**row, **{k: v for k, v in fields.items() if _empty(row.get(k))}})
    return pd.DataFrame(rows)


def _path(folder: Path, text: str) -> Path:
    path = Path(text.strip()).expanduser()
    return path if path.is_absolute() else folder / path
