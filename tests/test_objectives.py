"""avoid-OOM and throughput recommenders (recommend/objectives.py, by_objective.py) and their CLI flag.

The throughput objective's layout must equal a brute-force scan of every layout with the scalar estimator; the
avoid-OOM answers follow from hand arithmetic (bytes per parameter of mixed-precision AdamW).
"""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.contract import get_estimator
from autoconf.interfaces.cli import main
from autoconf.recommend.by_objective import recommend_for_objective
from autoconf.recommend.layout import layouts
from autoconf.recommend.objectives import avoid_oom_batch
from autoconf.schema import GIB, Job, Placement

THEORY = get_estimator("theory")
JOBS = [
    (Job(model="llama3.1-8b", method="full", tokens_per_sample=4096, batch_size=32), "NVIDIA-A100-80GB-PCIe"),
    (Job(model="llama-7b", method="lora", tokens_per_sample=8192, batch_size=16), "L40S"),
]


@pytest.mark.parametrize(("job", "gpu"), JOBS)
def test_throughput_choice_is_the_fastest_fitting_layout(job: Job, gpu: str) -> None:
    """Brute force with the scalar estimator: every layout of a fine-tuning stack (GPU count ≤ 16 × sharding ×
    micro-batch × checkpointing; data parallel only) as its own Job and Placement, THEORY.estimate of each, the most
    tokens/s among those that fit."""
    best = 0.0
    for trial, place in layouts(job, gpu, [1, 2, 4, 8, 16], model_parallel=False):
        est = THEORY.estimate(trial, place)
        if est.memory.oom_risk <= 0.05 and est.throughput is not None:
            best = max(best, est.throughput.tokens_per_second)
    rec = recommend_for_objective(job, gpu, THEORY, "throughput", max_gpus=16)
    assert best > 0 and rec.can_recommend == 1 and rec.estimate is not None and rec.estimate.throughput is not None
    assert rec.estimate.throughput.tokens_per_second == pytest.approx(best, rel=1e-9)
    assert rec.estimate.memory.oom_risk <= 0.05 and rec.reason.startswith("layout: ") and "runner-up" in rec.reason


def test_avoid_oom_keeps_the_requested_gpus_when_the_job_fits() -> None:
    """LoRA of a 2.5B model at 512 tokens, 1 sample per GPU: a few GiB of an 80 GB card."""
    job = Job(model="granite-3.1-2b", method="lora", tokens_per_sample=512, batch_size=1)
    for requested in (1, 3, 4):
        choice = avoid_oom_batch([job], ["NVIDIA-A100-80GB-PCIe"], [requested], THEORY)
        assert choice.candidates.gpus[choice.row[0]] == requested
        assert choice.candidates.batch[choice.row[0]] == requested  # per-device batch 1 kept


def test_avoid_oom_moves_to_more_gpus_when_one_cannot_hold_the_states() -> None:
    """Full fine-tuning of an 8B model with fp32 AdamW moments: bf16 weights + bf16 grads + fp32 moments are
    2 + 2 + 8 = 12 bytes per parameter, ≥ 12 × 8.0e9 = 96 GB > 80 GB, so 1 GPU cannot work; FSDP shards them."""
    params = get_architecture("llama3.1-8b").total_params
    assert 12 * params > 80 * GIB
    job = Job(model="llama3.1-8b", method="full", tokens_per_sample=1024, batch_size=1, optimizer_state_dtype="fp32")
    rec = recommend_for_objective(job, "NVIDIA-A100-80GB-PCIe", THEORY, "avoid-oom", requested_gpus=1)
    assert rec.can_recommend == 1 and rec.number_gpus in (2, 4, 8)
    assert rec.estimate is not None and rec.estimate.job.batch_size == rec.number_gpus  # per-device batch 1 kept
    smaller = [n for n in (1, 2, 4) if n < rec.number_gpus]
    for n in smaller:  # every smaller candidate really does not fit
        est = THEORY.estimate(job.model_copy(update={"batch_size": n}), Placement(gpu_model="NVIDIA-A100-80GB-PCIe",
                                                                                  number_gpus=n, gpus_per_worker=n))
        assert est.memory.oom_risk > 0.05


def test_nothing_fits_is_an_answer_with_a_reason() -> None:
    job = Job(model="llama3.1-405b", method="full", tokens_per_sample=8192, batch_size=8)
    for objective in ("avoid-oom", "throughput"):
        rec = recommend_for_objective(job, "L40S", THEORY, objective, max_gpus=8)
        assert rec.can_recommend == 0 and "nothing fits" in rec.reason


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--objective", "throughput"], 0, "recommended:"),
    (["--objective", "avoid-oom", "--number-gpus", "2"], 0, "recommended: 2 GPUs"),
    (["--objective", "fastest"], 2, "invalid choice"),
    (["--objective", "avoid-oom", "--number-gpus", "3"], 2, "batch_size"),
])
def test_cli_objective(args: list[str], code: int, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["recommend", "--model", "llama3.1-8b", "--method", "lora", "--gpu", "NVIDIA-A100-80GB-PCIe",
            "--tokens-per-sample", "2048", "--batch-size", "16", "--estimator", "theory"]
    try:
        got = main([*base, *args])
    except SystemExit as exc:
        got = int(exc.code or 0)
    out = capsys.readouterr()
    assert got == code
    assert text in out.out + out.err
