"""What a training config says, in our terms (``FromFile``), and how it becomes a Job and a Placement.

A reader fills ``values`` with knobs (the names of ``DEFAULTS``), ``sources`` with the file's key for each
knob it read, and leaves the keys it did not use in ``unused``: settings with no effect on memory or speed
(learning rate, data, logging). A knob no file sets takes ``DEFAULTS`` (ours) or the stack's documented
default, which the reader records with the source ``"<stack> default"``. Values of the wrong type are one
line naming the key and the format (``ConfigKeyError``, exit code 2 on the CLI).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoconf import defaults
from autoconf.catalog.catalogue import alias_index
from autoconf.errors import InvalidInputError
from autoconf.schema import DEFAULT_LORA_TARGETS, Job, Placement, field_metadata

# knob -> our default, used where neither the file nor a flag says
DEFAULTS: dict[str, Any] = {
    "method": defaults.METHOD, "dtype": defaults.DTYPE, "seq_len": defaults.TOKENS_PER_SAMPLE, "micro_batch": 1,
    "grad_accum": defaults.GRADIENT_ACCUMULATION_STEPS, "gpus_per_node": 1, "nodes": 1, "strategy": None,
    "offload": "none", "gradient_checkpointing": defaults.GRADIENT_CHECKPOINTING, "attention": defaults.ATTENTION,
    "lora_r": defaults.LORA_R, "lora_alpha": defaults.LORA_ALPHA, "lora_dropout": 0.0,
    "lora_target_modules": DEFAULT_LORA_TARGETS, "optimizer": defaults.OPTIMIZER, "tp": 1, "pp": 1,
}
# The Job fields a config may set, by their knob (schema Job metadata ``from``: the knob's name where it is not the
# field's); knobs that are Job fields as they are (None / absent = the framework profile decides); the knobs every
# answer reports: the Job's, then the launch's (GPUs, nodes, sharding, offload).
KNOB_OF = {name: name if knob is True else str(knob) for name, knob in field_metadata("from").items()}
JOB_KNOBS = tuple(name for name in Job.model_fields if KNOB_OF.get(name, name) == name and name != "model")
LAUNCH_KNOBS = ("gpus_per_node", "nodes", "strategy", "offload")
SHOWN = (*KNOB_OF.values(), *LAUNCH_KNOBS)
# Job / Placement field -> the knob it sets (REST and MCP bodies and sweep rows name fields, not knobs)
FIELD_KNOBS = {**KNOB_OF, "number_gpus": "gpus_per_node", "gpus_per_worker": "gpus_per_node", "strategy": "strategy",
               "offload": "offload"}
MAX_INT = 2**31 - 1  # far above any batch, length or GPU count; keeps arithmetic on the values small


class ConfigKeyError(InvalidInputError):
    """A key of a training config that cannot be used: one line naming the file, the format and the key."""

    def __init__(self, path: str, fmt: str, key: str, problem: str) -> None:
        super().__init__("--from", f"{path}: {fmt} key '{key}' {problem}")


@dataclass
class FromFile:
    """The knobs one or more files set, where each came from, and what in them has no effect."""

    format: str
    path: str
    framework: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def put(self, knob: str, value: object, key: str) -> None:
        if value is not None:
            self.values[knob], self.sources[knob] = value, key

    def report(self, overridden: set[str] | None = None) -> dict[str, Any]:
        """The machine-readable account: read (knob -> 'key = value'), defaulted, overridden, unused, notes."""
        given = overridden or set()
        read = {k: f"{self.sources[k]} = {_show(self.values[k])}" for k in SHOWN if k in self.values and k not in given}
        defaulted = [k for k in SHOWN if k not in self.values and k not in given]
        return {"format": self.format, "file": self.path, "framework": self.framework, "read": read,
                "defaulted": defaulted, "overridden_by_flags": sorted(given & set(SHOWN)),
                "no_effect": [str(k) for k in self.unused], "notes": self.notes}


def _show(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def catalogue_name(text: str) -> str:
    """A hub id as the catalogue knows it: itself if it is a name or alias, else its name without the
    organisation when that is one (mirrors such as NousResearch/Llama-3.2-1B), else unchanged."""
    index = alias_index()
    low = text.strip().lower()
    if low in index:
        return text.strip()
    bare = low.rsplit("/", 1)[-1]
    return index[bare] if "/" in low and bare in index else text.strip()


def take(rest: dict[str, Any], *keys: str) -> tuple[str, Any]:
    """The first of ``keys`` present in ``rest`` (removed from it), and its value; ('', None) if none is."""
    for key in keys:
        if key in rest:
            return key, rest.pop(key)
    return "", None


def read(found: FromFile, rest: dict[str, Any], field: str, convert: Callable[[FromFile, str, Any], Any],
         *keys: str) -> None:
    """Take the first of ``keys`` from ``rest``, convert its value and put it as ``field`` (named by that key)."""
    key, value = take(rest, *keys)
    found.put(field, convert(found, key, value), key)


def as_int(found: FromFile, key: str, value: object, low: int = 1) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigKeyError(found.path, found.format, key, f"must be an integer; got {value!r}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise ConfigKeyError(found.path, found.format, key, f"must be an integer; got {value!r}") from None
    if not math.isfinite(number) or number != int(number) or number < low or number > MAX_INT:
        raise ConfigKeyError(found.path, found.format, key, f"must be an integer >= {low}; got {value!r}")
    return int(number)


def as_float(found: FromFile, key: str, value: object) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigKeyError(found.path, found.format, key, f"must be a number; got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigKeyError(found.path, found.format, key, f"must be a finite number; got {value!r}")
    return number


def as_bool(found: FromFile, key: str, value: object) -> bool | None:
    """true/false in YAML, JSON, or the strings of a command line or a stringly JSON ("True", "auto" = true)."""
    if value is None or value == "" or isinstance(value, bool):
        return value if isinstance(value, bool) else None
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on", "auto"):
        return True
    if text in ("false", "0", "no", "off", "none"):
        return False
    raise ConfigKeyError(found.path, found.format, key, f"must be true or false; got {value!r}")


def as_names(found: FromFile, key: str, value: object) -> tuple[str, ...] | None:
    """Module names from a list, a comma-separated string, or all-linear spelled any of the stacks' ways."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        parts = [p.strip().strip("[]'\" ") for p in value.split(",")]
    elif isinstance(value, (list, tuple)):
        parts = [str(p).strip() for p in value]
    else:
        raise ConfigKeyError(found.path, found.format, key, f"must be a list of module names; got {value!r}")
    names = [p for p in parts if p]
    if any(n.lower() in ("all", "all-linear", "all_linear") for n in names):
        return ("all-linear",)
    return tuple(names)


OPTIMIZERS = {  # the HF `optim` names (and the stacks' spellings of the same) -> (optimizer, implementation)
    "adamw_torch": ("adamw", "foreach"), "adamw_hf": ("adamw", "for-loop"), "adamw_torch_fused": ("adamw", "fused"),
    "adamw": ("adamw", None), "adamw_8bit": ("adamw-8bit", None), "adamw_bnb_8bit": ("adamw-8bit", None),
    "paged_adamw_8bit": ("paged-adamw-8bit", None), "paged_adamw_32bit": ("paged-adamw", None),
    "paged_adamw": ("paged-adamw", None), "sgd": ("sgd", None), "adamw8bit": ("adamw-8bit", None),
    "pagedadamw8bit": ("paged-adamw-8bit", None), "pagedadamw": ("paged-adamw", None),
    "pagedadamw32bit": ("paged-adamw", None),
}


def set_optimizer(found: FromFile, key: str, value: object) -> None:
    if value is None or value == "":
        return
    name = str(value).rsplit(".", 1)[-1].lower()
    if name not in OPTIMIZERS:
        found.notes.append(f"{key} = {value}: not one of ours (adamw, adamw-8bit, paged-adamw[-8bit], sgd); "
                           "estimated as AdamW")
        name = "adamw"
    optimizer, impl = OPTIMIZERS[name]
    found.put("optimizer", optimizer, key)
    found.put("optimizer_impl", impl, key)


def build_inputs(found: FromFile | None, overrides: Mapping[str, Any], gpu_model: str) -> tuple[Job, Placement]:
    """Job and Placement from the file's knobs, with ``overrides`` (flags given beside --from) on top."""
    knobs = {**DEFAULTS, **(found.values if found else {}), **{k: v for k, v in overrides.items() if v is not None}}
    if "model" not in knobs:
        raise InvalidInputError("model", "the file names no model this reader maps to ours: give --model (or the "
                                "model field) beside it")
    tp, pp = int(knobs["tp"]), int(knobs["pp"])
    gpus = int(knobs["gpus_per_node"]) * int(knobs["nodes"])
    dp = max(gpus // (tp * pp), 1)
    job_fields = {k: knobs[k] for k in JOB_KNOBS if knobs.get(k) is not None}
    job = Job(model=knobs["model"], tokens_per_sample=knobs["seq_len"],
              batch_size=int(knobs["micro_batch"]) * dp * int(knobs["grad_accum"]),
              gradient_accumulation_steps=knobs["grad_accum"], **job_fields)
    placement = Placement(gpu_model=gpu_model, number_gpus=gpus, gpus_per_worker=min(int(knobs["gpus_per_node"]), 8),
                          strategy=knobs["strategy"], offload=knobs["offload"], tp=tp, pp=pp)
    return job, placement
