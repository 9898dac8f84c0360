"""Job and Placement fields as columns: the theory formulas run on one ``Job`` or on many rows with the same code.

Every formula of the theory takes a job and a placement. A ``Job``/``Placement`` is one row (its fields are Python
scalars); ``JobColumns``/``PlacementColumns`` hold the same fields as numpy arrays, one entry per row of a batch that
shares an architecture. The helpers below (``where``, ``is_in``, ``minimum``, ...) are what the formulas use for a
branch on a job or placement field: plain Python for one ``Job`` (the form the scalar callers use: the VRAM-budget
dialect, the traced estimator, the planners), numpy masks for columns. ``memory.estimate_memory`` itself is a batch
of one row. Framework profiles are resolved once per distinct framework and spread into columns
(``ResolvedColumns``); no formula runs Python per row of a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, get_args

import numpy as np

from autoconf.defaults import FRAMEWORK_LOSS_KERNEL, GPUS_PER_NODE
from autoconf.estimators.theory.frameworks import PROFILES, Resolved, resolve
from autoconf.schema import Job, Placement, Strategy

# A float for one Job/Placement, or a float array with one entry per row of a batch (numpy broadcasts both ways).
Num = Any
Flag = Any  # a bool for one row, a bool array for a batch


_BOOLS = (bool, np.bool_)  # a tuple: isinstance over it is faster than over the union ``bool | np.bool_``


def where(cond: Flag, a: Num, b: Num) -> Num:
    """``a if cond else b`` for one row; np.where over rows."""
    if isinstance(cond, _BOOLS):
        return a if cond else b
    return np.where(cond, a, b)


def not_(flag: Flag) -> Flag:
    return not flag if isinstance(flag, _BOOLS) else ~flag


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
    """``table[value]`` for one row; per row by one comparison per table entry (a ``Table``'s default elsewhere)."""
    if not isinstance(value, np.ndarray):
        return table[value]
    out = np.full(value.shape, table.default if isinstance(table, Table) else np.nan)
    for key, found in table.items():
        out[value == key] = found
    return out


class Table(dict[str, float]):
    """A lookup table with a default for the keys it does not name."""

    def __init__(self, table: Mapping[str, float], default: float) -> None:
        super().__init__(table)
        self.default = default

    def __missing__(self, key: str) -> float:
        return self.default


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
    def of(cls, values: Sequence[Any] | np.ndarray) -> Codes:
        index: dict[Any, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
        return cls(tuple(index), codes)

    def take(self, rows: np.ndarray | slice) -> Codes:
        return Codes(self.table, self.codes[rows])


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


class FlatColumns:
    """Columns that are numpy arrays of one length, or a Python scalar that every row shares: ``take`` selects the
    same rows of each array."""

    def take(self, rows: np.ndarray | slice) -> Self:
        out = object.__new__(type(self))
        for name, value in self.__dict__.items():
            setattr(out, name, value[rows] if isinstance(value, np.ndarray) else value)
        return out


STRATEGY_NAMES: tuple[str, ...] = get_args(Strategy)
_STRATEGY_TEXT = np.array(STRATEGY_NAMES)
_FSDP, _DDP = STRATEGY_NAMES.index("fsdp"), STRATEGY_NAMES.index("ddp")


class PlacementColumns(FlatColumns):
    """The Placement fields the theory reads, one numpy entry per row (``gpus_per_worker`` 0 = the default;
    ``offload`` may be one string that every row shares, as the layout search gives it).

    The effective strategy is held as ``strategy_code``, an index of STRATEGY_NAMES per row: the formulas ask
    which strategies a row has (``strategy_in``) about twenty times, an integer comparison each instead of a
    text one."""

    def __init__(self, number_gpus: np.ndarray, gpus_per_worker: np.ndarray, tp: np.ndarray, pp: np.ndarray,
                 offload: np.ndarray | str, strategy: np.ndarray | None, codes: np.ndarray | None = None) -> None:
        """``strategy``: "" where the Placement leaves it to the default (fsdp on > 1 data-parallel GPU, else ddp);
        or ``codes``: every row's effective strategy as an index of STRATEGY_NAMES (then ``strategy`` is None)."""
        self.number_gpus, self.gpus_per_worker, self.tp, self.pp = number_gpus, gpus_per_worker, tp, pp
        self.offload = offload
        self.dp = number_gpus // (tp * pp)
        if codes is None:
            assert strategy is not None
            codes = np.where(self.dp > 1, _FSDP, _DDP).astype(np.int8)  # the default, where strategy is ""
            for i, name in enumerate(STRATEGY_NAMES):
                codes[strategy == name] = i
        self.strategy_code = codes

    @property
    def effective_strategy(self) -> np.ndarray:
        """The effective strategy of every row as text."""
        out: np.ndarray = _STRATEGY_TEXT[self.strategy_code]
        return out

    @classmethod
    def of(cls, places: Sequence[Placement]) -> PlacementColumns:
        def ints(name: str) -> np.ndarray:
            return np.array([getattr(p, name) or 0 for p in places], dtype=np.int64)

        return cls(ints("number_gpus"), ints("gpus_per_worker"), ints("tp"), ints("pp"),
                   np.array([p.offload for p in places], dtype=str), np.array([p.strategy or "" for p in places],
                                                                              dtype=str))



AnyJob = Job | JobColumns
AnyPlacement = Placement | PlacementColumns


def strategy_in(placement: AnyPlacement, choices: Sequence[str]) -> Flag:
    """``placement.effective_strategy in choices`` for one Placement; a mask over rows (by strategy_code)."""
    if isinstance(placement, Placement):
        return placement.effective_strategy in choices
    key = tuple(choices)
    table = _CHOICE_TABLES.get(key)
    if table is None:  # one look-up per row instead of a comparison per choice
        table = np.zeros(len(STRATEGY_NAMES), dtype=bool)
        table[[STRATEGY_NAMES.index(c) for c in choices]] = True
        table.flags.writeable = False
        _CHOICE_TABLES[key] = table
    out: np.ndarray = table[placement.strategy_code]
    return out


# strategy_in's tables by choices: constants of STRATEGY_NAMES (the formulas ask about a dozen fixed sets)
_CHOICE_TABLES: dict[tuple[str, ...], np.ndarray] = {}


def settings_of(job: AnyJob) -> Resolved | ResolvedColumns:
    """The resolved framework settings of one Job, or the columns of a batch."""
    return resolve(job) if isinstance(job, Job) else job.settings


def node_size(placement: AnyPlacement) -> Num:
    """GPUs per worker: the Placement's, else min(number_gpus, GPUS_PER_NODE)."""
    if isinstance(placement, Placement):
        return placement.gpus_per_worker or min(placement.number_gpus, GPUS_PER_NODE)
    return np.where(placement.gpus_per_worker > 0, placement.gpus_per_worker,
                    np.minimum(placement.number_gpus, GPUS_PER_NODE))
