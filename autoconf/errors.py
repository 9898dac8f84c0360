"""Typed errors raised by library code; only the CLI's main() and the REST handlers convert them.

One message template: ``<field> must be <accepted>; got <value>`` (plus the closest known names
for unknown models and GPUs), so every interface can show the same one-line answer.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from pydantic import ValidationError


class AutoconfError(ValueError):
    """Base class: a user-facing problem with the input, never a bug."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidInputError(AutoconfError):
    """A value is out of its accepted range or set."""


class UnknownNameError(AutoconfError):
    """A model or GPU name the catalogue does not know."""

    def __init__(self, field: str, name: str, known: Iterable[str], what: str) -> None:
        known = sorted(set(known))
        close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=5, cutoff=0.4)
        by_lower = {k.lower(): k for k in known}
        suggestions = [by_lower[c] for c in close]
        hint = f"; closest: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(field, f"'{name}' is not a known {what}{hint} (list them with `autoconf-gpu catalog`)")
        self.name = name
        self.suggestions = suggestions


class UnknownModelError(UnknownNameError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__("model", name, known, "model")


class UnknownGPUError(UnknownNameError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__("gpu_model", name, known, "GPU")


class UnverifiedModelError(AutoconfError):
    """The model is catalogued but its architecture is not verified: we do not guess."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__("model", f"'{name}' is catalogued but its architecture is unverified ({why}); "
                         "pass a local config.json or a parameter count instead")


class NotBuiltError(RuntimeError):
    """A learned model version is missing or cannot be loaded; the message names the fix."""


def describe(exc: Exception, with_input: bool = True) -> str:
    """One line for a rejected input: the typed error's text, or the first pydantic error as
    'field: message' (plus '(got value)' when ``with_input``)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "input"
    text = f"{field}: {err['msg']}"
    quoted = err.get("type") == "invalid_word"  # schema.read_word's messages already say what was given
    return f"{text} (got {err.get('input')!r})" if with_input and not quoted else text
