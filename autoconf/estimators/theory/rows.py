"""Job and Placement fields as columns: the theory formulas run on one ``Job`` or on many rows with the same code.

Every formula of the theory takes a job and a placement. A ``Job``/``Placement`` is one row (its fields are Python
scalars); ``JobColumns``/``PlacementColumns`` hold the same fields as numpy arrays, one entry per row of a batch that
shares an architecture. The helpers below (``where``, ``is_in``, ``minimum``, ...) are what the formulas use for a
branch on a job or placement field: plain Python for one row (so a single estimate does the very same float
operations as before), numpy masks for columns. Framework profiles are resolved once per distinct framework and
spread into columns (``ResolvedColumns``); per-row Python never runs in a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoconf.defaults import GPUS_PER_NODE
from autoconf.estimators.theory.frameworks import PROFILES, Resolved, resolve
from autoconf.schema import Job, Placement

# A float for one Job/Placement, or a float array with one entry per row of a batch (numpy broadcasts both ways).
Num = Any
Flag = Any  # a bool for one row, a bool array for a batch


def where(cond: Flag, a: Num, b: Num) -> Num:
    """``a if cond else b`` for one row; np.where over rows."""
    if isinstance(cond, bool | np.bool_):
        return a if cond else b
    return np.where(cond, a, b)


def not_(flag: Flag) -> Flag:
    return not flag if isinstance(flag, bool | np.bool_) else ~flag


def is_in(value: Any, choices: Sequence[Any]) -> Flag:  # noqa: ANN401 - a field: a scalar or a column
    """``value in choices`` for one row; a mask over rows."""
    if not isinstance(value, np.ndarray):
        return value in choices
    mask = np.zeros(value.shape, dtype=bool)
    for c in choices:
        mask |= value == c
    return mask


def minimum(a: Num, b: Num) -> Num:
    return min(a, b) if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray) else np.minimum(a, b)


def maximum(a: Num, b: Num) -> Num:
    return max(a, b) if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray) else np.maximum(a, b)


def lookup(value: Any, table: Mapping[Any, float]) -> Num:  # noqa: ANN401
    """``table[value]`` for one row; per row from the distinct values of a column."""
    if not isinstance(value, np.ndarray):
        return table[value]
    keys, inverse = np.unique(value, return_inverse=True)
    return np.array([table[k] for k in keys.tolist()], dtype=float)[inverse]


def per_value(value: Any, fn: Callable[[Any], float]) -> Num:  # noqa: ANN401
    """``fn(value)`` for one row; ``fn`` once per distinct value of a column (e.g. LoRA targets, image sizes)."""
    if isinstance(value, Codes):
        return np.array([fn(v) for v in value.table], dtype=float)[value.codes]
    if not isinstance(value, np.ndarray):
        return fn(value)
    keys, inverse = np.unique(value, return_inverse=True)
    return np.array([fn(k) for k in keys.tolist()], dtype=float)[inverse]


@dataclass(frozen=True)
class Codes:
    """A column of hashable values (LoRA target tuples): distinct values and each row's index into them."""

    table: tuple[Any, ...]
    codes: np.ndarray

    @classmethod
    def of(cls, values: Sequence[Any]) -> Codes:
        index: dict[Any, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
        return cls(tuple(index), codes)

    def take(self, rows: np.ndarray) -> Codes:
        return Codes(self.table, self.codes[rows])


class ProfileColumns:
    """The memory-relevant parts of each row's framework profile (frameworks.Profile) as columns."""

    def __init__(self, names: np.ndarray) -> None:
        profiles = [PROFILES[str(n)] for n in names.tolist()]
        self.full_copy_on_gpu = np.array([p.full_copy_on_gpu for p in profiles], dtype=bool)
        self.quant_saves_input = np.array([p.quant_saves_input for p in profiles], dtype=bool)
        self.kbit_upcast = np.array([p.kbit_upcast for p in profiles], dtype=bool)
        self.fused_ce_bytes_per_vocab = np.array([p.fused_ce_bytes_per_vocab or 0 for p in profiles], dtype=float)
        self.loss_segment_bytes_per_vocab = np.array([p.loss_segment_bytes_per_vocab for p in profiles], dtype=float)
        self.has_fit = np.array([p.device_fit is not None for p in profiles], dtype=bool)
        fits = [p.device_fit for p in profiles]
        self.fit_context = np.array([f.context_bytes if f else 0.0 for f in fits])
        self.fit_nccl = np.array([f.nccl_bytes if f else 0.0 for f in fits])
        self.fit_fragmentation = np.array([f.fragmentation if f else 0.0 for f in fits])


class ResolvedColumns:
    """frameworks.resolve over rows: the Job's explicit settings, else its framework's (one entry per row)."""

    efficient_loading: np.ndarray
    double_quant: np.ndarray
    quantize_lm_head: np.ndarray
    optimizer_in_backward: np.ndarray
    activation_offloading: np.ndarray
    expandable_segments: np.ndarray

    def __init__(self, frameworks: np.ndarray, explicit: dict[str, np.ndarray]) -> None:
        keys, inverse = np.unique(frameworks, return_inverse=True)
        self.profile = ProfileColumns(keys)
        for name in ("full_copy_on_gpu", "quant_saves_input", "kbit_upcast", "fused_ce_bytes_per_vocab",
                     "loss_segment_bytes_per_vocab", "has_fit", "fit_context", "fit_nccl", "fit_fragmentation"):
            setattr(self.profile, name, getattr(self.profile, name)[inverse])
        for name, given in explicit.items():  # NaN = not set: the profile's value
            default = np.array([getattr(PROFILES[str(k)], name) for k in keys.tolist()], dtype=bool)[inverse]
            setattr(self, name, np.where(np.isnan(given), default, given > 0))
        self.adapter_bytes = np.array([PROFILES[str(k)].adapter_bytes for k in keys.tolist()], dtype=float)[inverse]


OVERRIDES = ("efficient_loading", "double_quant", "quantize_lm_head", "optimizer_in_backward",
             "activation_offloading", "expandable_segments")
_OVERRIDE_FIELDS = dict(zip(OVERRIDES, ("fsdp_cpu_ram_efficient_loading", "double_quant", "quantize_lm_head",
                                        "optimizer_in_backward", "activation_offloading", "expandable_segments"),
                            strict=True))
_TEXT = ("method", "dtype", "framework", "optimizer", "optimizer_state_dtype", "optimizer_impl", "attention")
_INT = ("tokens_per_sample", "batch_size", "gradient_accumulation_steps", "lora_r", "images_per_sample",
        "sequence_parallel")
_BOOL = ("gradient_checkpointing", "fused_loss", "packing", "samples_vary_in_length", "freeze_vision",
         "freeze_projector", "dora")


class JobColumns:
    """The Job fields the theory reads, one numpy entry per row (``image_resolution`` 0 = the model's default)."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.size = len(jobs)
        for name in _TEXT:
            setattr(self, name, np.array([getattr(j, name) for j in jobs], dtype=str))
        for name in _INT:
            setattr(self, name, np.array([getattr(j, name) for j in jobs], dtype=np.int64))
        for name in _BOOL:
            setattr(self, name, np.array([getattr(j, name) for j in jobs], dtype=bool))
        self.lora_dropout = np.array([j.lora_dropout for j in jobs], dtype=float)
        self.image_resolution = np.array([j.image_resolution or 0 for j in jobs], dtype=np.int64)
        self.effective_loss_kernel = np.array([j.effective_loss_kernel for j in jobs], dtype=str)
        self.lora_target_modules = Codes.of([j.lora_target_modules for j in jobs])
        explicit = {k: np.array([np.nan if (v := getattr(j, f)) is None else float(v) for j in jobs])
                    for k, f in _OVERRIDE_FIELDS.items()}
        self.settings = ResolvedColumns(self.framework, explicit)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the columns set in __init__ (for mypy)
        raise AttributeError(name)

    def take(self, rows: np.ndarray) -> JobColumns:
        """The columns of the selected rows (``rows``: indices)."""
        out = object.__new__(JobColumns)
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray | Codes):
                setattr(out, name, value.take(rows) if isinstance(value, Codes) else value[rows])
        settings = object.__new__(ResolvedColumns)
        for name, value in self.settings.__dict__.items():
            setattr(settings, name, value[rows] if isinstance(value, np.ndarray) else value)
        profile = object.__new__(ProfileColumns)
        for name, value in self.settings.profile.__dict__.items():
            setattr(profile, name, value[rows])
        settings.profile = profile
        out.settings = settings
        out.size = len(rows)
        return out


class PlacementColumns:
    """The Placement fields the theory reads, one numpy entry per row (``gpus_per_worker`` 0 = the default)."""

    def __init__(self, places: Sequence[Placement]) -> None:
        self.number_gpus = np.array([p.number_gpus for p in places], dtype=np.int64)
        self.gpus_per_worker = np.array([p.gpus_per_worker or 0 for p in places], dtype=np.int64)
        self.tp = np.array([p.tp for p in places], dtype=np.int64)
        self.pp = np.array([p.pp for p in places], dtype=np.int64)
        self.offload = np.array([p.offload for p in places], dtype=str)
        self.effective_strategy = np.array([p.effective_strategy for p in places], dtype=str)
        self.dp = self.number_gpus // (self.tp * self.pp)

    def take(self, rows: np.ndarray) -> PlacementColumns:
        out = object.__new__(PlacementColumns)
        for name, value in self.__dict__.items():
            setattr(out, name, value[rows])
        return out


AnyJob = Job | JobColumns
AnyPlacement = Placement | PlacementColumns


def settings_of(job: AnyJob) -> Resolved | ResolvedColumns:
    """The resolved framework settings of one Job, or the columns of a batch."""
    return resolve(job) if isinstance(job, Job) else job.settings


def node_size(placement: AnyPlacement) -> Num:
    """GPUs per worker: the Placement's, else min(number_gpus, GPUS_PER_NODE)."""
    if isinstance(placement, Placement):
        return placement.gpus_per_worker or min(placement.number_gpus, GPUS_PER_NODE)
    return np.where(placement.gpus_per_worker > 0, placement.gpus_per_worker,
                    np.minimum(placement.number_gpus, GPUS_PER_NODE))
