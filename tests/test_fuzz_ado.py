"""Fuzz the ado experiment functions (issue 16): good values with up to three replaced by hostile ones
(strings for numbers, NaN, huge integers, bytes, complex, lists). Every call is answered by our check
or refused by ado's own domain check with its clean ValueError; a refusal always has a reason; a
version asked for by name is never answered by theory."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("ado")

from tests._fuzz import ado_calls, ado_outcome  # noqa: E402


@settings(max_examples=400, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(call=ado_calls())
def test_ado_functions_answer_every_type(call: tuple[str, dict[str, Any]]) -> None:
    assert ado_outcome(*call) == "ok", call


BASE = {"model_name": "llama3.1-8b", "method": "lora", "gpu_model": "NVIDIA-A100-80GB-PCIe", "tokens_per_sample": 2048,
        "batch_size": 16}


@pytest.mark.parametrize("key, value, says", [
    ("tokens_per_sample", "2048", "tokens_per_sample must be a number"),  # was TypeError inside ado
    ("batch_size", 10**30, "batch_size must be a finite number"),  # was TypeError (numpy.isnan of a huge int)
    ("max_oom_risk", "0.05", "max_oom_risk must be a number"),
    ("max_gpus", float("nan"), "max_gpus must be a finite number"),
    ("strict", "maybe", "strict must be true or false: must be one of true, yes, on"),
    ("model_name", b"llama", "model_name must be a name"),
    ("lora_r", 8.5, "lora_r must be a whole number"),
])
def test_wrong_types_get_a_reason(key: str, value: Any, says: str) -> None:
    from autoconf.interfaces.ado.experiments import min_gpu_recommender

    out = min_gpu_recommender(**{**BASE, key: value})
    assert out["can_recommend"] == 0 and says in out["reason"]


def test_ado_still_sees_the_experiments() -> None:
    """The type-check wrapper keeps what ado reads from a decorated function."""
    from autoconf.interfaces.ado import experiments

    for fn in (experiments.min_gpu_recommender, experiments.resource_estimate):
        assert fn._is_custom_experiment and fn._experiment.identifier == fn.__name__
    assert experiments.resource_estimate(**BASE, number_gpus=2, estimator="theory")["fits"] in (0, 1)
