"""The web page at ``/`` and an offline ``/docs`` (issue 15), served by the REST API's own app and port.

``install(app)`` adds: ``/`` (static/index.html: form, answer, comparison and sweep views; plain HTML, CSS and
JavaScript, no CDN; app.js builds the job form from ``/api/form``, form.py), ``/api/form``, ``/static/*`` and
``/docs``: Swagger UI from the JavaScript and CSS that the ``fastapi-offline`` package ships (Swagger UI 5, which
reads OpenAPI 3.1), or, where that package is missing, static/docs.html, a plain list of the routes read from
``/openapi.json``. No page asset is fetched from outside the server. The page's own
POST routes (``/api/sweep``, ``/api/config``) are registered in app.py like every other POST, so that they pass
through the same body bounds, file policy and error handling (work.py).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from autoconf.interfaces.api.form import form_fields

STATIC = Path(__file__).parent / "static"

router = APIRouter()
FORM = form_fields()  # the fields' metadata does not change while the server runs


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/api/form", summary="The page's job form, generated from the Job, Placement and option fields")
async def form() -> dict[str, Any]:
    """Each offered field: name, label, control (select, checkbox, tristate, number, list, text), choices, bounds,
    step, unit, help, default, group and whether it is shown above "Advanced" (form.py)."""
    return {"fields": FORM}


def _swagger_assets() -> Path | None:
    """Folder of fastapi-offline's bundled Swagger UI, or None where that package is not installed."""
    try:
        folder = Path(str(importlib.resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install(app: FastAPI) -> None:
    """Add the page, its assets and the offline /docs to ``app``."""
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
