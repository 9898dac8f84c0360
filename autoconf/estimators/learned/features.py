"""Numeric features of (job, placement) rows for the learned models: job, architecture, theory.

The learned models never see a model *name*: they see the architecture numbers (parameters, layers,
hidden size, heads, KV heads, vocabulary, experts) and the theory's own per-component bytes, so a
model they never saw is described by the same quantities as the ones they did. Every feature is a
float (flags are 0/1, the method is one-hot), so AutoGluon's pipeline passes the columns through
unchanged and the numpy fast path (``fastpath.py``) reads the very same matrix.

Versions 2.x also see the training stack as the *behaviours* of its framework profile (theory/frameworks.py:
efficient loading, adapter bytes, double quantisation, ...), never its name, so a stack no row was measured
on is described by the same quantities; and the GPU (capacity, generation, bandwidth) for memory too. Columns
are read by name (``fastpath.Forest.bind``): a 1.x version reads the features it was trained on, which keep
their meaning, and ignores the ones added since.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from autoconf.catalog import get_architecture, get_gpu
from autoconf.estimators.theory.rows import Codes, JobColumns, PlacementColumns, is_in, lookup
from autoconf.estimators.theory.vector import TEXT_PARTS, MemoryBatch
from autoconf.estimators.theory.weights import DTYPE_BYTES, trainable_params
from autoconf.schema import GIB, Job, Placement

if TYPE_CHECKING:
    import pandas as pd

PHASE_NAMES = ("loss", "backward", "static", "optimizer")
SHARDED = ("fsdp", "fsdp-hybrid", "zero3")  # strategies that shard the weights themselves

JOB_FEATURES = (
    "method_full", "method_lora", "method_qlora", "dtype_bytes", "amp", "tokens_per_sample", "batch_size",
    "micro_batch", "micro_batch_tokens", "gradient_accumulation_steps", "gradient_checkpointing",
    "attention_eager", "loss_fused_ce", "loss_fused_linear_ce", "packing", "lora_r", "lora_modules", "number_gpus",
    "data_parallel", "weights_sharded",
    "tp", "pp",
)
ARCH_FEATURES = (
    "params_b", "trainable_params_b", "active_params_b", "num_layers", "hidden_size", "intermediate_size",
    "num_heads", "num_kv_heads", "head_dim", "vocab_size", "num_experts", "experts_per_token", "gpt_bigcode",
    "tied_embeddings",
)
THEORY_FEATURES = (
    *(f"theory_{p}_gib" for p in (*TEXT_PARTS, "overhead")), "theory_allocated_gib", "theory_peak_gib",
    "theory_activation_share", *(f"phase_{p}" for p in PHASE_NAMES),
)
GPU_FEATURES = ("capacity_gib", "theory_peak_over_capacity", "gpu_bf16_tflops", "gpu_bandwidth_tbps", "gpu_nvlink")
# 2.x: the framework profile's memory behaviours as resolved for the job (frameworks.Resolved/Profile), the
# theory's torch-reserved peak, and the GPU generation (CUDA compute capability of its architecture).
FRAMEWORK_FEATURES = (
    "fw_efficient_loading", "fw_full_copy_on_gpu", "fw_adapter_bytes", "fw_double_quant", "fw_quantize_lm_head",
    "fw_quant_saves_input", "fw_optimizer_in_backward", "fw_activation_offloading", "fw_expandable_segments",
    "fw_device_fit",
)
GPU_MEMORY_FEATURES = ("capacity_gib", "gpu_generation", "gpu_bandwidth_tbps")
# Compute capability per catalogue architecture (NVIDIA CUDA C Programming Guide, "Compute Capabilities"
# table: Volta 7.0, Turing 7.5, Ampere 8.0 (A100; 8.6 for GA10x), Ada Lovelace 8.9, Hopper 9.0, Blackwell 10.0).
GENERATION = {"Volta": 7.0, "Turing": 7.5, "Ampere": 8.0, "Ada Lovelace": 8.9, "Hopper": 9.0, "Blackwell": 10.0}

# Which features each predictor reads. Memory ratios exclude the GPU: torch's allocations do not
# depend on the board (same kernels on A100 and L40), and the data hold only two boards, so a GPU
# feature would only let the trees memorise them. The OOM classifier needs the capacity; the
# throughput ratio needs compute and bandwidth.
MEMORY_FEATURES = (*JOB_FEATURES, *ARCH_FEATURES, *THEORY_FEATURES)
OOM_FEATURES = (*MEMORY_FEATURES, *GPU_FEATURES)
THROUGHPUT_FEATURES = (*JOB_FEATURES, *ARCH_FEATURES, "theory_tokens_per_second_per_gpu", *GPU_FEATURES)
# 2.x feature sets: every predictor sees the stack's behaviours and the GPU (the data now span several GPUs
# and stacks: the device overhead and the allocator cache differ between boards and generations).
MEMORY_FEATURES_V2 = (*MEMORY_FEATURES, "theory_reserved_gib", *FRAMEWORK_FEATURES, *GPU_MEMORY_FEATURES)
OOM_FEATURES_V2 = (*OOM_FEATURES, "theory_reserved_gib", *FRAMEWORK_FEATURES, "gpu_generation")
THROUGHPUT_FEATURES_V2 = (*THROUGHPUT_FEATURES, *FRAMEWORK_FEATURES, "gpu_generation")
ALL_FEATURES = tuple(dict.fromkeys((*JOB_FEATURES, *ARCH_FEATURES, *OOM_FEATURES, *THROUGHPUT_FEATURES,
                                    *MEMORY_FEATURES_V2, *OOM_FEATURES_V2, *THROUGHPUT_FEATURES_V2)))


@lru_cache(maxsize=512)
def _arch_values(model: str) -> tuple[float, ...]:
    a = get_architecture(model)
    return (a.total_params / 1e9, 0.0, a.active_params / 1e9, a.num_layers, a.hidden_size, a.intermediate_size,
            a.num_heads, a.num_kv_heads, a.head_dim, a.vocab_size, a.num_experts, a.experts_per_token,
            float(a.model_type == "gpt_bigcode"), float(a.tie_word_embeddings))


@lru_cache(maxsize=64)
def _gpu_values(name: str) -> tuple[float, float, float, float, float]:
    g = get_gpu(name)
    return (g.memory_bytes / GIB, g.bf16_tflops or 0.0, g.memory_bandwidth_gbps / 1000,
            float(g.intra_node_link == "nvlink"), GENERATION.get(g.architecture, 0.0))


@lru_cache(maxsize=1024)
def _lora_modules(model: str, targets: tuple[str, ...]) -> float:
    return float(len(get_architecture(model).lora_targets(targets)))


INDEX = {name: k for k, name in enumerate(ALL_FEATURES)}
_GPU_COLUMNS = ("capacity_gib", "gpu_bf16_tflops", "gpu_bandwidth_tbps", "gpu_nvlink", "gpu_generation")
_ARCH_INDEX = np.array([INDEX[n] for n in ARCH_FEATURES], dtype=np.int64)
_GPU_INDEX = np.array([INDEX[n] for n in _GPU_COLUMNS], dtype=np.int64)


class FeatureTable:
    """Every feature of n rows as one (n, len(ALL_FEATURES)) float64 array; ``table[name]`` is a column."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def __getitem__(self, name: str) -> np.ndarray:
        return self.x[:, INDEX[name]]

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def rows(self, rows: np.ndarray) -> FeatureTable:
        return FeatureTable(self.x[rows])

    def set(self, name: str, values: np.ndarray) -> None:
        self.x[:, INDEX[name]] = values

    def frame(self, names: Sequence[str] = ALL_FEATURES) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.x[:, [INDEX[n] for n in names]], columns=list(names))


def _per_code(codes: Codes, rows: np.ndarray, fn: Callable[[Any], tuple[float, ...]]) -> np.ndarray:
    """``fn`` of each distinct value of ``codes`` that ``rows`` use (once per value), spread over ``rows``."""
    used = np.unique(codes.codes[rows])
    values = np.zeros((len(codes.table), len(fn(codes.table[used[0]]))))
    for k in used.tolist():
        values[k] = fn(codes.table[k])
    out: np.ndarray = values[codes.codes[rows]]
    return out


def _job_columns(job: JobColumns, place: PlacementColumns, micro: np.ndarray) -> dict[str, np.ndarray]:
    """JOB_FEATURES and the framework behaviours (frameworks.resolve: the Job's settings, else its profile's)."""
    lora = job.method != "full"
    s, p = job.settings, job.settings.profile
    return {
        "method_full": job.method == "full", "method_lora": job.method == "lora", "method_qlora": job.method == "qlora",
        "dtype_bytes": lookup(job.dtype, DTYPE_BYTES), "amp": np.char.startswith(job.dtype, "amp"),
        "tokens_per_sample": job.tokens_per_sample, "batch_size": job.batch_size, "micro_batch": micro,
        "micro_batch_tokens": micro * job.tokens_per_sample, "gradient_accumulation_steps": job.gradient_accumulation_steps,
        "gradient_checkpointing": job.gradient_checkpointing, "attention_eager": job.attention == "eager",
        "loss_fused_ce": job.effective_loss_kernel == "fused-ce",
        "loss_fused_linear_ce": job.effective_loss_kernel == "fused-linear-ce", "packing": job.packing,
        "lora_r": np.where(lora, job.lora_r, 0), "number_gpus": place.number_gpus, "data_parallel": place.dp,
        "weights_sharded": is_in(place.effective_strategy, SHARDED) & (place.dp > 1), "tp": place.tp, "pp": place.pp,
        "fw_efficient_loading": s.efficient_loading, "fw_full_copy_on_gpu": p.full_copy_on_gpu,
        "fw_adapter_bytes": s.adapter_bytes, "fw_double_quant": s.double_quant, "fw_quantize_lm_head": s.quantize_lm_head,
        "fw_quant_saves_input": p.quant_saves_input, "fw_optimizer_in_backward": s.optimizer_in_backward,
        "fw_activation_offloading": s.activation_offloading, "fw_expandable_segments": s.expandable_segments,
        "fw_device_fit": p.has_fit,
    }


def feature_columns(job: JobColumns, place: PlacementColumns, models: Codes, gpus: Codes,
                    theory: MemoryBatch) -> FeatureTable:
    """Features of rows given as columns (``models``, ``gpus``: each row's names); rows the theory refused are NaN
    (they are never predicted). Python runs per distinct model, GPU and LoRA target list, never per row."""
    table = FeatureTable(np.full((job.size, len(ALL_FEATURES)), np.nan))
    answered = theory.ok
    ok = np.flatnonzero(answered)
    if len(ok):
        for name, values in _job_columns(job, place, theory.micro_batch).items():
            table.x[ok, INDEX[name]] = values[ok]
        table.x[np.ix_(ok, _ARCH_INDEX)] = _per_code(models, ok, _arch_values)
        table.x[np.ix_(ok, _GPU_INDEX)] = _per_code(gpus, ok, _gpu_values)
        lora, targets = job.method != "full", job.lora_target_modules
        for k in np.unique(models.codes[ok]).tolist():
            rows = ok[models.codes[ok] == k]
            name = str(models.table[k])
            table.x[rows, INDEX["trainable_params_b"]] = trainable_params(job.take(rows), get_architecture(name)) / 1e9
            table.x[rows, INDEX["lora_modules"]] = 0.0
            adapted = rows[lora[rows]]  # full fine-tuning rows adapt nothing (their target list is never read)
            for c in np.unique(targets.codes[adapted]).tolist():
                table.x[adapted[targets.codes[adapted] == c], INDEX["lora_modules"]] = _lora_modules(
                    name, targets.table[c])
    for part in (*TEXT_PARTS, "overhead"):  # the learned models were trained on the text parts
        table.set(f"theory_{part}_gib", theory.parts[part] / GIB)
    table.set("theory_allocated_gib", theory.allocated / GIB)
    table.set("theory_peak_gib", theory.peak / GIB)
    table.set("theory_reserved_gib", theory.reserved / GIB)
    with np.errstate(invalid="ignore", divide="ignore"):
        table.set("theory_activation_share", (theory.parts["activations"] + theory.parts["logits"]) / theory.allocated)
        table.set("theory_peak_over_capacity", theory.peak / theory.capacity)
    phases = np.array(theory.phase)
    for p in PHASE_NAMES:
        table.set(f"phase_{p}", np.where(answered, (phases == p).astype(float), np.nan))
    return table


def feature_table(
    jobs: Sequence[Job], placements: Sequence[Placement], theory: MemoryBatch,
    theory_tokens_per_gpu: np.ndarray | None = None,
) -> FeatureTable:
    """Features of Job/Placement rows (``feature_columns`` of their columns), theory tokens/s per GPU if given."""
    table = feature_columns(JobColumns.of(jobs), PlacementColumns.of(placements), Codes.of([j.model for j in jobs]),
                            Codes.of([p.gpu_model for p in placements]), theory)
    if theory_tokens_per_gpu is not None:
        table.set("theory_tokens_per_second_per_gpu", np.asarray(theory_tokens_per_gpu, dtype=float))
    return table
