"""The layout recommender (recommend/layout.py): its search space and its choice under the memory gate."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from autoconf.catalog import get_gpu
from autoconf.estimators import get_estimator
from autoconf.estimators.risk import need_threshold
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.layout_grid import Layouts, layout_speeds
from autoconf.estimators.theory.vector import theory_batch
from autoconf.recommend.layout import fastest_layout, layouts, ranking, row_inputs, search_space
from autoconf.recommend.layout_memory import theory_gate
from autoconf.recommend.layout_space import Space
from autoconf.schema import Job

JOB = Job(model="llama3.1-8b", tokens_per_sample=4096, batch_size=32)


def test_two_gpus_space_by_hand() -> None:
    """2 GPUs, global batch 2: (tp, pp) = (1, 1) with dp 2 takes ddp/zero1/zero2/fsdp-shard-grad-op/zero3/fsdp (no
    hybrid on one node) at micro-batch 1; (2, 1) and (1, 2) have dp 1, so ddp only, at micro-batch 1 or 2; each with
    checkpointing on or off: 12 + 4 + 4."""
    found = list(layouts(JOB.model_copy(update={"batch_size": 2}), "H100", 2))
    assert len(found) == 20
    assert {(p.tp, p.pp) for _, p in found} == {(1, 1), (2, 1), (1, 2)}


@pytest.mark.parametrize("gpus", [8, 16])
def test_every_layout_is_consistent(gpus: int) -> None:
    for job, place in layouts(JOB, "H100", gpus):
        micro = job.batch_size // (place.dp * job.gradient_accumulation_steps)
        assert micro * place.dp * job.gradient_accumulation_steps == job.batch_size
        assert place.dp * place.tp * place.pp == gpus and place.tp <= 8
        assert place.effective_strategy == "ddp" or place.dp > 1
        assert place.effective_strategy != "fsdp-hybrid" or gpus > 8


def test_fastest_fits_and_beats_the_runner_up() -> None:
    choice = fastest_layout(JOB, "H100", 8, get_estimator("theory"))
    assert choice.best is not None and choice.runner_up is not None
    assert choice.best.oom_risk <= 0.05 and choice.fitting <= choice.evaluated
    assert choice.best.throughput.tokens_per_second >= choice.runner_up.throughput.tokens_per_second
    assert "runner-up" in choice.why
    for found in (choice.best, choice.runner_up):  # the reported figures are the scalar path's
        scalar = tp.estimate_throughput(found.job, found.placement)
        assert found.throughput.model_dump(exclude={"estimator"}) == pytest.approx(
            scalar.model_dump(exclude={"estimator"}), rel=1e-9)


def test_nothing_fits_says_so() -> None:
    big = Job(model="llama3.1-405b", tokens_per_sample=4096, batch_size=2)
    choice = fastest_layout(big, "L4", 2, get_estimator("theory"))
    assert choice.best is None and "fits" in choice.why


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "recommend", "--model", "llama3.1-8b", "--gpu", "H100",
                           "--estimator", "theory", *args], capture_output=True, text=True, timeout=120, check=False)


def test_cli_layouts_json() -> None:
    done = _cli("--objective", "throughput", "--layouts", "--number-gpus", "8", "--batch-size", "64", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["can_recommend"] and "runner-up" in answer["why"]
    place = answer["placement"]
    assert place["number_gpus"] == 8 and 8 % (place["tp"] * place["pp"]) == 0


def test_cli_layouts_need_the_throughput_objective() -> None:
    done = _cli("--layouts", "--number-gpus", "8")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "layouts" in done.stderr


# jobs that exercise every branch of the array path: pipelines (micro-batches in flight), a fused stack with
# overlaps, a free global batch, sequence parallelism, a load phase above every table (405B on 24 GB GPUs),
# and a GPU theory refuses for bf16 (V100: every row an error)
ARRAY_CASES = [
    (JOB.model_copy(update={"batch_size": 64}), "H100", [8, 16], None, None, False),
    (Job(model="llama3.2-1b", method="lora", tokens_per_sample=2048, batch_size=32, dtype="amp-bf16"),
     "NVIDIA-A100-80GB-PCIe", [4, 8], "megatron", 400.0, False),
    (Job(model="llama3.1-70b", method="qlora", tokens_per_sample=1024), "H100", [16], "internevo", None, True),
    (Job(model="qwen2.5-7b", tokens_per_sample=8192, batch_size=16, sequence_parallel=2), "H100", [8], None, None, False),
    (Job(model="llama3.1-405b", tokens_per_sample=4096, batch_size=2), "L4", [2], None, None, False),
    (Job(model="llama3.2-1b", tokens_per_sample=512, batch_size=8), "V100", [2], None, None, False),
    (Job(model="llama3.2-1b", tokens_per_sample=4096, batch_size=64), "H100", [16], "nanotron", 400.0, False),
]


@pytest.mark.parametrize(("job", "gpu", "counts", "stack", "network", "free"), ARRAY_CASES)
def test_array_search_equals_the_scalar_path_at_every_layout(
        job: Job, gpu: str, counts: list[int], stack: str | None, network: float | None, free: bool) -> None:
    """The gate (one theory column call) and tokens/s (numpy) of every layout against theory_batch and
    estimate_throughput on that layout's own Job and Placement."""
    space = search_space(job, counts, 8, free_batch=free)
    pairs = [row_inputs(job, gpu, space, r, network) for r in range(len(space))]
    batch = theory_batch([j for j, _ in pairs], [p for _, p in pairs])
    gate = theory_gate(job, gpu, space, 0.05)
    ok = batch.ok
    assert (np.isfinite(gate.need) == ok).all() and (gate.error is None) == ok.all()
    need = batch.peak - batch.releasable_or_zero()
    np.testing.assert_allclose(gate.need[ok], need[ok], rtol=1e-9)
    assert (gate.fits == (ok & (batch.oom_risk <= 0.05))).all()
    if not get_gpu(gpu).peak_tflops(job.dtype):
        return
    speeds = layout_speeds(job, gpu, space.rows, stack=stack, inter_node_gbps=network)
    scalar = [tp.estimate_throughput(j, p, stack=stack) for j, p in pairs]
    np.testing.assert_allclose(speeds.tokens_per_second, [s.tokens_per_second for s in scalar], rtol=1e-9)
    np.testing.assert_allclose(speeds.efficiency, [s.mfu for s in scalar], rtol=1e-9)


@pytest.mark.parametrize(("risk", "sigma_multiple"), [(0.5, 0.0), (0.1587, 1.0), (0.0228, 2.0)])
def test_need_threshold_is_the_normal_quantile(risk: float, sigma_multiple: float) -> None:
    """P(N(0, σ) > log(cap / need)) = r at need = cap · e^(−kσ) with k the standard normal's upper-r quantile
    (Φ(1) = 0.8413, Φ(2) = 0.9772 from the normal table)."""
    from autoconf.estimators.theory.risk_table import SIGMA

    sigma = SIGMA.get("full", SIGMA["*"])[0]
    assert need_threshold(80.0, risk, "full") == pytest.approx(80.0 * np.exp(-sigma * sigma_multiple), rel=2e-3)


def test_free_batch_layouts_have_no_accumulation() -> None:
    space = search_space(JOB, 8, free_batch=True)
    rows = space.rows
    assert (rows.accumulation == 1).all()
    assert (rows.batch == space.micro * rows.dp).all()


def test_the_best_of_several_gpu_counts_is_at_least_each_counts_best() -> None:
    est = get_estimator("theory")
    both = fastest_layout(JOB, "H100", [8, 16], est)
    alone = [fastest_layout(JOB, "H100", n, est) for n in (8, 16)]
    assert both.best is not None and all(a.best is not None for a in alone)
    assert both.best.throughput.tokens_per_second == pytest.approx(
        max(a.best.throughput.tokens_per_second for a in alone if a.best is not None), rel=1e-12)


def test_fine_tuning_stacks_get_data_parallel_layouts_and_model_parallel_stacks_all() -> None:
    """HF-based frameworks run DDP / FSDP / ZeRO only; Megatron-style stacks also split tensors and pipelines."""
    est = get_estimator("theory")
    plain = fastest_layout(JOB, "H100", 16, est)
    megatron = fastest_layout(JOB, "H100", 16, est, stack="megatron")
    assert plain.best is not None and (plain.best.placement.tp, plain.best.placement.pp) == (1, 1)
    assert megatron.evaluated > plain.evaluated
    space = search_space(JOB, 16, model_parallel=False)
    assert (space.rows.tp == 1).all() and (space.rows.pp == 1).all()


def test_calibrated_theory_gate_and_answer_equal_its_memory_batch() -> None:
    """Calibrated theory goes through the same column call with its calibration: every layout's need and the chosen
    layout's peak and risk equal the estimator's own memory_batch on that layout's Job and Placement."""
    from autoconf.estimators.theory.estimator import TheoryEstimator
    from autoconf.schema import Calibration

    est = TheoryEstimator(Calibration(grad_ckpt_reduction=0.5, fragmentation_gib=3.0, misc_overhead_gib=1.5))
    job = JOB.model_copy(update={"batch_size": 64})
    space = search_space(job, [8, 16], 8)
    pairs = [row_inputs(job, "H100", space, r, None) for r in range(len(space))]
    batch = est.memory_batch([j for j, _ in pairs], [p for _, p in pairs])
    gate = theory_gate(job, "H100", space, 0.05, est.calibration)
    np.testing.assert_allclose(gate.need, batch.peak - batch.releasable_or_zero(), rtol=1e-12)
    assert (gate.fits == (batch.oom_risk <= 0.05)).all() and gate.fits.any() and not gate.fits.all()
    best = fastest_layout(job, "H100", [8, 16], est).best
    assert best is not None
    one = est.memory_batch([best.job], [best.placement])
    assert best.peak_gib == pytest.approx(one.peak[0] / 2**30, rel=1e-12)
    assert best.oom_risk == pytest.approx(one.oom_risk[0], rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("top", [1, 2, 3])
def test_ranking_top_is_the_head_of_the_whole_ranking(top: int) -> None:
    """The first ``top`` rows the search reads equal the head of the full sort, ties included (speeds drawn from
    five values, so most rows tie)."""
    space = search_space(Job(model="llama3.1-8b", batch_size=64, tokens_per_sample=2048), [8, 16, 32], 8)
    rng = np.random.default_rng(26)
    for _ in range(50):
        speeds = rng.integers(1, 6, len(space)).astype(float)
        fits = rng.random(len(space)) < rng.random()
        assert ranking(space, speeds, fits, top=top).tolist() == ranking(space, speeds, fits)[:top].tolist()


def test_gate_with_refused_layouts_equals_theory_batch() -> None:
    """Layouts theory refuses (tp 3 does not divide 32 heads; pp 64 exceeds 16 layers) among answered ones: the
    gate (the job's fields as scalars, the answered rows taken apart) against theory_batch on each layout."""
    job = Job(model="llama3.2-1b", method="lora", tokens_per_sample=1024, batch_size=16)
    rows = search_space(job, [8], 8).rows
    tp_, pp_ = rows.tp.copy(), rows.pp.copy()
    tp_[::3], pp_[1::7] = 3, 64
    dp = rows.gpus // (rows.tp * rows.pp)
    changed = Layouts(gpus=dp * tp_ * pp_, tp=tp_, pp=pp_, strategy=rows.strategy, batch=rows.batch,
                      accumulation=rows.accumulation, checkpointing=rows.checkpointing,
                      gpus_per_worker=rows.gpus_per_worker)
    space = Space(rows=changed, micro=search_space(job, [8], 8).micro)
    pairs = [row_inputs(job, "H100", space, r, None) for r in range(len(space))]
    batch = theory_batch([j for j, _ in pairs], [p for _, p in pairs])
    gate = theory_gate(job, "H100", space, 0.05)
    assert 0 < (~batch.ok).sum() < len(space)
    assert (np.isfinite(gate.need) == batch.ok).all()
    np.testing.assert_allclose(gate.need[batch.ok], (batch.peak - batch.releasable_or_zero())[batch.ok], rtol=1e-9)
    assert gate.error == next(e for e in batch.errors if e is not None)
