"""``resolve_model``: the one resolution every caller uses, in this order:

1. a catalogue name or alias (hub id and its common variants included, case-insensitive; the
   catalogue holds one revision per model, so ``revision`` applies to steps 3 and 4 only);
2. a local path: a config.json, or a directory holding one;
3. the local Hugging Face cache (``revision``: a branch, tag or commit; default main);
4. a download of config.json alone through huggingface_hub, when the network allows.

Nothing found: ModelNotAvailableError (an UnknownModelError) naming the id, the closest catalogue
names and the three local ways to supply the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from autoconf.catalog import hub
from autoconf.catalog.architecture import Architecture
from autoconf.catalog.catalogue import Entry, alias_index, entries, suggest
from autoconf.catalog.config_bounds import check_config
from autoconf.catalog.config_parse import parse_config
from autoconf.catalog.config_view import (
    CatalogueModelError,
    ConfigError,
    ModelNotAvailableError,
    read_json,
)
from autoconf.errors import InvalidInputError, UnverifiedModelError

HOW = ("catalogue", "local", "cache", "download")


@lru_cache(maxsize=512)
def catalogue_architecture(name: str) -> Architecture:
    """The Architecture of a catalogue name (approximate ones included, flagged); a model without a
    known architecture raises UnverifiedModelError."""
    entry = entries()[name]
    if entry.config is None:
        raise UnverifiedModelError(entry.name, entry.verification or "no config")
    extra = {} if "_autoconf" in entry.config else _csv_fields(entry)
    return parse_config(entry.config, entry.origin, name=entry.name, **extra)


def _csv_fields(entry: Entry) -> dict[str, object]:
    return {"hf_id": entry.hf_id, "aliases": entry.aliases, "source": entry.source,
            "verification": entry.verification, "notes": entry.notes}


@dataclass(frozen=True)
class Resolution:
    """An Architecture and where it came from: ``how`` is one of HOW, ``origin`` the file it was read from,
    ``config`` the config.json keys themselves (without ``_autoconf``; empty for a models.csv row), which
    a caller can hand to ``transformers.AutoConfig.for_model`` to build the same model."""

    architecture: Architecture
    how: str
    origin: str
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def resolve_model(name_or_path: str, revision: str | None = None) -> Resolution:
    """Resolve a model name, path or hub id to its Architecture (see the module docstring)."""
    text = str(name_or_path).strip()
    if text.lower() in alias_index():
        name = alias_index()[text.lower()]
        entry = entries()[name]
        raw = entry.config or {}
        config = {k: v for k, v in raw.items() if k != "_autoconf"} if "_autoconf" in raw else {}
        return Resolution(catalogue_architecture(name), "catalogue", entry.origin, config)
    local = _local_config(text)
    if local is not None:
        return _read(local, text, "local")
    if not hub.HUB_ID.match(text):
        raise CatalogueModelError(text, suggest(text))
    cached = hub.cached_config(text, revision)
    if cached is not None:
        return _read(cached, text, "cache")
    try:
        return _read(hub.download_config(text, revision), text, "download")
    except hub.HubUnavailable as why:
        raise ModelNotAvailableError(text, suggest(text), str(why)) from None


def _local_config(text: str) -> Path | None:
    """A config.json path for a file or a folder holding one; a missing *.json path is an error."""
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InvalidInputError("model", f"the folder {path} holds no config.json")
        return path / "config.json"
    if path.is_file():
        return path
    if text.endswith(".json"):
        raise InvalidInputError("model", f"config file not found: {path}")
    return None


def _read(path: Path, name: str, how: str) -> Resolution:
    source = {"local": "local config", "cache": "Hugging Face cache", "download": "downloaded config"}[how]
    try:
        data = read_json(path)
    except ConfigError:
        raise
    except ValueError:  # an integer over the interpreter's digit limit (json.loads refuses it)
        raise ConfigError(str(path), "holds a number too long to be a config value") from None
    check_config(data, str(path))  # hostile shapes (huge layer counts, odd types) before the parser
    arch = parse_config(data, str(path), name=name, source=f"{source} {path}")
    config = {k: v for k, v in data.items() if k != "_autoconf"} if isinstance(data, dict) else {}
    return Resolution(arch, how, str(path), config)
