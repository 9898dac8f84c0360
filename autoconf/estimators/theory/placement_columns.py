"""Placement fields as columns: ``PlacementColumns``, and the strategy and node questions the formulas ask of them.

The effective strategy of every row is an index into STRATEGY_NAMES (``strategy_code``), so ``strategy_in`` is one
table look-up per row; ``node_size`` is the GPUs per worker. Both answer for one ``Placement`` too (rowwise.py's
convention). Kept apart from rows.py's Job columns, which they do not read; callers import them from rows.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

import numpy as np

from autoconf.defaults import GPUS_PER_NODE
from autoconf.estimators.theory.rowwise import Flag, FlatColumns, Num
from autoconf.schema import Placement, Strategy

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


def node_size(placement: AnyPlacement) -> Num:
    """GPUs per worker: the Placement's, else min(number_gpus, GPUS_PER_NODE)."""
    if isinstance(placement, Placement):
        return placement.gpus_per_worker or min(placement.number_gpus, GPUS_PER_NODE)
    return np.where(placement.gpus_per_worker > 0, placement.gpus_per_worker,
                    np.minimum(placement.number_gpus, GPUS_PER_NODE))
