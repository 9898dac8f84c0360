"""TRL's SFTTrainer on fake tensors (autoconf/estimators/traced/stacks/trl_step.py): per-rank bytes by hand.

A tiny llama (vocabulary 256, 2 layers, hidden 64, 4 heads of 16, 2 kv heads, MLP 128, untied) in bf16 with LoRA
r = 8 on q_proj and v_proj: peft keeps the adapters in fp32 next to the bf16 base, the Trainer's fused AdamW keeps
two fp32 moments and an fp32 ``step`` per adapter tensor; FSDP2 over a fake world of 4 shards all of it by 4 (every
dimension divides). Besides those, the rank holds the rotary ``inv_freq`` and ``original_inv_freq`` (fp32, head_dim
/ 2 each), the step's batch (input_ids, attention_mask, labels: int64, batch × sequence) and the Trainer's fp32
running loss. The whole single-device trace on fake tensors equals the same code on real CPU tensors, phase by phase.

QLoRA under FSDP2 (the FSDP-QLoRA recipe: ``bnb_4bit_quant_storage`` = the model's bf16): each of the 14 linear
weights is two 4-bit values a byte, packed in bf16 elements and sharded like any other parameter; its quant state
(bitsandbytes/functional.py ``quantize_4bit``: an fp32 absmax per 64 values and the 16-entry fp32 NF4 code; with
double quantisation a uint8 absmax per 64, an fp32 one per 256 of those, the fp32 offset and a copy of the 256-entry
fp32 dynamic code) stays whole on every rank; TRL casts the adapters of a quantised model to bf16 (sft_trainer.py),
DoRA's magnitudes excepted (fp32).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from autoconf.estimators.traced.stacks.memory import stack_version
from tests._stack_cli import TINY, cache_fixture, estimate_args  # noqa: F401 (the cache fixture)
from tests._stack_cli import cli as _cli
from tests._stack_driver import check_fake_equals_real, drive, phase, run_worker

pytestmark = pytest.mark.skipif(stack_version("trl") is None, reason="trl not installed (autoconf-gpu[stacks])")

V, L, D, H, KV, FF, R = 256, 2, 64, 4, 2, 128, 8
HD = D // H
B, S = 2, 32
ARCH = {"name": "tiny", "family": "llama", "model_type": "llama", "vocab_size": V, "num_layers": L, "num_heads": H,
        "num_kv_heads": KV, "hidden_size": D, "intermediate_size": FF, "head_dim": HD, "tie_word_embeddings": False,
        "max_position_embeddings": 0, "attention_bias": False, "mlp_bias": False, "num_experts": 0,
        "experts_per_token": 0}


def spec(world: int, **extra: Any) -> dict[str, Any]:
    return {"stack": "trl", "arch": ARCH, "method": "lora", "dtype": "bf16", "attention": "sdpa", "optimizer": "adamw",
            "optimizer_impl": "fused", "gradient_checkpointing": True, "lora_r": R, "lora_alpha": 16.0,
            "lora_dropout": 0.0, "lora_target_modules": ["q_proj", "v_proj"], "world": world,
            "strategy": "fsdp" if world > 1 else "single", "shape": [B, S], "dora": False, "fsdp_version": 2,
            "cpu_ram_efficient_loading": False, **extra}


def hand(world: int) -> tuple[int, int, int]:
    """(weights, gradients, AdamW states without its scalars) one rank holds at step 2's optimizer step."""
    layer = D * H * HD + 2 * D * KV * HD + H * HD * D + 3 * D * FF + 2 * D  # q, k, v, o, gate/up/down, two norms
    base = 2 * V * D + L * layer + D  # embedding, output, layers, final norm: bf16
    lora = L * (R * D + H * HD * R + R * D + KV * HD * R)  # A and B of q_proj and v_proj: fp32
    rotary = 2 * (HD // 2) * 4  # inv_freq and original_inv_freq, fp32, whole on every rank
    batch = 3 * B * S * 8  # input_ids, attention_mask, labels
    weights = (2 * base + 4 * lora) // world + rotary + batch + 4  # + the Trainer's running loss
    return weights, 4 * lora // world, 2 * 4 * lora // world + 4 * 4 * L  # + one fp32 step per adapter tensor (4 a layer)


def hand_qlora(world: int, double_quant: bool, dora: bool) -> tuple[int, int, int]:
    """(weights, gradients, AdamW states without its scalars) one rank holds at step 2's optimizer step, QLoRA."""
    linears = [D * H * HD, D * KV * HD, D * KV * HD, H * HD * D, D * FF, D * FF, D * FF] * L  # q k v o gate up down
    packed = sum(linears) // 2  # two 4-bit values a byte (bf16 elements: four a value)
    rest = 2 * (2 * V * D + 2 * L * D + D)  # embedding, output, norms: bf16
    lora = 2 * L * (R * D + H * HD * R + R * D + KV * HD * R)  # bf16 (TRL's cast)
    magnitudes = 4 * L * (H * HD + KV * HD) if dora else 0  # DoRA's, kept fp32 by TRL
    blocks = [n // 64 for n in linears]
    # double quantisation: uint8 absmax, fp32 absmax of <= 256 of them, fp32 offset, the dynamic code's copy
    state = sum(b + 4 * -(b // -256) + 4 + 4 * 256 if double_quant else 4 * b for b in blocks)
    state += 4 * 16 * len(linears)  # the NF4 code of each weight (functional.py get_4bit_type, on the device)
    rotary, batch = 2 * (HD // 2) * 4, 3 * B * S * 8
    trained = lora + magnitudes
    weights = (packed + rest + trained) // world + state + rotary + batch + 4
    steps = 4 * L * (4 + (2 if dora else 0))  # one fp32 step per trained tensor
    return weights, trained // world, 2 * trained // world + steps


@pytest.mark.slow
@pytest.mark.parametrize(("world", "double_quant", "dora"), [(4, False, False), (2, True, False), (1, False, True)])
def test_qlora_rank_bytes_are_the_hand_derived_ones(world: int, double_quant: bool, dora: bool,
                                                    tmp_path: Path) -> None:
    """peft QLoRA sharded by accelerate's FSDP2: the packed 4-bit weights 1/N, the quant states whole; DoRA on one
    GPU (peft deep-copies and dequantises each 4-bit layer to size its magnitudes). The optimizer category also
    holds the two gradient norms clipping returned that the Trainer keeps: bf16 and fp32 for bf16 gradients, two
    fp32 once DoRA's fp32 gradients join."""
    out = drive("trl", spec(world, method="qlora", double_quant=double_quant, dora=dora, cpu_ram_efficient_loading=True),
                tmp_path)
    weights, gradients, states = hand_qlora(world, double_quant, dora)
    assert phase(out, 2, "optimizer")["parts"][:3] == [weights, gradients, states + (4 + 4 if dora else 2 + 4)]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    runs = {"single": spec(1), "fsdp4": spec(4), "real": spec(1, real=True), "dora": spec(1, dora=True),
            "fsdp4-efficient": spec(4, cpu_ram_efficient_loading=True)}
    return {name: drive("trl", s, tmp_path_factory.mktemp(name)) for name, s in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "world"), [("single", 1), ("fsdp4", 4)])
def test_rank_bytes_are_the_hand_derived_ones(traces: dict[str, Any], name: str, world: int) -> None:
    weights, gradients, states = hand(world)
    parts = phase(traces[name], 2, "optimizer")["parts"]
    assert parts[0] == weights and parts[1] == gradients
    # the optimizer category also holds the fp32 gradient norms clipping returned (the Trainer logs them): 2 × 4 B
    assert parts[2] == states + 2 * 4


@pytest.mark.slow
def test_dora_adds_one_trained_magnitude_per_adapted_output(traces: dict[str, Any]) -> None:
    """peft's DoRA: a fp32 magnitude vector per adapted module (q_proj: H·HD outputs, v_proj: KV·HD), trained."""
    _, gradients, _ = hand(1)
    assert phase(traces["dora"], 2, "optimizer")["parts"][1] == gradients + 4 * L * (H * HD + KV * HD)


@pytest.mark.slow
def test_efficient_loading_changes_the_load_only(traces: dict[str, Any]) -> None:
    """accelerate's cpu_ram_efficient_loading: rank 0 broadcasts one full tensor at a time into meta-sharded FSDP2
    units instead of each unit's full tensors arriving on the device; the steps hold the same bytes."""
    off, on = traces["fsdp4"], traces["fsdp4-efficient"]
    assert [p for p in on["phases"] if p["step"] > 0] == [p for p in off["phases"] if p["step"] > 0]
    assert phase(on, 0, "load")["peak"] < phase(off, 0, "load")["peak"]


def hf_step(world: int, tmp: Path) -> dict[str, Any]:
    """The HF step's rank trace (dist.py), which answers --framework hf-trainer, for the same job."""
    keys = ("arch", "method", "dtype", "attention", "optimizer", "optimizer_impl", "gradient_checkpointing", "lora_r",
            "lora_alpha", "lora_dropout", "lora_target_modules", "world", "strategy", "shape")
    hf_spec = {k: v for k, v in spec(world).items() if k in keys}
    return run_worker("autoconf.estimators.traced.dist", hf_spec, tmp, "hf", dict(os.environ))


@pytest.mark.slow
@pytest.mark.parametrize("world", [4])  # one GPU holds the same differences (checked by hand; CI time)
def test_transformers_trainer_holds_what_the_hf_step_holds(world: int, tmp_path: Path) -> None:
    """transformers' own Trainer (the driver with ``trainer: transformers``: the model's loss, peft applied before
    the Trainer) against the HF step that answers hf-trainer jobs: at step 2's optimizer step they hold the same
    gradients, AdamW states and activations; the Trainer keeps more only the batch (input_ids, attention_mask,
    labels), its fp32 running loss and logged loss and the two fp32 gradient norms clipping returned."""
    own = drive("trl", spec(world, trainer="transformers"), tmp_path)
    ours = hf_step(world, tmp_path)
    a, b = phase(own, 2, "optimizer")["parts"], phase(ours, 2, "optimizer")["parts"]
    assert [x - y for x, y in zip(a, b, strict=True)] == [3 * B * S * 8 + 4, 0, 2 * 4, 0, 4]
    assert 0 <= own["allocated_peak"] - ours["allocated_peak"] <= 3 * B * S * 8 + 16


@pytest.mark.slow
def test_fake_trace_equals_the_real_cpu_step(traces: dict[str, Any]) -> None:
    check_fake_equals_real(traces["single"], traces["real"])


# --- QLoRA under FSDP on the CLI and REST, with a shared cache (the tiny LoRA job's CLI, sweep, REST and ado:
# tests/test_traced_stack_interfaces.py) --------------------------------------------------------------------------
OWN_CODE = "trl 1.16.0's own code"
ESTIMATE = estimate_args("trl")


@pytest.mark.slow
def test_qlora_under_fsdp_answers_from_the_sftrainers_code(cache: dict[str, str]) -> None:
    from tests._server import serve

    done = _cli(cache, *ESTIMATE[:7], "--qlora", "--dp", "2", "--strategy", "fsdp", "--estimator", "traced",
                "--framework", "trl")
    assert done.returncode == 0, done.stderr
    assert OWN_CODE in done.stdout and "a fake process group of 2 (FSDP2 fsdp" in done.stdout
    body = {"model": TINY, "method": "qlora", "gpu_model": "NVIDIA-A100-80GB-PCIe", "number_gpus": 2,
            "strategy": "fsdp", "tokens_per_sample": 64, "batch_size": 2, "estimator": "traced", "framework": "trl"}
    with serve(env={"AUTOCONF_CACHE": cache["AUTOCONF_CACHE"]}) as http:  # the same job: from the cache
        res = http.post("/api/memory", json=body)
    assert res.status_code == 200, res.text
    assert OWN_CODE in json.dumps(res.json())


@pytest.mark.parametrize(("flags", "why"), [(("--lora", "--strategy", "fsdp-hybrid"), "strategy fsdp-hybrid"),
                                           (("--qlora", "--dora", "--strategy", "fsdp"), "_init_mp_dtypes")])
def test_untraceable_combination_is_one_line_saying_why(cache: dict[str, str], flags: tuple[str, ...],
                                                        why: str) -> None:
    done = _cli(cache, *ESTIMATE[:7], *flags, "--dp", "2", "--estimator", "traced", "--framework", "trl")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0], done.stderr
