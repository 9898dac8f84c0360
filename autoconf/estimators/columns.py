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
from autoconf.estimators.theory.rows import JOB_BOOL, JOB_INT, JOB_TEXT, OVERRIDE_FIELDS, Codes, JobColumns
from autoconf.schema import (
    ALIASES,
    FRAMEWORKS,
    PER_DEVICE_BATCH,
    Job,
    Placement,
    job_and_placement,
    job_of_words,
    read_word,
)

ROW_ERRORS = (AutoconfError, ValidationError, TypeError, ValueError, OverflowError)
# optional fields: None is a value of its own (the model's resolution, the stack's kernel and settings)
_OPTIONAL = ("image_resolution", "loss_kernel", *OVERRIDE_FIELDS.values())
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
        records = self._records(rows, ())
        try:
            return [_read_row(r) for r in records]
        except TypeError:  # an unhashable cell (a list): read without the cache
            return [job_and_placement(dict(r)) for r in records]

    def job_rows(self, rows: np.ndarray, drop: tuple[str, ...] = ()) -> list[Job]:
        """The Jobs of some rows read without the words ``drop`` (each distinct set of words read once)."""
        records = self._records(rows, drop)
        try:
            return [_read_job_row(r) for r in records]
        except TypeError:
            return [job_of_words(dict(r)) for r in records]

    def _records(self, rows: np.ndarray, drop: tuple[str, ...]) -> list[tuple[tuple[str, Any], ...]]:
        return [tuple((k, v) for k, v in r.items() if not _missing(v) and k not in drop)
                for r in self.words.iloc[rows].to_dict(orient="records")]


@lru_cache(maxsize=65536)
def _read_job_row(words: tuple[tuple[str, Any], ...]) -> Job:
    return job_of_words(dict(words))


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
        # a bare parameter count read as a number is a name (schema.canonical_words)
        name = value if isinstance(value, str) or field != "model" else str(value)
        job = Job(model=name) if field == "model" else Job(model="probe", **{field: value})
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


@dataclass
class Column:
    """One field over the rows: its distinct read values and each row's index into them."""

    table: list[Any]
    index: np.ndarray

    def set(self, rows: np.ndarray | int, value: Any) -> None:  # noqa: ANN401
        if not self.index.flags.writeable:  # a column that was one value everywhere (a broadcast view)
            self.index = self.index.copy()
        self.table.append(value)
        self.index[rows] = len(self.table) - 1

    def typed(self, dtype: Any, convert: Callable[[Any], Any] = lambda v: v) -> np.ndarray:  # noqa: ANN401
        out: np.ndarray = np.array([convert(v) for v in self.table], dtype=dtype)[self.index]
        return out

    def codes(self, convert: Callable[[Any], Any] = lambda v: v) -> Codes:
        return Codes(tuple(convert(v) for v in self.table), self.index.astype(np.int64))


def _column(values: pd.Series, read: Callable[[str, type, Any], tuple[bool, Any]], field: str,
            default: Any) -> tuple[Column, np.ndarray]:  # noqa: ANN401
    """(the column, read ok per row): each distinct value read once, missing cells ``default``."""
    n = len(values)
    if values.isna().all():  # an absent or empty column: the default everywhere
        return Column([default], np.broadcast_to(np.int32(0), (n,))), np.ones(n, dtype=bool)
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError:  # unhashable cells (lists): every row is read one by one
        return Column([default], np.zeros(n, dtype=np.int32)), np.zeros(n, dtype=bool)
    found = [read(field, type(u), u.item() if hasattr(u, "item") else u) for u in uniques.tolist()]
    good = np.array([k for k, _ in found] + [True], dtype=bool)
    index = np.where(codes < 0, len(found), codes).astype(np.int32)
    return Column([v for _, v in found] + [default], index), good[index]


def canonical_frame(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Aliases renamed (a canonical name beside its alias wins where set); rows with a per-device batch and no
    batch_size are marked to be read one by one (schema.canonical_words does the arithmetic)."""
    words = frame
    for alias, name in ALIASES.items():
        if alias in words:
            if name in words:
                words = words.assign(**{name: words[name].where(words[name].notna(), words[alias])})
                words = words.drop(columns=[alias])
            else:
                words = words.rename(columns={alias: name})
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
    cols: dict[str, Column] = {}
    empty = pd.Series(np.full(n, np.nan))
    for fields, model, read in ((_JOB_READ, Job, _read_job), (_PLACE_READ, Placement, _read_place)):
        for field in fields:
            base = None if field in ("model", "gpu_model") else model.model_fields[field].default
            base = default_gpus if field == "number_gpus" else base
            cols[field], good = _column(words.get(field, empty), read, field, base)
            ok &= good
        if model is Job:
            _framework_defaults(cols, words)
    ok &= cols["model"].typed(bool, lambda v: v is not None) & cols["gpu_model"].typed(bool, lambda v: v is not None)
    gpus, tp, pp = (cols[f].typed(np.int64, lambda v: v if isinstance(v, int) else 1) for f in ("number_gpus", "tp", "pp"))
    ok &= gpus % (tp * pp) == 0
    errors: list[str | None] = [None] * n
    for i in np.flatnonzero(~ok).tolist():  # read again as one row: its exact error (or, if it reads, its values)
        try:
            job, place = job_and_placement(_words(words, i), default_gpus)
        except ROW_ERRORS as exc:
            errors[i] = describe(exc, with_input=False)
            continue
        ok[i] = True
        for field in _JOB_READ:
            cols[field].set(i, getattr(job, field))
        for field in _PLACE_READ:
            cols[field].set(i, getattr(place, field))
    given = words["number_gpus"].notna().to_numpy() if "number_gpus" in words else np.zeros(n, dtype=bool)
    return FrameColumns(n, ok, errors, given, cols["model"].typed(object), cols["model"].codes(),
                        cols["gpu_model"].codes(), _job_columns(cols), _place_columns(cols), words)


def _framework_defaults(cols: dict[str, Column], words: pd.DataFrame) -> None:
    """Cells left empty take the framework's default where it has its own (defaults.FRAMEWORK_JOB_DEFAULTS)."""
    framework = cols["framework"].typed(object)
    for field in {k for d in (defaults.FRAMEWORK_JOB_DEFAULT, *defaults.FRAMEWORK_JOB_DEFAULTS.values()) for k in d}:
        empty = words[field].isna().to_numpy() if field in words else np.ones(len(words), dtype=bool)
        listed = np.zeros(len(words), dtype=bool)
        for name, found in defaults.FRAMEWORK_JOB_DEFAULTS.items():
            here = framework == name
            listed |= here
            if field in found and (empty & here).any():
                cols[field].set(empty & here, found[field])
        others = empty & ~listed & np.isin(framework.astype(str), FRAMEWORKS)
        if field in defaults.FRAMEWORK_JOB_DEFAULT and others.any():
            cols[field].set(others, defaults.FRAMEWORK_JOB_DEFAULT[field])


def _job_columns(cols: dict[str, Column]) -> JobColumns:
    out: dict[str, Any] = {f: cols[f].typed(str, lambda v: v or "") for f in JOB_TEXT}
    out["framework"] = cols["framework"].typed(str, lambda v: v or defaults.FRAMEWORK)  # refused rows: any profile
    out |= {f: cols[f].typed(np.int64, lambda v: v or 0) for f in JOB_INT}
    out |= {f: cols[f].typed(bool, bool) for f in JOB_BOOL}
    out["lora_dropout"] = cols["lora_dropout"].typed(float, lambda v: v or 0.0)
    out["image_resolution"] = cols["image_resolution"].typed(np.int64, lambda v: v or 0)
    out["loss_kernel"] = cols["loss_kernel"].typed(str, lambda v: v or "")
    out["transformers_version"] = cols["transformers_version"].typed(str, lambda v: v or "")
    out["bitsandbytes_version"] = cols["bitsandbytes_version"].typed(str, lambda v: v or "")
    out["lora_target_modules"] = cols["lora_target_modules"].codes(lambda v: v or ())
    for f in _OPTIONAL[2:]:
        out[f] = cols[f].typed(float, lambda v: np.nan if v is None else float(v))
    return JobColumns(out)


def _place_columns(cols: dict[str, Column]) -> dict[str, np.ndarray]:
    def unset(v: object) -> bool:
        return v is not None

    return {
        "gpu_model": cols["gpu_model"].typed(object, lambda v: v or ""),
        "number_gpus": cols["number_gpus"].typed(np.int64, lambda v: v or 1),
        "gpus_per_worker": cols["gpus_per_worker"].typed(np.int64, lambda v: v or 0),
        "strategy": cols["strategy"].typed(str, lambda v: v or ""),
        "tp": cols["tp"].typed(np.int64, lambda v: v or 1),
        "pp": cols["pp"].typed(np.int64, lambda v: v or 1),
        "offload": cols["offload"].typed(str, lambda v: v or "none"),
        "virtual_pp": cols["virtual_pp"].typed(np.int64, lambda v: v or 1),
        "bandwidth_set": cols["intra_node_gbps"].typed(bool, unset) | cols["inter_node_gbps"].typed(bool, unset),
    }
