"""Per-layer saved bytes of the families the traced grid showed off, against sums of the tensors each module saves.

Each expected figure is the sum, written out term by term, of the tensors autograd keeps for backward in one
decoder layer of the transformers 5 module (bf16, flash/SDPA, micro-batch 1, per token), read from the modelling
code and listed with saved_tensors_hooks on a fake-tensor build; the traced grid (bench/traced_grid.py) measured the
same totals. h = hidden, q / kv = query / KV widths, I = MLP width, a = heads. Not the code's own output.
"""

from __future__ import annotations

import pytest

from autoconf.catalog import get_architecture
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory.coefficients import mlp_coef
from autoconf.schema import Job

R = 8  # Job default LoRA rank: each adapted module keeps its fp32 lora_A output, 4·r


def _job(model: str, method: str) -> Job:
    return Job(model=model, method=method, tokens_per_sample=4096, batch_size=1, gradient_checkpointing=False,
               optimizer_impl="fused")


# phi-2: h = q = kv = 2560, I = 10240, a = 32, partial rotary 32 of 80 per head.
# full: LayerNorm bf16 input 2h + mean, rstd 2 + 2; its output (q_proj, fc1 input) 2h; q, k (torch.cat: contiguous
# b,a,s,d), v, attention output 2q + 2kv + 2kv + 2q, fp32 logsumexp 4a; the output's copy before dense 2q;
# fc1 output, tanh, 1 + tanh, 0.5·x (gelu_new) 8I and fc2's input 2I.
PHI2_FULL = 2 * 2560 + 4 + 2 * 2560 + (4 * 2560 + 4 * 2560) + 4 * 32 + 2 * 2560 + 10 * 10240
# LoRA q_proj, v_proj: the LayerNorm's input and statistics, two fp32 input casts (4h each), attention as above but
# no dense input (frozen), gelu_new's 8I (frozen fc2 keeps no input), two lora_A outputs
PHI2_LORA = 2 * 2560 + 4 + 2 * 4 * 2560 + (4 * 2560 + 4 * 2560) + 4 * 32 + 8 * 10240 + 2 * 4 * R
# starcoder2-3b: h = q = 3072, kv = 256, I = 12288, a = 24. Two bf16 LayerNorms (input 2h + stats 4) and their
# outputs (2h each); q, k, v, out 4q + 4kv, logsumexp 4a; gelu_pytorch_tanh keeps its input: c_fc out 2I, c_proj in 2I
STARCODER2_FULL = 2 * (2 * 3072 + 4) + 2 * 2 * 3072 + 4 * 3072 + 4 * 256 + 4 * 24 + 4 * 12288
STARCODER2_LORA = 2 * (2 * 3072 + 4) + 2 * 4 * 3072 + 4 * 3072 + 4 * 256 + 4 * 24 + 2 * 12288 + 2 * 4 * R
# olmo-2-7b: h = q = kv = 4096, I = 11008, a = 32. Post-norms (Olmo2RMSNorm: fp32 copy 4h, rsqrt 4, fp32 weight
# multiply input 4h) after attention and MLP; q_proj and gate_proj read the residual (2h each); full-width q_norm and
# k_norm alike (8q + 4, 8kv + 4); q, k, v, out, logsumexp; SwiGLU 8I
OLMO2_FULL = 2 * (8 * 4096 + 4) + 2 * 2 * 4096 + (8 * 4096 + 4) * 2 + 8 * 4096 + 4 * 32 + 8 * 11008
# phi-3-mini: h = q = kv = 3072, I = 8192, a = 32. Llama RMSNorms (fp32 copy 4h, rsqrt 4, bf16 normalized 2h, output
# 2h); rotary through torch.cat: q, k copies 2q + 2kv, v a view keeping all of qkv_proj's output 2(q + 2kv), attention
# output 2q and its copy before o_proj 2q, logsumexp 4a; gate_up output 4I (gate and up views), silu 2I, product 2I
PHI3_FULL = 2 * (8 * 3072 + 4) + 2 * 3072 + 2 * 3072 + 2 * (3072 + 2 * 3072) + 2 * 3072 + 2 * 3072 + 4 * 32 + 8 * 8192
# LoRA (qkv_proj adapted): the norms' fp32 copies and rsqrt, one fp32 cast of qkv_proj's input, attention without
# the o_proj copy, frozen down_proj: 6I, one lora_A output
PHI3_LORA = 2 * (4 * 3072 + 4) + 4 * 3072 + 2 * 3072 + 2 * 3072 + 2 * (3072 + 2 * 3072) + 2 * 3072 + 4 * 32 + 6 * 8192 + 4 * R
# stablelm-2-1.6b: h = q = kv = 2048, I = 5632, a = 32; two bf16 LayerNorms, partial rotary through torch.cat
# (the out-projection copy 2q), SwiGLU
STABLELM_FULL = 2 * (2 * 2048 + 4) + 2 * 2 * 2048 + 4 * 2048 + 4 * 2048 + 4 * 32 + 2 * 2048 + 8 * 5632
STABLELM_LORA = 2 * (2 * 2048 + 4) + 2 * 4 * 2048 + 4 * 2048 + 4 * 2048 + 4 * 32 + 6 * 5632 + 2 * 4 * R
# gpt2: h = q = kv = 768, I = 3072, a = 12; two bf16 LayerNorms, c_attn's output (q, k, v views, 2q + 4kv) and the
# attention output 2q, gelu_new 10I
GPT2_FULL = 2 * (2 * 768 + 4) + 2 * 2 * 768 + 2 * 768 + 4 * 768 + 2 * 768 + 4 * 12 + 10 * 3072
# gpt-j-6b: h = q = kv = 4096, I = 16384, a = 16, rotary_dim 64; one LayerNorm (parallel block), per-layer sin / cos
# (four bf16 64-wide tables), q, k, v, out, logsumexp, gelu_new
GPTJ_FULL = 2 * 4096 + 4 + 2 * 4096 + 4 * 2 * 64 + 4 * 4096 + 4 * 4096 + 4 * 16 + 10 * 16384
# pythia-160m: h = q = kv = 768, I = 3072, a = 12; two LayerNorms of one input (parallel residual: the input once,
# 2h, the stats 4 + 4, the outputs 2h + 2h), q, k torch.cat copies, v keeping query_key_value's output, out and its
# copy before dense, gelu (exact) 4I
PYTHIA_FULL = 2 * 768 + 8 + 2 * 2 * 768 + 2 * 768 + 2 * 768 + 2 * (768 + 2 * 768) + 2 * 768 + 2 * 768 + 4 * 12 + 4 * 3072
# aya-23-8b (cohere): h = q = 4096, kv = 1024, I = 14336, a = 32; CohereLayerNorm in fp32: x − mean twice (8h), rstd
# 4, the fp32 weight multiply's input 4h (full); one norm for the parallel block, its output 2h; SwiGLU
AYA_FULL = 8 * 4096 + 4 + 4 * 4096 + 2 * 4096 + 4 * 4096 + 4 * 1024 + 4 * 32 + 8 * 14336
AYA_LORA = 8 * 4096 + 4 + 2 * 4 * 4096 + 4 * 4096 + 4 * 1024 + 4 * 32 + 6 * 14336 + 2 * 4 * R
# gemma-3-1b: h = 1152, q = 1024, kv = 256, I = 6912, a = 4, head_dim 256; four norms with the fp32 (1 + w) multiply:
# two pre-norms 4h + 4h + 4 and their outputs 2h, two post-norms 4h + 4h + 4; per-head q_norm / k_norm alike (8 per
# unit, 4 per head row); attention; GeGLU (gelu_pytorch_tanh) 8I
GEMMA3_FULL = 4 * (8 * 1152 + 4) + 2 * 2 * 1152 + 8 * (1024 + 256) + 4 * (4 + 1) + 4 * 1024 + 4 * 256 + 4 * 4 + 8 * 6912


@pytest.mark.parametrize(("model", "method", "expected"), [
    ("phi-2", "full", PHI2_FULL), ("phi-2", "lora", PHI2_LORA),
    ("starcoder2-3b", "full", STARCODER2_FULL), ("starcoder2-3b", "lora", STARCODER2_LORA),
    ("olmo-2-7b", "full", OLMO2_FULL),
    ("phi-3-mini-4k", "full", PHI3_FULL), ("phi-3-mini-4k", "lora", PHI3_LORA),
    ("stablelm-2-1.6b", "full", STABLELM_FULL), ("stablelm-2-1.6b", "lora", STABLELM_LORA),
    ("gpt2", "full", GPT2_FULL), ("gpt-j-6b", "full", GPTJ_FULL), ("pythia-160m", "full", PYTHIA_FULL),
    ("aya-23-8b", "full", AYA_FULL), ("aya-23-8b", "lora", AYA_LORA), ("gemma-3-1b", "full", GEMMA3_FULL),
])
def test_layer_bytes_per_token_by_hand(model: str, method: str, expected: int) -> None:
    assert act.layer_bytes_per_token(_job(model, method), get_architecture(model)) == pytest.approx(expected, abs=1e-6)


# Outside the layers (full): the final norm as a decoder norm plus the head's bf16 input, the rotary cos / sin
# (4 B per rotated unit; olmo2's fp32 8; none for gpt2's learned positions, whose int64 ids add 8), ids, labels, stat.
@pytest.mark.parametrize(("model", "expected"), [
    ("phi-2", 2 * 2560 + 2 * 2560 + 4 * 32 + 20),  # bf16 LayerNorm, rotary 32 of 80
    ("starcoder2-3b", 4 * 3072 + 4 * 128 + 20),
    ("olmo-2-7b", 8 * 4096 + 2 * 4096 + 8 * 128 + 20),  # fp32 weight multiply, fp32 rotary tables
    ("gpt2", 4 * 768 + 20 + 8),
    ("gemma-3-1b", 8 * 1152 + 2 * 1152 + 2 * 4 * 256 + 20),  # local and global rotary
])
def test_outside_layers_by_hand(model: str, expected: int) -> None:
    assert act.outside_layers_bytes_per_token(_job(model, "full"), get_architecture(model)) == expected


# MoE layers (grouped_mm experts): llama norms 16·h + 8 and attention 4q + 4kv + 4a as above; per routed copy (k per
# token) the gathered input 2h (full), gate_up output 4·I_e, silu 2·I_e, product 2·I_e, the down output 2h kept for
# the routing-weight multiply, the bf16 routing weight 2 and three int64 indices 24; the router's int64 top-k 8·k
# and fp32 softmax (4·E, granitemoe's over its top k 4·k), qwen3_moe's renormalised top-k copy 4·k and sum 4,
# qwen2_moe's shared expert (SwiGLU 8·I_s), its output 2h and sigmoid gate 2.
GRANITE_MOE_FULL = 16 * 1024 + 8 + 4 * 1024 + 4 * 512 + 4 * 16 + 8 * (2 * 1024 + 8 * 512 + 2 * 1024 + 2 + 24) + 8 * 8 + 4 * 8
GRANITE_MOE_LORA = (8 * 1024 + 8 + 2 * 4 * 1024 + 4 * 1024 + 4 * 512 + 4 * 16
                    + 8 * (6 * 512 + 2 * 1024 + 2 + 24) + 8 * 8 + 4 * 8 + 2 * 4 * R)  # frozen experts: no input, 6·I_e
QWEN15_MOE_FULL = (16 * 2048 + 8 + 4 * 2048 + 4 * 2048 + 4 * 16 + 4 * (2 * 2048 + 8 * 1408 + 2 * 2048 + 2 + 24)
                   + 8 * 4 + 4 * 60 + 8 * 5632 + 2 * 2048 + 2)
QWEN3_MOE_FULL = (16 * 2048 + 8 + 6 * (4096 + 512) + 4 * (32 + 4) + 4 * 4096 + 4 * 512 + 4 * 32
                  + 8 * (2 * 2048 + 8 * 768 + 2 * 2048 + 2 + 24) + 8 * 8 + 4 * 128 + 4 * 8 + 4)  # head q_norm / k_norm


@pytest.mark.parametrize(("model", "method", "expected"), [
    ("granite-3.0-1b-a400m", "full", GRANITE_MOE_FULL), ("granite-3.0-1b-a400m", "lora", GRANITE_MOE_LORA),
    ("qwen1.5-moe-a2.7b", "full", QWEN15_MOE_FULL), ("qwen3-30b-a3b", "full", QWEN3_MOE_FULL),
])
def test_moe_layer_bytes_by_hand(model: str, method: str, expected: int) -> None:
    assert act.layer_bytes_per_token(_job(model, method), get_architecture(model)) == pytest.approx(expected, abs=1e-6)


def test_deepseek_v2_moe_block_by_hand() -> None:
    """deepseek-v2-lite's MoE block (h = 2048, k = 6 of E = 64 experts of width 1408, shared 2816): the routed
    SwiGLU 8 · 6 · 1408 and shared 8 · 2816; per routed copy the gathered input and down output 2h + 2h, three int64
    indices 24 and an fp32 routing weight 4; the fp32 gate's input copy 4h, softmax 4 · 64 and int64 top-k 8 · 6."""
    arch, job = get_architecture("deepseek-v2-lite"), _job("deepseek-v2-lite", "full")
    expected = 8 * (6 * 1408 + 2816) + 6 * (4 * 2048 + 24 + 4) + 4 * 2048 + 4 * 64 + 8 * 6
    assert mlp_coef(job, arch, moe=True) * arch.hidden_size == pytest.approx(expected)


# LoRA (peft) outside the layers: the final norm's fp32 copy and statistic, the head's input (alive as the model's
# output), rotary tables, ids and labels; less what the first layer does not record because its input comes from the
# frozen embedding (its input norm; a parallel block's norms and frozen MLP; a frozen k_proj's k_norm). With
# checkpointing the first layer keeps its input like the others.
@pytest.mark.parametrize(("model", "checkpointing", "expected"), [
    ("llama3.2-1b", False, 4 * 2048 + 4 + 2 * 2048 + 4 * 64 + 16 - (4 * 2048 + 4)),  # traced 4,368
    ("llama3.2-1b", True, 8 * 2048 + 4 * 64 + 20 + 8 - 2 * 2048),  # traced 12,572
    ("phi-2", False, 2 * 2560 + 4 + 2 * 2560 + 4 * 32 + 16 - (2 * 2560 + 4 + 8 * 10240)),  # traced −76,656
    ("qwen3-0.6b", False, 4 * 1024 + 4 + 2 * 1024 + 4 * 128 + 16 - (4 * 1024 + 4) - (4 * 1024 + 4 * 8)),
])
def test_lora_outside_layers_by_hand(model: str, checkpointing: bool, expected: int) -> None:
    job = Job(model=model, method="lora", tokens_per_sample=4096, batch_size=1, gradient_checkpointing=checkpointing)
    assert act.outside_layers_bytes_per_token(job, get_architecture(model)) == expected


def test_text_only_mllama_skips_cross_attention_layers() -> None:
    """llama3.2-11b-vision without images: its 8 cross-attention layers are skipped, the 32 self-attention layers
    keep the llama form 16h + 4q + 4kv + 4a + 8 + 8I each (h = q = 4096, kv = 1024, a = 32, I = 14336); with
    checkpointing 2h each."""
    arch = get_architecture("llama3.2-11b-vision")
    layer = 16 * 4096 + 4 * 4096 + 4 * 1024 + 4 * 32 + 8 + 8 * 14336
    for checkpointing, per_layer in ((False, layer), (True, 2 * 4096)):
        job = Job(model=arch.name, method="full", tokens_per_sample=4096, batch_size=1,
                  gradient_checkpointing=checkpointing)
        assert act.stack_bytes_per_token(job, arch, None, False, arch.num_layers)[0] == 32 * per_layer


# Eager attention at s = 64 (6 B per head per key: 6·a·64): the output's (b, a, s, d) copy before the out projection
# is kept for every family (so the rotary-cat copy adds nothing), k and v as saved by the matmuls, no logsumexp.
# LoRA keeps no copy where o_proj is frozen (llama: 2q less than the full-derived form).
@pytest.mark.parametrize(("model", "method", "expected"), [
    ("llama3.2-1b", "full", 16 * 2048 + 8 + 8 * 2048 + 8 * 8192 + 6 * 32 * 64),  # repeat_kv: k, v at full width
    ("llama3.2-1b", "lora", 8 * 2048 + 8 + 2 * 4 * 2048 + 6 * 2048 + 6 * 8192 + 2 * 4 * R + 6 * 32 * 64),
    ("phi-2", "full", 2 * 2560 + 4 + 2 * 2560 + 8 * 2560 + 10 * 10240 + 6 * 32 * 64),
    ("phi-2", "lora", 2 * 2560 + 4 + 2 * 4 * 2560 + 6 * 2560 + 8 * 10240 + 2 * 4 * R + 6 * 32 * 64),
])
def test_eager_layer_bytes_by_hand(model: str, method: str, expected: int) -> None:
    job = Job(model=model, method=method, attention="eager", tokens_per_sample=64, batch_size=1,
              gradient_checkpointing=False)
    assert act.layer_bytes_per_token(job, get_architecture(model)) == pytest.approx(expected)


def test_lora_all_linear_by_hand() -> None:
    """llama3.2-1b, LoRA on all seven linears: the norms' fp32 copies and rsqrt (2 · (4h + 4)); fp32 input casts of
    q, k, v, gate, up (5 · 4h), o_proj (4q) and down (4I), none of the frozen bases' bf16 inputs; attention 4q + 4kv
    + 4a; SwiGLU without down's input 6I; seven lora_A outputs."""
    h, q, kv, i, a = 2048, 2048, 512, 8192, 32
    expected = 2 * (4 * h + 4) + 5 * 4 * h + 4 * q + 4 * i + 4 * q + 4 * kv + 4 * a + 6 * i + 7 * 4 * R
    job = Job(model="llama3.2-1b", method="lora", lora_target_modules=("all-linear",), tokens_per_sample=4096,
              batch_size=1, gradient_checkpointing=False)
    assert act.layer_bytes_per_token(job, get_architecture("llama3.2-1b")) == expected  # traced 158,056


@pytest.mark.parametrize(("model", "expected"), [
    # gpt-j: final LayerNorm 2h + 4 with the head input 2h, ids, labels 16; first layer without its LayerNorm
    # (2h + 4), its frozen gelu_new MLP (8I) and the frozen k's sin / cos (2 · 2 · 64)
    ("gpt-j-6b", 4 * 4096 + 20 - (2 * 4096 + 4 + 8 * 16384 + 4 * 64)),
    ("santacoder", 4 * 2048 + 28 - (2 * 2048 + 4)),  # gpt_bigcode: learned positions, its first LayerNorm
])
def test_lora_outside_layer_norm_families_by_hand(model: str, expected: int) -> None:
    job = Job(model=model, method="lora", tokens_per_sample=4096, batch_size=1, gradient_checkpointing=False)
    assert act.outside_layers_bytes_per_token(job, get_architecture(model)) == expected
