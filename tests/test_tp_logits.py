"""Logits under tensor parallel: transformers' tp_plan gathers the LM head's output on every rank; a vocabulary-
parallel loss (Megatron-like stacks, torchtitan's loss_parallel) keeps V / tp per rank."""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.contract import get_estimator
from autoconf.schema import Job, Placement

GPU = "NVIDIA-H100-80GB-HBM3"
TOKENS = 8192  # long enough that the loss is the peak phase


@pytest.mark.parametrize(("framework", "vocab_parallel", "share"), [
    ("hf-trainer", None, 1.0),  # colwise_gather_output: the whole vocabulary on each rank
    ("hf-trainer", True, 0.5),  # a Job that names a vocabulary-parallel loss
    ("torchtitan", None, 0.5),  # loss_parallel
    ("torchtitan", False, 1.0),
])
def test_logits_per_rank_by_tp_implementation(framework: str, vocab_parallel: bool | None, share: float) -> None:
    """12·V bytes per token (the fp32 log-softmax saved plus the 8·V transient gradients of transformers' loss, as
    the tp 2 rank traces hold them: docs/traced_vs_theory.md finding 26.1), whole or halved over tp 2."""
    job = Job(model="llama3.2-1b", method="full", tokens_per_sample=TOKENS, batch_size=1, framework=framework,
              vocab_parallel_loss=vocab_parallel)
    memory = get_estimator("theory").estimate(job, Placement(gpu_model=GPU, number_gpus=2, tp=2)).memory
    assert memory.peak_phase == "loss"
    assert memory.logits_bytes == pytest.approx(12 * get_architecture("llama3.2-1b").vocab_size * TOKENS * share)
