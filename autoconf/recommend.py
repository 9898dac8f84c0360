"""Minimum-GPU / workers recommendation: a search over placements on top of any estimator (design §5).

Candidates are 1, 2, 4, 8 GPUs (powers of two within one worker), then whole workers of
``gpus_per_node`` GPUs up to ``max_gpus``; a candidate is skipped when the global batch does not split
evenly over its GPUs (ado's SFTTrainer rejects those points too); the first candidate whose
``oom_risk`` is at most ``max_oom_risk`` wins. "Nothing fits" is an answer (``can_recommend = 0`` with
a reason), as are an unknown model or GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pydantic import ValidationError

from autoconf.errors import AutoconfError
from autoconf.estimators import Estimator, get_estimator
from autoconf.schema import Estimate, Job, Placement, Recommendation, Strategy

log = logging.getLogger(__name__)


def candidate_gpus(max_gpus: int = 64, gpus_per_node: int = 8) -> Iterator[int]:
    """1, 2, 4, ... up to one node, then 2, 3, ... whole nodes, all ≤ max_gpus."""
    n = 1
    while n < gpus_per_node and n <= max_gpus:
        yield n
        n *= 2
    workers = 1
    while workers * gpus_per_node <= max_gpus:
        yield workers * gpus_per_node
        workers += 1


def _placement(gpu_model: str, n: int, gpus_per_node: int, strategy: Strategy | None) -> Placement:
    return Placement(gpu_model=gpu_model, number_gpus=n, gpus_per_worker=min(n, gpus_per_node), strategy=strategy)


def _answer(est: Estimate, n: int, gpus_per_node: int, reason: str) -> Recommendation:
    workers = -(-n // gpus_per_node)
    return Recommendation(
        can_recommend=1, gpus=n // workers, workers=workers, number_gpus=n, reason=reason, estimate=est,
        estimator=est.estimator, model_version=est.model_version,
    )


def _refuse(reason: str, estimator: Estimator | None) -> Recommendation:
    return Recommendation(
        can_recommend=0, gpus=0, workers=0, number_gpus=0, reason=reason,
        estimator=getattr(estimator, "name", "theory"), model_version=getattr(estimator, "model_version", None),
    )


def recommend(
    job: Job,
    gpu_model: str,
    estimator: Estimator | None = None,
    *,
    max_gpus: int = 64,
    gpus_per_node: int = 8,
    max_oom_risk: float = 0.05,
    strict: bool = False,
    strategy: Strategy | None = None,
) -> Recommendation:
    """Smallest placement of ``job`` on ``gpu_model`` whose out-of-memory risk is acceptable."""
    estimator = estimator or get_estimator()
    if strict and hasattr(estimator, "in_training_domain"):
        inside, why = estimator.in_training_domain(job, gpu_model)
        if not inside:
            return _refuse(f"outside the training domain of model version {estimator.model_version}: {why}", estimator)
    last: Estimate | None = None
    tried = 0
    for n in candidate_gpus(max_gpus, gpus_per_node):
        if job.batch_size % (n * job.gradient_accumulation_steps):
            continue
        tried += 1
        try:
            est = estimator.estimate(job, _placement(gpu_model, n, gpus_per_node, strategy))
        except (AutoconfError, ValidationError) as exc:
            return _refuse(str(exc), estimator)
        last = est
        if est.memory.oom_risk <= max_oom_risk:
            return _answer(est, n, gpus_per_node, "; ".join(est.memory.notes[1:]))
    if tried == 0:
        return _refuse(f"batch_size {job.batch_size} does not split evenly over any candidate GPU count ≤ {max_gpus}", estimator)
    peak = f"{last.memory.peak_gib:.1f} GiB per GPU at {last.placement.number_gpus} GPUs" if last else "n/a"
    return _refuse(
        f"nothing fits up to {max_gpus} GPUs with oom_risk ≤ {max_oom_risk} (best: {peak}, "
        f"capacity {last.memory.capacity_gib:.1f} GiB)" if last else "no placement was evaluated",
        estimator,
    )
