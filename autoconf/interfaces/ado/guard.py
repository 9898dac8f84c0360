"""Type checks in front of ado's decorated experiments, so a wrong type is an answer, not a crash.

ado's ``custom_experiment`` decorator checks a call's values against the property domains before our
function body runs, and that check itself raises on some types (a 30-digit integer makes
``numpy.isnan`` raise TypeError; bytes or complex numbers fail pydantic inside ado). ado finds an
experiment as an attribute of its module, so ``prevalidated`` puts a wrapper in front of the
decorated function: values of the wrong type (strings for numbers, lists, NaN, huge integers) get
``can_recommend = 0`` / ``fits = 0`` and a reason naming the argument; values of the right type go
on to ado's domain check unchanged, except boolean words, which are read as every entry point reads them.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticCustomError

from autoconf.schema import Job, Placement, is_flag, read_flag

# Argument types, from the Job and Placement fields (their metadata, not a hand-kept list) and the
# experiments' own search settings.
_FIELDS = {**Job.model_fields, **Placement.model_fields}
INTEGERS = frozenset({"max_gpus", "gpus_per_node", "per_device_train_batch_size", "max_nodes",
                      *(n for n, f in _FIELDS.items() if f.annotation in (int, int | None))})
FLOATS = frozenset({"max_oom_risk", *(n for n, f in _FIELDS.items() if f.annotation in (float, float | None))})
BOOLEANS = frozenset({"strict", *(n for n, f in _FIELDS.items() if is_flag(f.annotation))})
MAX_INTEGER = 2**31 - 1  # every integer property's domain is far below this
MAX_TEXT = 256  # names: models, GPUs, methods, versions
MAX_CONFIG_TEXT = 1 << 20  # from_config: a training config's text (the readers refuse more)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _plain(value: Any) -> Any:
    """numpy scalars -> Python values (ado hands numbers over as numpy or float)."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (list, dict, str, bytes)) else value


def type_problem(name: str, value: Any) -> str | None:
    """Why ``value`` has the wrong type for argument ``name``, or None if its type is right."""
    value = _plain(value)
    if name in INTEGERS or name in FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name} must be a number; got {type(value).__name__} {_show(value)}"
        if abs(value) > MAX_INTEGER or not math.isfinite(value):  # abs() first: float(10**400) overflows
            return f"{name} must be a finite number below {MAX_INTEGER}; got {_show(value)}"
        if name in INTEGERS and value != int(value):
            return f"{name} must be a whole number; got {_show(value)}"
    elif name in BOOLEANS:
        try:
            read_flag(value)  # the words every entry point accepts (schema.TRUE_WORDS / FALSE_WORDS)
        except PydanticCustomError as exc:
            return f"{name} must be true or false: {exc.message()}"
    elif name == "from_config":  # a training config's text: many lines, up to the readers' size limit
        if not isinstance(value, str) or len(value) > MAX_CONFIG_TEXT:
            return f"from_config must be a config's text of at most {MAX_CONFIG_TEXT} characters; got {_show(value)}"
    elif not isinstance(value, str) or len(value) > MAX_TEXT:
        return f"{name} must be a name of at most {MAX_TEXT} characters; got {type(value).__name__} {_show(value)}"
    elif not value.isprintable():
        return f"{name} must be printable text; got {_show(value)}"
    return None


def prevalidated(decorated: Callable[..., dict[str, Any]], failure: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """``decorated`` behind a type check; a call with a wrong type answers ``failure`` plus the reason."""
    signature = inspect.signature(decorated)

    @functools.wraps(decorated)  # copies ado's attributes (_experiment, _is_custom_experiment, ...)
    def checked(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            return {**failure, "reason": f"arguments: {exc}"}
        for name, value in bound.arguments.items():
            problem = type_problem(name, value)
            if problem is not None:
                return {**failure, "reason": problem}
            if name in BOOLEANS:
                bound.arguments[name] = read_flag(_plain(value))  # 'yes', 'off', ... -> bool, as everywhere
        return decorated(*bound.args, **bound.kwargs)

    return checked
