"""Collective seconds per optimizer step: bandwidth (β) and latency (α) of each collective a strategy issues.

Bandwidth: a ring all-gather or reduce-scatter sends (n - 1)/n of the buffer from every GPU at the link's bus
bandwidth (an all-reduce is both). Latency: every collective *call* costs α (theory/collectives.py, NCCL's
cost model), so what matters is how many calls a strategy makes per step:

- FSDP wraps each decoder layer as one unit (accelerate's TRANSFORMER_BASED_WRAP, fms-fsdp's block wrap): per
  micro-step one all-gather per unit for forward, one for backward and one reduce-scatter (SHARD_GRAD_OP keeps
  the forward gather: one all-gather); HSDP adds one all-reduce per unit across the replicas.
- DDP, ZeRO-1/2 and Megatron's distributed optimizer reduce gradients in buckets (stacks.bucket_params): one
  all-reduce (DDP) or reduce-scatter (ZeRO) per bucket, and ZeRO gathers the updated parameters per bucket (or,
  InternEvo, one broadcast per ZeRO rank that owns a tensor: stacks.Stack.param_broadcast, parameter_tensors).
- Megatron TP: two all-reduces of the activations per layer forward, two backward, two more with recompute.

What overlaps is the stack's (stacks.py): overlappable collectives hide behind compute, the rest add to the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoconf.catalog import Architecture, GPUSpec
from autoconf.estimators.theory.collectives import Collective, latency_seconds
from autoconf.estimators.theory.pipeline_stages import cost_based_split, logits_bytes_per_token
from autoconf.estimators.theory.stacks import Stack, bucket_params, stack_for
from autoconf.estimators.theory.weights import trainable_params
from autoconf.schema import Job, Placement

# Inter-node bandwidth per node, one direction, GB/s: two 100 Gb/s Ethernet NICs per node (IBM's Vela
# cloud, where ado's measurements run: IBM Research blog "Why we built an AI supercomputer in the cloud",
# 2023). An assumption: pass inter_node_gbps for InfiniBand clusters (DGX H100: 8 × 400 Gb/s = 400 GB/s).
INTER_NODE_BANDWIDTH_GBPS = 25.0
# NCCL ring collectives reach ~80 % of the nominal link rate as bus bandwidth (nccl-tests' busbw on
# NVLink and PCIe systems); an assumption applied to both intra- and inter-node links.
COLLECTIVE_EFFICIENCY = 0.8
# Collectives move parameters/gradients in the compute dtype: 2 bytes for bf16/fp16 and amp (FSDP
# MixedPrecision param_dtype / reduce_dtype bf16 as accelerate configures it), 4 for pure fp32.
COMM_BYTES = {"bf16": 2, "fp16": 2, "amp-bf16": 2, "amp-fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Communication:
    """Seconds of collectives per optimizer step on one GPU."""

    overlappable: float  # can run concurrently with compute (bucketed reduce, prefetched all-gather)
    exposed: float  # cannot (ZeRO-1/2 parameter all-gather after the step, tensor-parallel all-reduces)
    # the part of ``overlappable`` issued once per step, in the last micro-batch's backward: it hides behind that
    # backward only (DDP no_sync / Megatron's grad sync on the last micro-batch; ZeRO-1's reduce; HSDP's replicas)
    last_backward: float = 0.0


def _ring_seconds(num_bytes: float, ranks: int, bandwidth_gbps: float) -> float:
    """Bandwidth part of one ring all-gather or reduce-scatter: each GPU sends (N-1)/N of the buffer."""
    if ranks <= 1 or num_bytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * num_bytes / (bandwidth_gbps * 1e9 * COLLECTIVE_EFFICIENCY)


def intra_bandwidth(gpu: GPUSpec, placement: Placement) -> float:
    """GB/s per GPU inside a node: the Placement's figure, else the GPU's NVLink / PCIe link."""
    return placement.intra_node_gbps or gpu.intra_node_bandwidth_gbps


def link_bandwidth(gpu: GPUSpec, placement: Placement, inter_node_gbps: float) -> float:
    """Bottleneck bandwidth of a data-parallel ring: its share of the node's NICs as soon as it leaves the node.

    A ring that spans nodes enters and leaves each node once and runs at the node's network bandwidth, shared with
    the other data-parallel groups of the node that reduce at the same time (nic_share).
    """
    intra = intra_bandwidth(gpu, placement)
    if not _dp_spans_nodes(placement):
        return intra
    return min(intra, (placement.inter_node_gbps or inter_node_gbps) * nic_share(placement))


def nic_share(placement: Placement) -> float:
    """Share of a node's network one data-parallel group gets: 1 / the groups of the node that reduce at once.

    The tp ranks of a pipeline stage hold tp data-parallel groups that reach their gradient reduction together
    (the same backward), so they split the node's NICs (rail-optimised nodes: one NIC per GPU, DGX H100's 8
    ConnectX-7): 1 / min(GPUs per node, tp). The stages of a pipeline reduce one after another (1F1B: stage s
    finishes its last backward p - 1 - s slots after the last stage, Narayanan et al. 2021 fig. 4), so they are not
    counted. Without it a TP group of 8 reduced its 1/8 of the gradients at the whole node's bandwidth.
    """
    per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
    return 1.0 / min(per_node, placement.tp)


def _dp_spans_nodes(placement: Placement) -> bool:
    # data-parallel ranks sit tp·pp GPUs apart: with tp·pp ≥ the node size, even dp = 2 leaves the node
    return placement.workers > 1 and placement.dp > 1


def dp_nodes(placement: Placement) -> int:
    """Nodes a data-parallel group spans (its ranks are tp·pp GPUs apart, filling nodes in order)."""
    if not _dp_spans_nodes(placement):
        return 1
    per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
    return min(placement.dp, max(1, math.ceil(placement.dp * placement.tp * placement.pp / per_node)))


def communication(
    job: Job, arch: Architecture, placement: Placement, gpu: GPUSpec,
    inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, stack: Stack | None = None, zero_group: int | None = None,
) -> Communication:
    """Collective seconds per optimizer step (per GPU), by strategy and by what the stack overlaps.

    ``zero_group``: ZeRO-1/2 shards the optimizer inside groups of this many data-parallel ranks (InternEvo
    ``zero1=k``: "for smaller models ... split the parameters within nodes"); the updated parameters are synced
    inside the group and the gradients reduce-scattered inside it, then all-reduced across the dp / k replicas.
    Default: one group of all data-parallel ranks.
    """
    stack = stack or stack_for(job.framework)
    strategy, dp, gas = placement.effective_strategy, placement.dp, job.gradient_accumulation_steps
    width = COMM_BYTES[job.dtype]
    shard = arch.total_params / placement.tp / placement.pp * width  # this rank's replica, bytes
    grad_width = stack.grad_reduce_bytes or width
    grads = trainable_params(job, arch) / placement.tp / placement.pp * grad_width
    bw = link_bandwidth(gpu, placement, inter_node_gbps)
    nodes, link = dp_nodes(placement), gpu.intra_node_link
    if stack.cost_based_stages and placement.pp > 1:  # nanotron's (pp, dp, tp) ranks: a stage's dp·tp GPUs in a row
        per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
        nodes = min(placement.dp, max(1, math.ceil(placement.dp * placement.tp / per_node)))
        bw = bw if nodes > 1 else intra_bandwidth(gpu, placement)

    def alpha(kind: Collective, ranks: int = dp, over: int = nodes) -> float:
        return latency_seconds(kind, ranks, over, link, stack.nccl)

    units = -(-arch.num_layers // placement.pp)  # FSDP units (decoder layers) on this pipeline stage
    buckets = max(1, math.ceil(grads / grad_width / bucket_params(stack, strategy, dp, grad_width)))
    gather, scatter = _ring_seconds(shard, dp, bw), _ring_seconds(grads, dp, bw)
    if strategy in ("ddp", "zero0"):  # all-reduce once per step (no_sync while accumulating)
        hidden, exposed = 2 * scatter + buckets * alpha("all-reduce"), 0.0
        last = hidden
    elif strategy in ("zero1", "zero2"):
        group, inside = min(dp, zero_group or dp), nodes
        reduce = scatter + buckets * alpha("reduce-scatter")
        if group < dp:  # sharded inside groups of consecutive ranks; the gradient shards all-reduced across groups
            per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
            inside = max(1, math.ceil(group * placement.tp * placement.pp / per_node))
            group_bw = intra_bandwidth(gpu, placement) if inside == 1 else bw
            replicas = dp // group
            gather = _ring_seconds(shard, group, group_bw)
            reduce = (_ring_seconds(grads, group, group_bw) + 2 * _ring_seconds(grads / group, replicas, bw)
                      + buckets * (alpha("reduce-scatter", group, inside) + alpha("all-reduce", replicas, nodes)))
        hidden = reduce * (gas if strategy == "zero2" else 1)
        last = 0.0 if strategy == "zero2" else reduce  # ZeRO-2 reduces every micro-step, ZeRO-1 once
        sync = (min(group, parameter_tensors(arch, stack)) * alpha("broadcast", group, inside) if stack.param_broadcast
                else (stack.param_gather_calls or buckets) * alpha("all-gather", group, inside))
        exposed = gather + sync
        if strategy == "zero1" and stack.zero1_reduce_after_backward:  # no DDP hook: one all-reduce after backward
            hidden, last, exposed = 0.0, 0.0, exposed + 2 * scatter + alpha("all-reduce")
        if stack.overlap_param_gather:  # the updated shards are gathered during the next forward
            hidden, exposed = hidden + exposed, 0.0
    elif strategy == "fsdp-shard-grad-op":
        hidden, exposed = gas * (gather + scatter + units * (alpha("all-gather") + alpha("reduce-scatter"))), 0.0
        last = 0.0
    elif strategy == "fsdp-hybrid":
        local = min(dp, placement.gpus_per_worker or min(placement.number_gpus, 8))
        intra = intra_bandwidth(gpu, placement)
        inner = 2 * _ring_seconds(shard, local, intra) + _ring_seconds(grads, local, intra)
        inner += units * (2 * alpha("all-gather", local, 1) + alpha("reduce-scatter", local, 1))
        # the replicas' all-reduce crosses the network (the Placement's, else the default): the node's `local` shard
        # groups all-reduce at once, one rank per node each, so each drives 1 / local of the node's NICs (nic_share)
        replicas = placement.workers
        network = (placement.inter_node_gbps or inter_node_gbps) / local
        outer = 2 * _ring_seconds(grads / local, replicas, min(intra, network))
        outer += units * alpha("all-reduce", replicas, replicas)
        hidden, exposed, last = gas * inner + outer, 0.0, outer
    else:  # fsdp full shard, zero3: gather for forward and again for backward, reduce-scatter grads
        calls = units * (2 * alpha("all-gather") + alpha("reduce-scatter"))
        hidden, exposed, last = gas * (2 * gather + scatter + calls), 0.0, 0.0
    if not stack.overlap_grad_reduce:
        hidden, exposed, last = 0.0, hidden + exposed, 0.0
    net_gbps = placement.inter_node_gbps or inter_node_gbps
    tensor = gas * tensor_parallel_seconds(job, arch, placement, gpu, net_gbps, stack.nccl)
    overlapped = tensor * (1.0 - stack.tp_exposed_share) if stack.tp_overlap else 0.0
    p2p = gas * pipeline_seconds(job, arch, placement, gpu, net_gbps, stack.nccl, stack.cost_based_stages)
    if stack.overlap_p2p and placement.virtual_pp > 1:  # NeMo: overlap_p2p_comm with the interleaved schedule
        hidden += p2p
    else:
        exposed += p2p
    exposed += tied_embedding_seconds(job, arch, placement, gpu, net_gbps, stack)
    return Communication(hidden + overlapped, exposed + tensor - overlapped, last)


def tied_embedding_seconds(job: Job, arch: Architecture, placement: Placement, gpu: GPUSpec,
                           inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, stack: Stack | None = None) -> float:
    """A pipeline of a model whose input embedding and LM head share one weight keeps it on the first and on the last
    stage, and after backward sums the two copies' gradients with an all-reduce over those two ranks, before the
    optimizer step: Megatron-Core ``finalize_model_grads`` → ``_allreduce_word_embedding_grads`` (the embedding group),
    nanotron ``training_step`` → ``sync_tied_weights_gradients``; exposed. The gradient is the embedding's vocabulary
    shard (V·h / tp) in the stack's reduce dtype. Stages are dp·tp consecutive ranks (nanotron (pp, dp, tp); Megatron
    tp-cp-ep-dp-pp), so beyond one node the first and last stage sit on different nodes and every pair reduces at
    once, each GPU through its own share of the node's network (nic_share)."""
    stack = stack or stack_for(job.framework)
    if placement.pp <= 1 or not arch.tie_word_embeddings or job.method != "full":
        return 0.0
    size = arch.vocab_size * arch.hidden_size / placement.tp * (stack.grad_reduce_bytes or COMM_BYTES[job.dtype])
    per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
    crosses = placement.workers > 1
    intra = intra_bandwidth(gpu, placement)
    bandwidth = min(intra, inter_node_gbps / per_node) if crosses else intra
    return 2 * _ring_seconds(size, 2, bandwidth) + latency_seconds(
        "all-reduce", 2, 2 if crosses else 1, gpu.intra_node_link, stack.nccl)


def parameter_tensors(arch: Architecture, stack: Stack) -> int:
    """Parameter tensors of a dense decoder as the stack builds it: per layer the attention projections (one fused
    QKV and the output projection with ``stack.fused_qkv``, else q, k, v, o), their biases, the MLP's weights (three
    for a gated SiLU MLP, else two) and biases, two norms; plus the embedding, the final norm and an untied head.

    InternEvo's ZeRO partitions whole tensors over the ranks (``HybridZeroOptimizer._partition_param_list``: largest
    first, each to the emptiest rank), so only min(ranks, tensors) ranks own parameters and broadcast them after the
    step; InternLM-7B there: Wqkv and out_proj with biases, w1, w2, w3, two RMSNorms, 9 per layer, 291 in all.
    """
    projections = 2 if stack.fused_qkv else 4
    attention = projections * (2 if arch.attention_bias else 1)
    if arch.qkv_bias and not arch.attention_bias:
        attention += 1 if stack.fused_qkv else 3
    mlp = (3 if arch.hidden_act == "silu" else 2) * (2 if arch.mlp_bias else 1)
    return arch.num_layers * (attention + mlp + 2) + 2 + (0 if arch.tie_word_embeddings else 1)


def pipeline_seconds(job: Job, arch: Architecture, placement: Placement, gpu: GPUSpec,
                     inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, nccl: str = "2.8",
                     cost_based_stages: bool = False) -> float:
    """Pipeline point-to-point per micro-batch on one stage: the b·s·h activations sent forward and their gradient
    sent back, once per model chunk (virtual_pp), each 1/tp of it (Megatron's scatter-gather optimisation), on the
    1F1B critical path (Narayanan et al. 2021, §4.1). Stages tp·pp GPUs wide or wider than a node talk over the
    network; each send pays a two-rank call's latency.

    ``cost_based_stages`` (nanotron): ranks are laid out (pp, dp, tp), tp innermost (parallel/context.py
    ``_init_parallel_groups``), so a stage is dp·tp consecutive GPUs and a pipeline over several nodes has a boundary between
    nodes. A GPU sends across it through its own share of the node's network: a rail-optimised node has one NIC per
    GPU (nic_share; AWS p5.48xlarge, the benchmark's cluster: 3,200 Gb/s of EFA for 8 GPUs, 50 GB/s each), and every
    GPU of a stage sends at once. The slowest boundary also carries the logits when nanotron's split puts the
    LM head, its fp32 cast and the loss on different stages (pipeline_stages.logits_bytes_per_token)."""
    if placement.pp <= 1:
        return 0.0
    micro = job.batch_size / (placement.dp * job.gradient_accumulation_steps)
    message = micro * job.tokens_per_sample * arch.hidden_size * COMM_BYTES[job.dtype] / placement.tp
    per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
    intra = intra_bandwidth(gpu, placement)
    if cost_based_stages:
        crosses = placement.workers > 1  # the stages fill the nodes in order: some boundary leaves a node
        bandwidth = min(intra, inter_node_gbps / per_node) if crosses else intra  # the sending GPU's own NIC
        logits = micro * job.tokens_per_sample * logits_bytes_per_token(
            cost_based_split(arch, placement.pp), arch.vocab_size / placement.tp)
        message = message + logits
    else:
        crosses = placement.tp * placement.pp > per_node
        bandwidth = min(intra, inter_node_gbps) if crosses else intra
    one = message / (bandwidth * 1e9 * COLLECTIVE_EFFICIENCY) + latency_seconds(
        "send", 2, 2 if crosses else 1, gpu.intra_node_link, nccl)
    return 2 * placement.virtual_pp * one


def tensor_parallel_seconds(job: Job, arch: Architecture, placement: Placement, gpu: GPUSpec,
                            inter_node_gbps: float = INTER_NODE_BANDWIDTH_GBPS, nccl: str = "2.8") -> float:
    """Megatron TP: 2 all-reduces of b·s·h activations per layer forward, 2 backward (+2 recompute). A TP group
    wider than a node (its ranks are consecutive) runs its rings at the node's network and pays its hops' latency."""
    if placement.tp <= 1:
        return 0.0
    micro = job.batch_size / (placement.dp * job.gradient_accumulation_steps)
    message = micro * job.tokens_per_sample * arch.hidden_size * COMM_BYTES[job.dtype]
    per_layer = 6 if job.gradient_checkpointing else 4
    layers = -(-arch.num_layers // placement.pp)
    per_node = placement.gpus_per_worker or min(placement.number_gpus, 8)
    nodes = -(-placement.tp // per_node)
    intra = intra_bandwidth(gpu, placement)
    bandwidth = min(intra, inter_node_gbps) if nodes > 1 else intra
    one = 2 * _ring_seconds(message, placement.tp, bandwidth)
    return per_layer * layers * (one + latency_seconds("all-reduce", placement.tp, nodes, gpu.intra_node_link, nccl))
