"""REST API (FastAPI; design §8): memory, throughput, time, tokens, cost, estimate and recommend.

Every POST route takes either the flat body (Job + Placement fields, plus options such as ``estimator``,
``token_budget``, ``price_per_gpu_hour_usd``) or the nested ``EstimateInput`` of the resource-estimator
design (``estimator{method}``, ``configs[{hf_training, fm, data, infra, peft_lora}]``; see
autoconf/interfaces/api/inputs.py; the answers are computed in autoconf/interfaces/api/answers.py). Answers
carry numbers with their unit in the field name, one result per config and, with several configs, an
aggregate. Input problems are 422 with the field (413 for a body over the size limit); no input answers 5xx.

Bounded work per request (issue 16): bodies are read up to ``serve --max-body-bytes`` and checked by
guard.py (nesting, finite numbers, digits, string lengths); server files only under ``serve --data-dir``
(paths.py), hub ids only under ``serve --allow-hub``; the work runs off the event loop (work.py; traced in
pool.py's bounded process pool, 503 + Retry-After when full) and is cut at ``serve --timeout-s``. The page's
``/api/sweep`` and ``/api/config`` take the same path (issue 27).

    autoconf-gpu serve --host 127.0.0.1 --port 8000     # OpenAPI at /docs
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from pydantic.json_schema import models_json_schema
from starlette.concurrency import run_in_threadpool

from autoconf import __version__
from autoconf.catalog import get_architecture, get_gpu, list_gpus, list_models
from autoconf.catalog.prices import list_prices
from autoconf.errors import AutoconfError, NotBuiltError, UnknownNameError
from autoconf.interfaces.api import pool as P
from autoconf.interfaces.api import work as W
from autoconf.interfaces.api.guard import BodyError, max_body_bytes
from autoconf.interfaces.api.inputs import EstimateInput, FlatBody, seed_example
from autoconf.interfaces.api.page import install
from autoconf.interfaces.api.pagework import SweepBody

log = logging.getLogger(__name__)

app = FastAPI(
    title="autoconf-gpu",
    version=__version__,
    description="Will this LLM fine-tuning job fit, on how many GPUs, how fast, how long, at what cost?",
    docs_url=None,  # /docs and the web page at / are added by page.install (assets served locally, no CDN)
    redoc_url=None,
)
def _error(loc: list[Any], msg: str, kind: str, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": [{"loc": loc, "msg": msg, "type": kind, **extra}]})


def _autoconf_error(exc: AutoconfError) -> JSONResponse:
    extra = {"suggestions": exc.suggestions} if isinstance(exc, UnknownNameError) else {}
    loc = [int(p) if p.isdigit() else p for p in exc.field.split(".")]
    return _error(loc, exc.message, "autoconf_error", **extra)


def _validation_error(exc: ValidationError | RequestValidationError) -> JSONResponse:
    detail = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "value_error")}
        for e in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": detail})


@app.exception_handler(RequestValidationError)
async def _on_request_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    return _validation_error(exc)


@app.exception_handler(AutoconfError)
async def _on_autoconf(_: Request, exc: AutoconfError) -> JSONResponse:
    return _autoconf_error(exc)


@app.exception_handler(ValidationError)
async def _on_validation(_: Request, exc: ValidationError) -> JSONResponse:
    return _validation_error(exc)


@app.exception_handler(BodyError)
async def _on_body(_: Request, exc: BodyError) -> JSONResponse:
    response = _autoconf_error(exc)
    response.status_code = exc.status
    return response


@app.exception_handler(NotBuiltError)
async def _on_not_built(_: Request, exc: NotBuiltError) -> JSONResponse:
    return _error(["estimator"], str(exc), "not_built")


TIMEOUT_ENV = "AUTOCONF_API_TIMEOUT_S"  # set by `autoconf-gpu serve --timeout-s`
TIMEOUT_S = 30.0  # longest computation one request may ask for (a first traced estimate takes a few seconds)


def timeout_s() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, TIMEOUT_S))
    except ValueError:
        return TIMEOUT_S


async def _read_capped(request: Request) -> bytes:
    """The body, refused (413) as soon as it passes the size limit: a 50 MB body is never held."""
    limit = max_body_bytes()
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise BodyError("body", f"must be at most {limit} bytes; got {length}", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyError("body", f"must be at most {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


async def _run(request: Request, route: str) -> Response:
    """The route's work in a worker thread (the traced pool's process for traced), cut at the timeout; never 5xx
    but the pool's 503 + Retry-After when it is full."""
    raw = await _read_capped(request)
    headers: dict[str, str] = {}
    try:
        if W.is_heavy(raw):
            status, content = await P.pool().run(W.answer, (route, raw), timeout_s())
        else:
            status, content = await asyncio.wait_for(run_in_threadpool(W.answer, route, raw), timeout_s())
    except TimeoutError:
        status, content = W.error_bytes(["body"], f"needed more than {timeout_s():g} s of computation; ask for fewer "
                                        "configs or a faster estimator (theory)", "timeout")
    except P.Busy as busy:
        headers["Retry-After"] = str(busy.retry_after)
        status, content = W.error_bytes(["body"], f"the traced estimator is busy; retry in {busy.retry_after} s",
                                        "busy", status=503)
    except P.Failed as failed:
        status, content = W.error_bytes(["body"], f"{failed}; the request may need more memory than the server "
                                        "allows (serve --worker-memory-mb)", "worker_failed")
    return Response(content, status_code=status, media_type="application/json", headers=headers)


async def _answer(request: Request, route: str) -> Response:
    return await _run(request, route)


_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": {"oneOf": [{"$ref": "#/components/schemas/FlatBody"},
                                 {"$ref": "#/components/schemas/EstimateInput"}]},
            "examples": {  # the first is the one /docs shows: the resource-estimator design's own example
                "EstimateInput": {"summary": "resource-estimator design example", "value": seed_example()},
                "flat": {"value": {"model": "llama3.1-8b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe",
                                   "number_gpus": 2, "tokens_per_sample": 4096, "batch_size": 16,
                                   "num_samples": 10000}},
            },
        }},
    }
}


SUMMARIES = {
    "memory": "Per-GPU peak memory by component",
    "time": "Tokens/s and wall time (load + train + checkpoints)",
    "tokens": "Training tokens/s, and dataset token counts when given",
    "cost": "GPU-hours × price per GPU-hour, USD",
    "estimate": "Memory, throughput, time and cost together",
}


def _route(name: str) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        return await _answer(request, name)

    handler.__name__ = name
    return handler


PARTS = W.PARTS
for _name, _summary in SUMMARIES.items():
    app.add_api_route(f"/api/{_name}", _route(_name), methods=["POST"], summary=_summary, openapi_extra=_BODY_DOC)


@app.post("/api/recommend", openapi_extra=_BODY_DOC, summary="Fewest GPUs (and workers) at which the job fits")
async def recommend(request: Request) -> Response:
    return await _run(request, "recommend")


_SWEEP_DOC = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/SweepBody"},
    "example": {"model": "llama3.1-8b", "gpu_model": "A100", "tokens_per_sample": [1024, 4096], "batch_size": [8, 64]},
}}}}
_CONFIG_DOC = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "description": "A Hugging Face config.json (at most 256 KB)"},
    "example": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
}}}}


@app.post("/api/sweep", openapi_extra=_SWEEP_DOC,
          summary="Fewest GPUs over tokens_per_sample × batch_size for one model and GPU")
async def sweep(request: Request) -> Response:
    return await _run(request, "sweep")


@app.post("/api/config", openapi_extra=_CONFIG_DOC,
          summary="Keep an uploaded Hugging Face config.json (checked first); answers the `model` to send")
async def upload_config(request: Request) -> Response:
    return await _run(request, "config")


@app.get("/api/models", summary="Catalogued models that can be answered")
async def models() -> JSONResponse:
    rows = []
    for name in list_models(answerable_only=True):
        arch = get_architecture(name)
        rows.append({"name": name, "model_type": arch.model_type, "total_params": arch.total_params,
                     "active_params": arch.active_params, "aliases": list(arch.aliases), "source": arch.source})
    return JSONResponse({"models": rows})


@app.get("/api/gpus", summary="Catalogued GPUs with peak TFLOPS, memory and catalogued prices")
async def gpus() -> JSONResponse:
    rows = []
    for name in list_gpus():
        spec = get_gpu(name)
        prices = [{"provider": p.provider, "usd_per_gpu_hour": p.usd_per_gpu_hour, "default": p.default,
                   "source": p.source} for p in list_prices(name)]
        rows.append({"name": name, "architecture": spec.architecture, "memory_gib": round(spec.memory_gib, 3),
                     "bf16_tflops": spec.bf16_tflops, "fp16_tflops": spec.fp16_tflops,
                     "intra_node_link": spec.intra_node_link,
                     "intra_node_bandwidth_gbps": spec.intra_node_bandwidth_gbps,
                     "aliases": list(spec.aliases), "prices": prices, "source": spec.source})
    return JSONResponse({"gpus": rows})


@app.get("/healthz", summary="Liveness")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok", "version": __version__})


def _openapi() -> dict[str, Any]:
    """OpenAPI with the two body schemas registered as components (the routes parse bodies themselves)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    _, defs = models_json_schema(
        [(FlatBody, "validation"), (EstimateInput, "validation"), (SweepBody, "validation")],
        ref_template="#/components/schemas/{model}",
    )
    schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
    app.openapi_schema = schema
    return schema


app.openapi = _openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
install(app)  # the web page at /, /static and the offline /docs
