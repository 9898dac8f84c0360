"""Reading a config.json: the typed errors for bad input, and a key reader that names what is missing.

Errors never echo a file's content: a malformed JSON names the path and the parser's line and
column, a missing key names the key, an unsupported model_type names the type and the families.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoconf.errors import AutoconfError, InvalidInputError, UnknownModelError

# Sizes of a text model a config.json gives (with their older names): whole numbers, or the arithmetic of
# parameter counts would take 64.5 or true (= 1) as a size.
SIZE_KEYS = frozenset({
    "hidden_size", "n_embd", "num_hidden_layers", "n_layer", "num_attention_heads", "n_head", "num_key_value_heads",
    "vocab_size", "intermediate_size", "n_inner", "head_dim", "kv_channels", "n_positions", "max_position_embeddings",
    "moe_intermediate_size", "num_experts_per_tok", "n_routed_experts", "num_local_experts", "num_experts",
    "shared_intermediate_size", "shared_expert_intermediate_size",
})


class ConfigError(InvalidInputError):
    """A config.json that cannot be read as a model architecture."""

    def __init__(self, origin: str, message: str) -> None:
        super().__init__("model", f"{origin}: {message}")
        self.origin = origin


class MissingConfigKeyError(ConfigError):
    def __init__(self, origin: str, key: str) -> None:
        super().__init__(origin, f"config is missing the required key '{key}'")
        self.key = key


class UnsupportedModelTypeError(ConfigError):
    def __init__(self, origin: str, model_type: str, supported: list[str]) -> None:
        super().__init__(origin, f"model_type must be one of {', '.join(supported)}; got '{model_type}'")
        self.model_type = model_type


class CatalogueModelError(UnknownModelError):
    """A name the catalogue does not know; ``suggestions`` are the closest catalogue names, ranked
    over every spelling the catalogue accepts (aliases and hub-id variants), not the names alone."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        super().__init__(name, [])
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        AutoconfError.__init__(self, "model", f"'{name}' is not a known model{hint} (list them with `autoconf-gpu catalog`)")
        self.suggestions = suggestions


class ModelNotAvailableError(CatalogueModelError):
    """Not catalogued, not a local path, not in the HF cache, and no download possible: one line
    naming the id, the closest catalogue names and the three local ways to supply the model."""

    def __init__(self, name: str, suggestions: list[str], why: str) -> None:
        super().__init__(name, suggestions)
        rest = self.message.split("is not a known model", 1)[1]
        AutoconfError.__init__(
            self, "model",
            f"'{name}' could not be fetched: {why}. It is not catalogued{rest}, not a local path and not in the "
            "Hugging Face cache; supply it as a catalogue name, as a path to its config.json (or the folder holding "
            "it), or through a local Hugging Face cache (HF_HUB_CACHE or HF_HOME)",
        )


def read_json(path: Path) -> object:
    """The parsed JSON of ``path``; errors name the path and the parser's position, never the text."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read ({type(exc).__name__})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ConfigError(str(path), "is nested too deeply to be a config.json") from None


class ConfigView:
    """Typed access to one config dict (or a sub-config), naming the origin in every error."""

    def __init__(self, data: Mapping[str, Any], origin: str) -> None:
        self.data, self.origin = data, origin

    def req(self, key: str, *aliases: str) -> Any:
        """A required key (or one of its older names); missing or null -> MissingConfigKeyError. A size
        (SIZE_KEYS) must be a positive whole number."""
        for name in (key, *aliases):
            if self.data.get(name) is not None:
                return self._size(name, self.data[name], low=1)
        raise MissingConfigKeyError(self.origin, key)

    def opt(self, key: str, default: Any = None) -> Any:
        """An optional key: absent -> ``default``; present (even null) -> its value (a size: a whole number >= 0)."""
        value = self.data.get(key, default)
        return value if value is None or key not in self.data else self._size(key, value, low=0)

    def _size(self, key: str, value: Any, low: int) -> Any:  # noqa: ANN401 - a JSON value
        """``value`` as an int if ``key`` is a size; a bool, a fraction, text or a number below ``low`` is an
        error naming the key (json gives 64.5 and true as a float and a bool, which int() would take)."""
        if key not in SIZE_KEYS:
            return value
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole or value < low:
            kind = "positive" if low else "non-negative"
            raise ConfigError(self.origin, f"'{key}' must be a {kind} whole number; got {json.dumps(value)[:40]}")
        return int(value)

    def sub(self, key: str) -> ConfigView:
        value = self.data.get(key)
        if value is None:
            return self
        if not isinstance(value, Mapping):
            raise ConfigError(self.origin, f"'{key}' must be a JSON object; got {type(value).__name__}")
        return ConfigView(value, f"{self.origin} [{key}]")
