"""The web page's two POST routes as plain functions (no FastAPI): ``/api/sweep`` and ``/api/config``.

Both run through work.py like every other POST (issue 27): the body is bounded and parsed by guard.py,
the sweep's ``model`` goes through the one file/hub policy (``confine_paths``), an upload is checked in
full before it is stored (uploads.py), and every problem is a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import Field, create_model

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_GPUS_LIMIT, MAX_OOM_RISK
from autoconf.errors import InvalidInputError
from autoconf.interfaces.api.answers import pick_estimator, results_for
from autoconf.interfaces.api.guard import BodyError, parse_json
from autoconf.interfaces.api.inputs import parse_body
from autoconf.interfaces.api.uploads import MAX_CONFIG_BYTES, store_config
from autoconf.recommend.frame import recommend_frame
from autoconf.schema import EstimatorName, Job, Strategy, Words

MAX_AXIS = 10  # values per sweep axis: 10 × 10 cells keep one request under a second with theory
SWEPT = ("tokens_per_sample", "batch_size")
OPTIONS = ("estimator", "max_gpus", "gpus_per_node", "max_oom_risk")  # of the search, not of a cell's job


class _Sweep(Words):
    model: str = Field(min_length=1, max_length=4096, description="Catalogue name, alias or parameter count.")
    gpu_model: str = Field(min_length=1, max_length=128, description="GPU name or alias.")
    strategy: Strategy | None = None
    tokens_per_sample: list[int] = Field(min_length=1, max_length=MAX_AXIS, description="Sweep axis: tokens.")
    batch_size: list[int] = Field(min_length=1, max_length=MAX_AXIS, description="Sweep axis: global batch.")
    estimator: EstimatorName | None = None
    max_gpus: int = Field(MAX_GPUS, ge=1, le=MAX_GPUS_LIMIT)
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1, le=GPUS_PER_NODE)
    max_oom_risk: float = Field(MAX_OOM_RISK, ge=0, le=1)


SweepBody = create_model(  # type: ignore[call-overload]  # pydantic's overloads cannot type **field definitions
    "SweepBody",
    __base__=_Sweep,
    __doc__="One model and GPU over tokens_per_sample × batch_size; every other Job field as in the flat body "
    "(generated from the Job's fields: the sweep view sends what the form holds).",
    **{n: (i.annotation, i) for n, i in Job.model_fields.items() if n not in (*SWEPT, *_Sweep.model_fields)},
)


def _job_words(body: Any) -> dict[str, Any]:  # noqa: ANN401 - a SweepBody (generated, no static type)
    """The words of every cell's job: the body without the axes and the search's options (None: left out)."""
    return body.model_dump(exclude={*SWEPT, *OPTIONS}, exclude_unset=True, exclude_none=True)  # type: ignore[no-any-return]


def _first_cell(body: Any) -> dict[str, Any]:  # noqa: ANN401 - a SweepBody
    """The flat body of the sweep's first cell: checks model, GPU and the job fields with the API's messages."""
    return {**_job_words(body), "tokens_per_sample": body.tokens_per_sample[0], "batch_size": body.batch_size[0],
            "estimator": "theory"}


def _cell(row: dict[str, Any]) -> dict[str, Any]:
    def num(key: str) -> float | None:
        value = row.get(key)
        return None if value is None or pd.isna(value) else float(value)

    gpus, workers = int(row["gpus"] or 0), int(row["workers"] or 0)
    return {"tokens_per_sample": int(row["tokens_per_sample"]), "batch_size": int(row["batch_size"]),
            "can_recommend": int(row["can_recommend"] or 0), "gpus": gpus, "workers": workers,
            "number_gpus": gpus * workers, "peak_memory_gib": num("peak_memory_gib"),
            "capacity_gib": num("capacity_gib"), "oom_risk": num("oom_risk"),
            "reason": row.get("reason") or "", "error": row.get("error")}


def sweep_for(body: Any) -> dict[str, Any]:
    """The sweep answer of a parsed body whose ``model`` has already passed ``confine_paths``."""
    if not isinstance(body, dict):
        raise InvalidInputError("body", f"must be a JSON object; got {type(body).__name__}")
    sweep = SweepBody.model_validate(body)
    results_for(parse_body(_first_cell(sweep)), ("memory",))  # unknown names -> 422 with the closest names
    estimator, notes = pick_estimator(sweep.estimator, None)
    words = _job_words(sweep)
    rows = [{**words, "tokens_per_sample": t, "batch_size": b} for b in sweep.batch_size for t in sweep.tokens_per_sample]
    out = recommend_frame(pd.DataFrame(rows), estimator, max_gpus=sweep.max_gpus, gpus_per_node=sweep.gpus_per_node,
                          max_oom_risk=sweep.max_oom_risk)
    cells = [_cell(r) for r in out.astype(object).where(out.notna(), None).to_dict(orient="records")]
    return {"estimator": estimator.name, "model_version": estimator.model_version,
            "tokens_per_sample": sweep.tokens_per_sample, "batch_size": sweep.batch_size, "cells": cells,
            "notes": notes}


def upload_for(raw: bytes) -> dict[str, Any]:
    """Check an uploaded config.json (size, then guard.py's JSON bounds, then the config itself), then keep it;
    the answer names the ``model`` string that later requests send. A refused upload writes nothing."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise InvalidInputError("config", f"must be at most {MAX_CONFIG_BYTES // 1024} KB; got {len(raw) // 1024} KB")
    try:
        config = parse_json(raw)
    except BodyError as exc:  # located inside the upload: config.<key>
        exc.field = "config" if exc.field == "body" else f"config.{exc.field}"
        if exc.message.startswith("must be JSON"):
            exc.message = "must be a JSON object (a config.json); got " + exc.message.removeprefix("must be JSON: ")
        raise
    path, arch = store_config(config, "config")
    return {"model": str(path), "model_type": arch.model_type, "total_params": arch.total_params}
