"""The page's job form, generated from the fields' metadata (``GET /api/form``; no FastAPI here).

Every Job and Placement field and the request options the page offers (``OPTIONS``) become one control, in field
order, grouped as the CLI groups the Job's flags (the field's ``group`` metadata, else the training stack's; the
Placement's fields under "placement", the options under "answer"). A control is read from the field's type:
choices -> a select, ``bool`` -> a checkbox (sent only when it differs from the default), ``bool | None`` -> a
select of default / on / off (None: the framework profile decides), numbers -> a number input with the field's
bounds and step, a tuple of words -> a comma-separated list; its label is the field's name, its help the field's
description, its unit the field's ``unit`` metadata; ``part`` says whose field it is (job, placement, option).
The page (static/app.js) builds the form from this list alone, so a new Job field appears on the page with no
page edit. What is the page's own choice, not the fields' (the few fields shown above "Advanced", the page's
starting values, the catalogue lists) is in the tables below.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from autoconf.interfaces.api.inputs import RequestOptions
from autoconf.schema import Job, Placement, is_flag, not_none
from autoconf.schema.words import _choices

# The request options the page offers (the others need server files or texts: the REST body has them).
OPTIONS = ("estimator", "num_samples", "epochs", "num_checkpoints", "price_per_gpu_hour_usd", "provider",
           "max_gpus", "gpus_per_node", "max_oom_risk")
MAIN = ("model", "gpu_model", "method", "number_gpus", "tokens_per_sample", "batch_size")  # above "Advanced"
GROUP_ORDER = ("training stack", "placement", "answer")  # the Job's own groups go after the training stack's
START = {"model": "llama3.1-8b", "method": "lora", "number_gpus": "recommend", "num_samples": 10000}
SOURCES = {"model": ("text", "models"), "gpu_model": ("select", "gpus")}  # filled from /api/models, /api/gpus
WORDS = {"number_gpus": ["recommend", 1, 2, 4, 8, 16]}  # a number or a word: a text input with these suggestions
WORD_HELP = {"number_gpus": "A number, or 'recommend': the fewest GPUs that fit."}
LABELS = {"gpu_model": "GPU", "number_gpus": "GPUs", "dtype": "precision", "strategy": "sharding",
          "offload": "CPU offload", "tp": "tensor parallel", "pp": "pipeline parallel", "lora_r": "LoRA rank",
          "price_per_gpu_hour_usd": "USD per GPU-hour"}
UNITS = {"num_samples": "samples", "price_per_gpu_hour_usd": "USD", "max_gpus": "GPUs", "gpus_per_node": "GPUs",
         "max_oom_risk": "probability"}  # units of the request options (the Job's and Placement's: metadata)


# (bound, constraint attribute, step to the nearest allowed integer): pydantic's ge / gt / le / lt constraints
BOUNDS = (("min", "ge", 0), ("min", "gt", 1), ("max", "le", 0), ("max", "lt", -1))


def _bounds(info: FieldInfo) -> dict[str, float]:
    """min / max of a number field from its constraints (a strict bound of an integer is the next integer)."""
    out: dict[str, float] = {}
    whole = not_none(info.annotation) is int
    for constraint in info.metadata:
        for bound, attribute, step in BOUNDS:
            value = getattr(constraint, attribute, None)
            if value is not None:
                out[bound] = float(value) + (step if whole else 0)
    return {k: int(v) if v.is_integer() else v for k, v in out.items()}


def _control(name: str, info: FieldInfo) -> dict[str, Any]:
    """How the page shows the field: control, choices or bounds."""
    annotation, default = info.annotation, info.default
    words = _choices(annotation)
    if name in WORDS:
        return {"control": "text", "suggestions": WORDS[name]}
    if name in SOURCES:
        return {"control": SOURCES[name][0], "source": SOURCES[name][1], "choices": []}
    if is_flag(annotation):
        return {"control": "checkbox" if isinstance(default, bool) else "tristate"}
    if words:
        return {"control": "select", "choices": list(words)}
    kind = not_none(annotation)
    if kind in (int, float):
        return {"control": "number", "step": 1 if kind is int else "any", **_bounds(info)}
    if typing.get_origin(kind) is tuple:
        return {"control": "list"}
    return {"control": "text"}


def _spec(name: str, info: FieldInfo, part: str, group: str) -> dict[str, Any]:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    default = None if info.default is PydanticUndefined else info.default
    text = " ".join(filter(None, [info.description, WORD_HELP.get(name)]))
    label = LABELS.get(name, name.replace("_", " "))
    unit = str(extra.get("unit", UNITS.get(name, "")))
    spec = {"name": name, "part": part, "label": label, "help": text,
            "unit": unit, "group": str(extra.get("group", group)),
            "main": name in MAIN, "required": info.is_required(),
            "default": list(default) if isinstance(default, tuple) else default, **_control(name, info)}
    if name in START:
        spec["start"] = START[name]
    return spec


def form_fields() -> list[dict[str, Any]]:
    """The page's form: one entry per offered field, the main ones first, then by group in field order."""
    found = [_spec(n, i, "job", "training stack") for n, i in Job.model_fields.items()]
    found += [_spec(n, i, "placement", "placement") for n, i in Placement.model_fields.items()]
    found += [_spec(n, RequestOptions.model_fields[n], "option", "answer") for n in OPTIONS]
    own = [s["group"] for s in found if s["group"] not in GROUP_ORDER]  # the Job's groups (VISION, ...)
    order = list(dict.fromkeys([GROUP_ORDER[0], *own, *GROUP_ORDER[1:]]))
    main = sorted((s for s in found if s["main"]), key=lambda s: MAIN.index(s["name"]))
    return main + sorted((s for s in found if not s["main"]), key=lambda s: order.index(s["group"]))

