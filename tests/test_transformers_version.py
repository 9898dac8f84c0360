"""Job.transformers_version: the causal-LM loss of the transformers release a stack ran, in theory and in the trace.

Expected bytes per token·V are bench/hf_loss_versions.py's measurements of each release line's loss code on real
CPU tensors (docs/traced_vs_theory.md, section loss-versions: 12.1, 14.1, 12.1 and 6.1 with one h·V matmul
temporary); the data rows' releases are fms-acceleration's pins (scripts/benchmarks/refs/requirements.txt at
4e81c64: transformers==4.44.2; at 24bdadb: 4.48.1; none before b92c99d).
"""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.theory import loss as ce
from autoconf.estimators.theory.memory import estimate_memory
from autoconf.estimators.theory.vector import theory_batch
from autoconf.schema import Job, job_and_placement
from tests._fms_campaigns import fms_campaigns

MISTRAL, SANTACODER = "mistral-7b-v0.1", "santacoder"


@pytest.mark.parametrize(("version", "model", "per_vocab"), [
    (None, MISTRAL, 12), ("4.39.3", MISTRAL, 12), ("4.45.2", MISTRAL, 12), ("4.46.0", MISTRAL, 14),
    ("4.48.1", MISTRAL, 14), ("4.49.0", MISTRAL, 12), ("5.0.0", MISTRAL, 12),
    # gpt_bigcode 4.x: the bf16 loss's 6·V, under the default stack's (hf-trainer's) fp32 output copy 8·V
    (None, SANTACODER, 12), ("4.44.2", SANTACODER, 8), ("4.48.1", SANTACODER, 8), ("4.49.0", SANTACODER, 12),
])
def test_loss_bytes_by_release(version: str | None, model: str, per_vocab: int) -> None:
    arch = get_architecture(model)
    job = Job(model=model, transformers_version=version)
    assert ce.loss_bytes_per_token(job, arch) == per_vocab * arch.vocab_size


@pytest.mark.parametrize(("framework", "per_vocab"), [("fms-hf-tuning", 8), ("hf-trainer", 8), ("ms-swift", 6)])
def test_trainer_fp32_outputs_peak_over_the_bf16_loss(framework: str, per_vocab: int) -> None:
    """gpt_bigcode 4.x under the HF Trainer's bf16 mixed precision: accelerate's fp32 copy of the returned bf16 logits
    (4) beside them (2) and the saved bf16 log-softmax (2), above the bf16 loss's own 6·V."""
    arch = get_architecture(SANTACODER)
    job = Job(model=SANTACODER, framework=framework, transformers_version="4.45.2")
    assert ce.loss_bytes_per_token(job, arch) == per_vocab * arch.vocab_size


@pytest.mark.parametrize("version", ["4.46.0", "4.48.1"])
def test_fp32_logits_are_12_in_every_release(version: str) -> None:
    """QLoRA with peft's kbit preparation (fp32 head) on one GPU: ``.float()`` copies nothing, 12·V as in 5.x."""
    arch = get_architecture(MISTRAL)
    job = Job(model=MISTRAL, method="qlora", framework="hf-trainer", transformers_version=version)
    assert ce.loss_bytes_per_token(job, arch) == 12 * arch.vocab_size
    assert ce.loss_bytes_per_token(job, arch, fsdp=True) == 14 * arch.vocab_size  # sharded: TRL skips the upcast


@pytest.mark.parametrize("word", ["4.38.2", "four", "3.0", ""])
def test_unmodelled_releases_are_refused_naming_the_field(word: str) -> None:
    with pytest.raises(ValueError, match="transformers_version"):
        Job(model=MISTRAL, transformers_version=word)


def test_one_estimate_equals_the_batch() -> None:
    words = {"model": MISTRAL, "method": "lora", "tokens_per_sample": 4096, "batch_size": 4,
             "gpu_model": "NVIDIA-A100-SXM4-80GB", "framework": "fms-hf-tuning"}
    jobs = [job_and_placement({**words, "transformers_version": v}) for v in ("4.44.2", "4.48.1", "4.49.0")]
    batch = theory_batch([j for j, _ in jobs], [p for _, p in jobs])
    one = [estimate_memory(j, p).peak_allocated_bytes for j, p in jobs]
    assert list(batch.allocated) == one
    tokens = 4096 * 4  # one GPU: the 4.48.1 loss peak holds 2·V more per token than 4.44.2 and 4.49.0
    assert one[1] - one[0] == one[1] - one[2] == 2 * 32000 * tokens


def test_fms_rows_carry_their_campaigns_release() -> None:
    fms, first, dated = fms_campaigns()
    version = {c: job.transformers_version for c, job in first.items()}
    assert version["refs/a100_80gb@2024-09-16:4e81c64"] == "4.44.2"
    assert version["refs/a100_80gb@2025-02-07:24bdadb"] == "4.48.1"
    assert version["refs/a100_80gb@2024-05-24:f39d03c"] is None  # no requirements file before 2024-07-12
    pinned = fms.framework_version.str.contains("transformers")
    assert (pinned == (dated >= "2024-07-12")).all()
