"""Wall time of a fine-tuning job: tokens ÷ tokens/s, plus model load and checkpoint writes, each reported.

Tokens to process come from, in order of precedence: an explicit token budget; dataset tokens (already
padded or packed, e.g. from ``autoconf.planning.tokens``) × epochs; or a number of samples × ``tokens_per_sample``
(every sample padded to the job's sequence length, as fms-hf-tuning does without packing) × epochs.

Load and checkpoint times are bytes ÷ storage bandwidth plus a fixed start-up. The bandwidths are
assumptions, not measurements (override them): 1 GB/s read and write is what a network file system or
object-store mount commonly sustains for one large file (local NVMe does 2–7 GB/s).
"""

from __future__ import annotations

import math

from autoconf.catalog import get_architecture
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory.states import optimizer_bytes_per_param
from autoconf.estimators.theory.throughput import estimate_throughput
from autoconf.estimators.theory.weights import ADAPTER_BYTES, DTYPE_BYTES, trainable_params
from autoconf.schema import Job, Placement, ThroughputEstimate, TimeEstimate

STORAGE_READ_GBPS = 1.0  # assumption: model weights read from shared storage, GB/s
STORAGE_WRITE_GBPS = 1.0  # assumption: checkpoint write bandwidth, GB/s
# Process launch, CUDA/NCCL initialisation, dataset tokenisation and the first compiled step: an
# assumed constant of one minute (order of magnitude of HF Trainer start-ups; not measured here).
STARTUP_SECONDS = 60.0
# Checkpoint = weights of the trainable part + the optimizer states (HF Trainer saves optimizer.pt so the
# run can resume), sized as autoconf/estimators/theory/states.py sizes them in memory. LoRA checkpoints hold the fp32
# adapters only (peft saves adapter weights).


def tokens_to_process(
    job: Job,
    *,
    token_budget: float | None = None,
    dataset_tokens: float | None = None,
    num_samples: int | None = None,
    epochs: float = 1.0,
) -> float:
    """Total tokens the job processes (padding and epochs included)."""
    if epochs <= 0:
        raise InvalidInputError("epochs", f"must be > 0; got {epochs}")
    if token_budget is not None:
        if token_budget <= 0:
            raise InvalidInputError("token_budget", f"must be > 0; got {token_budget}")
        return float(token_budget)
    if dataset_tokens is not None:
        if dataset_tokens <= 0:
            raise InvalidInputError("dataset_tokens", f"must be > 0; got {dataset_tokens}")
        return float(dataset_tokens) * epochs
    if num_samples is not None:
        if num_samples <= 0:
            raise InvalidInputError("num_samples", f"must be > 0; got {num_samples}")
        return float(num_samples) * job.tokens_per_sample * epochs
    raise InvalidInputError("tokens", "must be given as token_budget, dataset_tokens or num_samples; got none")


def model_bytes(job: Job) -> float:
    """Bytes of the base checkpoint read at start-up (bf16/fp16 weights on disk; fp32 for fp32 jobs)."""
    arch = get_architecture(job.model)
    width = 4 if job.dtype == "fp32" else 2
    return float(arch.total_params * width)


def checkpoint_bytes(job: Job) -> float:
    """Bytes written per checkpoint: trainable weights plus their optimizer states (weights only with
    save_only_model: HF Trainer then writes no optimizer.pt)."""
    arch = get_architecture(job.model)
    trainable = float(trainable_params(job, arch))
    width = DTYPE_BYTES[job.dtype] if job.method == "full" else ADAPTER_BYTES  # peft keeps adapters in fp32
    return trainable * (width + (0.0 if job.save_only_model else optimizer_bytes_per_param(job, zero=False)))


def estimate_time(
    job: Job,
    placement: Placement,
    *,
    throughput: ThroughputEstimate | None = None,
    token_budget: float | None = None,
    dataset_tokens: float | None = None,
    num_samples: int | None = None,
    epochs: float = 1.0,
    num_checkpoints: int | None = None,
    read_gbps: float = STORAGE_READ_GBPS,
    write_gbps: float = STORAGE_WRITE_GBPS,
    startup_seconds: float = STARTUP_SECONDS,
) -> TimeEstimate:
    """Total wall time = load + train + checkpoints; ``num_checkpoints`` defaults to one per epoch
    (fms-hf-tuning's save_strategy "epoch")."""
    if read_gbps <= 0 or write_gbps <= 0:
        raise InvalidInputError("storage bandwidth", f"must be > 0; got read {read_gbps}, write {write_gbps}")
    if startup_seconds < 0:
        raise InvalidInputError("startup_seconds", f"must be >= 0; got {startup_seconds}")
    tokens = tokens_to_process(
        job, token_budget=token_budget, dataset_tokens=dataset_tokens, num_samples=num_samples, epochs=epochs
    )
    throughput = throughput or estimate_throughput(job, placement)
    if throughput.tokens_per_second <= 0:
        raise InvalidInputError("tokens_per_second", f"must be > 0; got {throughput.tokens_per_second}")
    saves = max(1, math.ceil(epochs)) if num_checkpoints is None else num_checkpoints
    if saves < 0:
        raise InvalidInputError("num_checkpoints", f"must be >= 0; got {saves}")
    train = tokens / throughput.tokens_per_second
    load = startup_seconds + model_bytes(job) / (read_gbps * 1e9)
    ckpt = saves * checkpoint_bytes(job) / (write_gbps * 1e9)
    return TimeEstimate(
        total_seconds=load + train + ckpt, train_seconds=train, load_seconds=load, checkpoint_seconds=ckpt,
        tokens=tokens,
    )
