"""``throughput.estimate_throughput`` over many parallel layouts of one job at once: numpy over layout columns.

The layout recommender (recommend/layout.py) ranks every DP × TP × PP × sharding × micro-batch × accumulation ×
checkpointing layout of a job. The per-job constants (FLOPs per token and the efficiency without its micro-batch
term, with and without checkpointing; peak FLOP/s; bytes communicated; link speeds; the stack's overlaps) are
computed once by the scalar module's own functions, and the rest of its formulas (efficiency, compute with the 1F1B
bubble, communication by sharding strategy, the step) runs over arrays. Each line below names the function of
throughput.py it follows; tests/test_layout.py checks every layout of several jobs against the scalar path
(relative difference ≤ 1e-9).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autoconf.catalog import Architecture, get_architecture, get_gpu
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.collectives import Collective, latency_seconds
from autoconf.estimators.theory.communication import parameter_tensors
from autoconf.estimators.theory.pipeline_stages import cost_based_split, logits_bytes_per_token, stage_imbalance
from autoconf.estimators.theory.stacks import Stack, bucket_params, stack_for
from autoconf.estimators.theory.weights import trainable_params
from autoconf.schema import Job, Strategy

# the sharding strategies a layout column may name, by index, least sharded first (the recommender's tie-break):
# DDP; DeepSpeed ZeRO-1 / ZeRO-2; FSDP SHARD_GRAD_OP (ZeRO-2-like); ZeRO-3 and FSDP FULL_SHARD; HYBRID_SHARD
STRATEGIES: tuple[Strategy, ...] = ("ddp", "zero1", "zero2", "fsdp-shard-grad-op", "zero3", "fsdp", "fsdp-hybrid")
DDP, ZERO1, ZERO2, SHARD_GRAD_OP, ZERO3, FSDP, HYBRID = range(len(STRATEGIES))


@dataclass(frozen=True)
class Layouts:
    """Layout columns (one entry per layout; integer arrays, ``checkpointing`` 0/1, ``strategy`` an index of
    STRATEGIES). ``gpus_per_worker`` and the link figures are the Placement's, as in throughput.py."""

    gpus: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    strategy: np.ndarray
    batch: np.ndarray  # global batch per optimizer step
    accumulation: np.ndarray
    checkpointing: np.ndarray
    gpus_per_worker: np.ndarray

    @property
    def dp(self) -> np.ndarray:
        out: np.ndarray = self.gpus // (self.tp * self.pp)
        return out


@dataclass(frozen=True)
class Speeds:
    """Per layout: tokens/s, efficiency (the reported MFU), compute, overlappable and exposed seconds, step;
    FLOPs per token."""

    tokens_per_second: np.ndarray
    efficiency: np.ndarray
    compute: np.ndarray
    overlappable: np.ndarray
    exposed: np.ndarray
    step: np.ndarray
    flops_per_token: np.ndarray


def _ring(num_bytes: np.ndarray | float, ranks: np.ndarray, bandwidth: np.ndarray | float) -> np.ndarray:
    """throughput._ring_seconds over arrays (0 for one rank or no bytes)."""
    return _rings((num_bytes,), ranks, bandwidth)[0]


def _rings(sizes: tuple[np.ndarray | float, ...], ranks: np.ndarray, bandwidth: np.ndarray | float,
           ) -> list[np.ndarray]:
    """``_ring`` of each of ``sizes`` over the same ranks and bandwidth (their factors computed once)."""
    ranks_f = np.maximum(ranks, 1.0)  # float: the integer ranks, exactly
    share, rate = (ranks_f - 1) / ranks_f, np.asarray(bandwidth) * 1e9 * tp.COLLECTIVE_EFFICIENCY
    several = ranks > 1
    return [np.where(several & (b > 0), share * b / rate, 0.0) for b in sizes]


@lru_cache(maxsize=1024)
def _job_constants(job: Job, gpu_model: str, stack: str) -> tuple[np.ndarray, ...]:
    """With checkpointing off and on (index 0, 1): throughput.flops_per_token, job_factor, the weight matmuls'
    FLOPs per token, their peak (matmul_peak), attention seconds per token (attention_seconds) and backward_share;
    none reads the batch or the accumulation."""
    arch, gpu, profile = get_architecture(job.model), get_gpu(gpu_model), stack_for(stack)
    variants = [job.model_copy(update={"gradient_checkpointing": bool(c)}) for c in (0, 1)]
    return (np.array([tp.flops_per_token(v, arch) for v in variants]),
            np.array([tp.job_factor(v, gpu, arch, tp.FITTED, profile) for v in variants]),
            np.array([tp.flops_parts(v, arch)[0] for v in variants]),
            np.array([tp.matmul_peak(v, gpu, arch) for v in variants]),
            np.array([tp.attention_seconds(v, gpu, arch, profile) for v in variants]),
            np.array([tp.backward_share(v, arch) for v in variants]))


def _dense(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of the small non-negative integer ``code``, each row's index into them) through a
    table of ``code.max() + 1`` slots: no sort (np.unique's argsort and its bookkeeping cost more on a search's
    few hundred rows; the order of the distinct values is irrelevant to their users)."""
    slots = np.zeros(int(code.max(initial=0)) + 1, dtype=np.intp)
    slots[code] = 1
    values = np.flatnonzero(slots)
    slots[values] = np.arange(len(values))
    return values, slots[code]


class _Latency:
    """collectives.latency_seconds of each layout's (ranks, nodes) pair, computed once per distinct pair: the
    collectives over the same groups (data-parallel ranks and their nodes, ...) share one table of pairs, and the
    same collective over the same group is computed once per search."""

    def __init__(self, link: str, nccl: str) -> None:
        self.link, self.nccl = link, nccl
        self.groups: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, list[tuple[int, int]], np.ndarray]] = {}
        self.values: dict[tuple[str, int, int], np.ndarray] = {}

    def __call__(self, kind: Collective, ranks: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        key = (id(ranks), id(nodes))
        found = self.values.get((kind, *key))
        if found is not None:
            return found
        group = self.groups.get(key)
        if group is None:  # the arrays stay referenced with their pairs, so their ids are not reused meanwhile
            width = int(nodes.max(initial=0)) + 1
            codes, inverse = _dense(ranks * width + nodes)
            pairs = list(zip((codes // width).tolist(), (codes % width).tolist(), strict=True))
            group = self.groups[key] = (ranks, nodes, pairs, inverse)
        values = np.array([latency_seconds(kind, a, b, self.link, self.nccl) for a, b in group[2]])
        out: np.ndarray = values[group[3]]
        self.values[(kind, *key)] = out
        return out


def _buckets(profile: Stack, strategy: np.ndarray, dp: np.ndarray, grads: np.ndarray, width: int) -> np.ndarray:
    """communication()'s gradient buckets per step: max(1, ⌈gradient elements / stacks.bucket_params⌉), with
    bucket_params once per distinct (strategy, dp) and the rest over the rows (np.ceil of the same quotient)."""
    _, inverse = _dense(dp * len(STRATEGIES) + strategy)
    first = np.empty(int(inverse.max(initial=-1)) + 1, dtype=np.intp)
    first[inverse] = np.arange(len(inverse))  # a row of each distinct (strategy, dp): its last
    per = np.array([bucket_params(profile, STRATEGIES[k], d, width)
                    for k, d in zip(strategy[first].tolist(), dp[first].tolist(), strict=True)], dtype=float)
    out: np.ndarray = np.maximum(1.0, np.ceil(grads / width / per[inverse]))
    return out


def _slowest_stage(job: Job, arch: Architecture, p: np.ndarray, matmuls: np.ndarray, rate: np.ndarray,
                   attention: np.ndarray) -> np.ndarray:
    """throughput.compute_seconds' stage imbalance (pipeline_stages.stage_imbalance of nanotron's split) per row:
    1 without a pipeline; layer and head seconds per token as throughput.stage_seconds_per_token."""
    head_flops = (6.0 if job.method == "full" else 4.0) * arch.vocab_size * arch.hidden_size
    layer = ((matmuls - head_flops) / rate + attention) / arch.num_layers
    head = head_flops / rate
    out = np.ones(len(p))
    for stages in np.unique(p[p > 1]).tolist():
        rows = p == stages
        split = cost_based_split(arch, stages)
        out[rows] = [stage_imbalance(split, a, b) for a, b in zip(layer[rows].tolist(), head[rows].tolist(), strict=True)]
    return out


def layout_speeds(job: Job, gpu_model: str, rows: Layouts, *, stack: str | None = None,
                  intra_node_gbps: float | None = None, inter_node_gbps: float | None = None) -> Speeds:
    """estimate_throughput(job at row's batch/accumulation/checkpointing, Placement of row) for every row.

    ``intra_node_gbps`` / ``inter_node_gbps``: the Placement fields of every row (None: the catalogue's NVLink /
    PCIe figure, and throughput.INTER_NODE_BANDWIDTH_GBPS). The caller checks the GPU's peak first
    (throughput.peak_flops raises for a GPU without one)."""
    arch, gpu = get_architecture(job.model), get_gpu(gpu_model)
    profile = stack_for(stack or job.framework, job.method)
    fit = tp.FITTED
    key = job.model_copy(update={"batch_size": 1, "gradient_accumulation_steps": 1, "gradient_checkpointing": False})
    flops_by, factor_by, matmul_by, peak_by, attention_by, backward_by = _job_constants(key, gpu_model, profile.name)
    c = rows.checkpointing
    flops, factor, matmuls, peak, attention = flops_by[c], factor_by[c], matmul_by[c], peak_by[c], attention_by[c]
    x0 = tp.microbatch_overhead_tokens(arch, fit, profile)
    n, t, p, d, g = rows.gpus, rows.tp, rows.pp, rows.dp, rows.accumulation
    tokens = rows.batch * float(job.tokens_per_sample)  # float64, each batch exactly
    # efficiency(): micro_batch_tokens over dp · accumulation
    micro = tokens / (d * g)
    eff = np.minimum(factor * micro / (micro + x0), tp.MAX_EFFICIENCY)
    # compute_seconds(): matmuls at eff of their peak, attention at its kernel's rate, the 1F1B bubble
    # (p - 1) / (virtual_pp · micro-batches), virtual_pp = 1 here
    compute = tokens * (matmuls / (peak * eff) + attention) / n * (1 + (p - 1) / g)
    if profile.slowest_stage and (p > 1).any():  # the slowest of nanotron's stages sets the 1F1B slot
        compute = compute * _slowest_stage(job, arch, p, matmuls, peak * eff, attention)
    # communication(): link_bandwidth() (the NIC once a data-parallel ring leaves the node), per strategy
    width = tp.COMM_BYTES[job.dtype]
    shard = arch.total_params / t / p * width
    grad_width = profile.grad_reduce_bytes or width
    grads = trainable_params(job, arch) / t / p * grad_width
    intra = intra_node_gbps or gpu.intra_node_bandwidth_gbps
    network = inter_node_gbps or tp.INTER_NODE_BANDWIDTH_GBPS
    workers = -(-n // rows.gpus_per_worker)
    spread = (workers > 1) & (d > 1)
    share = 1.0 / np.minimum(rows.gpus_per_worker, t)  # nic_share()
    bw = np.where(spread, np.minimum(intra, network * share), intra)
    nodes = np.where(spread, np.minimum(d, np.maximum(1, -(-(d * t * p) // rows.gpus_per_worker))), 1)  # dp_nodes()
    if profile.cost_based_stages:  # communication(): nanotron's (pp, dp, tp) ranks put a stage's dp·tp GPUs in a row
        staged = p > 1
        nodes = np.where(staged, np.minimum(d, np.maximum(1, -(-(d * t) // rows.gpus_per_worker))), nodes)
        bw = np.where(staged & (nodes == 1), intra, bw)
    link = gpu.intra_node_link
    alpha = _Latency(link, profile.nccl)
    gather, scatter = _rings((shard, grads), d, bw)
    s = rows.strategy
    # only the strategies some row names are computed (a stack's shardings, e.g. nanotron's DDP / ZeRO-1): the
    # branches no row picks would only be discarded by the np.where below
    present = np.zeros(len(STRATEGIES), dtype=bool)
    present[s] = True
    has_ddp, has_zero1, has_zero2, has_grad_op, has_zero3, has_fsdp, has_hybrid = present.tolist()
    has_zero, has_full = has_zero1 or has_zero2, has_zero3 or has_fsdp
    buckets = _buckets(profile, s, d, grads, grad_width) if has_ddp or has_zero else None
    units = -(-arch.num_layers // p)  # FSDP units on one pipeline stage
    zero = (s == ZERO1) | (s == ZERO2)
    # by strategy (the masks exclude each other; each present branch overwrites its rows of the running result, as
    # nested np.where would; fewer calls than np.select on short columns)
    hidden = exposed = last = np.zeros(len(s))
    if has_full:  # ZeRO-3 and FSDP full shard: gather forward and backward
        hidden = g * (2 * gather + scatter + units * (2 * alpha("all-gather", d, nodes)
                                                      + alpha("reduce-scatter", d, nodes)))
    if has_hybrid:
        # fsdp-hybrid: throughput.communication's branch (shards inside the node, replicas all-reduce over the
        # network)
        is_hybrid = s == HYBRID
        local = np.minimum(d, rows.gpus_per_worker)
        local_gather, local_scatter = _rings((shard, grads), local, intra)
        inner = 2 * local_gather + local_scatter
        one_node = np.ones_like(local)
        inner = inner + units * (2 * alpha("all-gather", local, one_node) + alpha("reduce-scatter", local, one_node))
        outer = (2 * _ring(grads / local, workers, np.minimum(intra, network / local))  # nic_share: 1 / local each
                 + units * alpha("all-reduce", workers, workers))
        hidden = np.where(is_hybrid, g * inner + outer, hidden)
        last = np.where(is_hybrid, outer, last)
    if has_grad_op:
        grad_op = g * (gather + scatter + units * (alpha("all-gather", d, nodes)
                                                   + alpha("reduce-scatter", d, nodes)))
        hidden = np.where(s == SHARD_GRAD_OP, grad_op, hidden)
    if has_zero:
        zero_reduce = scatter + buckets * alpha("reduce-scatter", d, nodes)
        zero_hidden = zero_reduce * np.where(s == ZERO2, g, 1)
        sync = (np.minimum(d, parameter_tensors(arch, profile)) * alpha("broadcast", d, nodes)
                if profile.param_broadcast
                else (profile.param_gather_calls or buckets) * alpha("all-gather", d, nodes))
        if profile.overlap_param_gather:
            zero_hidden, zero_exposed = zero_hidden + gather + sync, np.zeros_like(gather)
        else:
            zero_exposed = gather + sync
        hidden = np.where(zero, zero_hidden, hidden)
        exposed = np.where(zero, zero_exposed, 0.0)
        if has_zero1 and profile.zero1_reduce_after_backward:  # communication(): one exposed all-reduce, no hook
            is_zero1 = s == ZERO1
            hidden = np.where(is_zero1, 0.0, hidden)
            exposed = np.where(is_zero1, exposed + 2 * scatter + alpha("all-reduce", d, nodes), exposed)
        elif has_zero1:
            last = np.where(s == ZERO1, zero_reduce, last)
    if has_ddp:
        is_ddp = s == DDP
        ddp = 2 * scatter + buckets * alpha("all-reduce", d, nodes)
        hidden = np.where(is_ddp, ddp, hidden)
        last = np.where(is_ddp, ddp, last)
    # the once-per-step reductions (communication().last_backward): DDP's, ZeRO-1's, HSDP's replicas'
    if not profile.overlap_grad_reduce:
        hidden, exposed, last = np.zeros_like(hidden), hidden + exposed, np.zeros_like(hidden)
    # tensor_parallel_seconds(): 2 all-reduces (2 rings each + α) per layer forward, 2 backward (+2 recompute)
    message = rows.batch / (d * g) * job.tokens_per_sample * arch.hidden_size * width  # one micro-batch's
    if (t > 1).any():  # 0 on every row otherwise
        per_layer = np.where(rows.checkpointing == 1, 6, 4)
        layers = -(-arch.num_layers // p)
        tp_nodes = -(-t // rows.gpus_per_worker)  # a TP group wider than a node rings over the network
        one = (2 * _ring(message, t, np.where(tp_nodes > 1, min(intra, network), intra))
               + alpha("all-reduce", t, tp_nodes))
        tensor = g * per_layer * layers * np.where(t > 1, one, 0.0)
        overlapped = tensor * (1.0 - profile.tp_exposed_share) if profile.tp_overlap else np.zeros_like(tensor)
        hidden, exposed = hidden + overlapped, exposed + tensor - overlapped
    # pipeline_seconds(): activations forward and gradients back, 1/tp each, per micro-batch (virtual_pp = 1 here:
    # on the critical path for every stack)
    if (p > 1).any():  # 0 on every row otherwise
        p2p_bytes = message / t
        if profile.cost_based_stages:  # pipeline_seconds(): nanotron's (pp, dp, tp) ranks and its logits boundary
            crosses = workers > 1
            p2p_link = np.where(crosses, np.minimum(intra, network / rows.gpus_per_worker), intra)
            logits = np.zeros(len(p))
            for stages in np.unique(p[p > 1]).tolist():
                per_token = logits_bytes_per_token(cost_based_split(arch, stages), arch.vocab_size)
                logits = np.where(p == stages, per_token, logits)
            p2p_bytes = p2p_bytes + rows.batch / (d * g) * job.tokens_per_sample * logits / t
        else:
            crosses = t * p > rows.gpus_per_worker
            p2p_link = np.where(crosses, min(intra, network), intra)
        p2p_one = (p2p_bytes / (p2p_link * 1e9 * tp.COLLECTIVE_EFFICIENCY)
                   + np.where(crosses, latency_seconds("send", 2, 2, link, profile.nccl),
                              latency_seconds("send", 2, 1, link, profile.nccl)))
        exposed = exposed + np.where(p > 1, g * 2 * p2p_one, 0.0)
        if arch.tie_word_embeddings and job.method == "full":  # tied_embedding_seconds(): first + last stage, once
            across = workers > 1
            tied_link = np.where(across, np.minimum(intra, network / rows.gpus_per_worker), intra)
            twins = np.full(len(p), 2)
            tied = (2 * _ring(arch.vocab_size * arch.hidden_size / t * grad_width, twins, tied_link)
                    + alpha("all-reduce", twins, np.where(across, 2, 1)))
            exposed = exposed + np.where(p > 1, tied, 0.0)
    # step_seconds(): the once-per-step reductions hide behind the last micro-batch's backward only
    window = backward_by[c] / g * compute
    step = compute + np.maximum(np.maximum(0.0, hidden - compute), last - window) + exposed
    return Speeds(tokens / step, eff, compute, hidden, exposed, step, flops)
