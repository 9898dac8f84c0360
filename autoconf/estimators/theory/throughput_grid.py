"""``estimate_throughput`` for many candidate placements at once: numpy over (GPUs, accumulation, batch).

The sweep's recommender (recommend/columns.py) and the avoid-OOM recommender price every candidate placement of
every job. The scalar path (``throughput.estimate_throughput``) builds pydantic objects per candidate; here the per-job
constants (FLOPs per token, fitted efficiency base, peak FLOPs, bytes communicated, link speed, layers) are
computed once per distinct job and the rest of the same formulas runs over arrays. It covers the
default placement of the search (one pipeline stage, no tensor parallelism, FSDP full shard over
more than one GPU, DDP on one), where it equals the scalar path to rounding
(tests/test_throughput.py checks it against the scalar path).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from autoconf.catalog import get_architecture, get_gpu
from autoconf.errors import AutoconfError
from autoconf.estimators.theory import collectives
from autoconf.estimators.theory import throughput as tp
from autoconf.estimators.theory.stacks import stack_for
from autoconf.estimators.theory.weights import trainable_params
from autoconf.schema import Job

# Per-job constants, in this order: matmul FLOPs/token, the efficiency without its micro-batch term
# (throughput.job_factor), the matmuls' peak FLOPs/s, parameter bytes gathered per FSDP all-gather, gradient bytes
# reduce-scattered, intra-node GB/s, FSDP units (decoder layers), the in-node ring hop latency in µs
# (collectives.RING_HOP_US by the GPU's link), attention seconds per token on one GPU (throughput.attention_seconds),
# the per-micro-batch cost X0 in tokens (throughput.microbatch_overhead_tokens).
CONSTANTS = 10


@lru_cache(maxsize=65536)
def _constants(job: Job, gpu_model: str) -> tuple[float, ...]:
    """The per-job constants of the formula (NaN row when the GPU has no peak or the job is refused)."""
    try:
        arch, gpu = get_architecture(job.model), get_gpu(gpu_model)
        if not gpu.peak_tflops(job.dtype) or (job.fp8 and not gpu.fp8_tflops):
            return (np.nan,) * CONSTANTS
        base = tp.job_factor(job, gpu, arch)  # the efficiency without its micro-batch term
        width = tp.COMM_BYTES[job.dtype]
        hop = collectives.RING_HOP_US["nvlink" if gpu.intra_node_link == "nvlink" else "pcie"]
        matmuls, _ = tp.flops_parts(job, arch)
        return (matmuls, base, tp.matmul_peak(job, gpu, arch), arch.total_params * width,
                trainable_params(job, arch) * width, gpu.intra_node_bandwidth_gbps, float(arch.num_layers), hop,
                tp.attention_seconds(job, gpu, arch),
                tp.microbatch_overhead_tokens(arch, tp.FITTED, stack_for(job.framework)))
    except (AutoconfError, ValueError):
        return (np.nan,) * CONSTANTS


def job_constants(jobs: Sequence[Job], gpu_models: Sequence[str]) -> np.ndarray:
    """(jobs, CONSTANTS) array of the per-job constants; the batch and accumulation of each job are ignored."""
    return np.array([_constants(j.model_copy(update={"batch_size": 1, "gradient_accumulation_steps": 1}), g)
                     for j, g in zip(jobs, gpu_models, strict=True)], dtype=float).reshape(len(jobs), CONSTANTS)


def _ring(num_bytes: np.ndarray, ranks: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """throughput._ring_seconds over arrays (0 for one rank)."""
    return np.where(ranks > 1, (ranks - 1) / ranks * num_bytes / (bandwidth * 1e9 * tp.COLLECTIVE_EFFICIENCY), 0.0)


def tokens_per_second(constants: np.ndarray, owner: np.ndarray, tokens_per_sample: np.ndarray, batch: np.ndarray,
                      gpus: np.ndarray, accumulation: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """Tokens/s of candidate rows: row r is job ``owner[r]`` with global ``batch[r]`` on ``gpus[r]`` GPUs
    and ``accumulation[r]`` micro-steps; ``tokens_per_sample`` is per job. NaN where a job has no constants."""
    c = constants[owner]
    flops, base, peak, shard, grads, intra, layers, hop, attention, x0 = (c[:, k] for k in range(CONSTANTS))
    n, g, b = gpus.astype(float), accumulation.astype(float), batch.astype(float)
    tokens = b * tokens_per_sample[owner]
    micro = tokens / (n * g)  # throughput.micro_batch_tokens with dp = number_gpus
    eff = np.minimum(base * micro / (micro + x0), tp.MAX_EFFICIENCY)
    compute = tokens * (flops / (peak * eff) + attention) / n  # compute_seconds, pp = 1: no bubble
    workers = np.ceil(n / np.minimum(n, gpus_per_node))
    bandwidth = np.where(workers <= 1, intra, np.minimum(intra, tp.INTER_NODE_BANDWIDTH_GBPS))
    # collectives.latency_seconds of one ring all-gather / reduce-scatter over n ranks on `workers` nodes
    alpha = np.where(n > 1, (collectives.RING_BASE_US + (n - workers) * hop
                             + (workers - 1) * collectives.RING_HOP_US["net"]) * 1e-6, 0.0)
    calls = 3 * layers * alpha  # FSDP full shard: per unit an all-gather forward and backward, a reduce-scatter
    hidden = g * (2 * _ring(shard, n, bandwidth) + _ring(grads, n, bandwidth) + calls)  # 0 on 1 GPU
    step = compute + np.maximum(0.0, hidden - compute)
    out: np.ndarray = tokens / step
    return out
