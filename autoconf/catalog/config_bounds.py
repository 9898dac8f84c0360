"""Bounds a config.json must meet before the parser reads it (issue 27): hostile shapes as one typed error.

The parser builds per-layer tuples and hashes ``model_type``, so a config with ``num_hidden_layers: 10**14``
exhausts memory and a list-valued ``model_type`` raises TypeError deep inside. ``check_config`` walks the
parsed JSON once, iteratively, and refuses:

- nesting deeper than ``MAX_DEPTH`` (a real config nests text_config / vision_config / rope_scaling: 3-4);
- an integer of more than ``MAX_INT_DIGITS`` digits (every size key of a real model is below 10**12);
- a layer or expert count above ``MAX_LAYERS`` (the deepest published LLMs have a few hundred layers;
  Llama-3.1-405B has 126, DeepSeek-V3 61, and MoE models at most a few hundred routed experts);
- NaN and Infinity (Python's json reads them; JSON has neither);
- a ``model_type`` that is not a string, an ``_autoconf`` block that is not an object, and strings that
  hold lone surrogates (they cannot be written as UTF-8).

Errors are ConfigError (a 422 / exit 2 naming the key), never quoting a value read from the file.
"""

from __future__ import annotations

import math
from typing import Any

from autoconf.catalog.config_view import ConfigError

MAX_DEPTH = 16
MAX_INT_DIGITS = 15  # 10**15 parameters is the catalogue's own upper bound on a model's size
MAX_LAYERS = 4096  # bounds per-layer tuples; 30x the deepest published LLM (see the docstring)
COUNT_KEYS = frozenset({"num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_local_experts",
                        "n_routed_experts", "num_experts", "moe_num_experts", "first_k_dense_replace"})


def _where(path: list[Any]) -> str:
    return ".".join(str(p) for p in path) or "config"


def _check_leaf(item: Any, path: list[Any], origin: str) -> None:
    if isinstance(item, bool):
        return
    if isinstance(item, int):
        if abs(item) >= 10**MAX_INT_DIGITS:
            raise ConfigError(origin, f"{_where(path)} must be an integer of at most {MAX_INT_DIGITS} digits")
        key = path[-1] if path else ""
        if key in COUNT_KEYS and not 0 <= item <= MAX_LAYERS:
            raise ConfigError(origin, f"{_where(path)} must be from 0 to {MAX_LAYERS}; got {item}")
    elif isinstance(item, float) and not math.isfinite(item):
        raise ConfigError(origin, f"{_where(path)} must be a finite number (JSON has no NaN or Infinity)")
    elif isinstance(item, str):
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(origin, f"{_where(path)} must be valid Unicode (no lone surrogates)") from None


def check_config(data: object, origin: str) -> None:
    """Raise ConfigError if ``data`` (a parsed config.json) breaks a bound above; a non-object passes
    through (the parser names that itself)."""
    if not isinstance(data, dict):
        return
    if "model_type" in data and not isinstance(data["model_type"], str):
        raise ConfigError(origin, f"model_type must be a string; got a {type(data['model_type']).__name__}")
    if "_autoconf" in data and not isinstance(data["_autoconf"], dict):
        raise ConfigError(origin, "_autoconf must be an object")
    aliases = data.get("_autoconf", {}).get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(origin, "_autoconf.aliases must be a list of strings")
    stack: list[tuple[Any, list[Any]]] = [(data, [])]
    while stack:
        item, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise ConfigError(origin, f"is nested more than {MAX_DEPTH} deep; a config.json nests a few levels")
        if isinstance(item, dict):
            for key, child in item.items():
                _check_leaf(key, [*path, "<key>"], origin)
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))
        else:
            _check_leaf(item, path, origin)
