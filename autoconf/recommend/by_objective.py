"""One job, one objective: ``min-gpus`` (search.recommend), ``avoid-oom`` (objectives.py) or ``throughput`` (the
fastest parallel layout, fastest.py).

The common entry of ``autoconf-gpu recommend --objective`` and ``/api/recommend``'s ``objective``:
every objective answers with a ``Recommendation`` whose estimate is the estimator's own at the chosen
placement (for ``throughput`` its job and placement carry the chosen layout: accumulation, checkpointing, tp, pp,
sharding).
"""

from __future__ import annotations

from typing import Literal, get_args

from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS, MAX_OOM_RISK
from autoconf.errors import InvalidInputError
from autoconf.estimators.contract import Estimator
from autoconf.recommend.fastest import fastest
from autoconf.recommend.objectives import avoid_oom_batch, row_job, row_placement
from autoconf.recommend.search import recommend
from autoconf.schema import Job, Recommendation, Strategy

Objective = Literal["min-gpus", "avoid-oom", "throughput"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)


def recommend_for_objective(
    job: Job, gpu_model: str, estimator: Estimator, objective: str = "min-gpus", *, requested_gpus: int = 1,
    max_gpus: int = MAX_GPUS, gpus_per_node: int = GPUS_PER_NODE, max_oom_risk: float = MAX_OOM_RISK, strict: bool = False,
    strategy: Strategy | None = None,
) -> Recommendation:
    """The placement ``objective`` picks for ``job`` on ``gpu_model``.

    avoid-oom: ``requested_gpus`` is kept if the job fits there, else the fewest more GPUs, keeping the
    per-device batch ``job.batch_size / requested_gpus``. throughput: the fastest parallel layout (GPU count × DP ×
    TP × PP × sharding × micro-batch × accumulation × checkpointing, recommend/fastest.py) at the global batch
    ``job.batch_size``; its reason says why the runner-up lost.
    """
    if objective not in OBJECTIVES:
        raise InvalidInputError("objective", f"must be one of {', '.join(OBJECTIVES)}; got '{objective}'")
    if objective == "min-gpus":
        return recommend(job, gpu_model, estimator, max_gpus=max_gpus, gpus_per_node=gpus_per_node,
                         max_oom_risk=max_oom_risk, strict=strict, strategy=strategy)
    if objective == "avoid-oom":
        if job.batch_size % requested_gpus:
            raise InvalidInputError("batch_size", f"must split evenly over the requested {requested_gpus} GPUs for "
                                    f"avoid-oom (per-device batch = batch_size / number_gpus); got {job.batch_size}")
        owner = job.model_copy(update={"batch_size": job.batch_size // requested_gpus})
        choice = avoid_oom_batch([owner], [gpu_model], [requested_gpus], estimator, max_gpus=max_gpus,
                                 gpus_per_node=gpus_per_node, max_oom_risk=max_oom_risk)
    else:
        return _throughput(job, gpu_model, estimator, max_gpus=max_gpus, gpus_per_node=gpus_per_node,
                           max_oom_risk=max_oom_risk, strategy=strategy)
    common = {"estimator": estimator.name, "model_version": estimator.model_version}
    row = int(choice.row[0])
    if row < 0:
        return Recommendation(can_recommend=0, gpus=0, workers=0, number_gpus=0, reason=choice.reasons[0], **common)
    picked = row_job([owner], choice.candidates, row)
    place = row_placement([gpu_model], choice.candidates, row, gpus_per_node)
    estimate = estimator.estimate(picked, place)
    n = place.number_gpus
    workers = -(-n // gpus_per_node)
    return Recommendation(can_recommend=1, gpus=n // workers, workers=workers, number_gpus=n, estimate=estimate,
                          reason="; ".join(estimate.memory.notes[1:]), **common)


def _throughput(job: Job, gpu_model: str, estimator: Estimator, *, max_gpus: int, gpus_per_node: int,
                max_oom_risk: float, strategy: Strategy | None) -> Recommendation:
    common = {"estimator": estimator.name, "model_version": estimator.model_version}
    found = fastest(job, gpu_model, estimator, max_gpus=max_gpus, gpus_per_node=gpus_per_node,
                    max_oom_risk=max_oom_risk, strategy=strategy)
    if isinstance(found, str):
        return Recommendation(can_recommend=0, gpus=0, workers=0, number_gpus=0, reason=found, **common)
    n, workers = found.layout.placement.number_gpus, found.workers
    notes = [f"layout: {found.layout.label}", found.runner_up, *found.estimate.memory.notes[1:]]
    return Recommendation(can_recommend=1, gpus=n // workers, workers=workers, number_gpus=n,
                          estimate=found.estimate, reason="; ".join(notes), **common)
