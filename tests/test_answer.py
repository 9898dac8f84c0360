"""The one way out: Answer carries the figures, and every output is read from it (issue 26 item 2)."""

from __future__ import annotations

import pytest

from autoconf.schema import (
    Answer,
    CostEstimate,
    Estimate,
    Job,
    MemoryEstimate,
    Placement,
    ThroughputEstimate,
    TimeEstimate,
    sweep_columns,
)

GIB = 1024**3  # written out: a GiB is 2^30 bytes
MEMORY = MemoryEstimate(
    weights_bytes=16 * GIB, gradients_bytes=2 * GIB, optimizer_bytes=4 * GIB, activations_bytes=8 * GIB,
    logits_bytes=1 * GIB, overhead_bytes=3 * GIB, peak_bytes=34 * GIB, peak_phase="loss", capacity_bytes=80 * GIB,
    fits=True, oom_risk=0.25, estimator="theory", notes=("a note",))
SPEED = ThroughputEstimate(tokens_per_second=1000.0, tokens_per_second_per_gpu=500.0, flops_per_token=6e9, mfu=0.4,
                           step_seconds=2.0, compute_seconds=1.5, communication_seconds=0.5)
ESTIMATE = Estimate(job=Job(model="llama3.1-8b"), placement=Placement(gpu_model="A100", number_gpus=2),
                    memory=MEMORY, throughput=SPEED)


def test_rest_memory_section_in_gib_in_its_order() -> None:
    memory = Answer.of(ESTIMATE).section("memory")
    assert memory is not None
    assert list(memory)[:7] == ["total_memory_gib", "weights_gib", "gradients_gib", "optimizer_gib", "activations_gib",
                                "logits_gib", "overhead_gib"]
    assert list(memory)[-7:] == ["capacity_gib", "fits", "oom_risk", "peak_phase", "num_gpus", "estimator", "notes"]
    assert (memory["total_memory_gib"], memory["weights_gib"], memory["capacity_gib"]) == (34.0, 16.0, 80.0)
    assert (memory["num_gpus"], memory["notes"], memory["oom_risk"]) == (2, ["a note"], 0.25)


@pytest.mark.parametrize("section", ["time", "cost"])
def test_a_section_without_figures_is_null(section: str) -> None:
    assert Answer.of(ESTIMATE).section(section) is None


def test_time_and_cost_sections() -> None:
    wall = TimeEstimate(total_seconds=100.0, train_seconds=90.0, load_seconds=6.0, checkpoint_seconds=4.0, tokens=1e6)
    cost = CostEstimate(cost_usd=5.0, gpu_hours=2.0, price_per_gpu_hour_usd=2.5, price_source="user")
    answer = Answer.of(ESTIMATE, time=wall, cost=cost)
    assert answer.section("time") == {"time_seconds": 100.0, "train_seconds": 90.0, "load_seconds": 6.0,
                                      "checkpoint_seconds": 4.0, "tokens": 1e6}
    assert answer.section("cost") == {"cost_usd": 5.0, "gpu_hours": 2.0, "price_per_gpu_hour_usd": 2.5,
                                      "price_source": "user"}


def test_ado_properties_keep_the_experiments_outputs() -> None:
    out = Answer.of(ESTIMATE).ado(["weights_gib", "peak_memory_gib", "fits", "oom_risk", "tokens_per_second"])
    assert out == {"weights_gib": 16.0, "peak_memory_gib": 34.0, "fits": 1, "oom_risk": 0.25,
                   "tokens_per_second": 1000.0}


def test_sweep_columns_rounded_and_in_the_header_order() -> None:
    header = ("estimator", "model_version", "weights_gib", "gradients_gib", "optimizer_gib", "activations_gib",
              "logits_gib", "overhead_gib", "peak_memory_gib", "capacity_gib", "fits", "oom_risk", "tokens_per_second",
              "can_recommend", "gpus", "workers", "reason", "error", "peak_allocated_gib", "peak_reserved_gib",
              "vision_weights_gib", "vision_activations_gib")
    assert sweep_columns() == header
    row = Answer.of(ESTIMATE, oom_risk=1 / 3).columns()
    assert row["oom_risk"] == 0.3333 and row["peak_allocated_gib"] == 31.0  # peak less overhead where not split


@pytest.mark.parametrize(("given", "kept"), [(-1e-12, 0.0), (1.0000001, 1.0), (0.5, 0.5)])
def test_oom_risk_bounded_once(given: float, kept: float) -> None:
    assert Answer.of(ESTIMATE, oom_risk=given).oom_risk == kept


def test_cli_json_sections_name_the_fields() -> None:
    assert Answer.of(ESTIMATE).cli() == ESTIMATE.model_dump(mode="json")
