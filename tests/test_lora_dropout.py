"""LoRA dropout as a CUDA device keeps it (docs/traced_vs_theory.md finding 27): the trace and theory."""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.theory.activations import layer_bytes_per_token
from autoconf.schema import Job

QKV = ["q_proj", "k_proj", "v_proj"]


def test_the_trace_keeps_a_bool_mask_as_cuda_does() -> None:
    """aten's dropout takes the fused native_dropout on CUDA (Dropout.cpp ``is_fused_kernel_acceptable``), whose
    backward keeps a bool mask: 1 byte per element, where the CPU composition keeps a noise tensor of the input's
    dtype. 128 × 64 fp32 elements: 8,192 bytes saved besides nothing else."""
    torch = pytest.importorskip("torch")
    from autoconf.estimators.traced import cuda_dropout

    cuda_dropout.install()
    x = torch.randn(128, 64, requires_grad=True)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.dropout(x, 0.1, training=True)
    assert saved == [128 * 64]


@pytest.mark.parametrize(("framework", "expected"), [
    # fp32 adapters (peft ≥ 0.12): each module's dropout output replaces its fp32 cast copy; a 1-byte mask each
    ("hf-trainer", 3 * 4096),
    # adapters in the model dtype (train.py's peft 0.7–0.11): three bf16 outputs and masks (3 × 3 bytes a unit)
    # replace lora_A's one shared bf16 input (2 bytes a unit)
    ("fsdp-qlora", 3 * 3 * 4096 - 2 * 4096),
])
def test_dropout_bytes_per_token_of_a_layer(framework: str, expected: int) -> None:
    """Llama-2-7B (h 4,096) LoRA on q, k, v without checkpointing: dropout 0.1 against none, per token per layer."""
    arch = get_architecture("Llama-2-7b-hf")

    def layer(dropout: float) -> float:
        job = Job(model="Llama-2-7b-hf", framework=framework, method="lora", lora_target_modules=QKV,
                  lora_dropout=dropout, tokens_per_sample=512, batch_size=1, gradient_checkpointing=False)
        return float(layer_bytes_per_token(job, arch))

    assert layer(0.1) - layer(0.0) == pytest.approx(expected)
