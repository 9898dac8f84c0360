"""Time (tokens ÷ tokens/s + load + checkpoints) and cost (GPU-hours × catalogued or given price)."""

from __future__ import annotations

import csv
import re
from importlib import resources

import pytest

from autoconf.catalog import list_gpus
from autoconf.catalog.prices import get_price, list_prices
from autoconf.errors import InvalidInputError
from autoconf.planning.cost import estimate_cost
from autoconf.planning.timing import (
    checkpoint_bytes,
    estimate_time,
    model_bytes,
    tokens_to_process,
)
from autoconf.schema import Job, Placement, ThroughputEstimate

JOB = Job(model="llama3.1-8b", tokens_per_sample=2048, batch_size=8)
PLACE = Placement(gpu_model="NVIDIA-A100-SXM4-80GB", number_gpus=8)
FIXED = ThroughputEstimate(
    tokens_per_second=10_000.0, tokens_per_second_per_gpu=1250.0, flops_per_token=1.0, mfu=0.5,
    step_seconds=1.0, compute_seconds=1.0, communication_seconds=0.0,
)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"token_budget": 1e9, "dataset_tokens": 5.0, "epochs": 3}, 1e9),  # an explicit budget wins
        ({"dataset_tokens": 1e8, "epochs": 2}, 2e8),
        ({"num_samples": 50_000, "epochs": 2}, 50_000 * 2048 * 2),  # padded to tokens_per_sample
    ],
)
def test_tokens_to_process(kwargs: dict, expected: float) -> None:
    assert tokens_to_process(JOB, **kwargs) == expected


@pytest.mark.parametrize("kwargs", [{}, {"num_samples": 10, "epochs": 0}, {"token_budget": -1}])
def test_tokens_to_process_rejects(kwargs: dict) -> None:
    with pytest.raises(InvalidInputError):
        tokens_to_process(JOB, **kwargs)


# Llama-3.1-8B by hand from its published config.json (vocab 128256, hidden 4096, 32 layers, intermediate
# 14336, 32 query / 8 KV heads of 128, untied head): embeddings + head 2 × 128256·4096 = 1,050,673,152;
# per layer q,o 2 × 4096² + k,v 2 × 4096·1024 + MLP 3 × 4096·14336 + 2 norms × 4096 = 218,112,000;
# × 32 layers + final norm 4096 -> 8,030,261,248 (the "8.03B" of the model card).
LLAMA31_8B_PARAMS = 2 * 128256 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096


def test_time_terms_add_up() -> None:
    t = estimate_time(JOB, PLACE, throughput=FIXED, token_budget=3.6e7, num_checkpoints=2,
                      startup_seconds=30.0, read_gbps=2.0, write_gbps=1.0)
    assert LLAMA31_8B_PARAMS == 8_030_261_248
    assert t.train_seconds == pytest.approx(3600.0)  # 3.6e7 tokens at 10,000 tokens/s
    # start-up + bf16 weights (2 B/param) read at 2 GB/s
    assert t.load_seconds == pytest.approx(30.0 + LLAMA31_8B_PARAMS * 2 / 2e9)
    # two checkpoints of bf16 weights + torch AdamW's exp_avg and exp_avg_sq, kept in the bf16 parameters'
    # dtype (2 + 2 + 2 B/param), written at 1 GB/s
    assert t.checkpoint_seconds == pytest.approx(2 * LLAMA31_8B_PARAMS * (2 + 2 + 2) / 1e9)
    assert t.total_seconds == pytest.approx(t.train_seconds + t.load_seconds + t.checkpoint_seconds)
    assert t.tokens == 3.6e7


def test_checkpoints_default_to_one_per_epoch() -> None:
    one = estimate_time(JOB, PLACE, throughput=FIXED, num_samples=100, epochs=1)
    three = estimate_time(JOB, PLACE, throughput=FIXED, num_samples=100, epochs=3)
    assert three.checkpoint_seconds == pytest.approx(3 * one.checkpoint_seconds)


def test_checkpoint_and_model_bytes() -> None:
    assert model_bytes(JOB) == LLAMA31_8B_PARAMS * 2
    assert checkpoint_bytes(JOB) == LLAMA31_8B_PARAMS * (2 + 2 * 2)  # bf16 weights + two bf16 AdamW states
    lora = Job(model="llama3.1-8b", method="lora")
    # default LoRA r=8 on q_proj (4096 -> 4096) and v_proj (4096 -> 1024): r·(in + out) per module, 32 layers
    adapters = 32 * 8 * ((4096 + 4096) + (4096 + 1024))
    assert adapters == 3_407_872
    assert checkpoint_bytes(lora) == adapters * (4 + 8)  # fp32 adapters + two fp32 AdamW states


def test_time_uses_the_theory_throughput_by_default() -> None:
    t = estimate_time(JOB, PLACE, token_budget=1e9)
    assert 0 < t.train_seconds < 1e6


def test_cost_is_gpu_hours_times_price() -> None:
    t = estimate_time(JOB, PLACE, throughput=FIXED, token_budget=3.6e7, startup_seconds=0, num_checkpoints=0,
                      read_gbps=1e9)
    c = estimate_cost(t, PLACE)
    price = get_price("NVIDIA-A100-SXM4-80GB")
    assert c.gpu_hours == pytest.approx(t.total_seconds / 3600 * 8)
    assert c.cost_usd == pytest.approx(c.gpu_hours * price.usd_per_gpu_hour)
    assert c.price_source.startswith("aws p4de.24xlarge") and "list price as of 2026-11-09" in c.price_source


def test_price_override_and_provider() -> None:
    t = estimate_time(JOB, PLACE, throughput=FIXED, token_budget=3.6e7)
    user = estimate_cost(t, PLACE, price_per_gpu_hour_usd=1.0)
    assert user.price_source == "user" and user.cost_usd == pytest.approx(user.gpu_hours)
    lam = estimate_cost(t, PLACE, provider="lambda")
    assert lam.price_per_gpu_hour_usd == 2.79 and "lambda.ai" in lam.price_source


@pytest.mark.parametrize("gpu, provider", [("V100", None), ("A100-80GB-SXM", "nosuchcloud")])
def test_missing_price_names_the_fix(gpu: str, provider: str | None) -> None:
    t = estimate_time(JOB, PLACE, throughput=FIXED, token_budget=1e6)
    with pytest.raises(InvalidInputError) as info:
        estimate_cost(t, Placement(gpu_model=gpu), provider=provider)
    assert info.value.field == "price_per_gpu_hour_usd"


def test_price_table_rows_have_source_and_date() -> None:
    text = resources.files("autoconf.catalog").joinpath("prices.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) == len(list_prices()) >= 10
    for row in rows:
        assert row["gpu_model"] in list_gpus()
        assert row["source_url"].startswith("https://") and row["transcribed_from"].startswith("https://")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["as_of"])
        assert 0 < float(row["usd_per_gpu_hour"]) < 20
    defaults = [r["gpu_model"] for r in rows if r["default"] == "1"]
    assert len(defaults) == len(set(defaults))  # at most one default per GPU


@pytest.mark.parametrize(("method", "params", "width"), [
    ("full", LLAMA31_8B_PARAMS, 2),  # bf16 weights, no AdamW states
    ("lora", 32 * 8 * ((4096 + 4096) + (4096 + 1024)), 4),  # the fp32 adapters only
])
def test_save_only_model_checkpoints_hold_the_weights_only(method: str, params: int, width: int) -> None:
    job = Job(model="llama3.1-8b", method=method, save_only_model=True)
    assert checkpoint_bytes(job) == params * width


@pytest.mark.parametrize("words", [
    {"save_only_model": "yes"},  # REST flat body, sweep row, ado point: the one way in
])
def test_save_only_model_shortens_the_checkpoint_time(words: dict[str, str]) -> None:
    job = Job(model="llama3.1-8b", **words)
    full = estimate_time(JOB, PLACE, throughput=FIXED, token_budget=3.6e7, num_checkpoints=2)
    light = estimate_time(job, PLACE, throughput=FIXED, token_budget=3.6e7, num_checkpoints=2)
    assert light.checkpoint_seconds == pytest.approx(full.checkpoint_seconds * 2 / (2 + 2 * 2))
