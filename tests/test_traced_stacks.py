"""torchtune's and DeepSpeed's own training code on fake tensors (autoconf/estimators/traced/stacks/).

The per-rank static bytes of a tiny llama are derived by hand from its dimensions (bf16 parameters, gradients and
the two AdamW moments of the trainable ones, sharded by the world; fused AdamW's fp32 ``step`` scalar per trainable
tensor; torchtune's rotary cache of (max_seq_len, head_dim / 2, 2) fp32 plus its theta); the whole trace on fake
tensors equals, phase by phase, the same code on real CPU tensors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autoconf.estimators.traced.stacks.memory import STACK_PATH, stack_version
from tests._stack_driver import check_fake_equals_real, drive, phase

# torchtune goes in a directory of its own (AUTOCONF_STACK_PATH; docs/traced.md): its torchao 0.15 and peft 0.21
# cannot share one environment
needs_torchtune = pytest.mark.skipif(stack_version("torchtune") is None or stack_version("torchao") is None,
                                     reason=f"torchtune and torchao not installed here or in ${STACK_PATH}")
# DeepSpeed's CPU accelerator compiles its shared-memory communication op (ninja + a C++ compiler) on first use
needs_deepspeed = pytest.mark.skipif(stack_version("deepspeed") is None or shutil.which("c++") is None,
                                     reason="deepspeed or a C++ compiler (for its CPU communication op) not installed")


V, L, D, H, KV, FF = 256, 2, 64, 4, 2, 128  # vocab, layers, hidden, heads, kv heads, MLP width
HD = D // H
SEQ_MAX = 128
ARCH = {"model_type": "llama", "vocab_size": V, "num_layers": L, "num_heads": H, "num_kv_heads": KV, "hidden_size": D,
        "intermediate_size": FF, "head_dim": HD, "tie_word_embeddings": False, "name": "tiny"}
R = 8  # LoRA rank, on q_proj and v_proj


def spec(method: str, world: int, **extra: Any) -> dict[str, Any]:
    return {"stack": "torchtune", "arch": ARCH, "max_seq_len": SEQ_MAX, "method": method, "dtype": "bf16",
            "gradient_checkpointing": True, "loss": "chunked", "optimizer_impl": "fused", "world": world,
            "strategy": "fsdp" if world > 1 else "single", "shape": [2, 32], "lora_r": R, "lora_alpha": 16.0,
            "lora_dropout": 0.0, "lora_target_modules": ["q_proj", "v_proj"], **extra}


def hand_static(method: str, world: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes one rank keeps between backward and the next forward."""
    layer = D * D + 2 * D * KV * HD + HD * H * D + 3 * D * FF + 2 * D  # q, k, v, o, gate/up/down, two norms
    base = 2 * V * D + L * layer + D  # embedding, untied output, layers, final norm
    lora = L * (R * D + D * R + R * D + KV * HD * R)  # A and B of q_proj and v_proj per layer
    trainable, tensors = (lora, 4 * L) if method == "lora" else (base, 2 + 9 * L + 1)
    total = base + (lora if method == "lora" else 0)
    rope = SEQ_MAX * (HD // 2) * 2 * 4 + (HD // 2) * 4  # rotary cache and theta, fp32, not sharded (buffers)
    weights = 2 * total // world + rope
    return weights, 2 * trainable // world, 2 * 2 * trainable // world + 4 * tensors


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int, bool], dict[str, Any]]:
    runs = [("full", 1, False), ("full", 4, False), ("lora", 4, False), ("lora", 4, True)]
    tmp = tmp_path_factory.mktemp("torchtune")
    return {run: drive("torchtune", spec(run[0], run[1], real=run[2]), tmp) for run in runs}


@pytest.mark.slow
@needs_torchtune
@pytest.mark.parametrize(("method", "world"), [("full", 1), ("full", 4), ("lora", 4)])
def test_static_bytes_per_rank_are_the_hand_derived_ones(traces: dict[Any, Any], method: str, world: int) -> None:
    weights, grads, states = hand_static(method, world)
    # after step 2's optimizer step, before zero_grad: parameters, reduced gradients, AdamW states
    assert phase(traces[(method, world, False)], 2, "optimizer")["parts"][:3] == [weights, grads, states]
    assert phase(traces[(method, world, False)], 0, "load")["parts"][1:] == [0, 0, 0, 0]


@pytest.mark.slow
@needs_torchtune
def test_fake_trace_equals_the_real_cpu_step(traces: dict[Any, Any]) -> None:
    check_fake_equals_real(traces[("lora", 4, False)], traces[("lora", 4, True)])


@pytest.mark.slow
@needs_torchtune
def test_qlora_fake_trace_equals_the_real_cpu_step(tmp_path: Path) -> None:
    # NF4 quantises blocks of 64 values and double-quantises blocks of 256 scalers: every weight needs 64·256 | numel
    arch = {**ARCH, "hidden_size": 256, "intermediate_size": 512}
    check_fake_equals_real(*(drive("torchtune", {**spec("qlora", 1, real=r), "arch": arch}, tmp_path)
                             for r in (False, True)))


@pytest.mark.slow
@needs_torchtune
def test_sharding_divides_the_full_models_states(traces: dict[Any, Any]) -> None:
    one, four = traces[("full", 1, False)], traces[("full", 4, False)]
    assert phase(four, 2, "optimizer")["parts"][2] < phase(one, 2, "optimizer")["parts"][2] / 3
    assert four["allocated_peak"] < one["allocated_peak"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoconf.interfaces.cli", "estimate", "--estimator", "traced",
                           "--framework", "torchtune", *args], capture_output=True, text=True, env=dict(os.environ),
                          timeout=300, check=False)


@pytest.mark.slow
@needs_torchtune
def test_cli_answers_from_torchtunes_code(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCONF_CACHE", str(tmp_path))
    done = _cli("--model", "llama3.2-1b", "--seq-len", "256", "--per-device-batch", "1", "--lora")
    assert done.returncode == 0, done.stderr
    assert "torchtune 0.6.1" in done.stdout and "own code" in done.stdout


def _deepspeed(tmp_path: Path, stage: int, real: bool) -> dict[str, Any]:
    arch = {**ARCH, "max_position_embeddings": 0, "attention_bias": False, "mlp_bias": False, "num_experts": 0,
            "experts_per_token": 0}
    return drive("deepspeed", {
        "stack": "deepspeed", "arch": arch, "method": "full", "dtype": "bf16", "attention": "sdpa", "optimizer": "adamw",
        "optimizer_impl": "fused", "gradient_checkpointing": True, "world": 4, "stage": stage, "shape": [2, 32],
        "lora_r": R, "lora_alpha": 16.0, "lora_dropout": 0.0, "lora_target_modules": [], "real": real}, tmp_path)


@pytest.fixture(scope="module")
def zero(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, bool], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("deepspeed")
    return {run: _deepspeed(tmp, *run) for run in [(1, False), (3, False), (3, True)]}


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("stage", [1, 3])
def test_deepspeed_zero_keeps_adam_states_of_its_fp32_partition(zero: dict[Any, Any], stage: int) -> None:
    layer = D * D + 2 * D * KV * HD + HD * H * D + 3 * D * FF + 2 * D
    params = 2 * V * D + L * layer + D
    forward = phase(zero[(stage, False)], 2, "forward")["parts"]
    # AdamW's two fp32 moments over the rank's quarter of the fp32 master copy; on top, ZeRO-1 keeps 8 B (step
    # counters) and ZeRO-3 652 B, not attributed here: within 0.5 %
    expected = 2 * 4 * params // 4
    assert expected <= forward[2] <= expected * 1.005
    if stage == 3:  # bf16 parameters partitioned too: far below one replica's bf16 weights + fp32 master quarter
        assert forward[0] < 2 * params + 4 * params // 4


@pytest.mark.slow
@needs_deepspeed
def test_deepspeed_fake_trace_equals_the_real_cpu_step(zero: dict[Any, Any]) -> None:
    check_fake_equals_real(zero[(3, False)], zero[(3, True)])
