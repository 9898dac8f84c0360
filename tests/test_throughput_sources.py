"""Throughput across training stacks: the MPT catalogue entries, the llm-foundry profile and its data rows,
and the efficiency fit (autoconf.evaluation.throughput_fit) on rows built by hand from known constants."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.frameworks import PROFILES
from autoconf.evaluation import throughput_fit as tf
from autoconf.evaluation.data import load_measurements, row_to_inputs
from autoconf.schema import Job


# NumParams published by llm-foundry's benchmark tables (shared/data/external/llm-foundry, column NumParams) for
# (size, sequence length, d_model, n_layers). llm-foundry's MPTConfig adds learned positions (seq · d_model) and
# biases ((11·L + 1)·d_model: 9·d_model on a layer's linears, d_model per LayerNorm) to what transformers builds.
@pytest.mark.parametrize("size, seq, d_model, layers, published", [
    ("125m", 512, 768, 12, 124_131_840), ("350m", 2048, 1024, 24, 355_985_408), ("760m", 512, 1536, 24, 758_111_232),
    ("1b", 2048, 2048, 24, 1_315_950_592), ("3b", 4096, 2560, 32, 2_657_080_320), ("7b", 2048, 4096, 32, 6_658_859_008),
    ("13b", 2048, 5120, 40, 12_853_954_560), ("30b", 8192, 7168, 48, 30_019_254_272),
    ("70b", 2048, 8192, 80, 64_862_437_376),
])
def test_mpt_sizes_match_the_published_parameter_counts(size: str, seq: int, d_model: int, layers: int,
                                                         published: int) -> None:
    arch = get_architecture(f"mpt-{size}")
    assert (arch.hidden_size, arch.num_layers, arch.vocab_size, arch.intermediate_size) == (d_model, layers, 50368,
                                                                                          4 * d_model)
    assert arch.total_params + seq * d_model + (11 * layers + 1) * d_model == published
    assert arch.tie_word_embeddings and arch.position_params == 0 and not arch.gated_mlp


def test_mpt_matmul_params_are_twelve_l_h_squared_plus_the_head() -> None:
    """Per layer: Wqkv 3h², out_proj h², up/down 8h²; the tied head V·h (Narayanan et al. 2021 eq. 2 layout)."""
    arch = get_architecture("mpt-7b")
    assert tp.matmul_params(arch) == 12 * 32 * 4096**2 + 50368 * 4096


def test_llm_foundry_profile_and_job_defaults() -> None:
    job = Job(model="mpt-1b", framework="llm-foundry")
    assert job.optimizer_impl == "for-loop"  # Composer DecoupledAdamW loops over parameters
    assert job.effective_loss_kernel == "fused-ce"  # flash_attn fused cross-entropy by default
    profile = PROFILES["llm-foundry"]
    assert profile.efficient_loading and {"load", "loss", "optimizer", "strategy"} <= set(profile.sources)


def test_llm_foundry_rows_are_answered() -> None:
    frame = load_measurements()
    rows = frame[(frame["source"] == "llm-foundry") & (frame["compute_precision"] == "amp_bf16")]
    job, place = row_to_inputs(rows.iloc[0])
    assert job.framework == "llm-foundry" and job.dtype == "amp-bf16" and job.model.startswith("mpt-")
    assert place.effective_strategy in ("fsdp", "fsdp-shard-grad-op")
    assert tp.estimate_throughput(job, place).tokens_per_second > 0


@pytest.mark.parametrize("section, model, kernel", [
    ("H100 80GB BF16", "mpt-7b", "llm-foundry-triton"),  # sweep.sh: submit_benchmarks.py's default attn_impl
    ("A100 40GB.*", "mpt-125m", "llm-foundry-triton"),
    (r"H100 80GB BF16 \(Large Scale.*", "mpt-7b", "hf"),  # sweep.py: --attn_impl flash for 1b, 3b, 7b, 70b
    (r"H100 80GB BF16 \(Large Scale.*", "mpt-13b", "llm-foundry-triton")])  # ... and triton for 13b, 30b
def test_llm_foundry_rows_run_the_attention_kernel_their_script_named(section: str, model: str, kernel: str) -> None:
    """llm-foundry 5e85bd62d scripts/train/benchmarking: which attn_impl made each table (data/convert_llm_foundry)."""
    frame = load_measurements()
    sections = frame["campaign"].str.split(":", n=1).str[-1]
    row = frame[(frame["source"] == "llm-foundry") & sections.str.fullmatch(section) & (frame["model_name"] == model)
                ].iloc[0]
    assert tf._inputs(row)[2] == kernel


def test_scattermoe_expert_parallel_rows_are_left_out() -> None:
    """fms-acceleration's "moe-scattermoe-granite-epN" configs shard the experts over N ranks (expert parallelism,
    not modelled): left out like rows whose expert_parallel column says so; ep1 rows stay."""
    frame = load_measurements()
    rows = tf.throughput_rows(frame[frame["kernels"].fillna("").str.contains("scattermoe")])
    assert set(rows["layout"].str.extract(r"-ep(\d+)")[0]) == {"1"}
    assert any("expert" in reason for reason in rows.attrs["skipped"])


def test_shard_grad_op_rows_train_in_bf16_autocast() -> None:
    """amp_bf16 under SHARD_GRAD_OP is fp32 master weights with bf16 compute, as under FULL_SHARD."""
    frame = load_measurements()
    row = frame[(frame["source"] == "llm-foundry") & (frame["strategy"] == "fsdp-shard-grad-op")].iloc[0]
    assert row_to_inputs(row)[0].dtype == "amp-bf16"


@pytest.mark.parametrize("campaign, gbps", [
    ("llm-foundry/x.csv:A100 80GB with 1600 Gbps node-node interconnect (RoCE)", 200.0),
    ("fms-acceleration/bench", tp.INTER_NODE_BANDWIDTH_GBPS),
])
def test_stated_interconnect(campaign: str, gbps: float) -> None:
    assert tf.inter_node_gbps(campaign) == gbps


def test_attention_share_by_hand() -> None:
    """MPT-7B full FT at 2048 tokens, flash: attention 14·L·s·h·(1/2) (backward 2.5 × forward) of 6·N + that."""
    job = Job(model="mpt-7b", tokens_per_sample=2048, batch_size=1, gradient_checkpointing=False, attention="flash")
    arch = get_architecture("mpt-7b")
    attention = 14 * 32 * 2048 * 4096 * 0.5
    matmul = 6 * (12 * 32 * 4096**2 + 50368 * 4096)
    assert tp.attention_share(job, arch) == pytest.approx(attention / (attention + matmul))


def test_memory_bound_term_costs_more_on_a_faster_gpu_and_a_narrower_model() -> None:
    def factor(model: str, gpu: str) -> float:
        from autoconf.catalog import get_gpu
        return tp.job_factor(Job(model=model, tokens_per_sample=2048, batch_size=8), get_gpu(gpu), get_architecture(model))
    assert factor("mpt-125m", "H100") / factor("mpt-7b", "H100") < factor("mpt-125m", "A100-40GB") / factor("mpt-7b", "A100-40GB")


def _synthetic(e: float, x0: float, k: float, alpha: float, fused: float, moe: float) -> pd.DataFrame:
    """Rows whose implied efficiency follows the formula exactly, from hand-picked constants."""
    rng = np.random.default_rng(0)
    n = 120
    x, q, a = rng.uniform(500, 40_000, n), rng.uniform(0.02, 0.3, n), rng.uniform(0.0, 0.5, n)
    is_fused, is_moe = rng.random(n) < 0.4, rng.random(n) < 0.2
    implied = e * x / (x + x0) / (1 + k * q) / (1 + alpha * a) * np.where(is_fused, fused, 1) * np.where(is_moe, moe, 1)
    return pd.DataFrame({"family": "Ampere", "method": "full", "fused": is_fused, "moe": is_moe, "x": x, "q": q, "a": a,
                         "implied": implied})


def test_fit_recovers_hand_picked_constants() -> None:
    rows = _synthetic(e=0.9, x0=2000.0, k=5.0, alpha=1.0, fused=1.2, moe=0.7)
    fit = tf.fit_efficiency(rows, tf.Shape(attention_term=True))
    # X0, K and α come from grids (about 12 %, 25 % and 25 % apart): the rest absorbs the grid step
    assert fit.microbatch_tokens == pytest.approx(2000, rel=0.15)
    assert fit.memory_bound == pytest.approx(5.0, rel=0.3) and fit.attention_cost == pytest.approx(1.0, rel=0.3)
    assert fit.fused_loss_factor == pytest.approx(1.2, rel=0.02) and fit.moe_factor == pytest.approx(0.7, rel=0.02)
    assert fit.by_group == {} and fit.by_method["full"] == pytest.approx(0.9, rel=0.2)
    assert not math.isnan(fit.by_method["lora"])  # no LoRA row: the pooled value stands in
