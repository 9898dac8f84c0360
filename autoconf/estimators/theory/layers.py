"""Saved-activation bytes per token of the decoder-layer kinds that are not llama-shaped attention.

The llama coefficient (activations.py, traced to the byte) reads: norms 8·h each (RMSNorm keeps an fp32
copy of its input), attention 4q + 4kv + 4a + 8 (q and the attention output in bf16, k and v in bf16, the
fp32 logsumexp per head, 8 B of kernel bookkeeping), SwiGLU 8·I. The forms below EXTEND that reasoning to
the other layer kinds, module by module, from the transformers 5 modeling code; they are not traced yet
(docs/theory_families.md lists what each term is):

* MLA (DeepSeek-V2/V3, ``modeling_deepseek_v3``): the low-rank query path saves q_a's output (2·r_q) and
  its RMSNorm's fp32 copy (4·r_q); the queries q_b(·) and their roped copy (4·a·d_qk, the llama 4q with
  d_qk = nope + rope); kv_a's output, the compressed KV plus the shared rope key (2·(r_kv + d_rope)),
  and its norm's fp32 copy (4·r_kv); kv_b's output k_nope ‖ v (2·a·(d_nope + d_v)); the assembled keys
  (2·a·d_qk) and the values padded to d_qk for flash attention (2·a·d_qk); the attention output
  (2·a·d_v), the logsumexp (4·a) and 8 B, as in the llama form.
* Mamba-2 (granite-4.0-h ``GraniteMoeHybridMambaLayer`` with the mamba_ssm/causal-conv1d kernels), with
  d_in = heads·d_head, conv = d_in + 2·G·N: in_proj's output z‖xBC‖dt (2·(d_in + conv + H)), the conv1d
  output and its SiLU (2·conv each), dt after softplus in fp32 (4·H), the scan output y (2·d_in), the
  chunked scan's fp32 states at every 256-token chunk boundary (4·H·d_head·N / 256), the gated RMSNorm's
  fp32 copy and silu(z) (4·d_in + 2·d_in) and out_proj's input (2·d_in). Per sequence, not per token:
  the final SSM state (fp32, 4·H·d_head·N) and the conv buffer ((d_conv − 1)·conv, bf16).
* cross-attention (mllama): per text token q and the output (4q), the fp32 copy of q's RMSNorm (4q),
  the logsumexp (4a), 8 B, and the two tanh gates' outputs (2·h each); per image token of the sample,
  k and v (4kv) and the fp32 copy of k's RMSNorm (4kv).
"""

from __future__ import annotations

from autoconf.catalog.architecture import Architecture
from autoconf.catalog.shapes import MLA, Mamba

SCAN_CHUNK = 256  # mamba_ssm chunk_size default in the granite-4.0-h configs (mamba_chunk_size)
# MoE routing (transformers 5 grouped_mm experts, integrations/moe.py, the default experts implementation): per
# routed copy of a token, the down projection's output kept for the routing-weight multiply (2·h), the bf16 routing
# weight (2) and three int64 sort / scatter indices (24); the gathered expert input (2·h) where the experts train
ROUTED_COPY_BYTES = 26
# routers: fp32 softmax over all experts (4·E; granitemoe's over its top k), the int64 top-k index (8·k), and where
# the top-k weights are renormalised in place (mixtral; qwen3_moe's norm_topk_prob) their fp32 copy and sum (4·k + 4)
TOPK_SOFTMAX_FAMILIES = frozenset({"granitemoe", "granitemoehybrid"})
RENORMALISED_FAMILIES = frozenset({"mixtral", "qwen3_moe"})
# deepseek_v2's gate runs in fp32 (modeling_deepseek_v2 ``F.linear(hidden_states.type(torch.float32), ...)``): its
# input's fp32 copy (4·h) and fp32 routing weights (2 more per routed copy)
FP32_ROUTER_FAMILIES = frozenset({"deepseek_v2"})
# qwen2_moe's shared_expert_gate: sigmoid output (2) and the shared expert's output it multiplies (2·h)
GATED_SHARED_FAMILIES = frozenset({"qwen2_moe"})


def mla_bytes(arch: Architecture, mla: MLA) -> float:
    """Attention bytes per token of one MLA layer (module docstring)."""
    a, d_qk = arch.num_heads, mla.qk_head_dim
    q_path = 6 * mla.q_lora_rank + 4 * a * d_qk
    kv_path = 2 * (mla.kv_lora_rank + mla.qk_rope_head_dim) + 4 * mla.kv_lora_rank
    kv_path += 2 * a * (mla.qk_nope_head_dim + mla.v_head_dim) + 2 * a * d_qk + 2 * a * d_qk
    return q_path + kv_path + 2 * a * mla.v_head_dim + 4 * a + 8


def moe_routing_bytes(arch: Architecture, experts_train: bool) -> float:
    """Bytes per token a MoE layer keeps beyond its experts' SwiGLU (8 per unit of the routed and shared widths).

    Traced per layer (full fine-tuning): granite-3.0-1b-a400m 8 · (4·1024 + 26) + 12 · 8 = 33,072; qwen1.5-moe
    4 · (4·2048 + 26) + 4 · 60 + 8 · 4 + 2 + 2·2048 = 37,242; qwen3-30b-a3b 8 · (4·2048 + 26) + 4 · 128 + 12 · 8 + 4
    = 66,356, exactly; deepseek-v2-lite's experts and fp32 router 6 · (4·2048 + 28) + 4·2048 + 4 · 64 + 8 · 6
    (its MLA attention traced on the CPU math path, not compared).
    """
    k, h = max(arch.experts_per_token, 1), arch.hidden_size
    routed = k * (2 * h + ROUTED_COPY_BYTES + (2 * h if experts_train else 0))
    router = 4 * (k if arch.family in TOPK_SOFTMAX_FAMILIES else arch.num_experts) + 8 * k
    router += 4 * k + 4 if arch.family in RENORMALISED_FAMILIES else 0
    router += 4 * h + 2 * k if arch.family in FP32_ROUTER_FAMILIES else 0
    shared = 2 + 2 * h if arch.family in GATED_SHARED_FAMILIES else 0
    return float(routed + router + shared)


def mamba_bytes(m: Mamba, tokens_per_sample: int) -> float:
    """Mixer bytes per token of one Mamba-2 layer, its per-sequence state and conv buffer spread over s."""
    d_in = m.n_heads * m.d_head
    conv = d_in + 2 * m.n_groups * m.d_state
    per_token: float = 2 * (d_in + conv + m.n_heads) + 4 * conv + 4 * m.n_heads + 2 * d_in
    per_token += 4 * m.n_heads * m.d_head * m.d_state / SCAN_CHUNK + 6 * d_in + 2 * d_in
    return per_token + ssm_state_bytes(m) / tokens_per_sample


def ssm_state_bytes(m: Mamba) -> float:
    """Per sequence: the final fp32 SSM state and the bf16 conv buffer of one Mamba-2 layer."""
    conv = m.n_heads * m.d_head + 2 * m.n_groups * m.d_state
    return 4 * m.n_heads * m.d_head * m.d_state + 2 * (m.d_conv - 1) * conv


def cross_bytes(arch: Architecture, image_tokens: int, tokens_per_sample: int) -> float:
    """Cross-attention bytes per text token, the image-side k/v spread over the sample's text tokens."""
    per_token = 8 * arch.q_width + 4 * arch.num_heads + 8 + 4 * arch.hidden_size
    return per_token + image_tokens * 8 * arch.kv_width / tokens_per_sample
