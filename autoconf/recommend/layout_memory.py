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

import numpy as np

from autoconf.catalog import get_gpu
from autoconf.estimators.contract import Estimator
from autoconf.estimators.risk import need_threshold
from autoconf.estimators.theory import cuda
from autoconf.estimators.theory.frameworks import resolve
from autoconf.estimators.theory.layout_grid import STRATEGIES
from autoconf.estimators.theory.vector import phase_table, theory_batch
from autoconf.recommend.layout_space import MICRO_BATCHES, Space
from autoconf.schema import GIB, Job, Placement


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


@lru_cache(maxsize=4096)
def _placement(gpu_model: str, cell: tuple[int, ...], gpus_per_node: int, inter_node_gbps: float | None) -> Placement:
    n, t, p, s, _ = cell
    return Placement(gpu_model=gpu_model, number_gpus=n, gpus_per_worker=min(n, gpus_per_node), tp=t, pp=p,
                     strategy=STRATEGIES[s], inter_node_gbps=inter_node_gbps)


# The largest micro-batch of layout_space.MICRO_BATCHES (TOP · GPUs stays within Job.batch_size's limit:
# 256 × 4,096 GPUs = 1,048,576).
TOP = max(MICRO_BATCHES)


def _cuda_line(job: Job, place: Placement, outside: float) -> tuple[float, float]:
    """(offset, slope) of need = device peak − releasable blocks as a function of the allocator peak:
    theory/cuda.py ``peaks`` is affine in it (fragmentation share, workspaces, context, communicators); read at
    0 and 1 GiB. The side-stream and loss-segment blocks it is given here (none) only move the releasable part."""
    gpu, settings = get_gpu(place.gpu_model), resolve(job)
    low, high = (cuda.peaks(a, outside, job, place, gpu, settings) for a in (0.0, float(GIB)))
    return low.device - low.releasable, (high.device - high.releasable - low.device + low.releasable) / GIB


@lru_cache(maxsize=256)
def _groups(job: Job, gpu_model: str, packed: bytes, gpus_per_node: int, inter_node_gbps: float | None) -> _Groups:
    """The coefficients of every memory group (``packed``: Space.cells as bytes; memoised: they do not depend on
    the global batch).

    The constant part a (states, buffers, the LM head's fixed bytes) of a group (GPUs, t, p, sharding,
    checkpointing) does not depend on checkpointing, and the per-token parts b, c (activations, loss, recompute) only
    on (t, p, checkpointing) and the phases FSDP adds (its activation bookkeeping, the load phase). So one
    theory_batch row per (GPUs, t, p, sharding) at (m, f) = (1, 1), checkpointing off, gives a + b + c (and the
    row's error, if refused); b and c come from phase tables at (1, 1), (2, 1) and (TOP, p) of one representative
    group per (t, p, checkpointing, phases): u = T(2, 1) − T(1, 1) = b + c, v = T(TOP, p) − T(1, 1) =
    (TOP − 1)·u + TOP·(p − 1)·c.
    """
    cells = [tuple(int(v) for v in c) for c in np.frombuffer(packed, dtype=np.int64).reshape(-1, 5)]
    bases = sorted({c[:4] for c in cells})
    places = {b: _placement(gpu_model, (*b, 0), gpus_per_node, inter_node_gbps) for b in bases}
    jobs: dict[tuple[int, ...], Job] = {}

    def synthetic(base: tuple[int, ...], micro: int, flight: int, ckpt: int) -> Job:
        groups = base[0] // (base[1] * base[2]) // job.sequence_parallel  # data-parallel groups of the cell
        key = (micro * groups * flight, flight, ckpt)
        if key not in jobs:
            jobs[key] = job.model_copy(update={"batch_size": key[0], "gradient_accumulation_steps": flight,
                                               "gradient_checkpointing": bool(ckpt)})
        return jobs[key]

    first = [synthetic(b, 1, 1, 0) for b in bases]
    batch = theory_batch(first, [places[b] for b in bases], risk=False)
    constant: dict[tuple[int, ...], tuple[tuple[str, ...], np.ndarray, tuple[float, float]]] = {}
    refused: dict[tuple[int, ...], str] = {}
    for k, b in enumerate(bases):
        found = phase_table(first[k], places[b])
        if batch.errors[k] is not None or isinstance(found, str):
            refused[b] = str(batch.errors[k] or found)
        else:
            constant[b] = (found[0], found[1].sum(axis=1), _cuda_line(first[k], places[b], found[2]))
    slopes: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray] | str] = {}

    def slope(base: tuple[int, ...], ckpt: int) -> tuple[np.ndarray, np.ndarray] | str:
        fsdp = STRATEGIES[base[3]].startswith("fsdp") and base[0] // (base[1] * base[2]) > 1  # as memory._phases
        key = (base[1], base[2], ckpt, fsdp, constant[base][0])
        if key not in slopes:
            points = ((1, 1), (2, 1), (TOP, base[2])) if base[2] > 1 else ((1, 1), (2, 1))
            tables = [phase_table(synthetic(base, m, f, ckpt), places[base]) for m, f in points]
            bad = next((t for t in tables if isinstance(t, str)), None)
            if bad is not None:
                slopes[key] = str(bad)
            else:
                totals = [t[1].sum(axis=1) for t in tables]  # type: ignore[union-attr]
                u = totals[1] - totals[0]
                c = ((totals[2] - totals[0] - (TOP - 1) * u) / (TOP * (base[2] - 1)) if len(totals) > 2
                     else np.zeros_like(u))
                slopes[key] = (u - c, c)
        return slopes[key]

    width = max((len(v[1]) for v in constant.values()), default=1)
    base_a = np.full((len(cells), width), -np.inf)
    per_micro, per_flight = np.zeros((len(cells), width)), np.zeros((len(cells), width))
    offset, line = np.full(len(cells), np.nan), np.full(len(cells), np.nan)
    errors: list[str | None] = []
    for i, cell in enumerate(cells):
        b = cell[:4]
        coef = refused.get(b) or slope(b, cell[4])
        off = slope(b, 0) if isinstance(coef, tuple) else coef
        if isinstance(coef, str) or isinstance(off, str):
            errors.append(coef if isinstance(coef, str) else str(off))
            continue
        names, t11, (offset[i], line[i]) = constant[b]
        pad = width - len(t11)  # a "load" phase makes some tables one row longer: pad the front, as theory_batch
        base_a[i, pad:] = t11 - off[0] - off[1]
        per_micro[i, pad:], per_flight[i, pad:] = coef
        errors.append(None)
    return _Groups(base_a, per_micro, per_flight, offset, line, tuple(errors))


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
