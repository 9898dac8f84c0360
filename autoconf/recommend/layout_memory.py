"""The memory gate of every layout, from theory's own phase tables, as array arithmetic.

Theory memory (estimators/theory/memory.py) reads the global batch and the accumulation of a layout only through
the micro-batch m (samples per GPU per forward pass) and, with a pipeline, the micro-batches in flight
f = min(accumulation, p) on the first stage. Every entry of its phase table (phase × part) is
``a + (b + c·f)·m``: states are constant; the saved activations are proportional to the micro-batch tokens × f
(``memory._phases``: saved × in_flight; the vision tower's likewise), the recomputed layer and the loss to the
micro-batch tokens (plus the LM head's fixed bytes: in a). So per memory group (GPUs, t, p, sharding,
checkpointing) three phase tables give every layout's phase totals exactly (``_groups``). The allocator peak is
the largest phase total, as in ``estimate_memory``; the device peak less the releasable blocks (on which theory
states its OOM risk) is an affine function of that peak (theory/cuda.py ``peaks``: fragmentation share,
workspaces, context, communicators), read off theory_batch at two of those points. tests/test_layout.py checks
the result against theory_batch on every layout of several jobs.

Estimators other than plain theory (learned, hybrid, calibrated theory) get one ``memory_batch`` call over every
layout instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from autoconf.catalog import get_gpu
from autoconf.estimators.contract import Estimator
from autoconf.estimators.theory.layout_grid import STRATEGIES
from autoconf.estimators.theory.risk_table import SIGMA
from autoconf.estimators.theory.vector import phase_table, theory_batch
from autoconf.recommend.layout_space import MICRO_BATCHES, Space
from autoconf.schema import Job, Placement


@dataclass(frozen=True)
class Gate:
    """Per layout: the bytes theory's OOM risk is stated on (NaN on error rows), whether it passes the gate,
    and the first error text of a refused group (None if none)."""

    need: np.ndarray
    fits: np.ndarray
    error: str | None


@dataclass(frozen=True)
class _Groups:
    base: np.ndarray  # (groups, phases): a of every phase total (-inf pads a group with fewer phases)
    per_micro: np.ndarray  # b
    per_flight: np.ndarray  # c
    offset: np.ndarray  # need = offset + slope · allocator peak
    slope: np.ndarray
    errors: tuple[str | None, ...]


def _placement(gpu_model: str, cell: tuple[int, ...], gpus_per_node: int, inter_node_gbps: float | None) -> Placement:
    n, t, p, s, _ = cell
    return Placement(gpu_model=gpu_model, number_gpus=n, gpus_per_worker=min(n, gpus_per_node), tp=t, pp=p,
                     strategy=STRATEGIES[s], inter_node_gbps=inter_node_gbps)


# The largest micro-batch of layout_space.MICRO_BATCHES: theory_batch at (TOP, p) is the most memory any layout of
# the group can take (every coefficient below is a byte count, so ≥ 0). TOP · GPUs stays within Job.batch_size's
# limit (256 × 4,096 GPUs = 1,048,576).
TOP = max(MICRO_BATCHES)


@lru_cache(maxsize=256)
def _groups(job: Job, gpu_model: str, packed: bytes, gpus_per_node: int, inter_node_gbps: float | None) -> _Groups:
    """The coefficients of every memory group (``packed``: Space.cells as bytes; memoised: they do not depend on
    the global batch). Per group: theory_batch at (m, f) = (1, 1) and (TOP, p), the phase table also at (2, 1).
    With u = T(2, 1) − T(1, 1) = b + c and v = T(TOP, p) − T(1, 1) = (TOP − 1)·u + TOP·(p − 1)·c: c, then b."""
    cells = [tuple(int(v) for v in c) for c in np.frombuffer(packed, dtype=np.int64).reshape(-1, 5)]
    places = [_placement(gpu_model, c, gpus_per_node, inter_node_gbps) for c in cells]
    jobs: dict[tuple[int, ...], Job] = {}

    def synthetic(cell: tuple[int, ...], micro: int, flight: int) -> Job:
        groups = cell[0] // (cell[1] * cell[2]) // job.sequence_parallel  # data-parallel groups of the cell
        key = (micro * groups * flight, flight, cell[4])
        if key not in jobs:
            jobs[key] = job.model_copy(update={"batch_size": key[0], "gradient_accumulation_steps": flight,
                                               "gradient_checkpointing": bool(cell[4])})
        return jobs[key]

    pairs = [(synthetic(c, m, f if f == 1 else c[2]), places[i]) for i, c in enumerate(cells)
             for m, f in ((1, 1), (TOP, 2))]
    batch = theory_batch([j for j, _ in pairs], [p for _, p in pairs], risk=False)
    need = batch.peak - batch.releasable_or_zero()
    found: list[tuple[np.ndarray, ...] | None] = []
    errors: list[str | None] = []
    for i, cell in enumerate(cells):
        tables = [phase_table(*pairs[2 * i]), phase_table(synthetic(cell, 2, 1), places[i]), phase_table(*pairs[2 * i + 1])]
        bad = batch.errors[2 * i] or batch.errors[2 * i + 1] or next((t for t in tables if isinstance(t, str)), None)
        errors.append(str(bad) if bad else None)
        found.append(None if bad else tuple(t[1].sum(axis=1) for t in tables))  # type: ignore[union-attr]
    width = max((len(f[0]) for f in found if f is not None), default=1)
    base = np.full((len(cells), width), -np.inf)
    per_micro, per_flight = np.zeros((len(cells), width)), np.zeros((len(cells), width))
    offset, slope = np.full(len(cells), np.nan), np.full(len(cells), np.nan)
    for i, totals in enumerate(found):
        if totals is None:
            continue
        t11, t21, top = totals
        p = cells[i][2]
        u = t21 - t11
        c = (top - t11 - (TOP - 1) * u) / (TOP * (p - 1)) if p > 1 else np.zeros_like(u)
        b = u - c
        pad = width - len(t11)  # a "load" phase makes some tables one row longer: pad the front, as theory_batch
        base[i, pad:], per_micro[i, pad:], per_flight[i, pad:] = t11 - u, b, c
        low, high = t11.max(), top.max()
        # need = offset + slope · allocator peak; a peak that does not move with the micro-batch (a load phase
        # above every layout's tables) is the same in every layout of the group
        slope[i] = (need[2 * i + 1] - need[2 * i]) / (high - low) if high > low else 0.0
        offset[i] = need[2 * i] - slope[i] * low
    return _Groups(base, per_micro, per_flight, offset, slope, tuple(errors))


def need_threshold(capacity: float, max_oom_risk: float, method: str) -> float:
    """Largest bytes whose theory OOM risk (memory.oom_probability) is ≤ ``max_oom_risk`` on ``capacity``:
    risk = P(N(0, σ) > log(capacity / need)) ≤ r ⇔ need ≤ capacity · exp(−σ · Φ⁻¹(1 − r))."""
    if max_oom_risk >= 1:
        return np.inf
    if max_oom_risk <= 0:
        return 0.0
    sigma = SIGMA.get(method, SIGMA["*"])[0]
    return float(capacity * np.exp(-sigma * NormalDist().inv_cdf(1 - max_oom_risk)))


def theory_gate(job: Job, gpu_model: str, space: Space, gpus_per_node: int, max_oom_risk: float,
                inter_node_gbps: float | None) -> Gate:
    """The gate of every layout of ``space`` from the group coefficients (plain theory only)."""
    key = job.model_copy(update={"batch_size": 1, "gradient_accumulation_steps": 1, "gradient_checkpointing": False})
    g = _groups(key, gpu_model, np.ascontiguousarray(space.cells, dtype=np.int64).tobytes(), gpus_per_node,
                inter_node_gbps)
    grp = space.group
    flight = np.minimum(space.rows.accumulation, space.rows.pp)
    m = space.micro.astype(float)[:, None]
    totals = g.base[grp] + (g.per_micro[grp] + g.per_flight[grp] * flight[:, None]) * m
    need = g.offset[grp] + g.slope[grp] * totals.max(axis=1)
    limit = need_threshold(float(get_gpu(gpu_model).memory_bytes), max_oom_risk, job.method)
    fits = np.isfinite(need) & (need <= limit)
    return Gate(need, fits, next((e for e in g.errors if e is not None), None))


def estimator_gate(estimator: Estimator, jobs: list[Job], places: list[Placement], max_oom_risk: float) -> Gate:
    """The gate from one ``memory_batch`` call over every layout (any estimator)."""
    batch = estimator.memory_batch(jobs, places)
    ok = batch.ok
    need = np.where(ok, batch.peak - batch.releasable_or_zero(), np.nan)
    fits = ok & (batch.oom_risk <= max_oom_risk)
    return Gate(need, fits, next((e for e in batch.errors if e is not None), None))
