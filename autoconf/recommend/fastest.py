"""The throughput objective (``recommend --objective throughput``, ``/api/recommend``, ado's throughput_recommender):
the fastest parallel layout that fits, over every candidate GPU count, with the runner-up and why it lost.

recommend/layout.py searches DP × TP × PP × sharding × micro-batch × accumulation × checkpointing on each GPU count
of ``search.candidate_gpus`` (1, 2, 4, … up to a node, then whole nodes, ≤ max_gpus) under the memory gate; the
answer at the chosen layout is the estimator's own (``Estimator.estimate``: its memory, notes and tokens/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.errors import AutoconfError
from autoconf.estimators.contract import Estimator
from autoconf.recommend.layout import SHARDINGS, Layout, LayoutChoice, fastest_layout, why
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Estimate, Job, Strategy


@dataclass(frozen=True)
class Fastest:
    """The chosen layout, the estimator's answer there, and one line on the runner-up."""

    layout: Layout
    estimate: Estimate
    runner_up: str
    choice: LayoutChoice

    @property
    def workers(self) -> int:
        return self.layout.placement.workers


def fastest(job: Job, gpu_model: str, estimator: Estimator, *, max_gpus: int = MAX_GPUS,
            gpus_per_node: int = GPUS_PER_NODE, max_oom_risk: float = MAX_OOM_RISK, free_batch: bool = False,
            strategy: Strategy | None = None) -> Fastest | str:
    """The fastest fitting layout of ``job`` on up to ``max_gpus`` × ``gpu_model``, or why there is none.

    ``free_batch``: the global batch is free (micro-batch × data-parallel GPUs, no accumulation); ``strategy``: keep
    this sharding (one the search knows) instead of searching them all.
    """
    counts = list(candidate_gpus(max_gpus, gpus_per_node))
    if not counts:
        return f"no GPU count ≤ max_gpus {max_gpus}"
    shardings = (strategy,) if strategy in SHARDINGS else SHARDINGS
    try:
        choice = fastest_layout(job, gpu_model, counts, estimator, gpus_per_node=gpus_per_node,
                                max_oom_risk=max_oom_risk, shardings=shardings, free_batch=free_batch)
    except AutoconfError as exc:
        return str(exc)
    best = choice.best
    if best is None:
        return choice.why
    runner = why(best, choice.runner_up) if choice.runner_up else "runner-up: none (only this layout fits)"
    return Fastest(best, estimator.estimate(best.job, best.placement), runner, choice)
