"""One formula for one row or many: the branch helpers, lookup tables and column types the theory's formulas use.

A theory formula reads a Job/Placement field, which is a Python scalar for one ``Job`` and a numpy array for the
columns of a batch (rows.py). ``where``, ``is_in``, ``minimum``, ``lookup``, ``per_value``, ... branch on it as plain
Python for a scalar and as numpy masks for a column, so one formula serves both. Kept apart from rows.py (the
columns themselves) because they depend on nothing of the Job: cuda.py's GPU columns and the learned estimator use
them too. Callers import them from rows.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

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


class FlatColumns:
    """Columns that are numpy arrays of one length, or a Python scalar that every row shares: ``take`` selects the
    same rows of each array."""

    def take(self, rows: np.ndarray | slice) -> Self:
        out = object.__new__(type(self))
        for name, value in self.__dict__.items():
            setattr(out, name, value[rows] if isinstance(value, np.ndarray) else value)
        return out
