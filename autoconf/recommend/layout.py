"""The fastest parallel layout for one job on a fixed GPU count: DP × TP × PP × sharding × micro-batch ×
accumulation × checkpointing, under the memory gate.

Every layout that the schema accepts is enumerated: tensor-parallel degree t (a power of two up to the node
size, dividing the attention heads; the key/value heads divide it, replicated, or are divided by it), pipeline
degree p (a power of two, at most the layer count), data-parallel degree d = GPUs / (t·p); sharding ``ddp`` /
``zero1`` / ``zero2`` / ``fsdp`` / ``fsdp-hybrid`` (sharded ones only when d > 1, hybrid only across nodes);
per-GPU micro-batch m with m·d dividing the global batch B (accumulation B / (m·d)); full activation
checkpointing on or off. Each layout's memory comes from the
estimator (the gate: ``oom_risk ≤ max_oom_risk``) and its tokens/s from the throughput theory under the stack
the job names (theory/stacks.py). The memory of all layouts is one ``Estimator.memory_batch`` call (numpy for
theory); tokens/s is computed for the layouts that pass the gate. The fastest layout that fits wins; the
runner-up and the reason it lost (compute, pipeline bubble or exposed communication, from the two step
breakdowns) are returned with it.
Ties go to the simpler layout (fewer model-parallel GPUs, no checkpointing, less sharding).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from autoconf.catalog import get_architecture, get_gpu
from autoconf.defaults import GPUS_PER_NODE, MAX_OOM_RISK
from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.estimators.theory import throughput as tp
from autoconf.schema import Job, Placement, Strategy, ThroughputEstimate

SHARDINGS: tuple[Strategy, ...] = ("ddp", "zero1", "zero2", "fsdp", "fsdp-hybrid")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
SIMPLER = {s: i for i, s in enumerate(SHARDINGS)}  # tie-break order: less sharding first


@dataclass(frozen=True)
class Layout:
    job: Job  # with the layout's accumulation and checkpointing
    placement: Placement
    throughput: ThroughputEstimate
    peak_gib: float
    oom_risk: float

    @property
    def label(self) -> str:
        p, j = self.placement, self.job
        micro = j.batch_size // (p.dp * j.gradient_accumulation_steps)
        return (f"dp {p.dp} × tp {p.tp} × pp {p.pp}, {p.effective_strategy}, micro-batch {micro}, "
                f"accumulation {j.gradient_accumulation_steps}, checkpointing {'on' if j.gradient_checkpointing else 'off'}")


@dataclass(frozen=True)
class LayoutChoice:
    best: Layout | None
    runner_up: Layout | None
    why: str
    evaluated: int  # layouts estimated
    fitting: int  # of those, the ones under the memory gate


def _powers(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if 1 << k <= limit]


def layouts(job: Job, gpu_model: str, number_gpus: int, gpus_per_node: int = GPUS_PER_NODE,
            inter_node_gbps: float | None = None, shardings: tuple[Strategy, ...] = SHARDINGS,
            ) -> Iterator[tuple[Job, Placement]]:
    """Every (Job, Placement) of the search space for ``job.batch_size`` samples per step on ``number_gpus``."""
    arch = get_architecture(job.model)
    per_node = min(number_gpus, gpus_per_node)
    for t in _powers(per_node):
        if arch.num_heads % t or (arch.num_kv_heads % t and t % arch.num_kv_heads) or number_gpus % t:
            continue
        for p in _powers(number_gpus // t):
            if p > arch.num_layers or number_gpus % (t * p):  # uneven stages allowed (ceil(L / p) layers)
                continue
            d = number_gpus // (t * p)
            for strategy in shardings:
                if (strategy != "ddp" and d == 1) or (strategy == "fsdp-hybrid" and number_gpus <= per_node):
                    continue
                place = Placement(gpu_model=gpu_model, number_gpus=number_gpus, gpus_per_worker=per_node, tp=t, pp=p,
                                  strategy=strategy, inter_node_gbps=inter_node_gbps)
                for m in MICRO_BATCHES:
                    if job.batch_size % (m * d):
                        continue
                    for ckpt in (False, True):
                        yield job.model_copy(update={"gradient_accumulation_steps": job.batch_size // (m * d),
                                                     "gradient_checkpointing": ckpt}), place


def _order(layout: Layout) -> tuple[float, int, int, int]:
    p = layout.placement
    return (-layout.throughput.tokens_per_second, p.tp * p.pp, int(layout.job.gradient_checkpointing),
            SIMPLER[p.effective_strategy])


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


def fastest_layout(job: Job, gpu_model: str, number_gpus: int, estimator: Estimator, *, gpus_per_node: int = GPUS_PER_NODE,
                   max_oom_risk: float = MAX_OOM_RISK, stack: str | None = None,
                   inter_node_gbps: float | None = None, shardings: tuple[Strategy, ...] = SHARDINGS) -> LayoutChoice:
    """The fastest layout of ``job`` on ``number_gpus`` × ``gpu_model`` that passes the memory gate
    (``shardings``: the sharding strategies a stack offers, e.g. nanotron's ZeRO-0 / ZeRO-1 only)."""
    tp.peak_flops(get_gpu(gpu_model), job.dtype)  # a GPU without a published peak is refused up front
    space = list(layouts(job, gpu_model, number_gpus, gpus_per_node, inter_node_gbps, shardings))
    evaluated = len(space)
    memory = estimator.memory_batch([j for j, _ in space], [p for _, p in space]) if space else None
    found: list[Layout] = []
    for i, (cand_job, place) in enumerate(space):
        assert memory is not None
        if memory.errors[i] is not None or not memory.oom_risk[i] <= max_oom_risk:
            continue  # refused by the memory model (an error row), or over the gate
        speed = tp.estimate_throughput(cand_job, place, stack=stack)
        found.append(Layout(cand_job, place, speed, float(memory.peak[i]) / 2**30, float(memory.oom_risk[i])))
    if evaluated == 0:
        raise InvalidInputError("batch_size", f"no layout of {number_gpus} GPUs divides the global batch "
                                f"{job.batch_size} (micro-batch × data-parallel degree must divide it)")
    if not found:
        return LayoutChoice(None, None, f"none of {evaluated} layouts fits under oom_risk ≤ {max_oom_risk}",
                            evaluated, 0)
    found.sort(key=_order)
    best = found[0]
    runner = next((f for f in found[1:] if f.label != best.label), None)
    reason = (f"fastest of {len(found)} fitting layouts ({evaluated} evaluated): {best.label}, "
              f"{best.throughput.tokens_per_second:,.0f} tokens/s, MFU {best.throughput.mfu:.2f}")
    return LayoutChoice(best, runner, reason + ("; " + why(best, runner) if runner else ""), evaluated, len(found))
