"""User words: the one reading of on/off and choice words, whatever the entry point, and the model bases."""

from __future__ import annotations

import functools
import types
import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

# Pydantic's own lax booleans, written out so that a CSV cell, an ado property, a CLI word and a JSON
# string all mean the same thing; anything else is an error naming these words.
TRUE_WORDS = ("true", "yes", "on", "1", "t", "y")
FALSE_WORDS = ("false", "no", "off", "0", "f", "n")


def _word_error(message: str) -> PydanticCustomError:
    return PydanticCustomError("invalid_word", "{detail}", {"detail": message})


def read_flag(value: object) -> object:
    """A boolean from a user's word (TRUE_WORDS / FALSE_WORDS, any case), a bool or 0/1; else an error."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    word = value.strip().lower() if isinstance(value, str) else None
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise _word_error(f"must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)}; got {value!r}")


def _choices(annotation: object) -> tuple[str, ...] | None:
    """The accepted words of a Literal of strings (also inside ``X | None``), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [c for arg in typing.get_args(annotation) if (c := _choices(arg))]
        return found[0] if found else None
    if typing.get_origin(annotation) is Literal and all(isinstance(a, str) for a in typing.get_args(annotation)):
        return typing.get_args(annotation)
    return None


def not_none(annotation: object) -> object:
    """``X`` of ``X | None`` (an optional field's type); the annotation itself otherwise."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def is_flag(annotation: object) -> bool:
    """True for a boolean field (``bool`` or ``bool | None``)."""
    return annotation is bool or annotation == bool | None


@functools.lru_cache(maxsize=256)
def _kind(annotation: object) -> bool | tuple[str, ...] | None:
    """True for a boolean field, its words for a choice field, None for any other (cached per annotation)."""
    return True if is_flag(annotation) else _choices(annotation)


def read_word(annotation: object, value: object) -> object:
    """``value`` as the field of type ``annotation`` reads it: booleans and choices by the tables above."""
    kind = _kind(annotation)
    if kind is True:
        return read_flag(value)
    if isinstance(kind, tuple) and isinstance(value, str):
        word = value.strip().lower()
        if word not in kind:
            raise _word_error(f"must be one of {', '.join(kind)}; got {value!r}")
        return word
    return value


class Words(BaseModel):
    """Base of every model that reads a user's words: booleans and choices through ``read_word``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @field_validator("*", mode="before")
    @classmethod
    def _read_words(cls, value: object, info: ValidationInfo) -> object:
        field = cls.__pydantic_fields__.get(info.field_name or "")
        return value if field is None else read_word(field.annotation, value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class _Input(Words):
    """A user's input (Job, Placement): strict, frozen, words read by ``read_word``."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())
