"""Job and Placement fields as columns: the theory formulas run on one ``Job`` or on many rows with the same code.

Every formula of the theory takes a job and a placement. A ``Job``/``Placement`` is one row (its fields are Python
scalars); ``JobColumns``/``PlacementColumns`` hold the same fields as numpy arrays, one entry per row of a batch that
shares an architecture. The helpers (``where``, ``is_in``, ``minimum``, ...; rowwise.py) are what the formulas use
for a branch on a job or placement field: plain Python for one ``Job`` (the form the scalar callers use: the
VRAM-budget dialect, the traced estimator, the planners), numpy masks for columns. ``memory.estimate_memory`` itself
is a batch of one row. Framework profiles are resolved once per distinct framework and spread into columns
(``ResolvedColumns``); no formula runs Python per row of a batch.

This module holds the Job columns; the Placement columns are placement_columns.py's. Callers import all of these
names from here (``__all__``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autoconf.defaults import FRAMEWORK_LOSS_KERNEL
from autoconf.estimators.theory.frameworks import PROFILES, Resolved, resolve
from autoconf.estimators.theory.placement_columns import (
    STRATEGY_NAMES,
    AnyPlacement,
    PlacementColumns,
    node_size,
    strategy_in,
)
from autoconf.estimators.theory.rowwise import (
    Codes,
    Flag,
    FlatColumns,
    Num,
    Table,
    is_in,
    lookup,
    maximum,
    minimum,
    not_,
    per_value,
    where,
)
from autoconf.schema import Job

__all__ = [  # the names callers import from here (several live in rowwise.py and placement_columns.py)
    "JOB_BOOL", "JOB_INT", "JOB_TEXT", "OVERRIDES", "OVERRIDE_FIELDS", "STRATEGY_NAMES", "AnyJob", "AnyPlacement",
    "Codes", "Flag", "FlatColumns", "JobColumns", "Num", "PlacementColumns", "ProfileColumns", "ResolvedColumns",
    "Table", "is_in", "lookup", "lookup_text", "maximum", "minimum", "node_size", "not_", "per_value", "settings_of",
    "strategy_in", "where",
]


class ProfileColumns:
    """The memory-relevant parts of each row's framework profile (frameworks.Profile) as columns."""

    def __init__(self, names: np.ndarray) -> None:
        profiles = [PROFILES[str(n)] for n in names.tolist()]
        self.full_copy_on_gpu = np.array([p.full_copy_on_gpu for p in profiles], dtype=bool)
        self.quant_saves_input = np.array([p.quant_saves_input for p in profiles], dtype=bool)
        self.kbit_upcast = np.array([p.kbit_upcast for p in profiles], dtype=bool)
        self.fp32_outputs = np.array([p.fp32_outputs for p in profiles], dtype=bool)
        self.peft_model_dtype_adapters = np.array([p.peft_model_dtype_adapters for p in profiles], dtype=bool)
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
    kbit_upcast: np.ndarray
    vocab_parallel_loss: np.ndarray

    def __init__(self, frameworks: np.ndarray, explicit: dict[str, np.ndarray]) -> None:
        keys, inverse = np.unique(frameworks, return_inverse=True)
        self.profile = ProfileColumns(keys)
        for name in ("full_copy_on_gpu", "quant_saves_input", "kbit_upcast", "fp32_outputs",
                     "peft_model_dtype_adapters", "fused_ce_bytes_per_vocab",
                     "loss_segment_bytes_per_vocab", "has_fit", "fit_context", "fit_nccl", "fit_fragmentation"):
            setattr(self.profile, name, getattr(self.profile, name)[inverse])
        for name, given in explicit.items():  # NaN = not set: the profile's value
            default = np.array([getattr(PROFILES[str(k)], name) for k in keys.tolist()], dtype=bool)[inverse]
            setattr(self, name, np.where(np.isnan(given), default, given > 0))
        self.adapter_bytes = np.array([PROFILES[str(k)].adapter_bytes for k in keys.tolist()], dtype=float)[inverse]


OVERRIDES = ("efficient_loading", "double_quant", "quantize_lm_head", "optimizer_in_backward",
             "activation_offloading", "expandable_segments", "kbit_upcast", "vocab_parallel_loss")
OVERRIDE_FIELDS = dict(zip(OVERRIDES, ("fsdp_cpu_ram_efficient_loading", "double_quant", "quantize_lm_head",
                                        "optimizer_in_backward", "activation_offloading", "expandable_segments",
                                        "kbit_prepare", "vocab_parallel_loss"),
                            strict=True))
JOB_TEXT = ("method", "dtype", "framework", "optimizer", "optimizer_state_dtype", "optimizer_impl", "attention")
JOB_INT = ("tokens_per_sample", "batch_size", "gradient_accumulation_steps", "lora_r", "images_per_sample",
           "sequence_parallel")
JOB_BOOL = ("gradient_checkpointing", "fused_loss", "packing", "samples_vary_in_length", "freeze_vision",
            "freeze_projector", "dora")


class JobColumns:
    """The Job fields the theory reads, one numpy entry per row (``image_resolution`` 0 = the model's default;
    the framework overrides NaN = the profile's; ``loss_kernel`` "" = the framework's; ``transformers_version`` and
    ``bitsandbytes_version`` "" = the installed release's behaviour)."""

    def __init__(self, columns: dict[str, Any]) -> None:
        self.size = len(columns["method"])
        for name in (*JOB_TEXT, *JOB_INT, *JOB_BOOL, "lora_dropout", "image_resolution", "lora_target_modules",
                     "transformers_version", "bitsandbytes_version"):
            setattr(self, name, columns[name])
        fused = np.where(self.fused_loss, "fused-linear-ce", lookup_text(self.framework, FRAMEWORK_LOSS_KERNEL, "hf"))
        self.effective_loss_kernel = np.where(columns["loss_kernel"] != "", columns["loss_kernel"], fused)
        self.settings = ResolvedColumns(self.framework, {k: columns[f] for k, f in OVERRIDE_FIELDS.items()})

    @classmethod
    def of(cls, jobs: Sequence[Job]) -> JobColumns:
        """The columns of a list of Jobs."""
        cols: dict[str, Any] = {name: np.array([getattr(j, name) for j in jobs], dtype=str) for name in JOB_TEXT}
        cols |= {name: np.array([getattr(j, name) for j in jobs], dtype=np.int64) for name in JOB_INT}
        cols |= {name: np.array([getattr(j, name) for j in jobs], dtype=bool) for name in JOB_BOOL}
        cols["lora_dropout"] = np.array([j.lora_dropout for j in jobs], dtype=float)
        cols["image_resolution"] = np.array([j.image_resolution or 0 for j in jobs], dtype=np.int64)
        cols["loss_kernel"] = np.array([j.loss_kernel or "" for j in jobs], dtype=str)
        cols["transformers_version"] = np.array([j.transformers_version or "" for j in jobs], dtype=str)
        cols["bitsandbytes_version"] = np.array([j.bitsandbytes_version or "" for j in jobs], dtype=str)
        cols["lora_target_modules"] = Codes.of([j.lora_target_modules for j in jobs])
        for field in OVERRIDE_FIELDS.values():
            cols[field] = np.array([np.nan if (v := getattr(j, field)) is None else float(v) for j in jobs])
        return cls(cols)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the columns set in __init__ (for mypy)
        raise AttributeError(name)

    @classmethod
    def broadcast(cls, job: Job, size: int) -> JobColumns:
        """``size`` rows of one ``job``: every field (and framework setting) holds the job's value as a Python
        scalar, which the formulas combine with the placement columns as they do for one ``Job`` (a branch on a
        job field alone is a Python ``if``; numpy broadcasts the rest); a caller may then set a field to ``size``
        entries of its own, as the layout search does for the batch, accumulation and checkpointing. The LoRA
        targets stay a one-entry ``Codes``. ``take`` keeps the scalar fields.

        The values are those of ``of([job])``'s one-entry columns (each field with its column's type: str, int,
        bool, float), built without the arrays: tests/test_layout_memory.py checks them field by field."""
        out = object.__new__(cls)
        for names, kind in ((JOB_TEXT, str), (JOB_INT, int), (JOB_BOOL, bool)):
            for name in names:
                setattr(out, name, kind(getattr(job, name)))
        loss_kernel = job.loss_kernel or ""
        fused = "fused-linear-ce" if job.fused_loss else FRAMEWORK_LOSS_KERNEL.get(job.framework, "hf")
        for name, value in (("lora_dropout", float(job.lora_dropout)),
                            ("image_resolution", int(job.image_resolution or 0)),
                            ("lora_target_modules", Codes.of([job.lora_target_modules])),
                            ("transformers_version", str(job.transformers_version or "")),
                            ("bitsandbytes_version", str(job.bitsandbytes_version or "")),
                            ("effective_loss_kernel", str(loss_kernel if loss_kernel != "" else fused))):
            setattr(out, name, value)
        profile = PROFILES[job.framework]
        fit = profile.device_fit
        columns = object.__new__(ProfileColumns)
        for name, value in (("full_copy_on_gpu", bool(profile.full_copy_on_gpu)),
                            ("quant_saves_input", bool(profile.quant_saves_input)),
                            ("kbit_upcast", bool(profile.kbit_upcast)),
                            ("fp32_outputs", bool(profile.fp32_outputs)),
                            ("peft_model_dtype_adapters", bool(profile.peft_model_dtype_adapters)),
                            ("fused_ce_bytes_per_vocab", float(profile.fused_ce_bytes_per_vocab or 0)),
                            ("loss_segment_bytes_per_vocab", float(profile.loss_segment_bytes_per_vocab)),
                            ("has_fit", fit is not None), ("fit_context", fit.context_bytes if fit else 0.0),
                            ("fit_nccl", fit.nccl_bytes if fit else 0.0),
                            ("fit_fragmentation", fit.fragmentation if fit else 0.0)):
            setattr(columns, name, value)
        settings = object.__new__(ResolvedColumns)
        settings.profile = columns
        for name, field in OVERRIDE_FIELDS.items():  # not set: the profile's value
            given = getattr(job, field)
            setattr(settings, name, bool(getattr(profile, name)) if given is None else float(given) > 0)
        setattr(settings, "adapter_bytes", float(profile.adapter_bytes))  # noqa: B010 - a scalar, not a column
        out.settings = settings
        out.size = size
        return out

    def take(self, rows: np.ndarray | slice) -> JobColumns:
        """The columns of the selected rows (``rows``: indices; a one-entry column of ``broadcast`` stays)."""
        size = self.size

        def pick(value: Any) -> Any:  # noqa: ANN401 - a column, or a field of ``broadcast``
            if isinstance(value, Codes):
                return value.take(rows) if len(value.codes) == size else value
            return value[rows] if isinstance(value, np.ndarray) and len(value) == size else value

        out = object.__new__(JobColumns)
        for name, value in self.__dict__.items():
            if name not in ("settings", "size"):
                setattr(out, name, pick(value))
        settings = object.__new__(ResolvedColumns)
        for name, value in self.settings.__dict__.items():
            setattr(settings, name, pick(value) if name != "profile" else value)
        profile = object.__new__(ProfileColumns)
        for name, value in self.settings.profile.__dict__.items():
            setattr(profile, name, pick(value))
        settings.profile = profile
        out.settings = settings
        out.size = len(np.arange(size)[rows])  # indices, a slice or a mask
        return out


def lookup_text(value: np.ndarray, table: Mapping[str, str], default: str) -> np.ndarray:
    """``table.get(v, default)`` for every entry of a text column."""
    out = np.full(value.shape, default, dtype=object)
    for key, found in table.items():
        out[value == key] = found
    return out.astype(str)


AnyJob = Job | JobColumns


def settings_of(job: AnyJob) -> Resolved | ResolvedColumns:
    """The resolved framework settings of one Job, or the columns of a batch."""
    return resolve(job) if isinstance(job, Job) else job.settings
