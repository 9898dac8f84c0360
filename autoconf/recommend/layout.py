"""The fastest parallel layout for one job: DP × TP × PP × sharding × micro-batch × accumulation × checkpointing
(recommend/layout_space.py) on one GPU count or the best of several, under the memory gate. Tensor and pipeline
splits are searched for the stacks that run them (MODEL_PARALLEL_STACKS), data-parallel layouts for the rest.

The whole search is array arithmetic: the space is numpy columns, the gate of every layout is theory's own memory
of every layout in one column call (recommend/layout_memory.py; ``oom_risk ≤ max_oom_risk``; one ``memory_batch``
over every layout for other estimators), and tokens/s the vectorised throughput (estimators/theory/layout_grid.py)
under the stack the job names (theory/stacks.py). The fastest layout that fits wins; ties go to the simpler layout
(fewer model-parallel GPUs, no checkpointing, less sharding, fewer GPUs, fewer micro-steps). Only the winner and the
runner-up become Job / Placement objects, with the estimator's own memory (theory's read from the gate's arrays),
and the reason the runner-up lost (compute incl. pipeline bubble and recompute, or exposed communication, from the
two step breakdowns).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from autoconf.catalog import get_architecture, get_gpu
from autoconf.defaults import GPUS_PER_NODE, MAX_OOM_RISK
from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.layout_grid import STRATEGIES, Speeds, layout_speeds
from autoconf.recommend import layout_space
from autoconf.recommend.layout_memory import Gate, estimator_gate, theory_gate
from autoconf.recommend.layout_space import Space
from autoconf.schema import Job, Placement, Strategy, ThroughputEstimate

SHARDINGS: tuple[Strategy, ...] = STRATEGIES
MICRO_BATCHES = layout_space.MICRO_BATCHES
# Stacks that run tensor and pipeline parallelism (theory/stacks.py names): Megatron-Core / NeMo (TP, PP, virtual
# PP), nanotron (TP, PP: its ParallelismArgs), InternEvo (TP, PP with hybrid ZeRO). The fine-tuning frameworks of
# Job.framework run data parallelism only: DDP, FSDP (full / hybrid shard) or DeepSpeed ZeRO through the HF Trainer /
# accelerate (fms-hf-tuning's README: FSDP multi-GPU), so their layouts keep tp = pp = 1.
MODEL_PARALLEL_STACKS = ("megatron", "nemo", "nanotron", "internevo")


@dataclass(frozen=True)
class Layout:
    job: Job  # with the layout's global batch, accumulation and checkpointing
    placement: Placement
    throughput: ThroughputEstimate
    peak_gib: float
    oom_risk: float

    @property
    def micro_batch(self) -> int:
        p, j = self.placement, self.job
        return j.batch_size // (p.dp // j.sequence_parallel * j.gradient_accumulation_steps)

    @property
    def label(self) -> str:
        p, j = self.placement, self.job
        return (f"dp {p.dp} × tp {p.tp} × pp {p.pp}, {p.effective_strategy}, micro-batch {self.micro_batch}, "
                f"accumulation {j.gradient_accumulation_steps}, checkpointing {'on' if j.gradient_checkpointing else 'off'}")


@dataclass(frozen=True)
class LayoutChoice:
    best: Layout | None
    runner_up: Layout | None
    why: str
    evaluated: int  # layouts estimated
    fitting: int  # of those, the ones under the memory gate


def _counts(number_gpus: int | Sequence[int]) -> list[int]:
    return [number_gpus] if isinstance(number_gpus, int) else sorted(set(number_gpus))


def row_inputs(job: Job, gpu_model: str, space: Space, r: int, inter_node_gbps: float | None) -> tuple[Job, Placement]:
    """The Job and Placement of layout row ``r``."""
    rows = space.rows
    n = int(rows.gpus[r])
    place = Placement(gpu_model=gpu_model, number_gpus=n, gpus_per_worker=int(rows.gpus_per_worker[r]),
                      tp=int(rows.tp[r]), pp=int(rows.pp[r]), strategy=STRATEGIES[int(rows.strategy[r])],
                      inter_node_gbps=inter_node_gbps)
    return job.model_copy(update={"batch_size": int(rows.batch[r]), "gradient_accumulation_steps":
                                  int(rows.accumulation[r]), "gradient_checkpointing": bool(rows.checkpointing[r])}), place


def search_space(job: Job, number_gpus: int | Sequence[int], gpus_per_node: int = GPUS_PER_NODE,
                 shardings: Sequence[Strategy] = SHARDINGS, free_batch: bool = False, model_parallel: bool = True,
                 ) -> Space:
    """The layouts of ``job.batch_size`` samples per step (``free_batch``: any, accumulation 1) on each GPU count
    (``model_parallel``: tensor and pipeline splits too)."""
    return layout_space.build(get_architecture(job.model), 0 if free_batch else job.batch_size,
                              tuple(_counts(number_gpus)), gpus_per_node, tuple(shardings), job.sequence_parallel,
                              model_parallel)


def layouts(job: Job, gpu_model: str, number_gpus: int | Sequence[int], gpus_per_node: int = GPUS_PER_NODE,
            inter_node_gbps: float | None = None, shardings: Sequence[Strategy] = SHARDINGS,
            model_parallel: bool = True) -> Iterator[tuple[Job, Placement]]:
    """Every (Job, Placement) of the search space, as objects (for callers that want them; the search does not)."""
    space = search_space(job, number_gpus, gpus_per_node, shardings, model_parallel=model_parallel)
    for r in range(len(space)):
        yield row_inputs(job, gpu_model, space, r, inter_node_gbps)


def why(best: Layout, other: Layout) -> str:
    """One sentence: how much slower ``other`` is and which part of its step costs the difference."""
    a, b = best.throughput, other.throughput
    loss = (1 - b.tokens_per_second / a.tokens_per_second) * 100
    parts = {"compute (incl. pipeline bubble and recompute)": b.compute_seconds - a.compute_seconds,
             "exposed communication": b.communication_seconds - a.communication_seconds}
    part, extra = max(parts.items(), key=lambda kv: kv[1])
    if loss < 0.05:
        return f"runner-up {other.label}: as fast ({b.tokens_per_second:,.0f} tokens/s); the choice is the simpler layout"
    return (f"runner-up {other.label}: {b.tokens_per_second:,.0f} tokens/s, {loss:.1f} % slower; "
            f"its step is {b.step_seconds - a.step_seconds:+.2f} s, mostly {part} ({extra:+.2f} s)")


def ranking(space: Space, tokens_per_second: np.ndarray, fits: np.ndarray, top: int | None = None) -> np.ndarray:
    """Rows that fit, fastest first (``top``: only the first that many); ties: fewer model-parallel GPUs, no
    checkpointing, less sharding, fewer GPUs, fewer micro-steps."""
    rows, fit = space.rows, np.flatnonzero(fits)  # only the fitting rows are sorted (lexsort is stable)
    speed = tokens_per_second[fit]
    if top is not None and len(fit) > top and not np.isnan(speed).any():
        # the first ``top`` of the whole order are among the rows at least as fast as the top-th fastest; sorting
        # only those (in row order, as in the whole) gives them in the same order
        kth = np.partition(speed, len(speed) - top)[len(speed) - top]
        fit = fit[speed >= kth]
    order = np.lexsort((rows.accumulation[fit], rows.gpus[fit], rows.strategy[fit], rows.checkpointing[fit],
                        rows.tp[fit] * rows.pp[fit], -tokens_per_second[fit]))
    out: np.ndarray = fit[order]
    return out if top is None else out[:top]


def _gate(job: Job, gpu_model: str, space: Space, estimator: Estimator, max_oom_risk: float,
          inter_node_gbps: float | None) -> Gate:
    if estimator.name == "theory":
        return theory_gate(job, gpu_model, space, max_oom_risk, getattr(estimator, "calibration", None))
    pairs = [row_inputs(job, gpu_model, space, r, inter_node_gbps) for r in range(len(space))]
    return estimator_gate(estimator, [j for j, _ in pairs], [p for _, p in pairs], max_oom_risk)


def _layouts(pairs: list[tuple[Job, Placement]], rows: list[int], speeds: Speeds, estimator: Estimator,
             gate: Gate) -> list[Layout]:
    """Layouts with the estimator's own memory (theory's from the gate's arrays, others' from one memory_batch
    call) and the throughput of their rows (equal to estimate_throughput's: tests/test_layout.py)."""
    memory = gate.memory(rows)
    if memory is None:
        batch = estimator.memory_batch([j for j, _ in pairs], [p for _, p in pairs])
        memory = batch.peak, batch.oom_risk
    peak, risk = memory
    out = []
    for i, ((job, place), r) in enumerate(zip(pairs, rows, strict=True)):
        tps, step, compute = (float(a[r]) for a in (speeds.tokens_per_second, speeds.step, speeds.compute))
        speed = ThroughputEstimate(tokens_per_second=tps, tokens_per_second_per_gpu=tps / place.number_gpus,
                                   flops_per_token=float(speeds.flops_per_token[r]), mfu=float(speeds.efficiency[r]),
                                   step_seconds=step, compute_seconds=compute, communication_seconds=step - compute)
        out.append(Layout(job, place, speed, float(peak[i]) / 2**30, float(risk[i])))
    return out


def fastest_layout(job: Job, gpu_model: str, number_gpus: int | Sequence[int], estimator: Estimator, *,
                   gpus_per_node: int = GPUS_PER_NODE, max_oom_risk: float = MAX_OOM_RISK, stack: str | None = None,
                   inter_node_gbps: float | None = None, shardings: Sequence[Strategy] = SHARDINGS,
                   free_batch: bool = False, model_parallel: bool | None = None) -> LayoutChoice:
    """The fastest layout of ``job`` on ``number_gpus`` × ``gpu_model`` (or on the best of several GPU counts)
    that passes the memory gate (``shardings``: the sharding strategies a stack offers, e.g. nanotron's ZeRO-0 /
    ZeRO-1 only; ``free_batch``: the global batch is free, micro-batch × data-parallel GPUs, no accumulation;
    ``model_parallel``: search tensor and pipeline splits, by default when the stack runs them,
    MODEL_PARALLEL_STACKS)."""
    tp.peak_flops(get_gpu(gpu_model), job.dtype)  # a GPU without a published peak is refused up front
    if model_parallel is None:
        model_parallel = (stack or job.framework) in MODEL_PARALLEL_STACKS
    if stack in MODEL_PARALLEL_STACKS and job.vocab_parallel_loss is None:
        # their loss splits the vocabulary over TP ranks: Megatron-Core vocab_parallel_cross_entropy (NeMo's too),
        # nanotron sharded_cross_entropy, InternEvo's parallel output + FlashGPTLMLoss
        job = job.model_copy(update={"vocab_parallel_loss": True})
    space = search_space(job, number_gpus, gpus_per_node, shardings, free_batch, model_parallel)
    evaluated = len(space)
    if evaluated == 0:
        raise InvalidInputError("batch_size", f"no layout of {number_gpus} GPUs divides the global batch "
                                f"{job.batch_size} (micro-batch × data-parallel degree must divide it)")
    gate = _gate(job, gpu_model, space, estimator, max_oom_risk, inter_node_gbps)
    speeds = layout_speeds(job, gpu_model, space.rows, stack=stack, inter_node_gbps=inter_node_gbps)
    ranked, fitting = ranking(space, speeds.tokens_per_second, gate.fits, top=2), int(gate.fits.sum())
    if not fitting:
        detail = f" (refused: {gate.error})" if gate.error and not np.isfinite(gate.need).any() else ""
        return LayoutChoice(None, None, f"nothing fits with oom_risk ≤ {max_oom_risk}: none of {evaluated} layouts{detail}",
                            evaluated, 0)
    top = [int(r) for r in ranked]
    found = _layouts([row_inputs(job, gpu_model, space, r, inter_node_gbps) for r in top], top, speeds, estimator, gate)
    best, runner = found[0], (found[1] if len(found) > 1 else None)
    reason = (f"fastest of {fitting} fitting layouts ({evaluated} evaluated): {best.label}, "
              f"{best.throughput.tokens_per_second:,.0f} tokens/s, MFU {best.throughput.mfu:.2f}")
    return LayoutChoice(best, runner, reason + ("; " + why(best, runner) if runner else ""), evaluated, fitting)
