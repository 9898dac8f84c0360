"""Property declarations of autoconf's ado experiments: every input with its domain, description and default.

The domains are the *answerable* domain of the newest model version (design §5); ``experiments.py``
uses these lists in its ``custom_experiment`` decorators.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, get_args

from ado.schema.domain import PropertyDomain, VariableTypeEnum
from ado.schema.property import ConstitutiveProperty

from autoconf.catalog import list_models
from autoconf.defaults import GPUS_PER_NODE, MAX_GPUS_LIMIT, NUMBER_GPUS_LIMIT, models_dir
from autoconf.errors import NotBuiltError
from autoconf.estimators.contract import DEFAULT_ESTIMATOR, ESTIMATORS, get_estimator
from autoconf.estimators.learned.domain import answerable_domain as catalogue_domain
from autoconf.estimators.learned.domain import job_field_range
from autoconf.estimators.learned.versions import CARD, list_versions
from autoconf.interfaces.ado.answers import ESTIMATE_FIGURES, JOB_KNOBS, KNOB_DEFAULTS, LATEST
from autoconf.interfaces.ado.answers import SEARCH_KNOBS as SEARCH_KNOB_NAMES
from autoconf.interfaces.ado.ibm.model_paths import IBM_VERSIONS
from autoconf.schema import Job

logger = logging.getLogger(__name__)

# LATEST ("latest", the newest installed model version) is always in the model_version domain, so the
# experiments stay usable before any learned version is built. JOB_KNOBS: the defaults of ado's
# SFTTrainer stack (design §3), visible in `ado describe experiment` and overridable per point or space.
# max_gpus (the search bound) and number_gpus (a Placement) share the limits of every interface (defaults.py).
# Resolution of max_oom_risk: risks are quoted to 0.1 %.
OOM_RISK_STEP = 0.001
# Per-worker GPU limit: Placement.gpus_per_worker is at most one node (defaults.GPUS_PER_NODE).
GPUS_PER_NODE_LIMIT = GPUS_PER_NODE
# IBM ado-autoconf's upper bound for batch sizes, lengths, GPUs per worker and max_gpus (its domains end at
# 10,000,001, exclusive). Accepted here too; what our estimators cannot answer gets can_recommend = false.
IBM_LIMIT = 10_000_000
# IBM's throughput_recommender's gpus_per_node and max_nodes domains end at 1,024.
IBM_GPUS_PER_NODE = 1024


@dataclass(frozen=True)
class Domain:
    """What a model version can answer: names, methods and inclusive integer ranges."""

    models: tuple[str, ...]
    gpus: tuple[str, ...]
    methods: tuple[str, ...]
    tokens_per_sample: tuple[int, int]
    batch_size: tuple[int, int]
    source: str


@lru_cache(maxsize=8)
def answerable_domain(model_version: str = LATEST) -> Domain:
    """The card's ``answerable_domain`` when the version has one, else the catalogue's.

    Model names: every catalogue name is kept even when the card lists fewer, because a catalogued
    model with an unverified architecture is still *answered* (``can_recommend = 0`` and the reason
    naming the fix); ado rejects only names nobody knows.
    """
    versions = list_versions()
    version = versions[-1] if model_version == LATEST and versions else model_version
    card_path = models_dir() / version / CARD
    try:  # a corrupt card must never break importing the plugin: the catalogue's domain answers instead
        card = json.loads(card_path.read_text(encoding="utf-8")) if card_path.is_file() else {}
        found = (card.get("answerable_domain") if isinstance(card, dict) else None) or {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        logger.warning("model version %s: unreadable %s (%s); using the catalogue's domain", version, CARD, exc)
        found = {}
    catalogue = catalogue_domain()
    return Domain(
        models=tuple(dict.fromkeys([*found.get("models", ()), *list_models()])),
        gpus=tuple(found.get("gpus") or catalogue["gpus"]),
        methods=tuple(found.get("methods") or catalogue["methods"]),
        tokens_per_sample=tuple(found.get("tokens_per_sample") or catalogue["tokens_per_sample"]),
        batch_size=tuple(found.get("batch_size") or catalogue["batch_size"]),
        source=str(card_path) if found else "autoconf catalogue",
    )


def _default_estimator() -> str:
    """hybrid (design §4) once it can be loaded; theory until then."""
    try:
        get_estimator(DEFAULT_ESTIMATOR, None)
    except (NotBuiltError, ImportError) as exc:
        logger.info("default estimator %s unavailable (%s); experiments default to theory", DEFAULT_ESTIMATOR, exc)
        return "theory"
    return DEFAULT_ESTIMATOR


# --- property declarations ------------------------------------------------------------------


def _prop(identifier: str, description: str | None, **domain: Any) -> ConstitutiveProperty:  # noqa: ANN401
    return ConstitutiveProperty(
        identifier=identifier, propertyDomain=PropertyDomain(**domain), metadata={"description": description or ""}
    )


def _categorical(identifier: str, description: str | None, values: list[Any]) -> ConstitutiveProperty:  # noqa: ANN401
    return _prop(identifier, description, variableType=VariableTypeEnum.CATEGORICAL_VARIABLE_TYPE, values=values)


def _integer(identifier: str, description: str | None, low: int, high: int) -> ConstitutiveProperty:
    """Integers low..high inclusive (ado's domainRange excludes its upper end)."""
    return _prop(identifier, description, variableType=VariableTypeEnum.DISCRETE_VARIABLE_TYPE,
                 interval=1, domainRange=[low, high + 1])


def _job_knob(name: str) -> ConstitutiveProperty:
    field = Job.model_fields[name]
    if field.annotation is bool:
        return _prop(name, field.description, variableType=VariableTypeEnum.BINARY_VARIABLE_TYPE)
    if field.annotation is int:
        return _integer(name, field.description, *job_field_range(name))
    if field.annotation == int | None:  # 0 stands for None (answers.NONE_WORDS: the model's own size)
        return _integer(name, f"{field.description} 0 = the model's default.", 0, job_field_range(name)[1])
    return _categorical(name, field.description, list(get_args(field.annotation)))


DOMAIN = answerable_domain()
VERSIONS = [LATEST, *list_versions()]
# IBM's version names are accepted too: one that is not also ours is answered by our newest, with a note.
ACCEPTED_VERSIONS = [*VERSIONS, *(v for v in IBM_VERSIONS if v not in VERSIONS)]
DEFAULT_ESTIMATOR_NAME = _default_estimator()
JOB_DEFAULTS = KNOB_DEFAULTS  # ado's SFTTrainer stack (fms-hf-tuning, not the CLI's hf-trainer); 0 = the model's own

REQUIRED = [
    # Open: any name our resolver knows (catalogue names and aliases, Hugging Face ids, local config.json
    # paths) and IBM's family names (granite-8b -> granite-3.1-8b-instruct, ...); an unknown one is answered
    # with can_recommend = false and the closest names. The catalogue names are listed as the known values.
    _prop("model_name", "Model: catalogue name or alias, Hugging Face id, local config.json path, or one of IBM "
          "ado-autoconf's family names.", variableType=VariableTypeEnum.OPEN_CATEGORICAL_VARIABLE_TYPE,
          values=list(DOMAIN.models)),
    _categorical("method", "Fine-tuning method: full, lora or qlora.", list(DOMAIN.methods)),
    _categorical("gpu_model", "GPU in ado's spelling, e.g. NVIDIA-A100-80GB-PCIe.", list(DOMAIN.gpus)),
    _integer("tokens_per_sample", Job.model_fields["tokens_per_sample"].description, 1, IBM_LIMIT),
    _integer("batch_size", Job.model_fields["batch_size"].description, 1, IBM_LIMIT),
]
NUMBER_GPUS = _integer("number_gpus", "Total GPUs across all workers; per-device batch = batch_size / number_gpus.",
                       1, NUMBER_GPUS_LIMIT)
COMMON_OPTIONAL = [
    _categorical("model_version", "Learned model version (AutoGluonModels/<version>); 'latest' = newest installed; "
                 "IBM ado-autoconf's names (4.0.0, ...) = our newest, said in reason.", ACCEPTED_VERSIONS),
    _categorical("estimator", "Estimator: theory, learned, hybrid (default once built) or traced.", list(ESTIMATORS)),
    # IBM's throughput_recommender accepts up to 1,024; one worker here holds at most 8 (Placement).
    _integer("gpus_per_node", f"GPUs per worker (node), at most {GPUS_PER_NODE_LIMIT} used; more GPUs than this "
             "means more workers.", 1, IBM_GPUS_PER_NODE),
    *[_job_knob(name) for name in JOB_KNOBS],
    _prop("from_config", "The text of your training config (axolotl, torchtune, LLaMA-Factory, LitGPT, TRL / "
          "Transformers, fms-hf-tuning, ms-swift; docs/from.md): it sets the job fields this point leaves at their "
          "defaults (precision, accumulation, checkpointing, attention, LoRA, optimizer, packing, framework); "
          "model_name, method, gpu_model, tokens_per_sample and batch_size stay the point's. Empty = none.",
          variableType=VariableTypeEnum.UNKNOWN_VARIABLE_TYPE),
]
SEARCH_OPTIONAL = [
    _integer("max_gpus", f"Largest total number of GPUs the search may recommend (searched up to {MAX_GPUS_LIMIT}).",
             1, IBM_LIMIT),
    # A 0.001 grid rather than a continuous range: ado's continuous check compares a string with a
    # number and crashes (TypeError), its discrete check rejects a string cleanly.
    _prop("max_oom_risk", "Highest accepted out-of-memory risk (0-1, steps of 0.001) at the recommended placement.",
          variableType=VariableTypeEnum.DISCRETE_VARIABLE_TYPE, interval=OOM_RISK_STEP,
          domainRange=[0.0, round(1.0 + OOM_RISK_STEP, 3)]),
    _prop("strict", "If true, points outside the version's training domain get can_recommend = 0.",
          variableType=VariableTypeEnum.BINARY_VARIABLE_TYPE),
]
RECOMMENDER_OUTPUTS = ["can_recommend", "gpus", "workers", "number_gpus", "peak_memory_gib", "oom_risk",
                       "tokens_per_second", "reason", "answered_by"]
ESTIMATE_OUTPUTS = [*ESTIMATE_FIGURES, "reason", "answered_by"]  # the Answer's memory and throughput figures
# Run each point inside the actuator process instead of as one Ray task per point: an answer takes
# ~1 ms and the estimator cache stays warm; measured here, 400 points of sweep/space.yaml took 36 s of
# operation time this way against 47 s as Ray tasks.
USE_RAY = False
# IBM ado-autoconf's spellings for the avoid-OOM and throughput recommenders.
PER_DEVICE_BATCH = _integer("per_device_train_batch_size", "Samples per GPU per step; kept when GPUs are added.",
                            1, IBM_LIMIT)
REQUESTED_GPUS = _integer("number_gpus", "GPUs requested; kept if the job fits there.", 1, NUMBER_GPUS_LIMIT)
GPUS_PER_WORKER = _integer("gpus_per_worker", "GPUs per worker (IBM's name; at most gpus_per_node and 8 are used); "
                           "more GPUs than this means more workers.", 1, IBM_LIMIT)
FREE_BATCH = _integer("batch_size", "Global batch per optimizer step; 0 = free (per-device batch 1-256 searched).", 0,
                      IBM_LIMIT)
MAX_NODES = _integer("max_nodes", "Most workers (nodes) the search may use.", 1, NUMBER_GPUS_LIMIT // GPUS_PER_NODE_LIMIT)
SEARCH_KNOBS = [_job_knob(name) for name in SEARCH_KNOB_NAMES]
COMMON_SEARCH = [COMMON_OPTIONAL[0], COMMON_OPTIONAL[1]]  # model_version, estimator
AVOID_OOM_OUTPUTS = ["can_recommend", "gpus", "workers", "total_gpus", "global_batch_size", "peak_memory_gib",
                     "oom_risk", "tokens_per_second", "reason", "answered_by"]
THROUGHPUT_OUTPUTS = ["can_recommend", "gpus", "workers", "effective_batch_size", "per_device_batch_size",
                      "estimated_throughput", "total_gpus", "gradient_accumulation_steps", "tensor_parallel",
                      "pipeline_parallel", "data_parallel", "sharding", "activation_checkpointing", "peak_memory_gib",
                      "oom_risk", "runner_up", "reason", "answered_by"]
