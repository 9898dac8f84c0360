"""ado custom experiments (design §8): min_gpu, avoid_oom and throughput recommenders, resource_estimate.

Thin decorated functions: each passes its arguments, as one point, to the batch function of
``answers.py`` that the ``autoconf_grid`` operator calls with whole spaces; the inputs (domains,
descriptions, defaults) are declared in ``properties.py``; the Job knobs each takes come from the Job's
metadata (``offering``). ado registers the experiments through the
``ado.custom_experiments`` entry point; the experiment identifier is the function's name. Parameter
names = property identifiers = YAML keys.

A point ado lets through is always answered: a problem with the input becomes ``can_recommend = 0``
(or ``fits = 0``) with the reason; only a broken installation raises.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ado.modules.actuators.custom_experiments import custom_experiment

from autoconf.defaults import IBM_MAX_GPUS, MAX_GPUS, MAX_OOM_RISK
from autoconf.interfaces.ado import answers
from autoconf.interfaces.ado.answers import JOB_KNOBS, KNOB_DEFAULTS, LATEST, MEMORY_COMPONENTS
from autoconf.interfaces.ado.answers import SEARCH_KNOBS as SEARCH_KNOB_NAMES
from autoconf.interfaces.ado.guard import prevalidated
from autoconf.interfaces.ado.properties import (
    AVOID_OOM_OUTPUTS,
    COMMON_OPTIONAL,
    COMMON_SEARCH,
    DEFAULT_ESTIMATOR_NAME,
    DOMAIN,
    ESTIMATE_OUTPUTS,
    FREE_BATCH,
    GPUS_PER_NODE_LIMIT,
    GPUS_PER_WORKER,
    MAX_NODES,
    NUMBER_GPUS,
    PER_DEVICE_BATCH,
    RECOMMENDER_OUTPUTS,
    REQUESTED_GPUS,
    REQUIRED,
    SEARCH_KNOBS,
    SEARCH_OPTIONAL,
    THROUGHPUT_OUTPUTS,
    USE_RAY,
    answerable_domain,
)

__all__ = ["DEFAULT_ESTIMATOR_NAME", "DOMAIN", "MEMORY_COMPONENTS", "answerable_domain", "avoid_oom_recommender",
           "min_gpu_recommender", "resource_estimate", "throughput_recommender"]
MAX_RISK = SEARCH_OPTIONAL[1]
_F = TypeVar("_F", bound=Callable[..., dict[str, Any]])
# ado ships no type information: its decorator, typed here at our boundary.
_experiment: Callable[..., Callable[[_F], _F]] = custom_experiment


def offering(knobs: Sequence[str]) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """The experiment with a keyword parameter per Job knob of ``knobs`` (answers.JOB_KNOBS, from the Job's
    metadata) and ado's default for it, in place of its ``**knobs``: ado reads the parameters and their defaults
    from the signature, so a new knob is a property of every experiment without an edit here."""
    def offer(function: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        own = [p for p in inspect.signature(function).parameters.values() if p.kind is not p.VAR_KEYWORD]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=KNOB_DEFAULTS[name],
                                   annotation=type(KNOB_DEFAULTS[name]).__name__) for name in knobs]
        signature = inspect.signature(function).replace(parameters=[*own, *added])

        @functools.wraps(function)
        def with_knobs(*args: Any, **kwargs: Any) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return function(**bound.arguments)

        with_knobs.__signature__ = signature  # type: ignore[attr-defined]  # what inspect.signature (and ado) reads
        return with_knobs

    return offer


# --- experiments ------------------------------------------------------------------------------

@_experiment(
    required_properties=REQUIRED, optional_properties=[*COMMON_OPTIONAL, *SEARCH_OPTIONAL, GPUS_PER_WORKER],
    output_property_identifiers=RECOMMENDER_OUTPUTS, use_ray=USE_RAY,
    metadata={"description": "Fewest GPUs (gpus per worker x workers) on which the job fits, with the "
              "peak memory, OOM risk and tokens/s there; can_recommend = 0 and the reason otherwise."},
)
@offering(JOB_KNOBS)
def min_gpu_recommender(
    model_name: str, method: str, gpu_model: str, tokens_per_sample: int, batch_size: int,
    model_version: str = LATEST, estimator: str = DEFAULT_ESTIMATOR_NAME, gpus_per_node: int = GPUS_PER_NODE_LIMIT,
    from_config: str = "", max_gpus: int = IBM_MAX_GPUS, max_oom_risk: float = MAX_OOM_RISK, strict: bool = False,
    gpus_per_worker: int = GPUS_PER_NODE_LIMIT, **knobs: Any,
) -> dict[str, Any]:
    """Recommend the minimum number of GPUs and workers for one fine-tuning job (IBM's default max_gpus 8)."""
    return answers.min_gpu_answers([_point(locals())])[0]


@_experiment(
    required_properties=[*REQUIRED, NUMBER_GPUS], optional_properties=COMMON_OPTIONAL,
    output_property_identifiers=ESTIMATE_OUTPUTS, use_ray=USE_RAY,
    metadata={"description": "Per-GPU memory by component (GiB), peak, fit, OOM risk and tokens/s of the job "
              "on number_gpus GPUs (FSDP full shard when number_gpus > 1, as fms-hf-tuning)."},
)
@offering(JOB_KNOBS)
def resource_estimate(
    model_name: str, method: str, gpu_model: str, tokens_per_sample: int, batch_size: int, number_gpus: int,
    model_version: str = LATEST, estimator: str = DEFAULT_ESTIMATOR_NAME, gpus_per_node: int = GPUS_PER_NODE_LIMIT,
    from_config: str = "", **knobs: Any,
) -> dict[str, Any]:
    """Estimate the memory breakdown and throughput of one job on a given number of GPUs."""
    return answers.resource_estimate_answers([_point(locals())])[0]


@_experiment(
    required_properties=[*REQUIRED[:4], PER_DEVICE_BATCH, REQUESTED_GPUS],
    optional_properties=[GPUS_PER_WORKER, SEARCH_OPTIONAL[0], *COMMON_SEARCH, MAX_RISK, *SEARCH_KNOBS],
    output_property_identifiers=AVOID_OOM_OUTPUTS, use_ray=USE_RAY,
    metadata={"description": "Keeps the requested number of GPUs if the job fits there, else the fewest GPUs "
              "above it that fit; the per-device batch is kept (IBM ado-autoconf's avoid_oom_recommender)."},
)
@offering(SEARCH_KNOB_NAMES)
def avoid_oom_recommender(
    model_name: str, method: str, gpu_model: str, tokens_per_sample: int, per_device_train_batch_size: int,
    number_gpus: int, gpus_per_worker: int = GPUS_PER_NODE_LIMIT, max_gpus: int = MAX_GPUS, model_version: str = LATEST,
    estimator: str = DEFAULT_ESTIMATOR_NAME, max_oom_risk: float = MAX_OOM_RISK, **knobs: Any,
) -> dict[str, Any]:
    """Keep number_gpus if the job does not run out of memory there, else the fewest GPUs that fit."""
    return answers.avoid_oom_answers([_point(locals())])[0]


@_experiment(
    required_properties=REQUIRED[:4],
    optional_properties=[FREE_BATCH, MAX_NODES, COMMON_OPTIONAL[2], *COMMON_SEARCH, MAX_RISK, *SEARCH_KNOBS],
    output_property_identifiers=THROUGHPUT_OUTPUTS, use_ray=USE_RAY,
    metadata={"description": "The fastest parallel layout (GPU count x data x tensor x pipeline parallel x "
              "sharding x micro-batch x accumulation x checkpointing; the global batch free when batch_size is 0) that "
              "fits with oom_risk <= max_oom_risk, with the runner-up and why it lost (IBM ado-autoconf's "
              "throughput_recommender, extended)."},
)
@offering(SEARCH_KNOB_NAMES)
def throughput_recommender(
    model_name: str, method: str, gpu_model: str, tokens_per_sample: int, batch_size: int = 0, max_nodes: int = 1,
    gpus_per_node: int = GPUS_PER_NODE_LIMIT, model_version: str = LATEST, estimator: str = DEFAULT_ESTIMATOR_NAME,
    max_oom_risk: float = MAX_OOM_RISK, **knobs: Any,
) -> dict[str, Any]:
    """The layout with the most tokens/s at the requested global batch (or any batch when 0); the input
    gradient_checkpointing is searched (on and off), not kept."""
    return answers.throughput_answers([_point(locals())])[0]


def _point(arguments: dict[str, Any]) -> dict[str, Any]:
    """An experiment's arguments as one point: its own and its knobs side by side."""
    return {**{k: v for k, v in arguments.items() if k != "knobs"}, **arguments["knobs"]}


# Wrong types (a string for a number, NaN, a 400-digit integer) are answered by our own check before
# ado's domain check can crash on them (interfaces/ado/guard.py); ado loads the experiments by name.
min_gpu_recommender = prevalidated(min_gpu_recommender,
                                   {"can_recommend": False, "gpus": 0, "workers": 0, "number_gpus": 0})
resource_estimate = prevalidated(resource_estimate, {"fits": 0})
avoid_oom_recommender = prevalidated(avoid_oom_recommender, {"can_recommend": False, "gpus": 0, "workers": 0})
throughput_recommender = prevalidated(throughput_recommender, {"can_recommend": False, "gpus": 0, "workers": 0})
