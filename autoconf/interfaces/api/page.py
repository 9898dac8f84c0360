"""The web page at ``/`` and an offline ``/docs`` (issue 15), served by the REST API's own app and port.

``install(app)`` adds: ``/`` (static/index.html: form, answer, comparison and sweep views; plain HTML, CSS and
JavaScript, no CDN), ``/static/*``, ``POST /api/sweep`` (a model and GPU over tokens × batch, the fewest GPUs of
each cell via ``recommend_frame``), ``POST /api/config`` (an uploaded config.json kept on the server so that
``model`` can name it) and ``/docs``: Swagger UI from the JavaScript and CSS that the ``fastapi-offline`` package
ships (Swagger UI 5, which reads OpenAPI 3.1), or, where that package is missing, static/docs.html, a plain list
of the routes read from ``/openapi.json``. No page asset is fetched from outside the server.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import pandas as pd
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import Field

from autoconf.catalog import architecture_from_config
from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_GPUS_LIMIT, MAX_OOM_RISK
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.interfaces.api.answers import pick_estimator, results_for
from autoconf.interfaces.api.inputs import parse_body
from autoconf.interfaces.api.paths import store_config
from autoconf.recommend.frame import recommend_frame
from autoconf.schema import DType, EstimatorName, Method, Strategy, Words

STATIC = Path(__file__).parent / "static"
MAX_AXIS = 10  # values per sweep axis: 10 × 10 cells keep one request under a second with theory
MAX_CONFIG_BYTES = 256 * 1024  # a Hugging Face config.json is a few KB; larger uploads are refused

router = APIRouter()


class SweepBody(Words):
    """One model and GPU over tokens_per_sample × batch_size; the other Job fields as in the flat body."""

    model: str = Field(min_length=1, max_length=4096, description="Catalogue name, alias or parameter count.")
    gpu_model: str = Field(min_length=1, max_length=128, description="GPU name or alias.")
    method: Method = "full"
    dtype: DType = "bf16"
    strategy: Strategy | None = None
    tokens_per_sample: list[int] = Field(min_length=1, max_length=MAX_AXIS, description="Sweep axis: tokens.")
    batch_size: list[int] = Field(min_length=1, max_length=MAX_AXIS, description="Sweep axis: global batch.")
    estimator: EstimatorName | None = None
    max_gpus: int = Field(MAX_GPUS, ge=1, le=MAX_GPUS_LIMIT)
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1, le=GPUS_PER_NODE)
    max_oom_risk: float = Field(MAX_OOM_RISK, ge=0, le=1)


def _first_cell(body: SweepBody) -> dict[str, Any]:
    """The flat body of the sweep's first cell: checks model, GPU and the job fields with the API's messages."""
    job = body.model_dump(exclude={"tokens_per_sample", "batch_size", "max_gpus", "gpus_per_node", "max_oom_risk",
                                   "estimator", "strategy"}, exclude_none=True)
    return {**job, "tokens_per_sample": body.tokens_per_sample[0], "batch_size": body.batch_size[0],
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


@router.post("/api/sweep", summary="Fewest GPUs over tokens_per_sample × batch_size for one model and GPU")
async def sweep(body: SweepBody) -> JSONResponse:
    results_for(parse_body(_first_cell(body)), ("memory",))  # unknown names -> 422 with the closest names
    estimator, notes = pick_estimator(body.estimator, None)
    rows = [{"model": body.model, "method": body.method, "dtype": body.dtype, "gpu_model": body.gpu_model,
             "strategy": body.strategy, "tokens_per_sample": t, "batch_size": b}
            for b in body.batch_size for t in body.tokens_per_sample]
    out = recommend_frame(pd.DataFrame(rows), estimator, max_gpus=body.max_gpus, gpus_per_node=body.gpus_per_node,
                          max_oom_risk=body.max_oom_risk)
    cells = [_cell(r) for r in out.astype(object).where(out.notna(), None).to_dict(orient="records")]
    return JSONResponse({"estimator": estimator.name, "model_version": estimator.model_version,
                         "tokens_per_sample": body.tokens_per_sample, "batch_size": body.batch_size,
                         "cells": cells, "notes": notes})


@router.post("/api/config", summary="Keep an uploaded Hugging Face config.json; answers the `model` to send")
async def upload_config(request: Request) -> JSONResponse:
    raw = await request.body()
    if len(raw) > MAX_CONFIG_BYTES:
        raise InvalidInputError("config", f"must be at most {MAX_CONFIG_BYTES // 1024} KB; got {len(raw) // 1024} KB")
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError("config", f"must be a JSON object (a config.json); {exc}") from None
    if not isinstance(config, dict):
        raise InvalidInputError("config", f"must be a JSON object (a config.json); got {type(config).__name__}")
    path = store_config(config)  # the server's private upload store (paths.py); `model` may name it
    try:
        arch = architecture_from_config(path)
    except AutoconfError as exc:  # the parser's own message (the key, the type, the supported families)
        raise InvalidInputError("config", exc.message) from None
    return JSONResponse({"model": str(path), "model_type": arch.model_type, "total_params": arch.total_params})


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


def _swagger_assets() -> Path | None:
    """Folder of fastapi-offline's bundled Swagger UI, or None where that package is not installed."""
    try:
        folder = Path(str(importlib.resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install(app: FastAPI) -> None:
    """Add the page, its assets, the sweep and config routes and the offline /docs to ``app``."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    assets = _swagger_assets()
    if assets is not None:
        app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        if assets is None:
            return HTMLResponse((STATIC / "docs.html").read_text(encoding="utf-8"))
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} · API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/static/favicon.svg")

    app.include_router(router)
