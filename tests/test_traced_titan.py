"""torchtitan's own model and parallelisation on fake tensors (autoconf/estimators/traced/stacks/torchtitan_step.py).

torchtitan is not in the extras (its datasets<4.8 pin moves huggingface_hub below what transformers 5 needs here,
and it imports triton): CI installs it into a stacks directory of its own (.ci/run, docs/traced.md). Per-rank static bytes of a tiny
llama derived by hand: torchtitan keeps fp32 master weights (training.dtype float32), reduces gradients in fp32 and
keeps two fp32 AdamW moments plus a 4-byte step per parameter tensor; FSDP2 divides every parameter by the data
parallel degree, TP divides the projection and embedding matrices (not the norms) by its degree; each layer's RoPE
keeps its own complex64 cache of (seq_len, head_dim / 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoconf.estimators.traced.stacks.memory import STACK_PATH, stack_version
from tests._stack_driver import drive

pytestmark = pytest.mark.skipif(stack_version("torchtitan") is None, reason=f"torchtitan not installed here or in ${STACK_PATH}")

V, L, D, H, KV, FF = 256, 2, 64, 4, 2, 128
HD, SEQ = D // H, 32
ARCH = {"model_type": "llama", "vocab_size": V, "num_layers": L, "num_heads": H, "num_kv_heads": KV, "hidden_size": D,
        "intermediate_size": FF, "head_dim": HD, "tie_word_embeddings": False, "name": "tiny"}


def run(tmp_path: Path, world: int, tp: int) -> dict[str, Any]:
    return drive("torchtitan", {
        "stack": "torchtitan", "arch": ARCH, "max_seq_len": SEQ, "method": "full", "dtype": "amp-bf16",
        "gradient_checkpointing": True, "optimizer_impl": "fused", "world": world, "tp": tp, "shape": [2, SEQ],
        "strategy": "fsdp"}, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("world", "tp"), [(4, 1), (4, 2)])
def test_static_bytes_per_rank_are_the_hand_derived_ones(tmp_path: Path, world: int, tp: int) -> None:
    norms = (2 * L + 1) * D
    matrices = 2 * V * D + L * (D * D + 2 * D * KV * HD + HD * H * D + 3 * D * FF)
    per_rank = matrices // world + norms // (world // tp)  # elements of this rank's shards
    tensors = 2 + L * 7 + 1  # embedding, lm_head, per layer wqkv, wo, w1, w2, w3 and two norms, final norm
    rope = L * SEQ * (HD // 2) * 8
    summary = run(tmp_path, world, tp)
    step2 = next(p for p in summary["phases"] if p["step"] == 2 and p["phase"] == "optimizer")
    assert step2["parts"][:3] == [4 * per_rank + rope, 4 * per_rank, 8 * per_rank + 4 * tensors]

