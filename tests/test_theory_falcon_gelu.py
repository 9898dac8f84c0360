"""Falcon's attention layouts, the Python GELUs and OLMo's weightless norms, against autograd and against sums written out by hand.

Expected values come from torch itself (the tensors autograd saves, listed with saved_tensors_hooks on real CPU
tensors) or from the sum of the tensors each module keeps, read from transformers' modelling code and torch's
kernels: h = hidden, q / kv = query / KV widths, I = MLP width, a = heads, s = tokens a query attends. Not the code's
own output.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers
from transformers.activations import ACT2FN

from autoconf.catalog import get_architecture
from autoconf.catalog.architecture import Architecture
from autoconf.catalog.config_parse import parse_config
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory.coefficients import PLAIN_MLP_BYTES
from autoconf.estimators.traced import falcon_flash
from autoconf.estimators.traced.fit import quadratic
from autoconf.estimators.traced.job_spec import trace_spec
from autoconf.schema import Job

S = 4096
R = 8  # Job default LoRA rank


def _job(model: str, method: str = "full", attention: str = "flash") -> Job:
    return Job(model=model, method=method, tokens_per_sample=S, batch_size=1, gradient_checkpointing=False,
               attention=attention)


@pytest.mark.parametrize("name", sorted(PLAIN_MLP_BYTES))
def test_python_gelu_saves_what_autograd_keeps(name: str) -> None:
    """Per unit of MLP width: every tensor autograd keeps inside the activation, fc1's output included, plus the
    activation's output that the down projection keeps (2 B)."""
    leaf = torch.randn(64, dtype=torch.bfloat16, requires_grad=True)
    fc1_out = leaf * 1.0
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ACT2FN[name](fc1_out)
    assert sum(kept.values()) / 64 + 2 == PLAIN_MLP_BYTES[name]


# gpt-neox-20b: h = q = kv = 6144, I = 24576, a = 64, head_dim 96, rotary 24 of 96 (torch.cat). Two LayerNorms of one
# input (parallel residual: input 2h, stats 4 + 4, outputs 2h + 2h); q, k cat copies 2q + 2kv, v keeping
# query_key_value's whole output 2(q + 2kv), out and its copy before dense 4q, logsumexp 4a; gelu_fast keeps x,
# 0.044715·x, 0.798·x, 1 + 0.044715·x², tanh, 1 + tanh, 0.5·x (14 per unit) and dense_4h_to_h its input 2I.
NEOX_FULL = 2 * 6144 + 8 + 4 * 6144 + 4 * 6144 + 2 * (3 * 6144) + 4 * 6144 + 4 * 64 + 16 * 24576
# LoRA on query_key_value: both norms' outputs and the dense copy go (frozen readers), one fp32 input cast 4h and
# lora_A's output 4r come; the frozen dense_4h_to_h keeps no input
NEOX_LORA = 2 * 6144 + 8 + 4 * 6144 + 4 * 6144 + 2 * (3 * 6144) + 2 * 6144 + 4 * 64 + 14 * 24576 + 4 * R


@pytest.mark.parametrize(("method", "expected"), [("full", NEOX_FULL), ("lora", NEOX_LORA)])
def test_gpt_neox_20b_gelu_fast_layer(method: str, expected: int) -> None:
    arch = get_architecture("gpt-neox-20b")
    assert act.layer_bytes_per_token(_job("gpt-neox-20b", method), arch) == pytest.approx(expected)


# falcon-7b: h = q = 4544, kv = 64 (one kv head), I = 18176, a = 71. One LayerNorm for the parallel block (input 2h,
# stats 4), its output (query_key_value and the MLP read it) 2h; MLP: dense_h_to_4h output 2I, dense_4h_to_h input 2I.
FALCON7_COMMON = 2 * 4544 + 4 + 2 * 4544 + 4 * 18176
# flash: q, k, v, the output (dense reads it in place) 4q + 4kv, logsumexp 4a
FALCON7_FLASH = FALCON7_COMMON + 4 * 4544 + 4 * 64 + 4 * 71
# SDPA: one kv head for 71 query heads, so the math kernel: fp32 q·√scale, k·√scale, v 4q + 8kv, the fp32 softmax
# output 4·a·s, the (b, a, s, d) output copied to (b, s, h) for dense 2q
FALCON7_SDPA = FALCON7_COMMON + 4 * 4544 + 8 * 64 + 4 * 71 * S + 2 * 4544


@pytest.mark.parametrize(("attention", "expected"), [("flash", FALCON7_FLASH), ("sdpa", FALCON7_SDPA)])
def test_falcon_7b_layer(attention: str, expected: int) -> None:
    arch = get_architecture("falcon-7b")
    assert act.layer_bytes_per_token(_job("falcon-7b", attention=attention), arch) == pytest.approx(expected)


def test_falcon_7b_math_softmax_backward() -> None:
    """The math kernel's softmax backward holds the fp32 gradients of the probabilities and of the scores, 8·a·s a
    token, for one layer; flash none."""
    arch = get_architecture("falcon-7b")
    assert act.score_backward_bytes_per_token(_job("falcon-7b", attention="sdpa"), arch) == 8 * 71 * S
    assert act.score_backward_bytes_per_token(_job("falcon-7b"), arch) == 0


# falcon-11B: h = q = 4096, kv = 1024 (8 kv heads of 128), I = 16384, a = 32, one LayerNorm (num_ln_in_parallel_attn
# 1). new_decoder_architecture: _split_heads broadcasts k, v to the 32 query heads and flattens them (a copy), so the
# kernel keeps q, k, v all q wide and its output 8q, logsumexp 4a; SDPA also keeps the bf16 causal mask FalconModel
# always builds, 2 B per key.
FALCON11_FLASH = 2 * 4096 + 4 + 2 * 4096 + 8 * 4096 + 4 * 32 + 4 * 16384
FALCON11_SDPA = FALCON11_FLASH + 2 * S


@pytest.mark.parametrize(("attention", "expected"), [("flash", FALCON11_FLASH), ("sdpa", FALCON11_SDPA)])
def test_falcon_11b_layer(attention: str, expected: int) -> None:
    arch = get_architecture("falcon-11b")
    assert act.layer_bytes_per_token(_job("falcon-11b", attention=attention), arch) == pytest.approx(expected)


# olmo-7b: h = q = kv = 4096, I = 11008, a = 32. OlmoLayerNorm has no weight: F.layer_norm on an fp32 copy keeps it
# (4h) and the fp32 mean and rstd (8) per norm, two norms; their bf16 outputs feed q/k/v and the MLP (2h each); q, k, v,
# out, logsumexp; SwiGLU 8I. LoRA (q, v): the fp32 copies stay, the outputs go, q_proj's and v_proj's fp32 input
# casts 4h each, 6I, 2 · 4r.
OLMO7_FULL = 2 * (4 * 4096 + 8) + 2 * 2 * 4096 + 4 * 4096 + 4 * 4096 + 4 * 32 + 8 * 11008
OLMO7_LORA = 2 * (4 * 4096 + 8) + 2 * 4 * 4096 + 4 * 4096 + 4 * 4096 + 4 * 32 + 6 * 11008 + 2 * 4 * R


@pytest.mark.parametrize(("method", "expected"), [("full", OLMO7_FULL), ("lora", OLMO7_LORA)])
def test_olmo_7b_weightless_norms(method: str, expected: int) -> None:
    assert act.layer_bytes_per_token(_job("olmo-7b", method), get_architecture("olmo-7b")) == pytest.approx(expected)


TINY: dict[str, Any] = {"model_type": "falcon", "hidden_size": 128, "num_attention_heads": 8, "num_hidden_layers": 2,
        "vocab_size": 256, "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True,
        "alibi": False, "bias": False, "max_position_embeddings": 512}


def _saved_per_layer(model: Any, seq: int) -> float:  # noqa: ANN401 - a transformers FalconForCausalLM
    """Bytes per token autograd keeps in the first decoder layer alone (storages the second layer also keeps,
    the shared rotary tables, left out)."""
    blocks = model.transformer.h
    kept: list[dict[int, int]] = [{}, {}]
    inside = [-1]
    for i, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda *_a, i=i: inside.__setitem__(0, i))
        block.register_forward_hook(lambda *_a: inside.__setitem__(0, -1))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if inside[0] >= 0 and ptr not in params:
            kept[inside[0]][ptr] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, TINY["vocab_size"], (1, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(n for ptr, n in kept[0].items() if ptr not in kept[1]) / seq


def _tiny(flash: bool) -> tuple[torch.nn.Module, Architecture]:
    arch = parse_config(TINY, "test tiny falcon", name="tiny-falcon")
    config = transformers.FalconConfig(**{k: v for k, v in TINY.items() if k != "model_type"},
                                       attention_dropout=0.0, hidden_dropout=0.0, use_cache=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model: Any = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    if flash:
        falcon_flash.install(model)
    return model.train(), arch


@pytest.mark.parametrize("attention", ["flash", "sdpa"])
def test_tiny_falcon_layer_as_autograd_keeps_it(attention: str) -> None:
    """A real multi-query Falcon on CPU: SDPA runs torch's math kernel (unequal head counts), and the flash trace
    (falcon_flash) keeps what flash-attn keeps; theory's layer matches autograd's saved bytes at two lengths."""
    model, arch = _tiny(attention == "flash")
    for seq in (64, 128):
        job = Job(model="falcon-7b", tokens_per_sample=seq, batch_size=1, gradient_checkpointing=False,
                  attention=attention)
        # less the two int64 indices of ``fused_qkv[..., [-2], :]`` / ``[-1]``: 16 B a layer, not per token
        assert _saved_per_layer(model, seq) - 16 / seq == pytest.approx(act.layer_bytes_per_token(job, arch))


def test_trace_spec_for_falcon() -> None:
    """SDPA on Falcon is fitted with s² terms (a mask or the math kernel); flash runs Falcon's flash class; other
    families keep their cache keys (no new spec fields)."""
    falcon, llama = get_architecture("falcon-7b"), get_architecture("llama3-8b")
    sdpa = trace_spec(_job("falcon-7b", attention="sdpa"), falcon)
    flash = trace_spec(_job("falcon-7b"), falcon)
    assert quadratic(sdpa) and not quadratic(flash) and flash.get("falcon_flash") is True
    assert not {"quadratic", "falcon_flash"} & set(trace_spec(_job("llama3-8b", attention="sdpa"), llama))
