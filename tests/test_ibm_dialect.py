"""IBM ado-autoconf's dialect, fast checks without IBM's release (tests/test_ibm_dropin.py runs IBM's own files).

The ado experiments take IBM's inputs and values (gpus_per_worker, IBM's version names, its family model names,
boolean can_recommend, max_gpus 8); IBM's import paths return IBM's dict shapes. Expected values come from IBM's
documented rules: its family table (docs of ado-autoconf 2.1.2, config_mapper), its worker layout (the fewest
workers of at most gpus_per_worker GPUs, GPUs spread evenly) and its return shapes.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

pytest.importorskip("ado")

from autoconf.interfaces.ado import experiments
from autoconf.interfaces.ado.ibm.engine import EnginePredictor

A100 = "NVIDIA-A100-80GB-PCIe"
JOB = {"model_name": "llama-7b", "method": "lora", "gpu_model": A100, "tokens_per_sample": 8192, "batch_size": 16,
       "estimator": "theory"}


@pytest.mark.parametrize(("name", "family"), [
    ("granite-8b", "granite-3.1-8b-instruct"), ("granite-3.3-8b-instruct", "granite-3.1-8b-instruct"),
    ("granite-2b-base", "granite-3.1-2b"), ("llama-3.1-8b-instruct", "llama3.1-8b"),
    ("granite-4.0-small", "granite-4.0-h-small"), ("granite-4.0-micro-base", "granite-4.0-h-micro"),
    ("custom-model-123", "custom-model-123"), ("granite-8b-code-instruct-128k", "granite-8b-code-instruct-128k"),
])
def test_ibm_family_table(name: str, family: str) -> None:
    from autoconf.utils.config_mapper import map_to_valid, map_valid_model_name

    assert map_valid_model_name(name) == family
    assert map_to_valid({"model_name": name, "gpu_model": "NVIDIA A100-SXM4-80GB"}) == {
        "model_name": family, "gpu_model": "NVIDIA-A100-SXM4-80GB"}


def test_ado_experiment_answers_ibm_family_names_as_their_model() -> None:
    mapped = experiments.min_gpu_recommender(**{**JOB, "model_name": "granite-8b"})
    direct = experiments.min_gpu_recommender(**{**JOB, "model_name": "granite-3.1-8b-instruct"})
    assert mapped["can_recommend"] is True
    assert (mapped["gpus"], mapped["workers"], mapped["peak_memory_gib"]) == (
        direct["gpus"], direct["workers"], direct["peak_memory_gib"])


@pytest.mark.parametrize("version", ["3.1.0", "4.0.0", "4.1.0"])
def test_ado_experiment_answers_ibm_version_names_with_a_note(version: str) -> None:
    out = experiments.min_gpu_recommender(**{**JOB, "estimator": "hybrid", "model_version": version})
    assert out["can_recommend"] is True
    assert f"model_version {version} is IBM ado-autoconf's" in out["reason"]


@pytest.mark.parametrize("per_worker", [1, 2, 4, 8])
def test_ado_experiment_takes_ibms_gpus_per_worker(per_worker: int) -> None:
    free = experiments.min_gpu_recommender(**JOB)
    total = free["gpus"] * free["workers"]
    out = experiments.min_gpu_recommender(**JOB, gpus_per_worker=per_worker)
    workers = math.ceil(total / per_worker)  # IBM's layout
    assert (out["workers"], out["gpus"]) == (workers, math.ceil(total / workers))


def test_ado_experiment_defaults_to_ibms_max_gpus() -> None:
    """llama3.1-70b, full, 8192 x 64 on A100-80GB: more than 8 GPUs (140 GB of bf16 weights alone, plus
    gradients and AdamW states); IBM's default max_gpus 8 refuses, max_gpus 64 answers."""
    job = {**JOB, "model_name": "llama3.1-70b", "method": "full", "batch_size": 64}
    out = experiments.min_gpu_recommender(**job)
    assert out["can_recommend"] is False and "up to 8 GPUs" in out["reason"]
    assert experiments.min_gpu_recommender(**job, max_gpus=64)["can_recommend"] is True


def test_direct_calls_return_ibms_shapes() -> None:
    from autoconf.min_gpu_recommender import avoid_oom_recommender, load_model, min_gpu_recommender
    from autoconf.throughput_recommender import throughput_recommender

    point = {k: v for k, v in JOB.items() if k != "estimator"}
    found = min_gpu_recommender(**point, model_version="4.0.0")
    assert found["can_recommend"] is True and found["gpus"] >= 1 and found["workers"] >= 1
    none = min_gpu_recommender(**{**point, "model_name": "llama3.1-405b", "method": "full"}, model_version="4.0.0")
    assert none["can_recommend"] is False and "gpus" not in none and "workers" not in none and none["reason"]
    bad = avoid_oom_recommender(**{k: v for k, v in point.items() if k != "batch_size"},
                                per_device_train_batch_size=1, number_gpus=2, gpus_per_worker=0)
    assert bad == {"can_recommend": False, "gpus": -1, "workers": -1, "reason": bad["reason"]}
    fast = throughput_recommender(**{k: v for k, v in point.items() if k != "batch_size"})
    assert fast["can_recommend"] is True
    assert fast["effective_batch_size"] == fast["per_device_batch_size"] * fast["gpus"] * fast["workers"]
    with pytest.raises(ValueError, match="Unknown model_version"):
        load_model("9.9.9")


def test_engine_predictor_is_resource_estimates_fit_at_five_percent() -> None:
    """The classifier IBM's recommenders ask says 1 exactly where resource_estimate's oom_risk <= 0.05."""
    rows = [{**{k: v for k, v in JOB.items() if k != "estimator"}, "number_gpus": n, "batch_size": 16 * n}
            for n in (1, 2, 4, 8)]
    said = EnginePredictor(estimator="theory").predict(pd.DataFrame(rows)).tolist()
    risks = [experiments.resource_estimate(**{**JOB, **row})["oom_risk"] for row in rows]
    assert said == [int(r <= 0.05) for r in risks]


@pytest.mark.parametrize(("experiment", "entity"), [
    ("min_gpu_recommender", {**{k: v for k, v in JOB.items() if k != "estimator"}, "model_version": "4.0.0",
                             "gpus_per_worker": 8, "max_gpus": 8}),
    ("avoid_oom_recommender", {"model_name": "llama-7b", "method": "lora", "gpu_model": A100,
                               "tokens_per_sample": 8192, "per_device_train_batch_size": 2, "number_gpus": 16,
                               "gpus_per_worker": 8, "max_gpus": 64, "model_version": "4.0.0"}),
    ("throughput_recommender", {"model_name": "granite-4.0-small-base-prerelease", "method": "lora",
                                "gpu_model": A100, "tokens_per_sample": 8192, "max_nodes": 2, "gpus_per_node": 8}),
])
def test_ibm_points_are_valid_entities(experiment: str, entity: dict[str, object]) -> None:
    """IBM's points (its README's, its avoid-OOM test's, an open model name) pass ado's own validation here."""
    from ado.modules.actuators.registry import ActuatorRegistry
    from ado.schema.point import SpacePoint
    from ado.schema.reference import ExperimentReference

    point = SpacePoint.model_validate({"entity": entity, "experiments": [
        {"actuatorIdentifier": "custom_experiments", "experimentIdentifier": experiment}]})
    found = ActuatorRegistry().experimentForReference(
        ExperimentReference(actuatorIdentifier="custom_experiments", experimentIdentifier=experiment))
    assert found.validate_entity(point.to_entity())
    out = getattr(experiments, experiment)(**entity)
    assert out["can_recommend"] is True, out
