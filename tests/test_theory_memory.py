"""Theory memory: real values against hand derivations and measured fms-acceleration rows."""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.errors import InvalidInputError
from autoconf.estimators.risk import oom_probability
from autoconf.estimators.theory.memory import estimate_memory, micro_batch
from autoconf.estimators.theory.states import model_states
from autoconf.schema import GIB, Job, Placement

A100 = "NVIDIA-A100-SXM4-80GB"
QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")


def _job(**kw) -> Job:
    base = dict(model="mistral-7b-v0.1", tokens_per_sample=4096, batch_size=4, lora_r=16, lora_target_modules=QKVO,
                framework="fms-hf-tuning")  # the stack of the measured rows
    return Job(**{**base, **kw})


def _alloc_gib(job: Job, gpus: int = 1) -> float:
    mem = estimate_memory(job, Placement(gpu_model=A100, number_gpus=gpus))
    return (mem.peak_bytes - mem.overhead_bytes) / GIB


@pytest.mark.parametrize(
    "method, batch, gpus, measured_gib",
    [  # torch max_memory_allocated, fms-acceleration refs/a100_80gb.csv @ 2f98563 (Mistral-7B, packed 4096, GC)
        ("full", 4, 1, 67.96), ("full", 8, 1, 67.96), ("full", 4, 2, 34.24),
        ("lora", 4, 1, 24.32), ("lora", 8, 1, 34.55), ("qlora", 4, 1, 14.77), ("qlora", 8, 1, 25.01),
    ],
)
def test_matches_measured_mistral_rows(method: str, batch: int, gpus: int, measured_gib: float) -> None:
    predicted = _alloc_gib(_job(method=method, batch_size=batch), gpus)
    assert predicted == pytest.approx(measured_gib, rel=0.06)


def test_full_ft_single_gpu_peaks_in_foreach_optimizer_step() -> None:
    mem = estimate_memory(_job(), Placement(gpu_model=A100))
    psi = get_architecture("mistral-7b-v0.1").total_params
    assert mem.peak_phase == "optimizer"
    # 2 (bf16 weights) + 2 (grads) + 4 (bf16 m, v) + 2 (foreach temporaries) bytes per parameter
    assert mem.peak_bytes - mem.overhead_bytes == pytest.approx(10 * psi)


@pytest.mark.parametrize("impl, extra_bytes_per_param", [("foreach", 2), ("fused", 0)])
def test_optimizer_implementation_temporaries(impl: str, extra_bytes_per_param: int) -> None:
    st = model_states(_job(optimizer_impl=impl), get_architecture("mistral-7b-v0.1"), Placement(gpu_model=A100))
    params = get_architecture("mistral-7b-v0.1").total_params
    assert st.optimizer_step_temp == pytest.approx(extra_bytes_per_param * params)


@pytest.mark.parametrize(
    "strategy, per_param",
    [("ddp", 8 + 0.0), ("zero1", 4 + 12 / 4 + 4 / 4), ("zero2", 2 + 2 / 4 + 16 / 4), ("zero3", 18 / 4 + 2 / 4)]
)
def test_zero_sharding_bytes_per_param(strategy: str, per_param: float) -> None:
    arch = get_architecture("llama3.1-8b")
    st = model_states(Job(model="llama3.1-8b", batch_size=4, optimizer_impl="fused"), arch,
                      Placement(gpu_model=A100, number_gpus=4, strategy=strategy))
    assert (st.weights + st.gradients + st.optimizer) / arch.total_params == pytest.approx(per_param, rel=1e-6)


def test_memory_rises_with_tokens_and_falls_with_gpus() -> None:
    peaks = [estimate_memory(_job(method="lora", tokens_per_sample=s),
                             Placement(gpu_model=A100)).peak_bytes for s in (512, 2048, 8192)]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    per_gpu = [estimate_memory(_job(batch_size=8),
                               Placement(gpu_model=A100, number_gpus=n)).peak_bytes for n in (1, 2, 4, 8)]
    assert per_gpu == sorted(per_gpu, reverse=True)


def _activations(attention: str, gc: bool) -> float:
    job = _job(method="lora", attention=attention, gradient_checkpointing=gc)
    return estimate_memory(job, Placement(gpu_model=A100)).activations_bytes


def test_eager_attention_keeps_the_score_matrices() -> None:
    """Eager attention (HF eager_attention_forward) keeps each layer's b·h·s² attention probabilities for the
    P·V matmul's backward: at least the bf16 copy (2 B/score), at most fp32 softmax output + bf16 copy + a
    dropout mask and output (4 + 2 + 1 + 2 = 9 B/score); SDPA/flash keeps none of them."""
    arch = get_architecture("mistral-7b-v0.1")
    scores = arch.num_layers * 4 * arch.num_heads * 4096**2  # micro-batch 4 (batch 4 on one GPU), s = 4096
    per_score = (_activations("eager", False) - _activations("flash", False)) / scores
    assert 2 <= per_score <= 9


def test_checkpointing_keeps_layer_inputs_only() -> None:
    """Checkpointing keeps each decoder layer's bf16 input (2 B × hidden per token) instead of its saved
    activations and recomputes one layer at a time: at least the kept inputs, at most those plus one layer
    and the tensors outside the layers (embedding output, final norm, head input: a few hidden-sized
    tensors per token, less than one layer), i.e. at most kept + 2 × (activations without checkpointing) / layers."""
    arch = get_architecture("mistral-7b-v0.1")
    kept = arch.num_layers * 4 * 4096 * 2 * arch.hidden_size  # micro-batch 4 × 4096 tokens
    without, with_gc = _activations("flash", False), _activations("flash", True)
    assert kept <= with_gc <= kept + 2 * without / arch.num_layers


def test_qlora_weights_are_four_bit() -> None:
    arch = get_architecture("llama2-70b")
    st = model_states(_job(model="llama2-70b", method="qlora"), arch, Placement(gpu_model=A100))
    assert st.weights / arch.total_params == pytest.approx(0.58, abs=0.02)


def test_bad_batch_split_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="batch_size"):
        micro_batch(_job(batch_size=3), Placement(gpu_model=A100, number_gpus=2))


# With σ = 0.12 given: z = ln(cap / peak) / 0.12; 70 → 80: ln(8/7) = 0.1335, z = 1.113, P = 0.133; 100 → 80:
# z = ln(0.8) / 0.12 = -1.86, P = 0.969 (normal table).
@pytest.mark.parametrize("peak, cap, expected", [(70, 80, 0.133), (80, 80, 0.5), (100, 80, 0.969), (40, 80, 0.0)])
def test_oom_probability(peak: float, cap: float, expected: float) -> None:
    assert oom_probability(peak, cap, 0.12) == pytest.approx(expected, abs=0.005)
