"""What the REST routes compute for resolved inputs (no FastAPI here): one result per config + an aggregate.

The memory part comes from ``autoconf.estimators.contract.get_estimator(name)``; the default is ``hybrid``, and when
the hybrid (or its learned models) is not built in this installation the answer falls back to ``theory``
and says so in ``notes``. Throughput, time and cost come from the theory formulas. A part that cannot be
answered (no GPU peak for the dtype, no token count, no catalogued price) is ``null`` with a note.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from autoconf import defaults
from autoconf.catalog import get_gpu
from autoconf.errors import AutoconfError, InvalidInputError, NotBuiltError
from autoconf.estimators.contract import DEFAULT_ESTIMATOR, Estimator, get_estimator
from autoconf.estimators.theory.throughput import throughput_or_none
from autoconf.interfaces.api.design import design_objects
from autoconf.interfaces.api.files import check_client_dataset, read_client_dataset
from autoconf.interfaces.api.inputs import Resolved, located
from autoconf.planning.cost import estimate_cost
from autoconf.planning.timing import estimate_time
from autoconf.planning.tokens import TokenCount, count_texts, record_text, tokens_per_epoch
from autoconf.recommend.by_objective import recommend_for_objective
from autoconf.recommend.search import candidate_gpus
from autoconf.schema import Answer, CostEstimate, Estimate, Recommendation, ThroughputEstimate, TimeEstimate

log = logging.getLogger(__name__)
RETRY_SECONDS = 30.0  # an estimator that failed to load is retried after this long (not on every request)
_UNAVAILABLE: dict[tuple[str, str | None], tuple[float, str]] = {}


def pick_estimator(name: str | None, version: str | None) -> tuple[Estimator, list[str]]:
    """The requested estimator; the hybrid falls back to theory (with a note) when it cannot be loaded.

    Any failure to import or build an estimator is an installation state, not a server error: the
    hybrid answers with theory, an explicitly requested learned/traced estimator is a 422.
    """
    wanted = name or DEFAULT_ESTIMATOR
    failed = _UNAVAILABLE.get((wanted, version))
    why = failed[1] if failed and time.monotonic() - failed[0] < RETRY_SECONDS else None
    if why is None:
        try:
            return get_estimator(wanted, version), []
        except AutoconfError:
            raise
        except Exception as exc:  # ImportError, NotBuiltError, or a broken optional module
            log.warning("estimator %s unavailable: %s", wanted, exc)
            why = str(exc)
            _UNAVAILABLE[(wanted, version)] = (time.monotonic(), why)
    if wanted != "hybrid":
        raise InvalidInputError("estimator", f"'{wanted}' is not available in this installation: {why}")
    return get_estimator("theory"), [f"hybrid estimator not available ({why}); answered with theory"]


def run_estimate(item: Resolved, notes: list[str]) -> Estimate:
    estimator, extra = pick_estimator(item.options.estimator, item.options.model_version)
    notes += extra
    try:
        return estimator.estimate(item.job, item.placement)
    except NotBuiltError as exc:
        if estimator.name != "hybrid":
            raise InvalidInputError("estimator", str(exc)) from exc
        notes.append(f"hybrid estimator not built ({exc}); answered with theory")
        return get_estimator("theory").estimate(item.job, item.placement)


def tokens_dict(count: TokenCount) -> dict[str, Any]:
    return {"num_samples": count.num_samples, "total_tokens": count.total_tokens,
            "mean_sample_tokens": count.mean_sample_tokens, "max_sample_tokens": count.max_sample_tokens,
            "exact": count.exact, "method": count.method, "max_seq_length": count.max_seq_length,
            "truncated_samples": count.truncated_samples, "padded_tokens": count.padded_tokens,
            "packed_tokens": count.packed_tokens, "padding_efficiency": count.padding_efficiency}


def count_tokens(item: Resolved) -> TokenCount | None:
    opts, seq = item.options, item.job.tokens_per_sample
    if opts.texts is not None:
        return count_texts(opts.texts, tokenizer_path=opts.tokenizer_path, max_seq_length=seq)
    if opts.dataset_path is not None:
        try:
            texts = (record_text(dict(r), opts.text_field) for r in read_client_dataset(opts.dataset_path))
            return count_texts(texts, tokenizer_path=opts.tokenizer_path, max_seq_length=seq)
        except InvalidInputError as exc:
            raise InvalidInputError("dataset" if item.prefix else "dataset_path", exc.message) from None
        except (UnicodeDecodeError, OSError, ValueError) as exc:  # unreadable file: the client's input
            raise InvalidInputError("dataset" if item.prefix else "dataset_path", f"could not be read: {exc}") from None
    return None


def _time(item: Resolved, tp: ThroughputEstimate, count: TokenCount | None, notes: list[str]) -> TimeEstimate | None:
    opts = item.options
    dataset_tokens = opts.dataset_tokens
    if dataset_tokens is None and count is not None:
        dataset_tokens = tokens_per_epoch(count, item.job.packing or item.te_approach == 1)
    if opts.token_budget is None and dataset_tokens is None and opts.num_samples is None:
        notes.append(missing_tokens_reason(item))
        return None
    return estimate_time(item.job, item.placement, throughput=tp, token_budget=opts.token_budget,
                         dataset_tokens=dataset_tokens, num_samples=opts.num_samples, epochs=opts.epochs,
                         num_checkpoints=opts.num_checkpoints)


def missing_tokens_reason(item: Resolved) -> str:
    """What to add so that time and cost can be computed."""
    if item.prefix:
        return ("time and cost need a token count: add hf_training.max_steps, or a local data.dataset "
                "(JSONL/CSV/Parquet on the server) with data.dataset_text_field")
    return "time and cost need a token count: add token_budget, dataset_tokens, num_samples or dataset_path"


def _cost(item: Resolved, wall: TimeEstimate, notes: list[str]) -> CostEstimate | None:
    try:
        return estimate_cost(wall, item.placement, price_per_gpu_hour_usd=item.options.price_per_gpu_hour_usd,
                             provider=item.options.provider)
    except InvalidInputError as exc:
        notes.append(f"cost: {exc.message}")
        return None


def discover_gpus(item: Resolved, notes: list[str]) -> Resolved:
    """infra.numGpusPerPod = 0: the fewest GPUs per pod (1, 2, 4, 8) at which the job fits with an OOM risk
    of at most defaults.MAX_OOM_RISK; the per-device batch stays (HF's meaning), so the global batch grows."""
    estimator, _ = pick_estimator(item.options.estimator, item.options.model_version)
    pods = item.placement.workers
    per_gpu = item.job.batch_size // item.placement.number_gpus  # per-device batch × accumulation
    chosen = item
    for n in candidate_gpus(defaults.GPUS_PER_NODE, defaults.GPUS_PER_NODE):
        place = item.placement.model_copy(update={"number_gpus": n * pods, "gpus_per_worker": n})
        job = item.job.model_copy(update={"batch_size": per_gpu * n * pods})
        chosen = Resolved(job, place, item.options, item.prefix, item.notes, te_approach=item.te_approach)
        memory = estimator.estimate(job, place).memory
        if memory.fits and memory.oom_risk <= defaults.MAX_OOM_RISK:
            notes.append(f"infra.numGpusPerPod=0: {n} GPU(s) per pod is the fewest at which the job fits "
                         f"(OOM risk {memory.oom_risk:.3f}); num_gpus says the total")
            return chosen
    notes.append(f"infra.numGpusPerPod=0: nothing fits up to {defaults.GPUS_PER_NODE} GPUs per pod; answered for "
                 f"{defaults.GPUS_PER_NODE}")
    return chosen


def answer_one(item: Resolved, parts: tuple[str, ...]) -> dict[str, Any]:
    notes = list(item.notes)
    if item.auto_gpus:
        item = discover_gpus(item, notes)
    estimate = run_estimate(item, notes) if "memory" in parts else None
    tp = (estimate.throughput if estimate is not None and estimate.throughput
          else throughput_or_none(item.job, item.placement))
    if tp is None:
        notes.append(f"{item.placement.gpu_model} has no published {item.job.dtype} peak: no throughput, time or cost")
    count = count_tokens(item) if "tokens" in parts or "time" in parts else None
    wall = _time(item, tp, count, notes) if tp is not None and "time" in parts else None
    cost = _cost(item, wall, notes) if wall and "cost" in parts else None
    answer = Answer.of(estimate, throughput=tp, time=wall, cost=cost, job=item.job, placement=item.placement)
    out: dict[str, Any] = {"job": item.job.model_dump(mode="json"),
                           "placement": {**item.placement.model_dump(mode="json"), "workers": item.placement.workers,
                                         "gpu_model": get_gpu(item.placement.gpu_model).name,
                                         "strategy": item.placement.effective_strategy}}
    if estimate is not None:
        out.update(estimator=answer.estimator, model_version=answer.model_version, memory=answer.section("memory"))
    out["throughput"] = answer.section("throughput")
    if "tokens" in parts:
        out["tokens"] = tokens_dict(count) if count else None
    out |= {part: answer.section(part) for part in ("time", "cost") if part in parts}
    out["notes"] = notes
    return out


def _located(exc: AutoconfError, item: Resolved) -> AutoconfError:
    """Error field as the body names it (nested: configs.<i>.<section>.<key>)."""
    return located(exc, item.prefix, nested=bool(item.prefix)) if item.prefix else exc


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Total time and cost (over the configs that have them) and the largest per-GPU memory."""
    def total(part: str, key: str) -> float | None:
        values = [r[part][key] for r in results if r.get(part)]
        return sum(values) if values else None

    memories = [r["memory"]["total_memory_gib"] for r in results if r.get("memory")]
    return {"configs": len(results), "total_time_seconds": total("time", "time_seconds"),
            "total_gpu_hours": total("cost", "gpu_hours"), "total_cost_usd": total("cost", "cost_usd"),
            "max_total_memory_gib": max(memories) if memories else None}


def results_for(inputs: list[Resolved], parts: tuple[str, ...]) -> dict[str, Any]:
    results = []
    for item in inputs:
        try:
            results.append(answer_one(item, parts))
        except AutoconfError as exc:
            raise _located(exc, item) from None
    route = "estimate" if {"memory", "cost"} <= set(parts) else parts[-1]
    return {**design_objects(results, route), "results": results,
            "aggregate": aggregate(results) if len(results) > 1 else None}


def recommend_one(item: Resolved) -> dict[str, Any]:
    notes = list(item.notes)
    opts = item.options
    if opts.dataset_path is not None:  # not read here, but refused as /api/estimate refuses it
        try:
            check_client_dataset(opts.dataset_path)
        except InvalidInputError as exc:
            raise InvalidInputError("dataset" if item.prefix else "dataset_path", exc.message) from None
    estimator, extra = pick_estimator(opts.estimator, opts.model_version)
    notes += extra
    def search(chosen: Estimator) -> Recommendation:
        return recommend_for_objective(
            item.job, item.placement.gpu_model, chosen, opts.objective, requested_gpus=item.placement.number_gpus,
            max_gpus=opts.max_gpus, gpus_per_node=opts.gpus_per_node, max_oom_risk=opts.max_oom_risk,
            strict=opts.strict, strategy=item.placement.strategy)

    try:
        rec = search(estimator)
    except NotBuiltError as exc:
        notes.append(f"hybrid estimator not built ({exc}); answered with theory")
        rec = search(get_estimator("theory"))
    out: dict[str, Any] = {"can_recommend": rec.can_recommend, "gpus": rec.gpus, "workers": rec.workers,
                           "number_gpus": rec.number_gpus, "reason": rec.reason, "estimator": rec.estimator,
                           "model_version": rec.model_version, "objective": opts.objective,
                           "job": (rec.estimate.job if rec.estimate else item.job).model_dump(mode="json"),
                           "placement": rec.estimate.placement.model_dump(mode="json") if rec.estimate else None,
                           "gpu_model": get_gpu(item.placement.gpu_model).name, "memory": None, "throughput": None}
    if rec.estimate is not None:
        tp = rec.estimate.throughput or throughput_or_none(item.job, rec.estimate.placement)
        answer = Answer.of(rec.estimate, throughput=tp, number_gpus=rec.number_gpus)
        out["memory"], out["throughput"] = answer.section("memory"), answer.section("throughput")
    out["notes"] = notes
    return out


def recommend_for(inputs: list[Resolved]) -> dict[str, Any]:
    results = []
    for item in inputs:
        try:
            results.append(recommend_one(item))
        except AutoconfError as exc:
            raise _located(exc, item) from None
    total = sum(r["number_gpus"] for r in results)
    summary = {"configs": len(results), "all_recommended": all(r["can_recommend"] for r in results),
               "total_gpus": total} if len(results) > 1 else None
    return {"results": results, "aggregate": summary}
