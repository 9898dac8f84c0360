"""Sweep rows as columns: every distinct value of a column is read once by the one way in, never row by row.

``schema.job_and_placement`` reads one mapping of words. A sweep of a million rows holds few distinct values per
column, so here each distinct value of each Job/Placement column is read by the same pydantic field (a probe Job
or Placement that holds only that value; ``tp``/``pp``, whose check spans fields, by their field's constraints),
missing cells take the Job's defaults (per framework where ``defaults.FRAMEWORK_JOB_DEFAULTS`` says so), and the
check that spans fields (number_gpus a multiple of tp·pp) runs on arrays. A row with any value the probe refuses
is read again by ``job_and_placement`` itself, so its error is exactly the one-row error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import TypeAdapter, ValidationError

from autoconf import defaults
from autoconf.errors import AutoconfError, describe
from autoconf.estimators.theory.rows import JOB_BOOL, JOB_INT, JOB_TEXT, Codes, JobColumns
from autoconf.schema import ALIASES, FRAMEWORKS, PER_DEVICE_BATCH, Job, Placement, job_and_placement, read_word

ROW_ERRORS = (AutoconfError, ValidationError, TypeError, ValueError, OverflowError)
_OPTIONAL = ("image_resolution", "loss_kernel", "fsdp_cpu_ram_efficient_loading", "double_quant", "quantize_lm_head",
             "optimizer_in_backward", "activation_offloading", "expandable_segments")
_JOB_READ = tuple(Job.model_fields)  # every field: a bad word in any of them refuses the row
_PLACE_READ = tuple(Placement.model_fields)


@dataclass
class FrameColumns:
    """The rows of a frame as columns; ``ok`` rows are read, the others carry their one-row ``errors``."""

    size: int
    ok: np.ndarray
    errors: list[str | None]
    given: np.ndarray  # number_gpus stated in the row
    model: np.ndarray
    model_codes: Codes  # the distinct models and each row's index into them
    gpu_codes: Codes
    jobs: JobColumns  # every row (refused rows hold defaults)
    place: dict[str, np.ndarray]  # gpu_model, number_gpus, gpus_per_worker (0 = unset), strategy ("" = unset), ...
    words: pd.DataFrame  # the canonical words of each row (for the few rows that need a Job object)

    def row(self, i: int) -> tuple[Job, Placement]:
        """Job and Placement of one row (read by job_and_placement)."""
        return self.rows(np.array([i]))[0]

    def rows(self, rows: np.ndarray) -> list[tuple[Job, Placement]]:
        """Job and Placement of some rows (each distinct set of words read once)."""
        records = [tuple((k, v) for k, v in r.items() if not _missing(v))
                   for r in self.words.iloc[rows].to_dict(orient="records")]
        try:
            return [_read_row(r) for r in records]
        except TypeError:  # an unhashable cell (a list): read without the cache
            return [job_and_placement(dict(r)) for r in records]


@lru_cache(maxsize=65536)
def _read_row(words: tuple[tuple[str, Any], ...]) -> tuple[Job, Placement]:
    return job_and_placement(dict(words))


def _words(frame: pd.DataFrame, i: int) -> dict[str, Any]:
    return dict(frame.iloc[i].to_dict())


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


@lru_cache(maxsize=4096)
def _read_job(field: str, kind: type, value: Any) -> tuple[bool, Any]:  # noqa: ANN401
    try:
        job = Job(model=value) if field == "model" else Job(model="probe", **{field: value})
    except ROW_ERRORS:
        return False, None
    return True, getattr(job, field)


@lru_cache(maxsize=64)
def _adapter(field: str) -> TypeAdapter[Any]:
    info = Placement.model_fields[field]
    form: Any = Annotated[info.annotation, info]  # the field's type and constraints, as the model checks them
    return TypeAdapter(form)


@lru_cache(maxsize=4096)
def _read_place(field: str, kind: type, value: Any) -> tuple[bool, Any]:  # noqa: ANN401
    try:
        if field in ("tp", "pp"):  # number_gpus % (tp·pp) spans fields: checked on the arrays
            return True, _adapter(field).validate_python(read_word(Placement.model_fields[field].annotation, value))
        place = Placement(gpu_model=value) if field == "gpu_model" else Placement(gpu_model="probe", **{field: value})
        return True, getattr(place, field)
    except (*ROW_ERRORS, Exception):
        return False, None


def _column(values: pd.Series, read: Callable[[str, type, Any], tuple[bool, Any]], field: str,
            default: Any) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN401
    """(value of each row, read ok) of one column: each distinct value read once, missing cells ``default``."""
    if values.isna().all():  # an absent or empty column: the default everywhere
        fill = np.empty(len(values), dtype=object)
        fill.fill(default)
        return fill, np.ones(len(values), dtype=bool)
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError:  # unhashable cells (lists): every row is read one by one
        return np.full(len(values), default, dtype=object), np.zeros(len(values), dtype=bool)
    found = [read(field, type(u), u.item() if hasattr(u, "item") else u) for u in uniques.tolist()]
    table = np.empty(len(found) + 1, dtype=object)
    table[:] = [v for _, v in found] + [default]
    good = np.array([k for k, _ in found] + [True], dtype=bool)
    index = np.where(codes < 0, len(found), codes)
    return table[index], good[index]


def _EMPTY(n: int) -> pd.Series:  # noqa: N802 - a constant-like factory
    return pd.Series(np.full(n, np.nan))


def canonical_frame(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Aliases renamed (a canonical name beside its alias wins where set); rows with a per-device batch and no
    batch_size are marked to be read one by one (schema.canonical_words does the arithmetic)."""
    words = frame.copy()
    for alias, name in ALIASES.items():
        if alias in words:
            words[name] = words[alias] if name not in words else words[name].where(words[name].notna(), words[alias])
            words = words.drop(columns=[alias])
    slow = np.zeros(len(words), dtype=bool)
    if PER_DEVICE_BATCH in words:
        slow = words[PER_DEVICE_BATCH].notna().to_numpy() & (
            words["batch_size"].isna().to_numpy() if "batch_size" in words else True)
    return words, slow


def frame_columns(frame: pd.DataFrame, default_gpus: int = 1) -> FrameColumns:
    """Read every row of ``frame`` as ``job_and_placement(row, default_gpus)`` would, column by column."""
    words, slow = canonical_frame(frame.reset_index(drop=True))
    n = len(words)
    ok = ~slow
    values: dict[str, np.ndarray] = {}
    for field in _JOB_READ:
        base = Job.model_fields[field].default if field != "model" else None
        col = words[field] if field in words else _EMPTY(n)
        if field == "model":
            col = col.map(lambda v: v if _missing(v) or isinstance(v, str) else str(v))
        values[field], good = _column(col, _read_job, field, base)
        ok &= good
    _framework_defaults(values, words)
    for field in _PLACE_READ:
        base = Placement.model_fields[field].default if field != "gpu_model" else None
        if field == "number_gpus":
            base = default_gpus
        col = words[field] if field in words else _EMPTY(n)
        values[field], good = _column(col, _read_place, field, base)
        ok &= good
    ok &= (values["model"] != None) & (values["gpu_model"] != None)  # noqa: E711 - element-wise
    degrees = [np.where(ok, values[f], 1).astype(np.int64) for f in ("number_gpus", "tp", "pp")]
    ok &= degrees[0] % (degrees[1] * degrees[2]) == 0
    errors: list[str | None] = [None] * n
    for i in np.flatnonzero(~ok).tolist():  # read again as one row: its exact error (or, if it reads, its values)
        try:
            job, place = job_and_placement(_words(words, i), default_gpus)
        except ROW_ERRORS as exc:
            errors[i] = describe(exc, with_input=False)
            continue
        ok[i] = True
        for field in _JOB_READ:
            values[field][i] = getattr(job, field)
        for field in _PLACE_READ:
            values[field][i] = getattr(place, field)
    given = words["number_gpus"].notna().to_numpy() if "number_gpus" in words else np.zeros(n, dtype=bool)
    where = _place_columns(values)
    return FrameColumns(n, ok, errors, given, values["model"], _codes(values["model"]), _codes(where["gpu_model"]),
                        _job_columns(values), where, words)


def _codes(values: np.ndarray) -> Codes:
    codes, uniques = pd.factorize(pd.Series(values, dtype=object).fillna(""))
    return Codes(tuple(uniques.tolist()), np.asarray(codes, dtype=np.int64))


def _framework_defaults(values: dict[str, np.ndarray], words: pd.DataFrame) -> None:
    """Cells left empty take the framework's default where it has its own (defaults.FRAMEWORK_JOB_DEFAULTS)."""
    framework = values["framework"]
    for field in {k for d in (defaults.FRAMEWORK_JOB_DEFAULT, *defaults.FRAMEWORK_JOB_DEFAULTS.values()) for k in d}:
        empty = words[field].isna().to_numpy() if field in words else np.ones(len(words), dtype=bool)
        listed = np.zeros(len(words), dtype=bool)
        for name, found in defaults.FRAMEWORK_JOB_DEFAULTS.items():
            here = framework == name
            listed |= here
            if field in found:
                values[field][empty & here] = found[field]
        if field in defaults.FRAMEWORK_JOB_DEFAULT:
            others = empty & ~listed & np.isin(framework.astype(str), FRAMEWORKS)
            values[field][others] = defaults.FRAMEWORK_JOB_DEFAULT[field]


def _job_columns(values: dict[str, np.ndarray]) -> JobColumns:
    cols: dict[str, Any] = {f: np.array(values[f], dtype=str) for f in JOB_TEXT}
    cols |= {f: np.array(values[f], dtype=np.int64) for f in JOB_INT}
    cols |= {f: np.array(values[f], dtype=bool) for f in JOB_BOOL}
    cols["lora_dropout"] = np.array(values["lora_dropout"], dtype=float)
    cols["image_resolution"] = np.array([v or 0 for v in values["image_resolution"]], dtype=np.int64)
    cols["loss_kernel"] = np.array([v or "" for v in values["loss_kernel"]], dtype=str)
    cols["lora_target_modules"] = Codes.of(values["lora_target_modules"])
    for f in _OPTIONAL[2:]:
        cols[f] = np.array([np.nan if v is None else float(v) for v in values[f]])
    return JobColumns(cols)


def _place_columns(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "gpu_model": np.array([v or "" for v in values["gpu_model"]], dtype=object),
        "number_gpus": np.array([v or 1 for v in values["number_gpus"]], dtype=np.int64),
        "gpus_per_worker": np.array([v or 0 for v in values["gpus_per_worker"]], dtype=np.int64),
        "strategy": np.array([v or "" for v in values["strategy"]], dtype=str),
        "tp": np.array([v or 1 for v in values["tp"]], dtype=np.int64),
        "pp": np.array([v or 1 for v in values["pp"]], dtype=np.int64),
        "offload": np.array([v or "none" for v in values["offload"]], dtype=str),
        "virtual_pp": np.array([v or 1 for v in values["virtual_pp"]], dtype=np.int64),
        "bandwidth_set": np.array([a is not None or b is not None for a, b in
                                   zip(values["intra_node_gbps"], values["inter_node_gbps"], strict=True)], dtype=bool),
    }
