"""The MCP tools, on the ``mcp`` SDK's MCPServer (an optional extra: ``pip install autoconf-gpu[mcp]``).

Each tool takes ``request``: the REST API's flat body (``FlatBody``: every Job and Placement field and the
request options, ``from_config`` with a training config's text included), with every field optional so that
a config alone can name the job. Answers are the REST API's JSON (estimate, recommend) and ``autoconf-gpu
check --json``'s object (check). Bad input is a tool error naming the field, as a 422 would. Server-side
files (``dataset_path``, ``tokenizer_path``) are not offered: an agent passes ``texts`` or ``num_samples``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, create_model

from autoconf.catalog import get_architecture, get_gpu, list_gpus, list_models
from autoconf.estimators.contract import get_estimator
from autoconf.interfaces.api.answers import recommend_for, results_for
from autoconf.interfaces.api.inputs import FlatBody, parse_body
from autoconf.interfaces.api.work import PARTS
from autoconf.interfaces.cli import user_error
from autoconf.interfaces.cli.check import answer as check_answer

SERVER_FILES = ("dataset_path", "tokenizer_path")  # the server's own files: not for an agent to name
CATALOG_LIMIT = 200
Request = create_model(  # type: ignore[call-overload]  # pydantic's overloads cannot type **field definitions
    "Request",
    __config__=ConfigDict(extra="forbid", protected_namespaces=()),
    __doc__="The REST API's flat body (FlatBody) with every field optional: a from_config alone can name the job.",
    **{name: (Optional[info.annotation], Field(None, description=info.description))  # noqa: UP045
       for name, info in FlatBody.model_fields.items() if name not in SERVER_FILES},
)


def _body(request: Any) -> dict[str, Any]:  # noqa: ANN401 - the dynamic Request model
    return {k: v for k, v in request.model_dump(exclude_none=True).items()}


def estimate(request: Request) -> dict[str, Any]:
    """Per-GPU memory by component, fit and OOM risk, tokens/s, time and cost of a fine-tuning job (as POST
    /api/estimate). Give the job's fields, or from_config with your training config's text."""
    return results_for(parse_body(_body(request)), PARTS["estimate"])


def recommend(request: Request) -> dict[str, Any]:
    """The placement an objective picks (fewest GPUs by default; as POST /api/recommend)."""
    return recommend_for(parse_body(_body(request)))


def check(request: Request) -> dict[str, Any]:
    """Guard a launch: does the job fit number_gpus × gpu_model with oom_risk <= max_oom_risk? If not, the fewest
    GPUs that would fit and the largest micro-batch that fits (as `autoconf-gpu check --json`)."""
    item = parse_body(_body(request))[0]
    estimator = get_estimator(item.options.estimator or "hybrid", item.options.model_version)
    out = check_answer(estimator, item.job, item.placement, item.options.max_oom_risk, item.options.max_gpus)
    return {**out, "notes": item.notes}


def catalog(kind: Literal["models", "gpus"] = "models", contains: str = "") -> dict[str, Any]:
    """Catalogued models (answerable ones) or GPUs, optionally those whose name contains a text."""
    needle = contains.lower()
    if kind == "gpus":
        rows = [{"name": n, "memory_gib": round(get_gpu(n).memory_gib, 3), "bf16_tflops": get_gpu(n).bf16_tflops,
                 "aliases": list(get_gpu(n).aliases)} for n in list_gpus() if needle in n.lower()]
    else:
        rows = []
        for name in list_models(answerable_only=True):
            if needle in name.lower():
                arch = get_architecture(name)
                rows.append({"name": name, "total_params": arch.total_params, "aliases": list(arch.aliases)})
    return {kind: rows[:CATALOG_LIMIT], "count": len(rows)}


TOOLS = (estimate, recommend, check, catalog)


def _one_line_errors(tool: Callable[..., dict[str, Any]], error: type[Exception]) -> Callable[..., dict[str, Any]]:
    """The tool, with bad input reported as the SDK's tool error in one line naming the field (as a 422)."""

    @functools.wraps(tool)
    def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401
        try:
            return tool(*args, **kwargs)
        except Exception as exc:
            message = user_error(exc)
            if message is None:
                raise
            raise error(message) from None

    return wrapped


def build_server() -> Any:  # noqa: ANN401 - the SDK's server type (optional dependency)
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        from autoconf.errors import InvalidInputError

        raise InvalidInputError("mcp", "the MCP SDK is not installed: pip install 'autoconf-gpu[mcp]'") from None
    server = MCPServer("autoconf-gpu", instructions="Will an LLM fine-tuning job fit, on how many GPUs, how fast? "
                       "Pass your training config's text as request.from_config, or the job's fields.")
    for tool in TOOLS:
        server.tool()(_one_line_errors(tool, ToolError))
    return server


def serve_stdio() -> None:
    build_server().run("stdio")
