"""Count the element-wise bytes a LoRA adapter adds to a decoder layer's training step (throughput.LORA_BYTES_PER_WIDTH).

The throughput theory's memory-bound term prices the bytes that a decoder layer's non-matmul kernels (norms,
activations, rotary, residual adds, casts, dropout) move per token, relative to its matmul FLOPs
(throughput.ridge_over_hidden). peft's LoRA adds such kernels around every adapted linear (dropout on the input,
the rank-r products' input read and output write, the scaling, the add into the base output, their backward, and
with gradient checkpointing their recompute). This script runs a real transformers Llama decoder (grouped-query
attention, MLP 3.5 h: Mistral-7B's and Llama-3-8B's shape, scaled down) in bf16 on the CPU, forward and backward,
with and without peft LoRA, and sums the bytes read and written by every aten kernel that is not a matmul, an
attention kernel, a view, the embedding or the loss. Per token and decoder layer (the difference between 3 and 1
layers at two sequence lengths, so per-step and per-weight work drops out) it prints the LoRA step's bytes over the
full fine-tuning step's, and γ: the added share per unit of adapted width Σ(in + out) / h.

    python bench/lora_elementwise_bytes.py     # needs the `traced` extra (torch, transformers, peft); ~30 s on a CPU

Measured with torch 2.13 (CPU), transformers 5.24, peft 0.21: γ = 0.132 (q, k, v, o) and 0.128 (q, v) with
gradient checkpointing, 0.106 and 0.101 without.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from peft import LoraConfig, get_peft_model
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HIDDEN, MLP, HEADS, KV_HEADS, VOCAB, RANK = 512, 1792, 8, 2, 1000, 16
# kernels that move no bytes (views) or are priced elsewhere (matmuls, attention, embedding, loss)
FREE = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "slice", "select", "as_strided", "detach",
        "alias", "unsqueeze", "squeeze", "reshape", "_reshape_alias", "split", "split_with_sizes", "unbind",
        "empty", "empty_like", "new_empty", "zeros", "ones", "scalar_tensor", "arange", "lift_fresh"}
PRICED = ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul")
PRICED_PARTS = ("scaled_dot_product", "embedding", "nll_loss", "log_softmax")


class ElementwiseBytes(TorchDispatchMode):
    """Sums the input and output bytes of every element-wise (non-matmul, non-view) aten kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name in FREE or name in PRICED or any(part in name for part in PRICED_PARTS):
            return out
        self.bytes += sum(t.numel() * t.element_size() for t in tree_leaves((args, kwargs, out))
                          if isinstance(t, torch.Tensor) and t.dim() > 0)
        return out


def step_bytes(layers: int, seq: int, targets: tuple[str, ...], checkpointing: bool) -> int:
    """Element-wise bytes of one forward + backward of 2 sequences of ``seq`` tokens (no targets: full FT)."""
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=layers, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, vocab_size=VOCAB, max_position_embeddings=4 * seq,
                         attn_implementation="sdpa")
    model: Any = LlamaForCausalLM(config).to(torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if targets:
        model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=RANK, lora_dropout=0.05,
                                                 target_modules=list(targets)))
        if checkpointing:
            model.enable_input_require_grads()
    model.train()
    ids = torch.randint(0, VOCAB, (2, seq))
    counter = ElementwiseBytes()
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.bytes


def per_token_layer(targets: tuple[str, ...], checkpointing: bool) -> float:
    """Bytes per token and decoder layer: the slope over layers (3 vs 1) and tokens (2 × 256 vs 2 × 128)."""
    b = {(n, s): step_bytes(n, s, targets, checkpointing) for n in (1, 3) for s in (128, 256)}
    return ((b[3, 256] - b[1, 256]) - (b[3, 128] - b[1, 128])) / 2 / (2 * 128)


def adapted_width(targets: tuple[str, ...]) -> float:
    """Σ (in + out features) of the adapted linears of one layer, over h."""
    head = HIDDEN // HEADS
    widths = {"q_proj": 2 * HIDDEN, "k_proj": HIDDEN + KV_HEADS * head, "v_proj": HIDDEN + KV_HEADS * head,
              "o_proj": 2 * HIDDEN}
    return sum(widths[t] for t in targets) / HIDDEN


def main() -> int:
    for checkpointing in (True, False):
        full = per_token_layer((), checkpointing)
        for targets in (("q_proj", "k_proj", "v_proj", "o_proj"), ("q_proj", "v_proj")):
            ratio = per_token_layer(targets, checkpointing) / full
            print(f"checkpointing={checkpointing} targets={','.join(targets)}: full FT {full / HIDDEN:.0f} h bytes per "
                  f"token and layer; LoRA / full = {ratio:.3f}; γ = {(ratio - 1) / adapted_width(targets):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
