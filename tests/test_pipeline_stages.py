"""nanotron's cost-based pipeline split (theory/pipeline_stages.py) and what it costs a pipeline's sends.

Expected values are derived by hand from nanotron's rule (models/base.py build_model: the next stage begins after
the block whose cumulative cost exceeds (rank + 1) / p of the total) and its costs (models/llama.py
get_block_compute_costs). The 1.34B shape (h 2,048, MLP 8,192, 32 heads of 64, 16 layers, vocabulary 131,072): a
layer costs 4 · 2,048² + 3 · 8,192 · 2,048 = 2²⁶, the LM head 131,072 · 2,048 = 4 · 2²⁶, 20 units in all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.theory import communication
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.collectives import latency_seconds
from autoconf.estimators.theory.layout_grid import layout_speeds
from autoconf.estimators.theory.pipeline_stages import (
    Stage,
    cost_based_split,
    logits_bytes_per_token,
    nanotron_split,
    stage_imbalance,
)
from autoconf.estimators.theory.stacks import STACKS, stack_for
from autoconf.recommend.layout import row_inputs, search_space
from autoconf.schema import Job, Placement

SHAPE = str(Path(__file__).resolve().parents[1] / "bench" / "nanotron_models" / "nanotron-1.34b" / "config.json")
UNIT = 2.0**26

# pp 2: thresholds 10 and 20 units: layer 11 is the first to pass 10. pp 8: thresholds 2.5 (r + 1): layers 3, 6,
# 8, 11, 13, 16 close stages 0-5, the head (20 > 17.5) closes stage 6, the cast and the loss share stage 7.
# pp 16: thresholds 1.25 (r + 1): stages of 2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2 layers; the norm and head on 12
# (20 > 16.25), the cast alone on 13 (20 > 17.5), the loss on 14 (20 > 18.75), 15 empty.
SPLITS = [
    (2, [11, 5], 1, 1, 1),
    (8, [3, 3, 2, 3, 2, 3, 0, 0], 6, 7, 7),
    (16, [2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 2, 0, 0, 0, 0], 12, 13, 14),
]


@pytest.mark.parametrize(("pp", "layers", "head", "cast", "loss"), SPLITS)
def test_nanotron_split_places_the_blocks_as_build_model_does(
        pp: int, layers: list[int], head: int, cast: int, loss: int) -> None:
    stages = nanotron_split(16, UNIT, 4 * UNIT, pp)
    assert [s.layers for s in stages] == layers
    assert [i for i, s in enumerate(stages) if s.head] == [head]
    assert [i for i, s in enumerate(stages) if s.cast] == [cast]
    assert [i for i, s in enumerate(stages) if s.loss] == [loss]
    assert cost_based_split(get_architecture(SHAPE), pp) == stages  # the costs read from the shape: the same units


@pytest.mark.parametrize(("pp", "slowest"), [(2, 11 * 2 / 20), (8, 4 * 8 / 20), (16, 4 * 16 / 20)])
def test_stage_imbalance_is_the_slowest_stage_over_the_mean(pp: int, slowest: float) -> None:
    """Layer 1, head 4 (nanotron's own costs): pp 2 runs 11 | 9, pp 8 and 16 wait on the head's stage (4)."""
    assert stage_imbalance(nanotron_split(16, UNIT, 4 * UNIT, pp), 1.0, 4.0) == pytest.approx(slowest)


@pytest.mark.parametrize(("pp", "per_entry"), [(2, 0.0), (8, 2.0), (16, 6.0)])
def test_logits_cross_where_the_head_cast_and_loss_part(pp: int, per_entry: float) -> None:
    """bf16 logits (2 bytes) from the head's stage to the cast's, fp32 (4) from the cast's to the loss's."""
    stages = nanotron_split(16, UNIT, 4 * UNIT, pp)
    assert logits_bytes_per_token(stages, 32768.0) == per_entry * 32768


def test_balanced_stages_have_no_imbalance() -> None:
    stages = (Stage(4, False, False, False), Stage(2, True, True, True))
    assert stage_imbalance(stages, 1.0, 2.0) == pytest.approx(1.0)


def test_nanotron_pipeline_sends_share_the_nics_and_carry_the_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 nodes of 8 H100 at 400 GB/s, nanotron's 1.34B on dp 1 × tp 1 × pp 16, micro-batch 1 × 4,096 tokens: each
    stage is one GPU, so a node's 8 GPUs send at once, 50 GB/s each at 80 %. Per send: 4,096 · 2,048 · 2 bytes of
    hidden states plus 4,096 · 131,072 · 6 bytes of logits (stage 12 → 13 bf16, 13 → 14 fp32), each way."""
    monkeypatch.setattr(communication, "latency_seconds", lambda *args: 0.0)
    arch, gpu = get_architecture(SHAPE), get_gpu("H100")
    job = Job(model=SHAPE, tokens_per_sample=4096, batch_size=16, gradient_accumulation_steps=16,
              gradient_checkpointing=False)
    place = Placement(gpu_model="H100", number_gpus=16, gpus_per_worker=8, pp=16, inter_node_gbps=400.0)
    one = (4096 * 2048 * 2 + 4096 * 131072 * 6) / (50e9 * 0.8)
    assert communication.pipeline_seconds(job, arch, place, gpu, 400.0, cost_based_stages=True) == pytest.approx(2 * one)
    # the same pipeline elsewhere: hidden states only, at the network's 400 GB/s (tp · pp > a node)
    plain = 4096 * 2048 * 2 / (400e9 * 0.8)
    assert communication.pipeline_seconds(job, arch, place, gpu, 400.0) == pytest.approx(2 * plain)
    assert stack_for("nanotron").cost_based_stages and not stack_for("hf").cost_based_stages


@pytest.mark.parametrize("slowest", [False, True])
def test_array_path_prices_nanotron_pipelines_as_the_scalar_path(monkeypatch: pytest.MonkeyPatch, slowest: bool) -> None:
    """Every layout of nanotron's 1.34B on 4 nodes at 400 GB/s (pipelines of 2-16 stages, their logits and sends; the
    slowest stage off as shipped and on): layout_grid equals estimate_throughput on the layout's Job and Placement."""
    monkeypatch.setitem(STACKS, "nanotron", dataclasses.replace(STACKS["nanotron"], slowest_stage=slowest))
    job = Job(model=SHAPE, tokens_per_sample=4096, batch_size=64, gradient_checkpointing=False)
    space = search_space(job, [32], 8, shardings=("ddp", "zero1"), model_parallel=True)
    pairs = [row_inputs(job, "H100", space, r, 400.0) for r in range(len(space))]
    assert any(p.pp == 16 for _, p in pairs)
    speeds = layout_speeds(job, "H100", space.rows, stack="nanotron", inter_node_gbps=400.0)
    scalar = [tp.estimate_throughput(j, p, stack="nanotron").tokens_per_second for j, p in pairs]
    np.testing.assert_allclose(speeds.tokens_per_second, scalar, rtol=1e-9)


@pytest.mark.parametrize(("gpus", "pp", "tp_", "crosses", "gbps"), [
    (256, 4, 4, True, 400.0 / 8),  # 32 nodes: first and last stage on different nodes, one NIC share per GPU
    (8, 2, 1, False, 450.0),  # one node: NVLink (the catalogue's H100 figure)
])
def test_tied_embedding_gradients_summed_over_first_and_last_stage(gpus: int, pp: int, tp_: int, crosses: bool,
                                                                   gbps: float) -> None:
    """nanotron's sync_tied_weights_gradients (Megatron's _allreduce_word_embedding_grads): an all-reduce of the
    embedding shard's fp32 gradient, 131,072 · 2,048 / tp · 4 B, over two ranks after backward: a two-rank ring sends
    half of it twice at 80 % of the link, plus NCCL's latency for two ranks on one or two nodes."""
    arch, gpu = get_architecture(SHAPE), get_gpu("H100")
    job = Job(model=SHAPE, tokens_per_sample=4096, batch_size=256, gradient_checkpointing=False)
    place = Placement(gpu_model="H100", number_gpus=gpus, tp=tp_, pp=pp, inter_node_gbps=400.0)
    size = 131072 * 2048 / tp_ * 4
    alpha = latency_seconds("all-reduce", 2, 2 if crosses else 1, "nvlink", "2.18")
    expected = 2 * 0.5 * size / (gbps * 1e9 * 0.8) + alpha
    got = communication.tied_embedding_seconds(job, arch, place, gpu, 400.0, stack_for("nanotron"))
    assert got == pytest.approx(expected, rel=1e-12)
    untied = dataclasses.replace(arch, tie_word_embeddings=False)
    assert communication.tied_embedding_seconds(job, untied, place, gpu, 400.0, stack_for("nanotron")) == 0.0
    lora = job.model_copy(update={"method": "lora"})  # a frozen embedding has no gradient to sum
    assert communication.tied_embedding_seconds(lora, arch, place, gpu, 400.0, stack_for("nanotron")) == 0.0
