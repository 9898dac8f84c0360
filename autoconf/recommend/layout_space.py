"""The search space of the layout recommender as numpy columns: every (GPUs, TP, PP, sharding, micro-batch,
checkpointing) layout the schema accepts, with its accumulation.

- tensor-parallel degree t: a power of two up to the node size, dividing the attention heads; the key/value heads
  divide it (replicated) or are divided by it (theory/memory.py check_parallelism);
- pipeline degree p: a power of two, at most the layer count (uneven stages allowed: ceil(L / p) layers);
- data-parallel degree d = GPUs / (t·p); sharding ``ddp`` / ``zero1`` / ``zero2`` / ``fsdp-shard-grad-op`` /
  ``zero3`` / ``fsdp`` / ``fsdp-hybrid`` (layout_grid.STRATEGIES), the sharded ones only when d > 1, hybrid only
  across nodes;
- per-GPU micro-batch m from MICRO_BATCHES with m·(d / sequence-parallel degree) dividing the global batch B
  (accumulation B / (m·d/c)); with B = 0 the global batch is free: accumulation 1, B = m·d/c;
- full activation checkpointing off or on.

Built as an outer product of the few (GPUs, t, p) combinations with strategies × micro-batches × checkpointing,
then masked: no Python loop over layouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autoconf.catalog import Architecture
from autoconf.estimators.theory.layout_grid import DDP, HYBRID, STRATEGIES, Layouts
from autoconf.schema import Strategy

# Per-GPU micro-batches tried: powers of two, as the nanotron and Megatron sweeps use (nanotron's published best
# layouts use 1-8), up to ado-autoconf's largest per-device batch, 256 (it caps batch / GPUs at 256).
MICRO_BATCHES = tuple(1 << k for k in range(9))


@dataclass(frozen=True)
class Space:
    """The layouts (``rows``) and each one's per-GPU micro-batch."""

    rows: Layouts
    micro: np.ndarray

    def __len__(self) -> int:
        return len(self.micro)


def _powers(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if 1 << k <= limit]


def combinations(arch: Architecture, counts: Sequence[int], gpus_per_node: int, model_parallel: bool = True,
                 ) -> np.ndarray:
    """(GPUs, t, p) rows of every allowed tensor × pipeline split of every GPU count (t = p = 1 only without
    ``model_parallel``)."""
    out = []
    for n in counts:
        per_node = min(n, gpus_per_node)
        for t in _powers(per_node if model_parallel else 1):
            if arch.num_heads % t or (arch.num_kv_heads % t and t % arch.num_kv_heads) or n % t:
                continue
            out += [(n, t, p) for p in _powers(n // t if model_parallel else 1)
                    if p <= arch.num_layers and n % (t * p) == 0]
    return np.array(out, dtype=np.int64).reshape(-1, 3)


@lru_cache(maxsize=1024)
def build(arch: Architecture, batch: int, counts: tuple[int, ...], gpus_per_node: int,
          shardings: tuple[Strategy, ...], sequence_parallel: int = 1, model_parallel: bool = True) -> Space:
    """Every layout of ``batch`` samples per step (0: free) on each GPU count of ``counts`` (memoised; the arrays
    are read-only). Rows in the order of (combination, sharding, micro-batch, checkpointing), the last fastest."""
    combos = combinations(arch, counts, gpus_per_node, model_parallel)
    n, t, p = combos[:, 0], combos[:, 1], combos[:, 2]
    d = n // (t * p)
    per_node = np.minimum(n, gpus_per_node)
    s = np.array([STRATEGIES.index(x) for x in shardings], dtype=np.int64)
    m = np.array(MICRO_BATCHES, dtype=np.int64)
    # which (combination, sharding) and (combination, micro-batch) pairs are allowed: the conditions on the small
    # tables, then the outer product of the two masks with checkpointing off / on
    by_sharding = (((s == DDP) | (d[:, None] > 1)) & ((s != HYBRID) | (n > per_node)[:, None])
                   & (d % sequence_parallel == 0)[:, None])
    groups = d // sequence_parallel
    if batch:
        by_micro = batch % (m * np.maximum(groups, 1)[:, None]) == 0
        accumulation = batch // np.maximum(m * groups[:, None], 1)
        total = np.full(accumulation.shape, batch, dtype=np.int64)
    else:
        by_micro = np.ones((len(combos), len(m)), dtype=bool)
        accumulation, total = np.ones(by_micro.shape, dtype=np.int64), m * groups[:, None]
    keep = by_sharding[:, :, None, None] & by_micro[:, None, :, None] & np.ones(2, dtype=bool)
    k, si, mi, c = np.nonzero(keep)
    rows = Layouts(gpus=n[k], tp=t[k], pp=p[k], strategy=s[si], batch=total[k, mi], accumulation=accumulation[k, mi],
                   checkpointing=c.astype(np.int64), gpus_per_worker=per_node[k])
    space = Space(rows=rows, micro=m[mi])
    for column in (*rows.__dict__.values(), space.micro):
        column.flags.writeable = False
    return space
