"""Traced stack kernels: QLoRA (bitsandbytes 4-bit), AdamW8bit, torchtune's chunked CE, Liger's fused linear CE.

Where the real kernel runs on CPU (bitsandbytes' CPU backend, plain torch) the fake trace equals the real CPU
step op by op; Liger's Triton kernel cannot run here, so its stand-in is checked against sizes derived by hand
from liger_kernel/ops/fused_linear_cross_entropy.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch

from autoconf.catalog import get_architecture
from autoconf.estimators.traced.estimator import TracedEstimator
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import Job, Placement

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

TINY = "tiny-llama-test"  # h 64, I 176, 2 layers, 4 heads (2 kv) of 16, vocabulary 512, untied
GPU = "NVIDIA-A100-80GB-PCIe"


def _job(**kw: object) -> Job:
    base = {"model": TINY, "tokens_per_sample": 64, "batch_size": 1, "gradient_checkpointing": True}
    return Job(**{**base, **kw})


def _trace(job: Job, shape: tuple[int, int], real: bool = False) -> np.ndarray:
    from autoconf.estimators.traced.step import trace

    spec = {**trace_spec(job, get_architecture(TINY)), "shapes": [list(shape)], "real": real}
    samples: np.ndarray = trace(spec)["results"][0]["samples"]
    return samples


@pytest.mark.parametrize("fields", [
    {"method": "qlora"},
    {"method": "qlora", "double_quant": True, "framework": "fms-hf-tuning"},
    {"method": "full", "optimizer": "adamw-8bit"},
    {"method": "lora", "loss_kernel": "chunked"},
])
def test_fake_trace_equals_real_cpu_step(fields: dict[str, object]) -> None:
    """bitsandbytes' own CPU kernels and torchtune's chunked loss, real against fake: every op, to the byte."""
    if fields.get("method") == "qlora" or fields.get("optimizer") == "adamw-8bit":
        pytest.importorskip("bitsandbytes")
    job = _job(**fields)
    fake, real = _trace(job, (2, 64)), _trace(job, (2, 64), real=True)
    assert fake.shape == real.shape and fake.shape[0] > 200
    np.testing.assert_array_equal(fake, real)


def _rotary_bytes(head_dim: int) -> int:
    return 2 * (head_dim // 2) * 4  # transformers' rotary inv_freq and original_inv_freq, fp32


def test_qlora_weights_are_nf4_with_absmax_by_hand() -> None:
    """Weights of the tiny QLoRA model, from the architecture by hand: NF4 linears (½ B per value, one fp32
    absmax per 64, a 16-entry fp32 code table per weight), embeddings, head and norms upcast to fp32
    (hf-trainer's kbit_upcast), fp32 LoRA on q and v (r 8)."""
    pytest.importorskip("bitsandbytes")
    h, inter, layers, kv, vocab, r = 64, 176, 2, 32, 512, 8
    linears = [h * h, h * kv, h * kv, h * h, h * inter, h * inter, inter * h]
    quantised = layers * sum(linears)
    nf4 = quantised // 2 + quantised // 64 * 4 + layers * len(linears) * 16 * 4
    upcast = (2 * vocab * h + (2 * layers + 1) * h) * 4
    adapters = layers * ((r * h + h * r) + (r * h + kv * r)) * 4
    samples = _trace(_job(method="qlora"), (1, 64))
    assert samples[0, 0] == nf4 + upcast + adapters + _rotary_bytes(16)


def test_adamw8bit_states_by_hand() -> None:
    """bitsandbytes AdamW8bit: two uint8 states and two fp32 absmax per 256-block for tensors of >= 4096
    values, two fp32 states below (min_8bit_size), and its two shared 256-entry fp32 quantisation maps."""
    pytest.importorskip("bitsandbytes")
    from autoconf.estimators.traced.model import meta_model

    job = _job(method="full", optimizer="adamw-8bit")
    sizes = [p.numel() for p in meta_model(trace_spec(job, get_architecture(TINY))).parameters()]
    states = sum(2 * n + 2 * 4 * math.ceil(n / 256) if n >= 4096 else 2 * 4 * n for n in sizes)
    assert _trace(job, (1, 64))[0, 2] == states + 2 * 256 * 4


def test_liger_chunk_size_is_liger_example() -> None:
    """Liger's own worked example: BT = 4096·4, V = 32000, H = 4096 → inc_factor 8, chunk 2048."""
    from autoconf.estimators.traced.kernels import liger_chunk_size

    assert liger_chunk_size(4096 * 4, 4096, 32000) == 2048
    assert liger_chunk_size(100, 64, 512) == 16  # cdiv(512, 64) = 8; cdiv(100, 8) = 13 → 16
    assert liger_chunk_size(5, 64, 4096) == 1


@pytest.mark.parametrize("trained_head", [True, False])
def test_liger_stand_in_allocations_by_hand(trained_head: bool) -> None:
    """Forward: grad_input (BT×H), grad_weight (V×H, trained head only), fp32 loss_1d, the bool target mask
    and one chunk×V logits buffer live at once; after it the two gradients stay, saved for backward."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autoconf.estimators.traced.kernels import FusedLinearCrossEntropy
    from autoconf.estimators.traced.live_bytes import LiveBytes

    tokens, h, vocab = 100, 64, 512
    with FakeTensorMode():
        hidden = torch.empty(tokens, h, dtype=torch.bfloat16, requires_grad=True)
        weight = torch.empty(vocab, h, dtype=torch.bfloat16, requires_grad=trained_head)
        target = torch.zeros(tokens, dtype=torch.int64)
        tracker = LiveBytes()
        with tracker:
            for tensor in (hidden, weight, target):  # live before the loss: not counted below
                tracker.track(tensor, 0)
            before = sum(tracker.totals)
            loss = FusedLinearCrossEntropy.apply(hidden, weight, target)
            after = sum(tracker.totals) - before
        peak = max(sum(s[:5]) for s in tracker.samples) - before
        del loss
    grads = tokens * h * 2 + (vocab * h * 2 if trained_head else 0)
    assert peak == grads + tokens * 4 + tokens + 16 * vocab * 2
    assert after == grads + 4  # and the fp32 scalar loss


@pytest.mark.parametrize(("args", "why"), [
    (["--loss-kernel", "fused-ce"], "fused-ce loss kernel"),
    (["--framework", "unsloth"], "unsloth's fused Triton cross-entropy"),
    (["--tp", "2", "--dp", "2", "--strategy", "fsdp-shard-grad-op"], "data-parallel strategy fsdp-shard-grad-op"),
])
def test_untraceable_job_is_a_one_line_error(args: list[str], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    from autoconf.interfaces.cli import main

    assert main(["estimate", "--model", TINY, "--method", "lora", "--estimator", "traced", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and why in err and "--estimator theory" in err


@pytest.mark.parametrize(("fields", "why"), [
    ({"method": "lora", "loss_kernel": "fused-ce"}, "fused-ce loss kernel"),
    ({"model": "mixtral-8x7b-instruct-v0.1", "method": "lora", "dtype": "fp16"}, "grouped_mm"),
    ({"model": "mixtral-8x7b-instruct-v0.1", "method": "full", "dtype": "amp-bf16"}, "MoE experts in amp-bf16"),
    ({"model": "mixtral-8x7b-instruct-v0.1", "method": "qlora"}, "QLoRA of MoE experts"),
    ({"method": "full", "optimizer": "paged-adamw"}, "optimizer paged-adamw"),
])
def test_untraceable_job_raises_in_the_api(fields: dict[str, object], why: str) -> None:
    from autoconf.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=why):
        TracedEstimator().estimate(_job(**fields), Placement(gpu_model=GPU))


@pytest.mark.slow
@pytest.mark.parametrize(("version", "model_type", "framework", "per_vocab"), [
    (None, "llama", "hf-trainer", 12.0), ("4.48.1", "llama", "hf-trainer", 14.0),
    ("4.44.2", "gpt_bigcode", "ms-swift", 6.0), ("4.44.2", "gpt_bigcode", "fms-hf-tuning", 8.0)])
def test_release_loss_stand_in_keeps_the_release_bytes(version: str | None, model_type: str, framework: str,
                                                       per_vocab: float) -> None:
    """The loss of an older transformers release on the installed model's logits (kernels.release_loss): the
    logits component at its peak holds bench/hf_loss_versions.py's measured bytes per token·V (14.1 for 4.46–4.48,
    6.1 for gpt_bigcode 4.x, 12.1 installed: the fraction is its matmul temporary; 8 with accelerate's fp32 copy of
    the bf16 logits beside them and the bf16 log-softmax: 4 + 2 + 2), less the shifted copy's missing last position
    (1/64 here); fake equals real. gpt_bigcode's line runs on the tiny llama's logits (the loss
    does not depend on the decoder)."""
    from autoconf.estimators.traced.job_spec import release_loss_line
    from autoconf.estimators.traced.step import trace

    arch = get_architecture(TINY)
    job = _job(transformers_version=version, framework=framework)
    line = release_loss_line(job, dataclasses.replace(arch, model_type=model_type))
    spec = {**trace_spec(job, arch), "shapes": [[2, 64]]} | ({"hf_loss": line} if line else {})
    spec |= {"fp32_outputs": True} if line == "bf16-4.x" and framework == "fms-hf-tuning" else {}
    fake, real = (trace({**spec, "real": r})["results"][0]["samples"] for r in (False, True))
    np.testing.assert_array_equal(fake, real)
    assert fake[:, 4].max() / (2 * 64 * arch.vocab_size) == pytest.approx(per_vocab, rel=1 / 64)


def test_host_storages_are_not_device_memory() -> None:
    """``LiveBytes.to_host``: a storage moved to the host frees its device bytes (a free event in the allocator
    replay), what an op makes from host tensors only is host memory, and an op that also reads a device tensor
    allocates on the device (1,000 fp32 elements: 4,000 bytes)."""
    from autoconf.estimators.traced.live_bytes import LiveBytes

    tracker = LiveBytes(events=True)
    tracker.host_outputs = True  # as under FSDP1's CPU offload (fsdp1_offload.cpu_offload)
    with tracker:
        shard = torch.empty(1000)
        assert sum(tracker.totals) == 4000
        tracker.to_host(shard)
        moments = torch.zeros_like(shard) + shard
        assert sum(tracker.totals) == 0
        device = torch.ones(1000)
        mixed = device * shard
        assert sum(tracker.totals) == 8000
    assert tracker.events is not None
    assert [n for _, n, _ in tracker.events[:2]] == [4000, -4000]
    del moments, mixed


@pytest.mark.parametrize("steps", [1, 2])
def test_fused_sgd_steps_in_place_on_fake_tensors(steps: int) -> None:
    """``SGD(momentum=0.9, fused=True)`` under FakeTensorMode (kernels._fused_sgd_meta): the first step allocates one
    momentum buffer per parameter (``torch.empty_like``: 2 bytes × 1,000 bf16 elements), the fused update allocates
    nothing, as the CUDA kernel updates in place."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autoconf.estimators.traced.live_bytes import LiveBytes

    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_sgd_", "Meta")
    tracker = LiveBytes()
    with FakeTensorMode():
        param = torch.nn.Parameter(torch.zeros(1000, dtype=torch.bfloat16))
        param.grad = torch.zeros_like(param)
        opt = torch.optim.SGD([param], lr=1e-3, momentum=0.9, fused=True)
        with tracker:
            for _ in range(steps):
                opt.step()
    assert sum(tracker.totals) == 2000
