"""Bounded request bodies for the REST API: size, JSON syntax, nesting, numbers, strings, server paths.

``parse_json`` turns raw bytes into a JSON value or a ``BodyError`` (HTTP 422, or 413 for size):
only finite floats (``NaN``, ``Infinity`` and ``1e999`` are refused), integers of at most
``MAX_INT_DIGITS`` digits, nesting at most ``MAX_DEPTH`` deep, strings without lone surrogates and
within ``STRING_LIMITS``. ``confine_paths`` then applies paths.py's policy to every field the server
would open (flat ``model``/``dataset_path``/``tokenizer_path``, nested ``fm.base_model_path`` and
``data.dataset``) and turns an uploaded config object into a private file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from autoconf.catalog import canonical_name, get_architecture, hub, parse_param_count
from autoconf.catalog.catalogue import alias_index
from autoconf.errors import AutoconfError, InvalidInputError
from autoconf.interfaces.api.inputs import check_one_shape
from autoconf.interfaces.api.paths import allow_hub, allowed_path, data_dir, looks_like_path
from autoconf.interfaces.api.uploads import CONFIG_HINT, store_config, uploaded_config

MAX_BODY_ENV = "AUTOCONF_API_MAX_BODY_BYTES"
MAX_BODY_BYTES = 1_000_000  # 1 MB: the largest legitimate body (64 configs, 10,000 short texts) is far smaller
MAX_DEPTH = 32  # the nested body is 4 levels deep; hf_training passthrough sections add a few
MAX_INT_DIGITS = 18  # every integer field is below 10**18 (Job and section bounds); int64 holds 18 digits
NAME_CHARS = 256  # model, GPU, estimator, provider, field names (issue 16: a model name is <= 256 characters)
PATH_CHARS = 4096  # paths (PATH_MAX) and other free text
KEY_CHARS = 256
STRING_LIMITS = {k: NAME_CHARS for k in ("model", "gpu_model", "gpuModel", "method", "technique", "dtype", "estimator",
                                         "model_version", "provider", "text_field", "dataset_text_field", "strategy",
                                         "attention", "optimizer", "torch_dtype")}
FREE_TEXT = ("texts",)  # uploaded dataset texts: bounded by the body size only


class BodyError(InvalidInputError):
    """A body refused before it is interpreted; ``status`` is the HTTP code (422, or 413 for size)."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(field, message)
        self.status = status


def max_body_bytes() -> int:
    raw = os.environ.get(MAX_BODY_ENV, "")
    return int(raw) if raw.isdigit() else MAX_BODY_BYTES


def _constant(name: str) -> Any:
    raise BodyError("body", f"numbers must be finite; got {name}")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError("body", f"numbers must be finite; got {text[:40]}")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BodyError("body", f"integers must have at most {MAX_INT_DIGITS} digits; got {len(text.lstrip('-'))}")
    return int(text)


def parse_json(raw: bytes) -> Any:
    """Bytes -> a JSON value within every bound above, or BodyError."""
    if len(raw) > max_body_bytes():
        raise BodyError("body", f"must be at most {max_body_bytes()} bytes; got {len(raw)}", status=413)
    try:
        value = json.loads(raw or b"null", parse_constant=_constant, parse_float=_float, parse_int=_int)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError("body", f"JSON must be nested at most {MAX_DEPTH} deep") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError("body", f"must be JSON: {type(exc).__name__} at position {getattr(exc, 'pos', '?')}") from None
    except ValueError as exc:  # int() over the interpreter's digit limit, and similar
        raise BodyError("body", f"must be JSON with bounded numbers ({exc.__class__.__name__})") from None
    check_tree(value)
    return value


def _check_string(text: str, where: list[Any], limit: int) -> None:
    if len(text) > limit:
        raise BodyError(".".join(map(str, where)) or "body", f"must be at most {limit} characters; got {len(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyError(".".join(map(str, where)) or "body", "must be valid Unicode (no lone surrogates)") from None


def check_tree(value: Any) -> None:
    """Depth, key and string bounds over a parsed JSON value (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, list[Any]]] = [(value, [])]
    while stack:
        item, where = stack.pop()
        if len(where) > MAX_DEPTH:
            raise BodyError("body", f"JSON must be nested at most {MAX_DEPTH} deep")
        if isinstance(item, str):
            key = next((p for p in reversed(where) if isinstance(p, str)), "")
            free = any(p in FREE_TEXT for p in where if isinstance(p, str))
            _check_string(item, where, STRING_LIMITS.get(key, PATH_CHARS) if not free else max_body_bytes())
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_string(key, [*where, "<key>"], KEY_CHARS)
                stack.append((child, [*where, key]))
        elif isinstance(item, list):
            stack.extend((child, [*where, i]) for i, child in enumerate(item))


def _config_path(path: Path | str, field: str) -> str:
    """Read a config once here, so that any problem with it is one message that quotes nothing from it."""
    try:
        get_architecture(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure to use a client's config is the client's 422
        raise InvalidInputError(field, f"{CONFIG_HINT} ({type(exc).__name__})") from None
    return str(path)


def _is_catalogued(text: str) -> bool:
    if text.lower() in alias_index():  # a plain lookup: canonical_name's miss ranks suggestions (slow)
        return True
    try:
        return parse_param_count(text) is not None
    except (AutoconfError, OverflowError, ValueError):
        return True  # a (bad) count: the estimators answer it with the field's message, without files


def _unknown(text: str, field: str, hint: str = "") -> AutoconfError:
    """The catalogue's unknown-model error (closest names), named by ``field``, with ``hint`` appended."""
    try:
        canonical_name(text)
        exc: AutoconfError = InvalidInputError(field, f"'{text}' is not a known model")
    except AutoconfError as found:
        exc = found
    exc.field = field
    exc.message += hint
    return exc


def _hub_model(text: str, field: str) -> str:
    """A hub id the operator allows (``serve --allow-hub``): its config.json fetched (bounded, one download
    per id at a time; this runs in a worker thread, never on the event loop) and checked; else refused."""
    if not allow_hub():
        raise _unknown(text, field, "; hub ids are downloaded only when the server runs with `serve --allow-hub`")
    try:
        hub.cached_config(text) or hub.download_config(text)
    except hub.HubUnavailable as why:
        raise InvalidInputError(field, f"'{text}' could not be fetched from the hub: {why}") from None
    except OSError as exc:
        raise InvalidInputError(field, f"'{text}' could not be cached ({exc.strerror or type(exc).__name__})") from None
    return _config_path(text, field)


def confine_model(value: Any, field: str) -> Any:
    """The one policy for a client's ``model`` (every route, /api/sweep included): catalogue names as they
    are; a config object checked, then stored (uploads.py); a path only under --data-dir (paths.py); a hub id
    only under ``serve --allow-hub``; anything else an unknown model. Nothing here stats a path outside
    --data-dir, so no answer tells whether such a path exists."""
    if isinstance(value, dict):
        return str(store_config(value, field, detailed=False)[0])
    if not isinstance(value, str) or _is_catalogued(value.strip()):
        return value
    text = value.strip()
    stored = uploaded_config(text)
    if stored is not None:
        return _config_path(stored, field)
    root = data_dir()
    if looks_like_path(text, (".json",)) or (root is not None and _under(root, text)):
        path = allowed_path(text, field)
        if path.stat().st_size > hub.MAX_CONFIG_BYTES:  # a config.json is kilobytes; a dataset may be 64 MiB
            raise InvalidInputError(field, f"a config.json must be at most {hub.MAX_CONFIG_BYTES} bytes")
        return _config_path(path, field)
    if hub.HUB_ID.match(text):
        return _hub_model(text, field)
    raise _unknown(text, field)


def _under(root: Path, text: str) -> bool:
    """Whether ``text`` names a file or folder under ``root`` (only ever asked inside the data directory)."""
    try:
        path = (root / text).resolve()
        return path.is_relative_to(root) and path.exists()
    except (OSError, RuntimeError, ValueError):
        return False


def _confine_file(section: dict[str, Any], key: str, field: str, always: bool) -> None:
    value = section.get(key)
    if isinstance(value, str) and (always or looks_like_path(value)):
        section[key] = str(allowed_path(value, field))


def confine_paths(body: Any) -> set[str]:
    """Rewrite every server path of ``body`` in place to its allowed, resolved form (or raise);
    returns the fields that name server files (their errors must not quote the files)."""
    named: set[str] = set()
    if not isinstance(body, dict):
        return named
    check_one_shape(body)  # a mixed body is refused as such, before any name in it is looked up
    configs = body.get("configs", body.get("job_configs"))
    if isinstance(configs, list):
        for i, config in enumerate(configs):
            fm, data = (config.get("fm"), config.get("data")) if isinstance(config, dict) else (None, None)
            if isinstance(fm, dict) and "base_model_path" in fm:
                fm["base_model_path"] = confine_model(fm["base_model_path"], f"configs.{i}.fm.base_model_path")
            if isinstance(data, dict) and data.get("dataset"):
                _confine_file(data, "dataset", f"configs.{i}.data.dataset", always=True)
                named.add("dataset")
        return named
    if "model" in body:
        body["model"] = confine_model(body["model"], "model")
    for key in ("dataset_path", "tokenizer_path"):
        if body.get(key) is not None:
            _confine_file(body, key, key, always=True)
            named.add(key)
    return named
