"""Training throughput from FLOPs: tokens/s = GPUs · peak · efficiency / FLOPs-per-token, plus communication.

FLOPs per token (Kaplan et al. 2020 §2.1; Narayanan et al. 2021 "Efficient large-scale language model
training on GPU clusters" eq. 3): a matmul with N weights costs 2N FLOPs per token forward, 2N for the input
gradient and 2N for the weight gradient, so full fine-tuning costs 6N. Attention scores QKᵀ and the
weighted sum AV add 4·s·d_q per layer forward (d_q = heads·head_dim), ×3 with backward = 12·L·s·d_q, and
causal flash/SDPA kernels skip the masked half (eager computes the whole square). Gradient checkpointing
re-runs the forward (+1/3: ×4/3 for full FT). LoRA freezes the base: forward 2N + input gradient 2N = 4N,
plus 6 FLOPs per adapter parameter. MoE counts only the routed experts (Architecture.active_params).
The embedding lookup costs no matmul FLOPs; the LM head does (V·h weights).

The efficiency (fraction of the GPU's dense peak achieved on these FLOPs, recompute included) is fitted
on the measured tokens/s rows of data/ (constants below; autoconf.evaluation.throughput_fit fits them). Communication
(DDP all-reduce, ZeRO/FSDP reduce-scatter + all-gather, TP all-reduces) is computed from message sizes, link
bandwidth and NCCL's per-call latency (theory/communication.py, theory/collectives.py); it is hidden behind
compute when it can overlap, and only the excess is added.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoconf.catalog import Architecture, GPUSpec, get_architecture, get_gpu
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory.communication import (  # re-exported: the throughput model's public names
    COLLECTIVE_EFFICIENCY as COLLECTIVE_EFFICIENCY,
)
from autoconf.estimators.theory.communication import COMM_BYTES as COMM_BYTES
from autoconf.estimators.theory.communication import INTER_NODE_BANDWIDTH_GBPS as INTER_NODE_BANDWIDTH_GBPS
from autoconf.estimators.theory.communication import Communication as Communication
from autoconf.estimators.theory.communication import _ring_seconds as _ring_seconds
from autoconf.estimators.theory.communication import communication as communication
from autoconf.estimators.theory.communication import intra_bandwidth as intra_bandwidth
from autoconf.estimators.theory.communication import link_bandwidth as link_bandwidth
from autoconf.estimators.theory.pipeline_stages import cost_based_split, stage_imbalance
from autoconf.estimators.theory.stacks import Stack, stack_for
from autoconf.estimators.theory.weights import trainable_params
from autoconf.schema import Job, Placement, ThroughputEstimate

# ---- fitted efficiency -----------------------------------------------------------------------------------
# efficiency = E[GPU architecture, method] · x / (x + φ_X·X0) / (1 + φK · R / w) / (1 + α · a) · (F if fused) · (M if MoE)
#              · (S if the stack fuses its element-wise kernels) · (C if torch.compile) · (P if FP8 GEMMs);
#              φ = φ_X = 1 for unfused stacks. It prices the weight matmuls (at matmul_peak: with FP8, the FP8 peak on the
#              decoder layers' GEMMs); attention runs at its kernel's published efficiency (ATTENTION_EFFICIENCY).
# x: tokens of one micro-batch on one GPU; X0 a per-micro-batch fixed cost (optimizer step, launches, data
# loader) in tokens of compute, times total / active weights for MoE (microbatch_overhead_tokens). R / w: the GPU's
# ridge point (dense peak FLOP/s over memory bytes/s, FLOPs per byte) over the layer's matmul width w (h; an MoE
# expert's intermediate size if smaller), times L·h² / N_layers:
# per token and layer the matmuls cost ∝ the layer's weights while norms, activations, softmax and residual adds
# move ∝ h bytes, so the memory-bound share of the step grows as R · L · h / N_layers (small models, MoE with narrow
# experts, and fast-compute GPUs such as H100 with R ≈ 295 against A100's 153); K is per h² of layer weights
# (a Llama layer holds ~12 h²). a: attention's share of the counted FLOPs; α an extra cost
# on top of the attention kernel's own time (fitted 0 in the shipped shape: the kernel efficiency prices it). F: the fused-loss kernel
# bundles (Job.loss_kernel fused-ce = fms-acceleration FOAK / flash_attn's fused CE in llm-foundry,
# fused-linear-ce = Liger); M: what is left of HF's MoE blocks once X0 covers all experts
# (microbatch_overhead_tokens). Recompute FLOPs are counted, so this is a hardware-FLOPs utilisation; the reported
# `mfu` is this assumed efficiency. A GPU architecture with no measured rows uses by_method (pooled over the
# architectures that have rows).
# Fitted by least squares in log space on the implied efficiency (measured tokens/s · FLOPs per token /
# (GPUs · peak), communication removed) of every ok, non-duplicate row of data/measurements.csv with a
# resolvable model and a GPU peak; X0 and K by grid search. Command: python bench/throughput_accuracy.py --fit
# (prints this block; autoconf.evaluation.throughput_fit.fit_efficiency).


@dataclass(frozen=True)
class EfficiencyFit:
    by_group: dict[tuple[str, str], float]  # (GPU architecture, method) -> E
    by_method: dict[str, float]  # fallback for an architecture with no measured rows
    microbatch_tokens: float  # X0
    fused_loss_factor: float  # F
    moe_factor: float  # M
    rows: int = 0
    memory_bound: float = 0.0  # K
    attention_cost: float = 0.0  # α
    fitted_on: str = ""  # which rows, for the record
    stack_factor: float = 1.0  # S: a stack's fused kernel set (stacks.Stack.fused_kernels)
    compile_factor: float = 1.0  # C: torch.compile (Job.torch_compile)
    # φ: a fused-kernel stack's element-wise traffic relative to an unfused one (it scales the memory-bound term
    # K·R/w: what fusing norms, activations and rotary removes); φ_X: its per-micro-batch overhead relative to an
    # unfused one (it scales X0: launches and the work per micro-batch that fusion does not remove); None: φ
    fused_memory_share: float = 1.0
    fp8_factor: float = 1.0  # P: FP8 GEMMs' efficiency relative to the training dtype's (Job.fp8)
    fused_microbatch_share: float | None = None


FITTED = EfficiencyFit(
    by_group={},
    by_method={'full': 0.7801, 'lora': 0.7801, 'qlora': 0.7483},
    microbatch_tokens=1990.5, fused_loss_factor=1.1562, moe_factor=1.0809, rows=1471,
    memory_bound=67.3551, attention_cost=0.0000,
    stack_factor=0.7350, compile_factor=1.0860, fused_memory_share=0.00, fp8_factor=0.7464,
    fused_microbatch_share=0.20,
    fitted_on='1471 ok non-duplicate tokens/s rows of data/measurements.csv (bench/throughput_accuracy.py --fit)',
)
# Those rows: fms-acceleration (A100-SXM4-80GB, L40; full, LoRA, QLoRA, dense and MoE), llm-foundry (MPT
# 125m-70b pre-training on A100-40GB/80GB and H100, 8-512 GPUs), Liger (A100), NVIDIA DGX Cloud NeMo recipes
# (H100 and GB200, 8-2,304 GPUs, TP/PP/CP layouts, BF16 and FP8), NeMo 24.07 FP8 pre-training (H100), llm-foundry's
# FP8 table (H100), InternEvo (A100, 8-1,024 GPUs) and fms-fsdp (A100, H100). P < 1: FP8 GEMMs reach 0.75 of the
# fraction of their (doubled) peak that BF16 GEMMs reach of theirs (amax / cast / transpose kernels around them).
# S < 1 with φ = 0: a fused-kernel stack (stacks.py) pays no memory-bound term, and its E·S is what is left (0.74
# of the HF E: the plain GEMM efficiency of those stacks); φ_X = 0.2: it keeps a fifth of the HF per-micro-batch
# cost X0 (~400 tokens). InternEvo's FLOPS table gives the same order on its own: at 8 GPUs one 16,384-token
# micro-batch with recompute runs at 0.808 of four 4,096-token ones without (3,314 / 4,103 tokens/s per GPU, the
# same tokens a step) where the counted FLOPs give 0.762: 4 (4,096 + t0) = 0.808 (16,384 / 0.762 + t0), t0 ≈ 300.
# No per-GPU-architecture E:
# fitted per architecture, the leave-one-source-out error was worse (docs/accuracy.md, throughput-theory);
# the GPU enters through its peak, its ridge point R and its links. E > 1 is not an efficiency by itself:
# the memory-bound term always divides it (ridge_over_hidden).
# Attention (QKᵀ, softmax, AV) runs in its own kernel at a published fraction of the dense peak, not at the
# fitted GEMM efficiency. FlashAttention-2 reaches "50-73 % of the theoretical maximum FLOPs/s on A100" (Dao 2023,
# abstract) and "only 35 % utilization on the H100" (Shah et al. 2024, FlashAttention-3, abstract); FlashAttention-3
# is "1.5-2.0×" faster on H100 (same abstract): 0.53-0.70, the class of Transformer Engine's cuDNN fused attention.
# Each value is the middle of its published range (0.615; 0.35; 0.6125). Ada runs Ampere's FlashAttention-2 kernels
# and Blackwell is given Hopper's: assumptions, no published figure. FLOPs as FlashAttention counts them (backward
# 2.5 × forward: throughput.flops_parts).
# FlashAttention written in Triton (the kernel llm-foundry's MPT runs with attn_impl 'triton'): "FlashAttention-2 is
# ... 1.3-2.5× faster than FlashAttention in Triton" (Dao 2023, §4.1, A100; 1.3-1.5× forward, ~2× backward), so it
# runs at FlashAttention-2's rate over 1.9 (the middle of the range) on each generation; the ratio is measured on
# A100 only and assumed elsewhere.
TRITON_ATTENTION_SLOWDOWN = 1.9
ATTENTION_EFFICIENCY = {
    ("Ampere", "fa2"): 0.615, ("Ampere", "cudnn"): 0.615, ("Ada Lovelace", "fa2"): 0.615,
    ("Ada Lovelace", "cudnn"): 0.615, ("Hopper", "fa2"): 0.35, ("Hopper", "cudnn"): 0.6125,
    ("Blackwell", "fa2"): 0.35, ("Blackwell", "cudnn"): 0.6125,
}
ATTENTION_EFFICIENCY.update({(generation, "triton"): ATTENTION_EFFICIENCY[(generation, "fa2")] / TRITON_ATTENTION_SLOWDOWN
                             for generation in ("Ampere", "Ada Lovelace", "Hopper", "Blackwell")})
MAX_EFFICIENCY = 0.95  # no kernel mix sustains more than ~95 % of the dense tensor-core peak

def matmul_params(arch: Architecture) -> float:
    """Active weights that take part in a matmul per token: all but embedding lookups and norms."""
    lookups = arch.position_params + (0 if arch.tie_word_embeddings else arch.embedding_params)
    norms = arch.num_layers * arch.layer_norm_params + arch.final_norm_params
    return float(arch.active_params - lookups - norms)


def recompute_fraction(job: Job, recompute: float | None = None) -> float:
    """Share of the decoder layers whose forward is recomputed in backward: ``recompute`` when given (selective
    checkpointing of every k-th block: fms-fsdp ``selective_checkpointing``, InternEvo ``checkpoint=0.x``), else
    1 with gradient checkpointing and 0 without."""
    if recompute is not None:
        return min(max(recompute, 0.0), 1.0)
    return 1.0 if job.gradient_checkpointing else 0.0


def attention_span(job: Job, span: float | None = None) -> float:
    """Tokens a sequence's attention runs over: ``span`` when packed samples attend only within themselves (NeMo's
    packed fine-tuning: THD layout with cu_seqlens; the mean sample length, at most the packed length), else
    tokens_per_sample."""
    return float(job.tokens_per_sample) if span is None else min(float(span), float(job.tokens_per_sample))


def flops_parts(job: Job, arch: Architecture | None = None, recompute: float | None = None,
                span: float | None = None) -> tuple[float, float]:
    """Training FLOPs per token as (weight matmuls, attention scores + weighted sum), recompute included.
    ``span``: the attended length of packed samples (attention_span)."""
    arch = arch or get_architecture(job.model)
    again = recompute_fraction(job, recompute)
    n = matmul_params(arch)
    causal = 1.0 if job.attention == "eager" else 0.5
    attn_fwd = 4.0 * arch.num_layers * attention_span(job, span) * arch.q_width * causal
    if job.method == "full":
        fwd, bwd = 2 * n, 4 * n
    else:
        adapters = float(trainable_params(job, arch))
        fwd, bwd = 2 * n + 2 * adapters, 2 * n + 4 * adapters  # input grads only through the frozen base
    # forward, backward, + the recomputed layers' forward; a flash kernel's backward recomputes QKᵀ: 2.5 × its
    # forward (FlashAttention-2 paper's FLOP count), eager autograd's backward 2 ×
    passes = (3.0 if job.attention == "eager" else 3.5) + again
    # checkpointing wraps the decoder layers, not the LM head: its forward is not run again
    head = 2.0 * arch.vocab_size * arch.hidden_size
    return fwd + bwd + again * (fwd - head), attn_fwd * passes


def backward_share(job: Job, arch: Architecture | None = None, recompute: float | None = None,
                   span: float | None = None) -> float:
    """Share of a micro-batch's counted FLOPs that runs in its backward pass (the recomputed forward included):
    the window in which a once-per-step gradient reduction can overlap compute."""
    arch = arch or get_architecture(job.model)
    n = matmul_params(arch)
    adapters = 0.0 if job.method == "full" else float(trainable_params(job, arch))
    causal = 1.0 if job.attention == "eager" else 0.5
    forward = 2 * n + 2 * adapters + 4.0 * arch.num_layers * attention_span(job, span) * arch.q_width * causal
    return 1.0 - forward / flops_per_token(job, arch, recompute, span)


def flops_per_token(job: Job, arch: Architecture | None = None, recompute: float | None = None,
                    span: float | None = None) -> float:
    """Training FLOPs per token (forward + backward, + forward recompute with checkpointing)."""
    matmuls, attention = flops_parts(job, arch, recompute, span)
    return matmuls + attention


def attention_share(job: Job, arch: Architecture, recompute: float | None = None, span: float | None = None) -> float:
    """Fraction of the counted FLOPs that are attention's QKᵀ and AV (grows with the sequence length)."""
    matmuls, attention = flops_parts(job, arch, recompute, span)
    return attention / (matmuls + attention)


def micro_batch_tokens(job: Job, placement: Placement) -> float:
    """Tokens one data-parallel rank processes per forward/backward (global batch over data-parallel ranks and
    micro-steps). Not divided by tp: tried, a tensor-parallel GPU paying X0 in full made the held-out DGX Cloud
    rows (TP 2-8) 38 % too slow, against 5 % as here."""
    return job.batch_size * job.tokens_per_sample / (placement.dp * job.gradient_accumulation_steps)


def microbatch_overhead_tokens(arch: Architecture, fit: EfficiencyFit, stack: Stack) -> float:
    """X0 of a model: the fitted per-micro-batch cost in tokens of compute (φ_X-scaled on a fused-kernel stack), times
    the model's total over its active weights.

    The cost that does not shrink with the micro-batch scales with the weights a micro-batch touches, its FLOPs with
    the weights a token uses. A dense model touches what it uses (ratio 1). An MoE layer in HF touches every expert
    per micro-batch (transformers' Mixtral / GraniteMoE blocks loop over all experts; bitsandbytes dequantises each
    expert's weights at each call; FSDP gathers all of them) while a token runs top-k of them: Mixtral 8x7B 46.7 B
    total / 12.9 B active, Granite-3.0-3B-A800M 3.3 B / 0.8 B.
    """
    phi = fit.fused_memory_share if fit.fused_microbatch_share is None else fit.fused_microbatch_share
    share = phi if stack.fused_kernels else 1.0
    return fit.microbatch_tokens * share * arch.total_params / arch.active_params


def fused_kernels(job: Job) -> bool:
    """A fused cross-entropy (FOAK fused-ce or Liger fused-linear-ce) and the kernel bundle it ships with."""
    return job.effective_loss_kernel != "hf"


def matmul_width(arch: Architecture) -> int:
    """The narrowest weight dimension of a layer's matmuls: h, or an MoE expert's intermediate size if smaller."""
    return min(arch.hidden_size, arch.expert_intermediate_size) if arch.is_moe else arch.hidden_size


def layer_matmul_params(arch: Architecture) -> float:
    """The decoder layers' matmul weights per token (matmul_params less the LM head's V · h)."""
    return matmul_params(arch) - float(arch.vocab_size * arch.hidden_size)


# peft LoRA's element-wise kernels around each adapted linear (dropout on its input, the rank-r products' input read
# and output write, the scaling and the add into the base output, their backward, and their recompute under
# checkpointing) add γ · Σ (in + out features) / h to a decoder layer's element-wise bytes of a full fine-tuning
# step, per token. Counted, not fitted: bench/lora_elementwise_bytes.py sums the bytes of every non-matmul aten
# kernel of a real transformers Llama decoder (GQA, MLP 3.5 h) with and without peft LoRA (r 16, dropout 0.05),
# forward and backward: γ = 0.132 / 0.128 (targets q, k, v, o / q, v) with gradient checkpointing, 0.106 / 0.101
# without; the mean of the two target sets below. q, k, v, o on Mistral-7B: the LoRA step moves 1.86 × the bytes.
LORA_BYTES_PER_WIDTH = {True: 0.13, False: 0.10}  # γ by gradient checkpointing


def elementwise_bytes_factor(job: Job, arch: Architecture) -> float:
    """A decoder layer's element-wise bytes per token relative to full fine-tuning's: 1 + γ · Σ (in + out) / h over
    the LoRA-adapted linears of a layer (LORA_BYTES_PER_WIDTH); 1 for full fine-tuning."""
    if job.method == "full":
        return 1.0
    width = arch.lora_params(job.lora_target_modules, 1) / arch.num_layers / arch.hidden_size
    return 1.0 + LORA_BYTES_PER_WIDTH[bool(job.gradient_checkpointing)] * width


def ridge_over_hidden(job: Job, gpu: GPUSpec, arch: Architecture, recompute: float | None = None,
                      span: float | None = None) -> float:
    """R / w · L·h² / N_layers: the GPU's dense peak FLOPs per byte of memory bandwidth, over the layer's matmul
    width, times the decoder layers' element-wise bytes per matmul FLOP relative to a layer of h² weights.

    Per token and layer the norms, activations, rotary and residual adds move ∝ h bytes while the layer's matmuls
    cost ∝ its weights (2 FLOPs each forward): the memory-bound share is R · L · h / N_layers, not R / h for every
    model; grouped-query attention and a wide MLP (more weights per h) are less memory-bound than 12 h² per layer
    suggests. Tensor parallelism leaves the ratio alone when it shards the norms and activations too (Megatron's
    sequence parallelism): the matmul FLOPs and the element-wise bytes per GPU both shrink tp times. LoRA's adapters
    add element-wise bytes (elementwise_bytes_factor).
    """
    weights_per_h2 = arch.num_layers * arch.hidden_size**2 / layer_matmul_params(arch)
    ridge = job_peak(job, gpu, arch, recompute, span) / (gpu.memory_bandwidth_gbps * 1e9)
    return ridge / matmul_width(arch) * weights_per_h2 * elementwise_bytes_factor(job, arch)


def job_factor(
    job: Job, gpu: GPUSpec, arch: Architecture, fit: EfficiencyFit = FITTED, stack: Stack | None = None,
    recompute: float | None = None, span: float | None = None,
) -> float:
    """Everything of the efficiency but the micro-batch term: E · memory-bound · attention · F · M · S · C.

    A stack with fused element-wise kernels moves fewer bytes per token: its memory-bound term is φ · K · R / w
    (its per-micro-batch cost, φ_X · X0, is in microbatch_overhead_tokens).
    """
    stack = stack or stack_for(job.framework)
    base = fit.by_group.get((gpu.architecture, job.method), fit.by_method[job.method])
    share = fit.fused_memory_share if stack.fused_kernels else 1.0
    base /= 1.0 + share * fit.memory_bound * ridge_over_hidden(job, gpu, arch, recompute, span)
    base /= 1.0 + fit.attention_cost * attention_share(job, arch, recompute, span)
    base *= fit.fused_loss_factor if fused_kernels(job) else 1.0
    base *= fit.stack_factor if stack.fused_kernels else 1.0
    base *= fit.compile_factor if job.torch_compile else 1.0
    base *= fit.fp8_factor if job.fp8 else 1.0
    return base * (fit.moe_factor if arch.is_moe else 1.0)


def efficiency(
    job: Job, placement: Placement, gpu: GPUSpec, arch: Architecture, fit: EfficiencyFit = FITTED,
    stack: Stack | None = None, recompute: float | None = None, span: float | None = None,
) -> float:
    """Fraction of the dense peak reached on the counted FLOPs, from the fitted constants."""
    stack = stack or stack_for(job.framework)
    x = micro_batch_tokens(job, placement)
    factor = job_factor(job, gpu, arch, fit, stack, recompute, span)
    x0 = microbatch_overhead_tokens(arch, fit, stack)
    return min(factor * x / (x + x0), MAX_EFFICIENCY)


def implied_efficiency(
    job: Job, placement: Placement, measured_tokens_per_second: float,
    inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, stack: Stack | None = None, recompute: float | None = None,
    zero_group: int | None = None, span: float | None = None,
) -> float | None:
    """The efficiency that makes this model reproduce a measured tokens/s (None if comm-bound)."""
    arch, gpu = get_architecture(job.model), get_gpu(placement.gpu_model)
    at_peak = compute_seconds(job, arch, placement, gpu, 1.0, recompute, stack, matmuls_only=True, span=span)
    attention = compute_seconds(job, arch, placement, gpu, 1.0, recompute, stack, span=span) - at_peak
    comm = communication(job, arch, placement, gpu, inter_node_gbps, stack, zero_group)
    busy = job.batch_size * job.tokens_per_sample / measured_tokens_per_second - comm.exposed
    # invert step_seconds: busy = compute when everything hides, else compute · (1 − w) + last-backward collectives
    w = backward_share(job, arch, recompute, span) / job.gradient_accumulation_steps
    compute = busy
    if comm.last_backward > w * busy:
        compute = (busy - comm.last_backward) / (1.0 - w)
        if compute * (1.0 - w) <= comm.overlappable - comm.last_backward:
            return None  # comm-bound: the overlappable collectives alone set the step
    elif busy <= comm.overlappable:
        return None
    return at_peak / (compute - attention) if compute > attention else None


def peak_flops(gpu: GPUSpec, dtype: str) -> float:
    peak = gpu.peak_tflops(dtype)
    if not peak:
        raise InvalidInputError(
            "gpu_model", f"must have a published dense {dtype} peak to estimate throughput; "
            f"got {gpu.name} (no {dtype} TFLOPS in the catalogue)"
        )
    return peak * 1e12


def job_peak(job: Job, gpu: GPUSpec, arch: Architecture, recompute: float | None = None,
             span: float | None = None) -> float:
    """The dense peak the job's FLOPs run at, FLOP/s: the training dtype's, or with FP8 the harmonic blend of
    the FP8 peak on the decoder layers' weight matmuls and the dtype's peak on attention and the LM head.

    Transformer Engine's FP8 recipes (NeMo / Megatron-Core, llm-foundry ``fc_type: te``) cast the inputs of
    te.Linear layers (QKV, output projection, MLP: forward, data- and weight-gradient GEMMs) to FP8; the core
    attention (flash / cuDNN) and Megatron's output layer stay in BF16 (TE docs, "Using FP8 with Transformer
    Engine"; Megatron-Core ``--fp8-format``). A Blackwell MXFP8 recipe scales the same GEMMs by blocks.
    """
    dtype_peak = peak_flops(gpu, job.dtype)
    if not job.fp8:
        return dtype_peak
    if not gpu.fp8_tflops:
        raise InvalidInputError("fp8", f"needs FP8 tensor cores; {gpu.name} has no FP8 TFLOPS in the catalogue "
                                       "(Hopper, Ada and Blackwell have)")
    matmuls, attention = flops_parts(job, arch, recompute, span)
    layers = matmuls * (1.0 - arch.vocab_size * arch.hidden_size / matmul_params(arch))
    return (matmuls + attention) / (layers / (gpu.fp8_tflops * 1e12) + (matmuls - layers + attention) / dtype_peak)


def matmul_peak(job: Job, gpu: GPUSpec, arch: Architecture, recompute: float | None = None) -> float:
    """job_peak over the weight matmuls alone (attention runs at its own kernel's rate: attention_seconds)."""
    dtype_peak = peak_flops(gpu, job.dtype)
    if not job.fp8:
        return dtype_peak
    job_peak(job, gpu, arch, recompute)  # refuses FP8 without FP8 tensor cores
    matmuls, _ = flops_parts(job, arch, recompute)
    layers = matmuls * (1.0 - arch.vocab_size * arch.hidden_size / matmul_params(arch))
    return matmuls / (layers / (float(gpu.fp8_tflops or 0) * 1e12) + (matmuls - layers) / dtype_peak)


def attention_efficiency(gpu: GPUSpec, stack: Stack) -> float:
    """ATTENTION_EFFICIENCY of the stack's attention kernel on the GPU's generation (older GPUs: Ampere's)."""
    return ATTENTION_EFFICIENCY.get((gpu.architecture, stack.attention_kernel), ATTENTION_EFFICIENCY[("Ampere", "fa2")])


def attention_seconds(job: Job, gpu: GPUSpec, arch: Architecture, stack: Stack | None = None,
                      recompute: float | None = None, span: float | None = None) -> float:
    """Seconds per token of attention FLOPs on one whole GPU, at the kernel's published efficiency and the dtype peak
    (FP8 recipes keep attention in BF16)."""
    _, attention = flops_parts(job, arch, recompute, span)
    return attention / (peak_flops(gpu, job.dtype) * attention_efficiency(gpu, stack or stack_for(job.framework)))


def compute_seconds(
    job: Job, arch: Architecture, placement: Placement, gpu: GPUSpec, eff: float, recompute: float | None = None,
    stack: Stack | None = None, matmuls_only: bool = False, span: float | None = None,
) -> float:
    """Seconds of compute per optimizer step on one GPU: the matmuls at efficiency ``eff`` of matmul_peak, attention
    at attention_seconds, with the pipeline bubble.

    1F1B with m micro-batches and p stages idles (p - 1) micro-batch slots per step; interleaving v model
    chunks per GPU shrinks each slot v times (Narayanan et al. 2021, §2.2.2): bubble = (p - 1) / (v · m).
    """
    tokens = job.batch_size * job.tokens_per_sample
    matmuls, _ = flops_parts(job, arch, recompute)
    per_token = matmuls / (matmul_peak(job, gpu, arch, recompute) * eff)
    if not matmuls_only:
        per_token += attention_seconds(job, gpu, arch, stack, recompute, span)
    micro_batches = job.gradient_accumulation_steps
    slowest = 1.0
    if placement.pp > 1 and (stack or stack_for(job.framework)).slowest_stage:
        layer, head = stage_seconds_per_token(job, arch, gpu, eff, recompute, stack, span)
        slowest = stage_imbalance(cost_based_split(arch, placement.pp), layer, head)
    return (tokens * per_token / placement.number_gpus * slowest
            * (1 + (placement.pp - 1) / (placement.virtual_pp * micro_batches)))


def stage_seconds_per_token(job: Job, arch: Architecture, gpu: GPUSpec, eff: float, recompute: float | None = None,
                            stack: Stack | None = None, span: float | None = None) -> tuple[float, float]:
    """(one decoder layer, the LM head): seconds per token on one whole GPU, as compute_seconds prices them (the
    weight matmuls at ``eff`` of matmul_peak, recompute included; attention at its kernel's rate)."""
    matmuls, _ = flops_parts(job, arch, recompute)
    head_flops = 6.0 * arch.vocab_size * arch.hidden_size if job.method == "full" else 4.0 * arch.vocab_size * arch.hidden_size
    peak = matmul_peak(job, gpu, arch, recompute) * eff
    layer = (matmuls - head_flops) / arch.num_layers / peak
    layer += attention_seconds(job, gpu, arch, stack, recompute, span) / arch.num_layers
    return layer, head_flops / peak


def step_seconds(compute: float, comm: Communication, backward_window: float = 1.0) -> float:
    """Overlappable collectives hide behind compute; only their excess and the exposed part add. Those issued once
    per step in the last micro-batch's backward (``comm.last_backward``) hide behind that backward only:
    ``backward_window`` is its share of the step's compute (backward_share / accumulation steps).

    PyTorch DDP ``no_sync`` ("gradients will be accumulated ... and synchronized in the first forward-backward
    pass exiting the context") and Megatron-Core's grad sync on the last micro-batch: accumulation leaves the
    reduction one micro-batch's backward to hide behind, not the whole step.
    """
    hidden_excess = max(0.0, comm.overlappable - compute, comm.last_backward - backward_window * compute)
    return compute + hidden_excess + comm.exposed


def estimate_throughput(
    job: Job, placement: Placement, *, efficiency_override: float | None = None,
    inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, fit: EfficiencyFit = FITTED, stack: str | None = None,
    recompute: float | None = None, zero_group: int | None = None, span: float | None = None,
) -> ThroughputEstimate:
    """Tokens/s of the whole job and per GPU, the assumed efficiency, and the step's parts.

    ``stack`` names a throughput profile (stacks.STACKS); default: the Job's framework. ``recompute``: the share
    of layers recomputed under selective checkpointing (recompute_fraction); default: all with checkpointing.
    ``zero_group``: ZeRO-1/2 inside groups of that many data-parallel ranks (communication.communication).
    ``span``: packed samples that attend only within themselves, their mean length in tokens (attention_span).
    """
    arch, gpu = get_architecture(job.model), get_gpu(placement.gpu_model)
    job_peak(job, gpu, arch)  # a GPU without a published peak (or FP8 without FP8 tensor cores) is refused first
    profile = stack_for(stack or job.framework, job.method)
    eff = efficiency_override if efficiency_override is not None else efficiency(
        job, placement, gpu, arch, fit, profile, recompute, span)
    if not 0 < eff <= 1:
        raise InvalidInputError("efficiency", f"must be in (0, 1]; got {eff}")
    flops = flops_per_token(job, arch, recompute, span)
    compute = compute_seconds(job, arch, placement, gpu, eff, recompute, profile, span=span)
    comm = communication(job, arch, placement, gpu, inter_node_gbps, profile, zero_group)
    step = step_seconds(compute, comm, backward_share(job, arch, recompute, span) / job.gradient_accumulation_steps)
    tps = job.batch_size * job.tokens_per_sample / step
    return ThroughputEstimate(
        tokens_per_second=tps, tokens_per_second_per_gpu=tps / placement.number_gpus,
        flops_per_token=flops, mfu=eff, step_seconds=step,
        compute_seconds=compute, communication_seconds=step - compute, estimator="theory",
    )


def throughput_or_none(job: Job, placement: Placement) -> ThroughputEstimate | None:
    """estimate_throughput, or None when the GPU has no published peak for the dtype (A10G, V100 bf16) or for FP8."""
    gpu = get_gpu(placement.gpu_model)
    if not gpu.peak_tflops(job.dtype) or (job.fp8 and not gpu.fp8_tflops):
        return None
    return estimate_throughput(job, placement)
