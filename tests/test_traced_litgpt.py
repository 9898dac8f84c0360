"""LitGPT's own finetune code on fake tensors (autoconf/estimators/traced/stacks/litgpt_step.py): bytes by hand.

A tiny llama (vocabulary 256, 2 layers, hidden 64, 4 heads of 16, 2 kv heads, MLP 128) as a LitGPT Config, trained
in bf16-true with fused AdamW. LitGPT never ties the output head to the embedding (litgpt/model.py: ``lm_head`` and
``transformer.wte`` are separate), fuses q, k and v into one ``attn.qkv`` projection and keeps its LoRA matrices in
the model's dtype (bf16 under ``init_module``); LoRA on q and v is one ``LoRAQKVLinear`` per layer with ``lora_A``
of (2r, hidden) and ``lora_B`` of (q + v outputs, r), plus the int64 indices of the adapted outputs it registers on
its first forward (``lora_ind``). ``fit`` rebuilds the rotary cache for the sequence: cos and sin of (sequence,
head_dim), fp32. Fused AdamW keeps two moments in the parameter dtype and an fp32 ``step`` per trained tensor.
Under ``full.py``'s FSDP (torch's FSDP1 through Fabric) on a fake world of 4, each ``Block`` and the root (lm_head,
wte, ln_f) is one flat parameter split in four; rank 0 keeps the first quarter of each, and AdamW keeps a ``step``
only for the original parameters with elements in it. Under ``lora.py``'s FSDP2 each parameter is split by rows.
The whole single-device trace on fake tensors equals the same code on real CPU tensors, phase by phase.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoconf.estimators.traced.stacks.memory import STACK_PATH, stack_version
from tests._stack_cli import cache_fixture, estimate_args  # noqa: F401 (the cache fixture)
from tests._stack_cli import cli as _cli
from tests._stack_driver import check_fake_equals_real, drive, phase

# litgpt 0.5.13 pins huggingface_hub < 1.4 (transformers 5 needs more): it goes in the stack directory (docs/traced.md)
pytestmark = pytest.mark.skipif(stack_version("litgpt") is None or stack_version("lightning") is None,
                                reason=f"litgpt and lightning not installed here or in ${STACK_PATH}")

V, L, D, H, KV, FF, R = 256, 2, 64, 4, 2, 128, 8
HD = D // H
B, S = 2, 32
ARCH = {"name": "tiny", "model_type": "llama", "vocab_size": V, "num_layers": L, "num_heads": H, "num_kv_heads": KV,
        "hidden_size": D, "intermediate_size": FF, "head_dim": HD, "attention_bias": False}


def spec(method: str, world: int = 1, **extra: Any) -> dict[str, Any]:
    return {"stack": "litgpt", "arch": ARCH, "block_size": 128, "method": method, "dtype": "bf16",
            "optimizer_impl": "fused", "lora_r": R, "lora_alpha": 16.0, "lora_dropout": 0.0,
            "lora_target_modules": ["q_proj", "v_proj"] if method == "lora" else [], "world": world,
            "strategy": "fsdp" if world > 1 else "single", "shape": [B, S], **extra}


# parameter sizes in registration order: the root's (lm_head, wte, ln_f) and a Block's (norm_1, qkv, proj, norm_2,
# fc_1, fc_2, mlp proj)
ROOT = [V * D, V * D, D]
BLOCK = [D, D * (H + 2 * KV) * HD, H * HD * D, D, D * FF, D * FF, FF * D]


def first_quarter_params(sizes: list[int], world: int) -> int:
    """Parameters with elements in rank 0's chunk (the first 1/world) of a flat parameter of ``sizes``."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return sum(start < sum(sizes) // world for start in starts)


def hand(method: str, world: int = 1) -> list[int]:
    """(weights, gradients, AdamW states, activations) on rank 0 at step 2's optimizer step, before ``zero_grad``."""
    base = sum(ROOT) + L * sum(BLOCK)  # every dimension divides by 4: no padding
    lora = L * (2 * R * D + (H + KV) * HD * R)  # lora_A (2r, D) and lora_B (q + v outputs, r) per layer
    rope = 2 * S * HD * 4  # cos and sin for the sequence, fp32, on every rank
    if method == "lora":  # FSDP2 shards each adapter by rows; its base shards: see test_lora_under_fsdp_keeps_...
        trained, tensors = lora // world, 2 * L
        weights = 2 * (base + lora) // world + rope
    else:
        trained = base // world
        tensors = first_quarter_params(ROOT, world) + L * first_quarter_params(BLOCK, world)
        weights = 2 * base // world + rope
    indices = L * (H + KV) * HD * 8 if method == "lora" else 0  # LoRAQKVLinear.lora_ind, int64, on every rank
    return [weights, 2 * trained, 2 * 2 * trained + 4 * tensors, indices]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    runs = {"full": spec("full", accumulation=2), "lora": spec("lora"), "lora-real": spec("lora", real=True),
            "full4": spec("full", 4, accumulation=2), "lora4": spec("lora", 4)}
    return {name: drive("litgpt", s, tmp_path_factory.mktemp(name)) for name, s in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "method", "world"),
                         [("full", "full", 1), ("lora", "lora", 1), ("full4", "full", 4), ("lora4", "lora", 4)])
def test_bytes_are_the_hand_derived_ones(traces: dict[str, Any], name: str, method: str, world: int) -> None:
    assert phase(traces[name], 2, "optimizer")["parts"][:4] == hand(method, world)
    assert phase(traces[name], 0, "load")["parts"][1:] == [0, 0, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["full", "full4"])
def test_accumulation_keeps_whole_gradients_for_the_next_micro_batch(traces: dict[str, Any], name: str) -> None:
    """Two micro-batches a step: the second runs its forward with the first one's gradients, whole in bf16 on every
    rank (under FSDP ``fabric.no_backward_sync`` is FSDP1's ``no_sync``: no reduce-scatter, unsharded gradients)."""
    assert phase(traces[name], 2, "forward")["parts"][1] == 2 * (sum(ROOT) + L * sum(BLOCK))


@pytest.mark.slow
def test_lora_under_fsdp_keeps_the_materialised_base_shards(traces: dict[str, Any]) -> None:
    """lora.py under FSDP2 builds the optimizer from ``model.parameters()`` (frozen base included), then loads with
    ``load_from_full_model_state_dict(cpu_offload=True)``, which assigns host copies of the base shards: the device
    shards FSDP2 materialised stay alive in the optimizer's parameter list. Rank 0's weights are a quarter of the
    base and of the adapters in bf16 plus the rotary cache, as if the base were sharded on the device."""
    weights = phase(traces["lora4"], 2, "optimizer")["parts"][0]
    base, adapters = sum(ROOT) + L * sum(BLOCK), L * (2 * R * D + (H + KV) * HD * R)
    assert weights - 2 * adapters // 4 - 2 * S * HD * 4 == 2 * base // 4


@pytest.mark.slow
def test_fsdp_full_save_gathers_one_unit_at_a_time(traces: dict[str, Any]) -> None:
    """``fabric.save`` of a full state dict: FSDP1 gathers each unit on the device and moves it to rank 0's host
    (offload_to_cpu) before the next, so the device holds the shards plus the largest unit, a Block, in bf16."""
    sharded = phase(traces["full4"], 2, "optimizer")["parts"][0]
    assert phase(traces["full4"], 3, "save")["parts"][0] == sharded + 2 * sum(BLOCK)


@pytest.mark.slow
def test_fake_trace_equals_the_real_cpu_step(traces: dict[str, Any]) -> None:
    check_fake_equals_real(traces["lora"], traces["lora-real"])


# --- refusals on the CLI, with a shared cache (CLI, sweep, REST and ado: tests/test_traced_stack_interfaces.py) ------
ESTIMATE = estimate_args("litgpt")


@pytest.mark.parametrize(("flags", "why"), [(("--qlora",), "bitsandbytes"),
                                            (("--lora", "--dora"), "DoRA"), (("--loss-kernel", "hf"), "chunked_cross_entropy"),
                                            (("--dp", "2", "--strategy", "ddp"), "FSDPStrategy")])
def test_untraceable_combination_is_one_line_saying_why(cache: dict[str, str], flags: tuple[str, ...], why: str) -> None:
    done = _cli(cache, *ESTIMATE[:7], *flags, "--estimator", "traced", "--framework", "litgpt")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and "use --estimator theory" in lines[0], done.stderr
