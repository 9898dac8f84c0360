"""The answers behind the ado experiments, for one point or thousands (no ado import here).

Each experiment of ``experiments.py`` is a thin decorated function that calls the batch function of
this module with one point; the ``autoconf_grid`` operator calls the same functions with a whole
space. A point is the dict of the experiment's inputs (ado fills optional ones with their defaults).
Points that share the search settings (estimator, model version, GPU limits, risk, strict) go into
one ``recommend_batch`` call, so a 3,960-point space costs a few vectorised calls. A point that
cannot be answered comes back as ``can_recommend = 0`` (or ``fits = 0``) with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from autoconf.catalog.catalogue import alias_index
from autoconf.defaults import GPUS_PER_NODE, MEMORY_PARTS, NUMBER_GPUS_LIMIT
from autoconf.errors import AutoconfError, NotBuiltError, describe
from autoconf.estimators.contract import Estimator, get_estimator
from autoconf.estimators.learned.versions import list_versions
from autoconf.interfaces.ado.ibm.model_paths import IBM_VERSIONS
from autoconf.interfaces.ado.ibm.utils.config_mapper import map_valid_model_name
from autoconf.recommend.fastest import Fastest, fastest
from autoconf.recommend.objectives import Choice, Chosen, avoid_oom_batch, chosen
from autoconf.recommend.search import BatchSearch, recommend_batch
from autoconf.schema import GIB, Answer, Estimate, Job, Placement, field_metadata, job_of_words
from autoconf.schema.answer import ado_figures

logger = logging.getLogger(__name__)

# model_version value meaning "the newest version installed".
LATEST = "latest"
# Job fields that are optional properties of the experiments, in their published order (the Job's metadata ``ado``:
# position, and of every experiment or only of those answering one global batch), with ado's defaults
# (``ado_default`` where not the Job's: design §3).
OFFERED = {name: where for name, (_, where) in sorted(field_metadata("ado").items(), key=lambda item: item[1][0])}
JOB_KNOBS = tuple(OFFERED)
SEARCH_KNOBS = tuple(name for name, where in OFFERED.items() if where == "all")
KNOB_DEFAULTS = {name: field_metadata("ado_default").get(name, Job.model_fields[name].default) for name in JOB_KNOBS}
# ado's default of a knob the Job leaves None (the model's own image size): that value means None
NONE_WORDS = {name: KNOB_DEFAULTS[name] for name in JOB_KNOBS if Job.model_fields[name].default is None}
MAX_SEARCH_GPUS = NUMBER_GPUS_LIMIT  # the most GPUs a search tries (Placement.number_gpus)
MEMORY_COMPONENTS = MEMORY_PARTS
ESTIMATE_FIGURES = ado_figures("memory", "throughput")  # resource_estimate's measured properties but reason, answered_by
CHOSEN_FIGURES = ("peak_memory_gib", "oom_risk", "tokens_per_second")  # a recommendation's figures at its placement
RECOMMENDED_FIGURES = ("can_recommend", "gpus", "workers", "number_gpus", *CHOSEN_FIGURES)
ANSWERABLE = (AutoconfError, NotBuiltError, ValidationError)
Point = Mapping[str, Any]
Outputs = dict[str, Any]  # one point's measured properties, as ado stores them


def plain(value: Any) -> Any:  # noqa: ANN401
    """numpy scalars -> Python; whole floats (ado stores numbers as floats) -> int."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


def model_of(name: Any) -> Any:  # noqa: ANN401
    """A catalogue name or alias as given; else IBM ado-autoconf's family name mapped (granite-8b ->
    granite-3.1-8b-instruct); anything else as given (the resolver answers or names the closest)."""
    if not isinstance(name, str) or name.strip().lower() in alias_index():
        return name
    return map_valid_model_name(name)


def job_of(point: Point) -> Job:
    """The Job of a point (raises pydantic/typed errors for a bad one)."""
    words = {name: point[name] for name in ("model_name", "method", "tokens_per_sample", "batch_size", *JOB_KNOBS)
             if name in point}
    words = {k: plain(v) for k, v in words.items() if k not in NONE_WORDS or plain(v) not in (None, NONE_WORDS[k])}
    if "model_name" in words:  # IBM ado-autoconf's family names (granite-8b -> granite-3.1-8b-instruct)
        words["model_name"] = model_of(words["model_name"])
    if point.get("from_config"):  # a training config's fields, where the point leaves a knob at its default
        words |= config_knobs(str(point["from_config"]), {k: v for k, v in words.items() if k in JOB_KNOBS})
    return job_of_words(words)  # the one way in (schema.job_and_placement)


@lru_cache(maxsize=64)
def _config_values(text: str) -> dict[str, Any]:
    """The knobs a training config's text states (read once per distinct text; callers only read the mapping)."""
    from autoconf.interfaces.configs.detect import read_text

    return dict(read_text(text, "from_config").values)


def _config_fields(text: str) -> dict[str, Any]:
    """The Job fields a training config's text sets."""
    from autoconf.interfaces.configs.common import JOB_KNOBS as CONFIG_JOB_KNOBS
    from autoconf.interfaces.configs.common import KNOB_OF

    values = _config_values(text)
    fields = {k: v for k, v in values.items() if k in CONFIG_JOB_KNOBS and k != "method"}
    # knobs of another name that set an offered field (grad_accum); the point's length and batch stay its own
    renamed = {knob: name for name, knob in KNOB_OF.items() if knob != name and name in OFFERED}
    return fields | {renamed[k]: v for k, v in values.items() if k in renamed}


def config_placement(text: str) -> dict[str, Any]:
    """The sharding and offload a training config states (a DeepSpeed config's ZeRO stage and offload, an
    accelerate config's FSDP): resource_estimate's placement takes them; the point names the GPUs."""
    return {k: v for k, v in _config_values(text).items() if k in ("strategy", "offload") and v is not None}


def config_knobs(text: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """The point's knobs with the config's fields where the point has a knob at its default (or none)."""
    kept = {k: v for k, v in knobs.items() if v != KNOB_DEFAULTS.get(k)}
    return {**knobs, **_config_fields(text), **kept}


def ibm_version(model_version: str) -> str:
    """IBM's note for one of its version names that is not installed here ("" for any other)."""
    if model_version in IBM_VERSIONS and model_version not in list_versions():
        return (f"model_version {model_version} is IBM ado-autoconf's; answered by autoconf's newest model "
                "version")
    return ""


def estimator_of(name: str, model_version: str) -> tuple[Estimator, str]:
    """The cached estimator asked for; theory, with the reason noted, if it cannot be loaded. One of IBM's
    version names that is not ours is answered by the newest version, with a note."""
    ibm = ibm_version(model_version)
    if ibm:
        estimator, note = estimator_of(name, LATEST)
        return estimator, "; ".join(filter(None, [ibm, note]))
    version = None if model_version == LATEST else model_version
    try:
        return get_estimator(name, version), ""
    except (NotBuiltError, ImportError) as exc:
        if name == "theory":
            raise
        if version is not None:  # a version asked for by name is answered by it or refused, never by theory
            raise NotBuiltError(f"model_version {version} cannot be used by the {name} estimator: {exc}") from None
        return get_estimator("theory", None), f"{name} estimator unavailable ({exc}); answered by theory"


def answered_by(estimator: str, model_version: str | None) -> str:
    return f"{estimator}@{model_version}" if model_version else estimator


def estimate_outputs(estimate: Estimate) -> Outputs:
    """resource_estimate's figures: the memory and throughput properties of the Outputs (ESTIMATE_FIGURES)."""
    return Answer.of(estimate).ado(ESTIMATE_FIGURES)


def grouped(points: Sequence[Point], keys: Sequence[str]) -> dict[tuple[Any, ...], list[int]]:
    """Indices of the points sharing the same values of ``keys``, in first-seen order."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(tuple(plain(point[k]) for k in keys), []).append(i)
    return groups


Searcher = Callable[[list[Job], list[str], Estimator, dict[str, Any]], BatchSearch]


def refused(reason: str) -> Outputs:
    """No recommendation: can_recommend is a boolean, as IBM ado-autoconf's (gpus, workers 0 here, absent in
    IBM's, so that ado's tables keep one shape)."""
    return {"can_recommend": False, "gpus": 0, "workers": 0, "number_gpus": 0, "reason": reason}


def search_answers(points: Sequence[Point], settings: Sequence[str], search: Searcher,
                   row: Callable[[BatchSearch, int, Job, dict[str, Any]], Outputs]) -> list[Outputs]:
    """Shared driver of the recommenders: group by settings, build jobs, search, format each row."""
    answers: list[Outputs | None] = [None] * len(points)
    for key, idx in grouped(points, ["estimator", "model_version", *settings]).items():
        options = dict(zip(settings, key[2:], strict=True))
        try:
            estimator, note = estimator_of(str(key[0]), str(key[1]))
        except ANSWERABLE as exc:
            for i in idx:
                answers[i] = refused(describe(exc))
            continue
        ok: list[int] = []
        jobs: list[Job] = []
        for i in idx:
            try:
                jobs.append(job_of(points[i]))
                ok.append(i)
            except ANSWERABLE as exc:
                answers[i] = refused(describe(exc))
        if not ok:
            continue
        found = search(jobs, [str(points[i]["gpu_model"]) for i in ok], estimator, options)
        common = {"answered_by": answered_by(estimator.name, estimator.model_version)}
        for k, i in enumerate(ok):
            answer = {**row(found, k, jobs[k], options), **common}
            answer["reason"] = "; ".join(filter(None, [answer.get("reason", ""), note]))
            answers[i] = answer
    return [a if a is not None else refused("not answered") for a in answers]


def chosen_outputs(found: BatchSearch, k: int) -> Outputs:
    """peak_memory_gib, oom_risk and tokens_per_second at the chosen placement of row ``k``."""
    figures = Answer(peak_bytes=float(found.memory["peak"][k]), oom_risk=float(found.memory["oom_risk"][k]),
                      tokens_per_second=found.throughput[k].tokens_per_second if found.throughput[k] else None)
    return figures.ado(CHOSEN_FIGURES)


def placement_answer(found: BatchSearch, k: int, gpus_per_node: int) -> Outputs:
    """can_recommend, gpus, workers, number_gpus (+ estimates) of row ``k`` of a search."""
    n = int(found.number_gpus[k])
    if not n:
        return refused(found.reasons[k])
    workers = -(-n // gpus_per_node)
    return {"can_recommend": True, "gpus": n // workers, "workers": workers, "number_gpus": n,
            "reason": found.reasons[k], **chosen_outputs(found, k)}


def per_worker(point: Point, name: str) -> int:
    """GPUs per worker of a point: the smaller of ``name`` and IBM's ``gpus_per_worker`` (both default 8),
    at most the 8 of one node (Placement's limit)."""
    return int(min(plain(point.get(name, GPUS_PER_NODE)), plain(point.get("gpus_per_worker", GPUS_PER_NODE)),
                   GPUS_PER_NODE))


def min_gpu_answers(points: Sequence[Point]) -> list[Outputs]:
    """min_gpu_recommender at every point: the fewest GPUs whose oom_risk ≤ max_oom_risk."""
    settings = ("max_gpus", "gpus_per_node", "max_oom_risk", "strict")
    points = [{**p, "gpus_per_node": per_worker(p, "gpus_per_node"),
               "max_gpus": min(plain(p["max_gpus"]), MAX_SEARCH_GPUS)} for p in points]

    def search(jobs: list[Job], gpus: list[str], estimator: Estimator, o: dict[str, Any]) -> BatchSearch:
        return recommend_batch(jobs, gpus, estimator, max_gpus=int(o["max_gpus"]),
                               gpus_per_node=int(o["gpus_per_node"]), max_oom_risk=float(o["max_oom_risk"]),
                               strict=bool(o["strict"]))

    def row(found: BatchSearch, k: int, job: Job, o: dict[str, Any]) -> Outputs:
        return placement_answer(found, k, int(o["gpus_per_node"]))

    return search_answers(points, settings, search, row)


def resource_estimate_answers(points: Sequence[Point]) -> list[Outputs]:
    """resource_estimate at every point (one estimate per point: estimators without a batch form too)."""
    out: list[Outputs] = []
    for point in points:
        try:
            job = job_of(point)
            chosen, note = estimator_of(str(point["estimator"]), str(point["model_version"]))
            gpus = plain(point["number_gpus"])
            stated = config_placement(str(point["from_config"])) if point.get("from_config") else {}
            place = Placement(gpu_model=point["gpu_model"], number_gpus=gpus,
                              gpus_per_worker=min(gpus, plain(point["gpus_per_node"])), **stated)
            estimate = chosen.estimate(job, place)
        except ANSWERABLE as exc:
            out.append({"fits": 0, "reason": describe(exc)})
            continue
        out.append({**estimate_outputs(estimate), "reason": note,
                    "answered_by": answered_by(estimate.estimator, estimate.model_version)})
    return out


def _objective(points: Sequence[Point], settings: Sequence[str], job_point: Callable[[Point], Point],
               search: Callable[[list[Job], list[Point], Estimator, dict[str, Any]], Choice],
               row: Callable[[Chosen | None, str, dict[str, Any]], Outputs], node_key: str) -> list[Outputs]:
    """Shared driver of avoid-OOM and throughput: group, build jobs, one search, one annotate per group."""
    answers: list[Outputs | None] = [None] * len(points)
    for key, idx in grouped(points, ["estimator", "model_version", *settings]).items():
        options = dict(zip(settings, key[2:], strict=True))
        estimator, note = estimator_of(str(key[0]), str(key[1]))
        ok, jobs = [], []
        for i in idx:
            try:
                jobs.append(job_of(job_point(points[i])))
                ok.append(i)
            except ANSWERABLE as exc:
                answers[i] = refused(describe(exc))
        if not ok:
            continue
        gpus = [str(points[i]["gpu_model"]) for i in ok]
        choice = search(jobs, [points[i] for i in ok], estimator, options)
        picks = chosen(choice, jobs, gpus, estimator, int(options[node_key]))
        for k, i in enumerate(ok):
            answer = row(picks[k], choice.reasons[k], options)
            answer["reason"] = "; ".join(filter(None, [answer.get("reason", ""), note]))
            answers[i] = {**answer, "answered_by": answered_by(estimator.name, estimator.model_version)}
    out = [a if a is not None else refused("not answered") for a in answers]
    for answer in out:  # avoid_oom_recommender takes number_gpus as an input: the count out is total_gpus
        answer["total_gpus"] = answer.pop("number_gpus")
    return out


def _at(pick: Chosen, gpus_per_node: int) -> Outputs:
    workers = -(-pick.number_gpus // gpus_per_node)
    figures = Answer(can_recommend=True, gpus=pick.number_gpus // workers, workers=workers,
                      number_gpus=pick.number_gpus, peak_bytes=pick.peak_gib * GIB, oom_risk=pick.oom_risk,
                      tokens_per_second=pick.tokens_per_second)
    return {**figures.ado(RECOMMENDED_FIGURES), "reason": "; ".join(pick.notes[1:])}


def avoid_oom_answers(points: Sequence[Point]) -> list[Outputs]:
    """avoid_oom_recommender: keep number_gpus if the job fits there, else the fewest more (per-device batch kept)."""
    settings = ("max_gpus", "gpus_per_worker", "max_oom_risk")
    points = [{**p, "gpus_per_worker": per_worker(p, "gpus_per_worker"),
               "max_gpus": min(plain(p["max_gpus"]), MAX_SEARCH_GPUS)} for p in points]

    def search(jobs: list[Job], pts: list[Point], estimator: Estimator, o: dict[str, Any]) -> Choice:
        return avoid_oom_batch(jobs, [str(p["gpu_model"]) for p in pts], [int(plain(p["number_gpus"])) for p in pts],
                               estimator, max_gpus=int(o["max_gpus"]), gpus_per_node=int(o["gpus_per_worker"]),
                               max_oom_risk=float(o["max_oom_risk"]))

    def row(pick: Chosen | None, reason: str, o: dict[str, Any]) -> Outputs:
        if pick is None:
            return refused(reason)
        return {**_at(pick, int(o["gpus_per_worker"])), "global_batch_size": pick.batch_size}

    return _objective(points, settings, lambda p: {**p, "batch_size": p["per_device_train_batch_size"]}, search,
                      row, "gpus_per_worker")


def throughput_answers(points: Sequence[Point]) -> list[Outputs]:
    """throughput_recommender: the fastest parallel layout that fits (recommend/fastest.py: GPU count × DP × TP × PP
    × sharding × micro-batch × accumulation × checkpointing; batch_size 0 leaves the global batch free), with the
    runner-up and why it lost (``runner_up``)."""
    out: list[Outputs] = []
    for point in points:
        estimator, note = estimator_of(str(point["estimator"]), str(point["model_version"]))
        try:
            free = int(plain(point["batch_size"])) == 0
            job = job_of({**point, "batch_size": max(1, int(plain(point["batch_size"])))})
            per_node = per_worker(point, "gpus_per_node")
            found: Fastest | str = fastest(
                job, str(point["gpu_model"]), estimator, free_batch=free, gpus_per_node=per_node,
                max_gpus=min(int(plain(point["max_nodes"])) * per_node, MAX_SEARCH_GPUS),
                max_oom_risk=float(plain(point["max_oom_risk"])))
        except ANSWERABLE as exc:
            found = describe(exc)
        if isinstance(found, str):
            answer = refused("; ".join(filter(None, [found, note])))
            answer.update(total_gpus=answer.pop("number_gpus"), effective_batch_size=0, per_device_batch_size=0)
        else:
            answer = _layout_answer(found, note)
        out.append({**answer, "answered_by": answered_by(estimator.name, estimator.model_version)})
    return out


def _layout_answer(found: Fastest, note: str) -> Outputs:
    layout, estimate = found.layout, found.estimate
    place, job, memory = layout.placement, layout.job, estimate.memory
    workers = place.workers
    figures = Answer(peak_bytes=memory.peak_bytes, oom_risk=memory.oom_risk,
                     tokens_per_second=None if estimate.throughput is None else estimate.throughput.tokens_per_second)
    out: Outputs = {"can_recommend": True, "gpus": place.number_gpus // workers, "workers": workers,
                    "total_gpus": place.number_gpus, "effective_batch_size": job.batch_size,
                    "per_device_batch_size": layout.micro_batch,
                    "gradient_accumulation_steps": job.gradient_accumulation_steps,
                    "tensor_parallel": place.tp, "pipeline_parallel": place.pp, "data_parallel": place.dp,
                    "sharding": place.effective_strategy, "activation_checkpointing": int(job.gradient_checkpointing),
                    **figures.ado(CHOSEN_FIGURES), "runner_up": found.runner_up,
                    "reason": "; ".join(filter(None, [*memory.notes[1:], note]))}
    if "tokens_per_second" in out:
        out["estimated_throughput"] = out["tokens_per_second"]
    return out
