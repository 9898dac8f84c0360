"""The page's job form is generated from the fields' metadata (interfaces/api/form.py, served at /api/form).

Expected controls are written here from the fields' declarations (schema/job.py, schema/placement.py), not read
from form.py; the browser side (every served field has its control, a new field shows up) is in
test_page_browser.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field

from autoconf.interfaces.api import form
from autoconf.interfaces.api.form import form_fields
from autoconf.schema import Job, Placement

OPTIONS = {"estimator", "num_samples", "epochs", "num_checkpoints", "price_per_gpu_hour_usd", "provider", "max_gpus",
           "gpus_per_node", "max_oom_risk"}


def _by_name() -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in form_fields()}


def test_every_job_and_placement_field_is_offered_once() -> None:
    names = [f["name"] for f in form_fields()]
    assert len(names) == len(set(names))
    assert set(names) == {*Job.model_fields, *Placement.model_fields, *OPTIONS}


# (field, what its declaration says the control must be)
EXPECTED = [
    ("method", {"control": "select", "choices": ["full", "lora", "qlora"], "default": "full", "main": True}),
    ("tokens_per_sample", {"control": "number", "step": 1, "min": 1, "max": 2_097_152, "unit": "tokens", "main": True}),
    ("lora_dropout", {"control": "number", "step": "any", "min": 0, "max": 1, "default": 0.0, "main": False}),
    ("lora_target_modules", {"control": "list", "default": ["q_proj", "v_proj"]}),
    ("gradient_checkpointing", {"control": "checkbox", "default": True, "group": "training stack"}),
    ("double_quant", {"control": "tristate", "default": None}),
    ("loss_kernel", {"control": "select", "choices": ["hf", "chunked", "fused-ce", "fused-linear-ce"], "default": None}),
    ("images_per_sample", {"control": "number", "min": 0, "max": 64, "unit": "images",
                           "group": "vision-language models"}),
    ("gpus_per_worker", {"control": "number", "min": 1, "max": 8, "unit": "GPUs", "group": "placement"}),
    ("strategy", {"control": "select", "default": None, "group": "placement", "part": "placement"}),
    ("inter_node_gbps", {"control": "number", "step": "any", "min": 0, "max": 10_000, "unit": "GB/s"}),
    ("max_oom_risk", {"control": "number", "min": 0, "max": 1, "default": 0.05, "group": "answer", "part": "option"}),
    ("gpu_model", {"control": "select", "source": "gpus", "required": True, "main": True}),
    ("model", {"control": "text", "source": "models", "required": True, "part": "job"}),
]


@pytest.mark.parametrize("name, expected", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_control_follows_the_field(name: str, expected: dict[str, Any]) -> None:
    spec = _by_name()[name]
    assert {k: spec.get(k) for k in expected} == expected
    assert spec["help"].startswith((Job.model_fields.get(name) or Placement.model_fields.get(name)
                                    or form.RequestOptions.model_fields[name]).description or "")


def test_order_main_then_groups_in_field_order() -> None:
    fields = form_fields()
    main = [f["name"] for f in fields if f["main"]]
    assert main == ["model", "gpu_model", "method", "number_gpus", "tokens_per_sample", "batch_size"]
    rest = [f for f in fields if not f["main"]]
    groups = list(dict.fromkeys(f["group"] for f in rest))
    assert groups == ["training stack", "vision-language models", "placement", "answer"]
    declared = [*Job.model_fields, *Placement.model_fields, *sorted(OPTIONS)]
    for group in groups:
        names = [f["name"] for f in rest if f["group"] == group and f["part"] != "option"]
        assert names == sorted(names, key=declared.index), group

def test_a_new_job_field_is_on_the_form_without_a_page_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field added to the Job (here on a subclass) gets its control from its declaration alone."""

    class NewJob(Job):
        warmup_ratio: float = Field(0.0, ge=0, le=1, description="Fraction of steps with a rising learning rate.",
                                    json_schema_extra={"unit": "fraction", "group": "schedule"})

    monkeypatch.setattr(form, "Job", NewJob)
    fields = form_fields()
    spec = {f["name"]: f for f in fields}["warmup_ratio"]
    assert spec == {"name": "warmup_ratio", "part": "job", "label": "warmup ratio",
                    "help": "Fraction of steps with a rising learning rate.", "unit": "fraction", "group": "schedule",
                    "main": False, "required": False, "default": 0.0, "control": "number", "step": "any",
                    "min": 0, "max": 1}
    groups = list(dict.fromkeys(f["group"] for f in fields if not f["main"]))
    assert groups == ["training stack", "vision-language models", "schedule", "placement", "answer"]
