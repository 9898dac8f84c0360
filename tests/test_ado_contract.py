"""Contract of the ado experiments, checked with the real ado-core (in-process, no Ray).

Pins the experiment identifiers, required/optional properties, domains, defaults and outputs;
validates every YAML in examples/ and sweep/ against the experiments as ado itself does; calls the
decorated functions directly, including with bad points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("ado")

from ado.core.discoveryspace.config import DiscoverySpaceConfiguration
from ado.core.operation.config import DiscoveryOperationResourceConfiguration
from ado.modules.actuators.registry import ActuatorRegistry
from ado.schema.entityspace import EntitySpaceRepresentation
from ado.schema.experiment import Experiment
from ado.schema.measurementspace import MeasurementSpace
from ado.schema.point import SpacePoint
from ado.schema.reference import ExperimentReference

from autoconf.catalog import list_gpus, list_models
from autoconf.interfaces.ado import experiments

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ["model_name", "method", "gpu_model", "tokens_per_sample", "batch_size"]
COMMON_OPTIONAL = ["model_version", "estimator", "gpus_per_node", "dtype", "gradient_accumulation_steps",
                   "gradient_checkpointing", "attention", "fused_loss", "lora_r", "framework", "images_per_sample",
                   "image_resolution", "freeze_vision", "from_config"]
CONTRACT = {
    "min_gpu_recommender": {
        "required": REQUIRED,
        "optional": [*COMMON_OPTIONAL, "max_gpus", "max_oom_risk", "strict", "gpus_per_worker"],  # IBM's name last
        "outputs": ["can_recommend", "gpus", "workers", "number_gpus", "peak_memory_gib", "oom_risk",
                    "tokens_per_second", "reason", "answered_by"],
    },
    "resource_estimate": {
        "required": [*REQUIRED, "number_gpus"],
        "optional": COMMON_OPTIONAL,
        "outputs": ["weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "logits_gib",
                    "overhead_gib", "peak_memory_gib", "capacity_gib", "fits", "oom_risk", "tokens_per_second",
                    "reason", "answered_by"],
    },
}
SEARCH_KNOBS = ["dtype", "gradient_checkpointing", "attention", "fused_loss", "lora_r", "framework", "images_per_sample",
                "image_resolution", "freeze_vision"]
CONTRACT.update({
    "avoid_oom_recommender": {  # IBM ado-autoconf's input spellings
        "required": [*REQUIRED[:4], "per_device_train_batch_size", "number_gpus"],
        "optional": ["gpus_per_worker", "max_gpus", "model_version", "estimator", "max_oom_risk", *SEARCH_KNOBS],
        "outputs": ["can_recommend", "gpus", "workers", "total_gpus", "global_batch_size", "peak_memory_gib",
                    "oom_risk", "tokens_per_second", "reason", "answered_by"],
    },
    "throughput_recommender": {
        "required": REQUIRED[:4],
        "optional": ["batch_size", "max_nodes", "gpus_per_node", "model_version", "estimator", "max_oom_risk",
                     *SEARCH_KNOBS],
        "outputs": ["can_recommend", "gpus", "workers", "effective_batch_size", "per_device_batch_size",
                    "estimated_throughput", "total_gpus", "gradient_accumulation_steps", "tensor_parallel",
                    "pipeline_parallel", "data_parallel", "sharding", "activation_checkpointing", "peak_memory_gib",
                    "oom_risk", "runner_up", "reason", "answered_by"],
    },
})
DEFAULTS = {
    "gpus_per_worker": 8, "max_nodes": 1, "batch_size": 0,
    "model_version": "latest", "gpus_per_node": 8, "dtype": "bf16", "gradient_accumulation_steps": 1,
    "gradient_checkpointing": True, "attention": "flash", "fused_loss": False, "lora_r": 8,
    "framework": "fms-hf-tuning",  # ado's SFTTrainer stack (the CLI/REST default is hf-trainer)
    "images_per_sample": 0, "image_resolution": 0, "freeze_vision": True,  # text-only; 0 = the model's resolution
    "max_gpus": 8, "max_oom_risk": 0.05, "strict": False, "from_config": "",  # max_gpus: IBM's 8 for min_gpu_recommender
}
AVOID_OOM_MAX_GPUS = 64  # IBM's avoid_oom_recommender default
# model_name and gpu_model values of the predecessor's published space (reference/ibm-ado-autoconf-readme.md)
PUBLISHED_SPACE_MODELS = (
    "granite-3.1-2b", "granite-20b-v2", "granite-13b-v2", "granite-3-8b", "granite-3.1-3b-a800m-instruct",
    "granite-3.1-8b-instruct", "granite-34b-code-base", "granite-3b-code-base-128k", "granite-7b-base",
    "granite-8b-code-base", "granite-8b-japanese", "llama-13b", "llama-7b", "llama2-70b", "llama3-70b", "llama3-8b",
    "llama3.1-405b", "llama3.1-70b", "llama3.1-8b", "mistral-123b-v2", "mistral-7b-v0.1", "mixtral-8x7b-instruct-v0.1",
)
PUBLISHED_SPACE_GPUS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe", "L40S")
SIMPLE = {"model_name": "llama-7b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe",
          "tokens_per_sample": 8192, "batch_size": 16}


@pytest.fixture(scope="module")
def registry() -> ActuatorRegistry:
    return ActuatorRegistry()


def _experiment(registry: ActuatorRegistry, identifier: str) -> Experiment:
    return registry.experimentForReference(
        ExperimentReference(actuatorIdentifier="custom_experiments", experimentIdentifier=identifier)
    )


def _domain(experiment: Experiment, identifier: str) -> Any:
    props = [*experiment.requiredProperties, *experiment.optionalProperties]
    return next(p for p in props if p.identifier == identifier).propertyDomain


@pytest.mark.parametrize("identifier", sorted(CONTRACT))
def test_registered_with_pinned_properties(registry: ActuatorRegistry, identifier: str) -> None:
    """ado finds the experiment through the entry point (a broken import would only log a warning)."""
    exp = _experiment(registry, identifier)
    assert [p.identifier for p in exp.requiredProperties] == CONTRACT[identifier]["required"]
    assert [p.identifier for p in exp.optionalProperties] == CONTRACT[identifier]["optional"]
    assert [p.identifier for p in exp.targetProperties] == CONTRACT[identifier]["outputs"]
    assert exp.version is None  # unversioned: YAMLs reference it by name alone
    assert all((p.metadata or {}).get("description") for p in [*exp.requiredProperties, *exp.optionalProperties])


@pytest.mark.parametrize("identifier", sorted(CONTRACT))
def test_defaults(registry: ActuatorRegistry, identifier: str) -> None:
    exp = _experiment(registry, identifier)
    defaults = {v.property.identifier: v.value for v in exp.defaultParameterization}
    expected = {k: v for k, v in DEFAULTS.items() if k in CONTRACT[identifier]["optional"]}
    if identifier == "avoid_oom_recommender":
        expected["max_gpus"] = AVOID_OOM_MAX_GPUS
    assert {k: defaults[k] for k in expected} == expected
    # design: hybrid answers by default whenever a learned version is installed (this repository ships one)
    assert any((ROOT / "AutoGluonModels").glob("*/card.json"))
    assert defaults["estimator"] == "hybrid"


def test_domains(registry: ActuatorRegistry) -> None:
    exp = _experiment(registry, "min_gpu_recommender")
    models, gpus = _domain(exp, "model_name").values, _domain(exp, "gpu_model").values
    # open (IBM's throughput_recommender's is): any name the resolver or IBM's family mapping answers;
    # the catalogue names are its listed values
    assert _domain(exp, "model_name").variableType == "OPEN_CATEGORICAL_VARIABLE_TYPE"
    assert len(models) == len(set(models)) and len(gpus) == len(set(gpus))
    # the predecessor's published 3,960-point space (reference/ibm-ado-autoconf-readme.md) must stay valid
    assert set(PUBLISHED_SPACE_MODELS) <= set(models)
    assert set(PUBLISHED_SPACE_GPUS) <= set(gpus)
    assert set(list_models(answerable_only=True)) <= set(models)
    assert set(gpus) <= set(list_gpus())
    assert _domain(exp, "method").values == ["full", "lora", "qlora"]
    assert _domain(exp, "estimator").values == ["theory", "learned", "hybrid", "traced"]
    assert _domain(exp, "dtype").values == ["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]
    # IBM ado-autoconf's ranges (its domains end at 10,000,001 and 1,025, exclusive)
    assert _domain(exp, "batch_size").domainRange == [1, 10_000_001]
    assert _domain(exp, "tokens_per_sample").domainRange == [1, 10_000_001]
    assert _domain(exp, "gpus_per_node").domainRange == [1, 1025]
    assert _domain(exp, "gpus_per_worker").domainRange == [1, 10_000_001]
    assert _domain(exp, "model_version").values[0] == "latest"
    assert {"3.1.0", "4.0.0", "4.1.0"} <= set(_domain(exp, "model_version").values)  # IBM's version names


def test_experiment_dump_validate_round_trip(registry: ActuatorRegistry) -> None:
    for identifier in CONTRACT:
        exp = _experiment(registry, identifier)
        assert Experiment.model_validate(exp.model_dump()) == exp


@pytest.mark.parametrize(("name", "identifier", "valid"), [
    ("simple", "min_gpu_recommender", True),
    ("resource_estimate", "resource_estimate", True),
    ("out_of_domain", "min_gpu_recommender", False),
])
def test_example_points(registry: ActuatorRegistry, name: str, identifier: str, valid: bool) -> None:
    point = SpacePoint.model_validate(yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text()))
    assert [r.experimentIdentifier for r in point.experiments] == [identifier]
    assert _experiment(registry, identifier).validate_entity(point.to_entity()) is valid


@pytest.mark.parametrize(("name", "size"), [("space.yaml", 3960), ("space_small.yaml", 36),
                                            ("space_objectives.yaml", 32)])
def test_sweep_spaces_fit_the_experiment(registry: ActuatorRegistry, name: str, size: int) -> None:
    config = DiscoverySpaceConfiguration.model_validate(yaml.safe_load((ROOT / "sweep" / name).read_text()))
    entity_space = EntitySpaceRepresentation(constitutiveProperties=config.entitySpace)
    measurement = MeasurementSpace.measurementSpaceFromExperimentReferences(config.experiments)
    assert measurement.checkEntitySpaceCompatible(entity_space, strict=True)
    assert entity_space.size == size


def test_operation_yaml_visits_every_point() -> None:
    config = DiscoveryOperationResourceConfiguration.model_validate(
        yaml.safe_load((ROOT / "sweep" / "operation.yaml").read_text()))
    params = config.operation.parameters
    params = params if isinstance(params, dict) else params.model_dump()
    assert params["numberEntities"] == "all"
    assert params["samplerConfig"]["samplerType"] == "generator"


def test_objectives_example_is_valid_for_both_experiments(registry: ActuatorRegistry) -> None:
    point = SpacePoint.model_validate(yaml.safe_load((ROOT / "examples" / "objectives.yaml").read_text()))
    names = [r.experimentIdentifier for r in point.experiments]
    assert names == ["avoid_oom_recommender", "throughput_recommender"]
    assert all(_experiment(registry, n).validate_entity(point.to_entity()) for n in names)


def test_domains_of_the_objective_experiments(registry: ActuatorRegistry) -> None:
    avoid, fast = _experiment(registry, "avoid_oom_recommender"), _experiment(registry, "throughput_recommender")
    assert _domain(avoid, "number_gpus").domainRange == [1, 65_537]
    assert _domain(avoid, "per_device_train_batch_size").domainRange == [1, 10_000_001]
    assert _domain(avoid, "gpus_per_worker").domainRange == [1, 10_000_001]
    assert _domain(fast, "batch_size").domainRange == [0, 10_000_001]  # 0 = free
    assert _domain(fast, "max_nodes").domainRange == [1, 8193]
    assert _domain(fast, "model_name").values == _domain(avoid, "model_name").values


def test_grid_operator_registered_and_operation_yaml_valid() -> None:
    from ado.modules.operators.collections import characterize

    from autoconf.interfaces.ado import grid

    assert "autoconf_grid" in characterize.list_operators()
    meta = characterize.operators["autoconf_grid"]
    assert meta.version == grid.VERSION and meta.configuration_model is grid.GridParameters
    config = DiscoveryOperationResourceConfiguration.model_validate(
        yaml.safe_load((ROOT / "sweep" / "operation_grid.yaml").read_text()))
    params = config.operation.parameters
    params = params if isinstance(params, dict) else params.model_dump()
    assert params == {"batchSize": 500, "onlyUnmeasured": False}
    assert set(grid.batch_functions()) == set(CONTRACT)
    with pytest.raises(ValueError, match="batchSize"):
        grid.GridParameters.model_validate({"batchSize": 0})


@pytest.mark.parametrize(("experiment", "point", "expected"), [
    # 2.5B LoRA, 512 tokens, 1 sample per GPU on 2 requested GPUs: fits, so 2 GPUs and global batch 2 stay
    ("avoid_oom_recommender", {"model_name": "granite-3.1-2b", "method": "lora", "per_device_train_batch_size": 1,
                               "number_gpus": 2, "tokens_per_sample": 512}, {"total_gpus": 2, "global_batch_size": 2}),
    # batch_size 1 leaves one candidate: 1 GPU, no accumulation
    ("throughput_recommender", {"model_name": "granite-3.1-2b", "method": "lora", "batch_size": 1,
                                "tokens_per_sample": 512}, {"total_gpus": 1, "gradient_accumulation_steps": 1,
                                                            "effective_batch_size": 1, "per_device_batch_size": 1}),
])
def test_objective_experiments_direct_calls(experiment: str, point: dict[str, Any], expected: dict[str, Any]) -> None:
    out = getattr(experiments, experiment)(**{"gpu_model": "NVIDIA-A100-80GB-PCIe", "estimator": "theory", **point})
    assert out["can_recommend"] == 1 and out["gpus"] * out["workers"] == out["total_gpus"]
    assert {k: out[k] for k in expected} == expected
    assert out["answered_by"] == "theory" and 0 < out["peak_memory_gib"] < 80


def test_throughput_recommender_answers_a_layout_with_its_runner_up() -> None:
    """Full fine-tuning of an 8B model, global batch 64 on one node: the fastest fitting layout of the fine-tuning
    stack (data parallel × sharding × micro-batch × accumulation × checkpointing), its runner-up in one line."""
    out = experiments.throughput_recommender(model_name="llama3.1-8b", method="full", tokens_per_sample=2048,
                                             gpu_model="NVIDIA-A100-80GB-PCIe", batch_size=64, estimator="theory")
    assert out["can_recommend"] == 1 and out["oom_risk"] <= 0.05
    assert out["data_parallel"] * out["tensor_parallel"] * out["pipeline_parallel"] == out["total_gpus"]
    assert out["per_device_batch_size"] * out["data_parallel"] * out["gradient_accumulation_steps"] == 64
    assert out["sharding"] in ("ddp", "zero1", "zero2", "fsdp-shard-grad-op", "zero3", "fsdp")  # one node: no hybrid
    assert out["activation_checkpointing"] in (0, 1)
    assert out["runner_up"].startswith("runner-up ") and "\n" not in out["runner_up"]


def test_throughput_recommender_with_a_free_batch_picks_the_micro_batch() -> None:
    """batch_size 0: the global batch is the micro-batch × data-parallel GPUs, no accumulation."""
    out = experiments.throughput_recommender(model_name="granite-3.1-2b", method="lora", tokens_per_sample=1024,
                                             gpu_model="NVIDIA-A100-80GB-PCIe", batch_size=0, estimator="theory")
    assert out["can_recommend"] == 1 and out["gradient_accumulation_steps"] == 1
    assert out["effective_batch_size"] == out["per_device_batch_size"] * out["data_parallel"]


def test_direct_call_answers_simple_point() -> None:
    out = experiments.min_gpu_recommender(**SIMPLE)
    assert out["can_recommend"] == 1
    assert out["gpus"] >= 1 and out["workers"] >= 1
    assert out["number_gpus"] == out["gpus"] * out["workers"]
    assert 0 < out["peak_memory_gib"] <= 80
    assert out["tokens_per_second"] > 0
    assert out["answered_by"].split("@")[0] == experiments.DEFAULT_ESTIMATOR_NAME


def test_direct_call_resource_estimate_breakdown() -> None:
    out = experiments.resource_estimate(**{**SIMPLE, "model_name": "llama3.1-8b", "method": "full"}, number_gpus=4,
                                        estimator="theory")
    parts = sum(out[f"{c}_gib"] for c in experiments.MEMORY_COMPONENTS)
    assert out["peak_memory_gib"] > 0 and parts > 0
    assert out["capacity_gib"] == pytest.approx(80, rel=0.05)
    assert out["fits"] in (0, 1) and out["answered_by"] == "theory"


@pytest.mark.parametrize("bad", [
    {"batch_size": -8},                    # negative batch
    {"tokens_per_sample": 0},
    {"model_version": "9.9.9"},            # not an installed model version
    {"gpu_model": "H100"},                 # alias, not ado's spelling
])  # strings for numbers are answered by our type check (can_recommend = 0): tests/test_fuzz_ado.py
def test_bad_points_rejected_by_ado_validation(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="do not match required/optional properties"):
        experiments.min_gpu_recommender(**{**SIMPLE, **bad})


@pytest.mark.parametrize(("experiment", "extra", "output"), [
    ("min_gpu_recommender", {"model_name": "llama3.1-405b", "method": "full", "max_gpus": 1}, "can_recommend"),
    ("min_gpu_recommender", {"model_name": "gpt-5"}, "can_recommend"),  # open model_name: unknown is answered
    ("min_gpu_recommender", {"tokens_per_sample": 9_000_000}, "can_recommend"),  # IBM's range, beyond ours
])
def test_unanswerable_points_answered_with_reason(experiment: str, extra: dict[str, Any], output: str) -> None:
    out = getattr(experiments, experiment)(**{**SIMPLE, "estimator": "theory", **extra})
    assert out[output] == 0
    assert out["reason"]


def test_strict_refuses_outside_training_domain() -> None:
    """strict: a point outside the hybrid's training domain gets can_recommend = 0 and the reason.
    SIMPLE is llama-7b, a model with no measured row (data/measurements.csv), so outside any training domain."""
    relaxed = experiments.min_gpu_recommender(**SIMPLE, estimator="hybrid")
    strict = experiments.min_gpu_recommender(**SIMPLE, estimator="hybrid", strict=True)
    assert relaxed["can_recommend"] == 1 and relaxed["answered_by"].startswith("hybrid@")
    assert strict["can_recommend"] == 0 and "training domain" in strict["reason"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_point_in_the_domains_is_answered(data: st.DataObject) -> None:
    """Whatever ado lets through comes back as an answer (0/1 plus a reason), never an exception."""
    point = {
        "model_name": data.draw(st.sampled_from(experiments.DOMAIN.models)),
        "method": data.draw(st.sampled_from(experiments.DOMAIN.methods)),
        "gpu_model": data.draw(st.sampled_from(experiments.DOMAIN.gpus)),
        "tokens_per_sample": data.draw(st.integers(*experiments.DOMAIN.tokens_per_sample)),
        "batch_size": data.draw(st.integers(*experiments.DOMAIN.batch_size)),
        "gpus_per_node": data.draw(st.integers(1, 8)),
        "gradient_accumulation_steps": data.draw(st.sampled_from([1, 2, 3])),
        "dtype": data.draw(st.sampled_from(["bf16", "fp32", "amp-bf16"])),
        "estimator": data.draw(st.sampled_from(["theory", "hybrid"])),
    }
    out = experiments.min_gpu_recommender(**point)
    assert out["can_recommend"] in (0, 1)
    assert out["can_recommend"] == 1 or out["reason"]
    est = experiments.resource_estimate(**point, number_gpus=data.draw(st.integers(1, 128)))
    assert est["fits"] in (0, 1)
    assert est["fits"] == 1 or est["reason"] or est["peak_memory_gib"] > est["capacity_gib"]


def test_from_config_sets_the_fields_the_point_leaves_at_their_defaults() -> None:
    text = (ROOT / "tests/fixtures/configs/axolotl/mistral-qlora-liger.yml").read_text(encoding="utf-8")
    base = {"model_name": "mistral-7b-v0.1", "method": "qlora", "gpu_model": "NVIDIA-A100-80GB-PCIe",
            "tokens_per_sample": 8192, "batch_size": 4, "number_gpus": 1, "estimator": "theory"}
    plain_answer = experiments.resource_estimate(**base)
    with_file = experiments.resource_estimate(**base, from_config=text)
    # the file adds the Liger fused loss, paged 8-bit AdamW and axolotl's stack: less memory at the loss
    assert with_file["fits"] in (0, 1) and with_file["peak_memory_gib"] < plain_answer["peak_memory_gib"]
    from autoconf.interfaces.ado.answers import job_of

    job = job_of({**base, "from_config": text, "gradient_checkpointing": True, "lora_r": 64})
    assert (job.framework, job.fused_loss, job.optimizer, job.lora_r) == ("axolotl", True, "paged-adamw-8bit", 64)
    assert job.lora_target_modules == ("all-linear",) and job.packing is True
    bad = experiments.resource_estimate(**base, from_config="base_model: x\nmicro_batch_size: two\n")
    assert bad["fits"] == 0 and "axolotl key 'micro_batch_size'" in bad["reason"]
