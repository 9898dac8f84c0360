"""The work of one POST, off the event loop: parse and bound the body, confine its paths, answer, render.

``answer(route, raw)`` never raises: every outcome is ``(status, JSON bytes)``, so it can run in a worker
thread or in a child process (exceptions with custom constructors do not cross a process boundary).
Every POST route comes through here (``/api/sweep`` and ``/api/config`` included), so the body bounds, the
file and hub policy (guard.py, paths.py) and the error mapping are the same everywhere. Requests for the
traced estimator run in pool.py's bounded process pool; everything else in the thread pool. No FastAPI here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from autoconf.errors import AutoconfError, InvalidInputError, NotBuiltError, UnknownNameError
from autoconf.interfaces.api.answers import recommend_for, results_for
from autoconf.interfaces.api.guard import BodyError, confine_paths, parse_json
from autoconf.interfaces.api.inputs import parse_body
from autoconf.interfaces.api.pagework import sweep_for, upload_for

log = logging.getLogger(__name__)
PARTS = {
    "memory": ("memory",),
    "time": ("throughput", "time"),
    "tokens": ("throughput", "tokens"),
    "cost": ("throughput", "time", "cost"),
    "estimate": ("memory", "throughput", "time", "cost", "tokens"),
}
FILE_FIELDS = {"path", "dataset", "text_field", "tokenizer", "dataset_path", "tokenizer_path"}
HEAVY_MARK = b'"traced"'  # a body naming the traced estimator anywhere goes to the process pool


def error_bytes(loc: list[Any], msg: str, kind: str, status: int = 422, **extra: Any) -> tuple[int, bytes]:
    return status, render({"detail": [{"loc": loc, "msg": msg, "type": kind, **extra}]})


def render(content: Any) -> bytes:
    """Starlette JSONResponse's encoding (compact, UTF-8, no NaN), so answers are byte-identical to before."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def autoconf_error(exc: AutoconfError, status: int = 422) -> tuple[int, bytes]:
    extra = {"suggestions": exc.suggestions} if isinstance(exc, UnknownNameError) else {}
    loc = [int(p) if p.isdigit() else p for p in exc.field.split(".")]
    return error_bytes(loc, exc.message, "autoconf_error", status, **extra)


def _quiet(exc: AutoconfError, named: set[str]) -> AutoconfError:
    """An error about a server file the client named, without anything read from the file."""
    where, _, last = exc.field.rpartition(".")
    if named and last in FILE_FIELDS:
        own = "tokenizer_path" if last.startswith("tokenizer") else "dataset_path"
        exc.field = f"{where}.data.dataset" if where else own  # nested: configs.<i>.data.dataset
        exc.message = ("could not be used as a dataset: it must be a UTF-8 JSONL, CSV or Parquet file of records "
                       "holding the text field (its content is not shown)")
    return exc


def _compute(route: str) -> Callable[[list[Any]], dict[str, Any]]:
    if route == "recommend":
        return recommend_for
    return lambda inputs: results_for(inputs, PARTS[route])


def _answer(route: str, raw: bytes) -> bytes:
    if route == "config":  # the body is the config.json itself: checked in full, then stored
        return render(upload_for(raw))
    body = parse_json(raw)
    named = confine_paths(body)
    try:
        result = sweep_for(body) if route == "sweep" else _compute(route)(parse_body(body))
    except AutoconfError as exc:
        raise _quiet(exc, named) from None
    try:
        return render(result)
    except ValueError as exc:  # a non-finite number in an answer: the input was extreme
        raise InvalidInputError("body", "could not be estimated: a result is not a finite number") from exc


def answer(route: str, raw: bytes) -> tuple[int, bytes]:
    """(HTTP status, JSON body) of one POST; input problems are 4xx with the field, never an exception."""
    try:
        return 200, _answer(route, raw)
    except BodyError as exc:
        return autoconf_error(exc, exc.status)
    except AutoconfError as exc:
        return autoconf_error(exc)
    except ValidationError as exc:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "value_error")}
                  for e in exc.errors()]
        return 422, render({"detail": detail})
    except NotBuiltError as exc:
        return error_bytes(["estimator"], str(exc), "not_built")
    except MemoryError:  # the traced process's memory limit (pool.py), or an extreme size
        return error_bytes(["body"], "could not be estimated within the server's memory limit", "memory_error")
    except (ArithmeticError, RecursionError) as exc:  # extreme but valid-looking numbers
        return error_bytes(["body"], f"could not be estimated ({type(exc).__name__})", "arithmetic_error")
    except OSError as exc:  # a name the file system refuses (too long, bad characters)
        return error_bytes(["body"], f"names a file that cannot be used ({exc.strerror or type(exc).__name__})",
                           "os_error")
    except Exception as exc:  # a bug: logged with its traceback, answered 422 so no input can make a 5xx
        log.exception("unexpected error answering /api/%s", route)
        return error_bytes(["body"], f"could not be answered ({type(exc).__name__}); the server logged it",
                           "internal_error")


def is_heavy(raw: bytes) -> bool:
    return HEAVY_MARK in raw
