"""The traced estimator: fake-tensor traces equal real CPU steps, exact fits, the estimator contract."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from autoconf.catalog import get_architecture
from autoconf.estimators.contract import get_estimator
from autoconf.estimators.traced.cache import get_fit
from autoconf.estimators.traced.estimator import TracedEstimator
from autoconf.estimators.traced.fit import PHASE_NAMES
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import Estimate, Job, Placement
from tests._cache import fresh_cache  # noqa: F401 (an autouse fixture: a fresh cache per module)

# transformers 5 warns from inside peft's checkpointing check; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

TINY = "tiny-llama-test"
GPU = "NVIDIA-A100-80GB-PCIe"


def _job(**kw: object) -> Job:
    # No checkpointing by default: the tests then share two cached fits (full, LoRA) of one regime.
    base = {"model": TINY, "tokens_per_sample": 256, "batch_size": 1, "gradient_checkpointing": False}
    return Job(**{**base, **kw})


@pytest.mark.parametrize(
    ("method", "checkpointing", "attention", "shape"),
    [("full", False, "sdpa", (2, 96)), ("full", True, "sdpa", (1, 64)), ("lora", True, "eager", (2, 64))],
)
def test_fake_trace_equals_real_cpu_step(method: str, checkpointing: bool, attention: str,
                                         shape: tuple[int, int]) -> None:
    """Same step on fake and on real CPU tensors: every op's live bytes per category, to the byte."""
    from autoconf.estimators.traced.step import trace

    job = _job(method=method, gradient_checkpointing=checkpointing, attention=attention)
    spec = {**trace_spec(job, get_architecture(TINY)), "shapes": [list(shape)]}
    fake = trace(spec)["results"][0]["samples"]
    real = trace({**spec, "real": True})["results"][0]["samples"]
    assert fake.shape == real.shape and fake.shape[0] > 300
    for code, phase in enumerate(PHASE_NAMES):
        in_phase = fake[:, 5] == code
        assert in_phase.any(), phase
        assert fake[in_phase, :5].sum(axis=1).max() == real[real[:, 5] == code, :5].sum(axis=1).max(), phase
    np.testing.assert_array_equal(fake, real)


@pytest.mark.slow
def test_fit_is_exact_and_cached() -> None:
    spec = trace_spec(_job(), get_architecture(TINY))
    fit = get_fit(spec, "single")
    assert fit.meta["check_max_error_bytes"] == 0  # a shape outside the fit, predicted to the byte
    assert fit.meta["total_params"] == get_architecture(TINY).total_params
    import autoconf.estimators.traced.cache as tc

    tc._MEMORY.clear()
    again = get_fit(spec, "single")  # from disk: no worker would take < 1 s
    np.testing.assert_array_equal(again.coef, fit.coef)
    # At the start of the step: bf16 weights (2 B/param) + two fp32 rotary buffers (head_dim/2 each);
    # AdamW m and v in bf16 (4 B/param) + one fp32 ``step`` per parameter tensor (fused AdamW).
    arch, psi = get_architecture(TINY), fit.meta["total_params"]
    tensors = 2 + 1 + arch.num_layers * 9  # embed, lm_head, final norm; per layer 7 linears + 2 norms
    start = fit.landmark("start", 1, 256)
    assert start[0] == 2 * psi + 2 * 4 * arch.head_dim // 2
    assert start[2] == 4 * psi + 4 * tensors


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
def test_estimator_contract(method: str) -> None:
    est = get_estimator("traced")
    assert isinstance(est, TracedEstimator) and est.name == "traced"
    peaks = []
    for tokens in (256, 512, 1024):
        answer = est.estimate(_job(method=method, tokens_per_sample=tokens), Placement(gpu_model=GPU))
        assert isinstance(answer, Estimate) and answer.estimator == "traced"
        mem = answer.memory
        assert mem.estimator == "traced" and mem.peak_phase in PHASE_NAMES
        parts = [mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes, mem.activations_bytes, mem.logits_bytes]
        assert all(math.isfinite(p) and p >= 0 for p in parts)
        assert mem.peak_bytes == pytest.approx(sum(parts) + mem.overhead_bytes)
        peaks.append(mem.peak_bytes)
    assert peaks[0] < peaks[1] < peaks[2]


@pytest.mark.slow
def test_more_gpus_do_not_raise_per_gpu_memory() -> None:
    est = get_estimator("traced")
    job = _job(batch_size=4)
    two, four = (est.estimate(job, Placement(gpu_model=GPU, number_gpus=n)).memory for n in (2, 4))
    assert four.peak_bytes <= two.peak_bytes
    assert four.activations_bytes < two.activations_bytes  # micro-batch 1 vs 2


@pytest.mark.slow
def test_estimate_frame_has_no_nans_and_reports_bad_rows() -> None:
    frame = pd.DataFrame(
        {"model": [TINY, TINY, "no-such-model"], "method": ["full", "qlora", "full"], "gpu_model": [GPU] * 3,
         "tokens_per_sample": [512, 512, 512], "batch_size": [1, 1, 1], "gradient_checkpointing": [False] * 3,
         "passthrough": [1, 2, 3]}
    )
    out = get_estimator("traced").estimate_frame(frame)
    assert list(out["passthrough"]) == [1, 2, 3]
    good = out.iloc[:2]
    assert good["error"].isna().all() and (good["estimator"] == "traced").all()
    assert not good[["weights_gib", "activations_gib", "logits_gib", "peak_memory_gib"]].isna().any().any()
    assert "no-such-model" in out.iloc[2]["error"]


@pytest.mark.slow
def test_cli_estimate_with_traced(capsys: pytest.CaptureFixture[str]) -> None:
    from autoconf.interfaces.cli import main

    assert main(["estimate", "--model", TINY, "--seq-len", "512", "--estimator", "traced",
                 "--no-grad-checkpoint"]) == 0
    out = capsys.readouterr().out
    assert "estimator traced" in out and "traced: HF training step" in out


def test_spec_ignores_provenance_fields() -> None:
    arch = get_architecture(TINY)
    moved = dataclasses.replace(arch, source="elsewhere", verification="other")
    assert trace_spec(_job(), arch) == trace_spec(_job(), moved)
