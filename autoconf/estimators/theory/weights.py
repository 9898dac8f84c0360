"""Resident weights per GPU: bytes per parameter by dtype, the LoRA/DoRA adapters, NF4 quantisation, and the
parameters a pipeline stage and a tensor-parallel rank hold.

* a weight costs its dtype's bytes (bf16/fp16 2, fp32 and amp's fp32 master 4); peft casts LoRA adapters to fp32
  (``autocast_adapter_dtype=True``), the framework profile (frameworks.py) says where adapters stay bf16.
* QLoRA: bitsandbytes NF4 stores 0.5 B/param for layer linears plus one fp32 absmax per 64-weight block
  (4/64 = 0.0625 B/param, HF default without double quantisation); embeddings, head and norms stay bf16.
  Double quantisation stores the absmax as 8 bits per block plus one fp32 constant per 256 blocks
  (QLoRA paper, Dettmers et al. 2023 §2: 0.127 bits/param instead of 0.5). A quantised lm_head
  (``quantize_lm_head``) costs NF4 bytes instead of 2.
* peft's ``prepare_model_for_kbit_training`` makes every parameter that is not 4-bit fp32 (``kbit_upcast``).
* DoRA adds one magnitude parameter per output feature of every adapted module (peft's lora_magnitude_vector).

Every function takes one ``Job``/``Placement`` or the columns of a batch (rows.py).
"""

from __future__ import annotations

from typing import overload

import numpy as np

from autoconf.catalog.architecture import Architecture
from autoconf.estimators.theory.rows import (
    AnyJob,
    AnyPlacement,
    Codes,
    Flag,
    JobColumns,
    Num,
    is_in,
    lookup,
    not_,
    settings_of,
    strategy_in,
    where,
)
from autoconf.schema import Job

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "amp-bf16": 4, "amp-fp16": 4}
ADAPTER_BYTES = 4  # peft autocasts LoRA weights to fp32
NF4_BYTES = 0.5 + 4 / 64  # 4-bit code + fp32 absmax per block of 64 (bitsandbytes blocksize 64)
NF4_DQ_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # 8-bit absmax per 64 + fp32 constant per 256 blocks
AMP = ("amp-bf16", "amp-fp16")
FSDP_STRATEGIES = ("fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")


def dtype_bytes(job: AnyJob) -> Num:
    return lookup(job.dtype, DTYPE_BYTES)


def amp(job: AnyJob) -> Flag:
    return is_in(job.dtype, AMP)


def _adapters(arch: Architecture, targets: tuple[str, ...], rank: int, dora: bool) -> int:
    adapters = arch.lora_params(targets, rank)
    if dora:  # one magnitude per output feature of each adapted module
        adapters += arch.num_layers * sum(lin.per_layer * lin.out_features for lin in arch.lora_targets(targets))
    return adapters


@overload
def trainable_params(job: Job, arch: Architecture) -> int: ...
@overload
def trainable_params(job: JobColumns, arch: Architecture) -> np.ndarray: ...
def trainable_params(job: AnyJob, arch: Architecture) -> Num:
    """Trainable parameters of the language model (a VLM's vision parts are counted by vision_states)."""
    if isinstance(job, Job):
        return arch.text_params if job.method == "full" else _adapters(arch, job.lora_target_modules, job.lora_r,
                                                                       job.dora)
    targets: Codes = job.lora_target_modules
    if isinstance(job.method, str) and isinstance(job.lora_r, int) and len(targets.table) == 1:
        # JobColumns.broadcast: one job on every row, its count as a float (what the column path gives each row)
        return float(arch.text_params if job.method == "full"
                     else _adapters(arch, targets.table[0], job.lora_r, bool(job.dora)))
    keys = (targets.codes * 8192 + job.lora_r) * 2 + job.dora  # lora_r ≤ 4096 (schema.Job)
    distinct, inverse = np.unique(keys, return_inverse=True)
    lora = job.method != "full"
    wanted = np.zeros(len(distinct), dtype=bool)
    wanted[inverse[lora]] = True  # adapters of full fine-tuning rows are never counted (nor checked)
    values = np.array([_adapters(arch, targets.table[key // 2 // 8192], int(key // 2 % 8192), bool(key % 2))
                       if wanted[k] else 0 for k, key in enumerate(distinct.tolist())], dtype=float)
    return np.where(lora, values[inverse], float(arch.text_params))


def nf4_bytes(job: AnyJob) -> Num:
    return where(settings_of(job).double_quant, NF4_DQ_BYTES, NF4_BYTES)


def stage_params(arch: Architecture, placement: AnyPlacement) -> Num:
    """Parameters held by the busiest pipeline stage, before tensor-parallel splitting."""
    head = arch.lm_head_params + arch.final_norm_params
    embed = arch.embedding_params + arch.position_params
    layers = -(-arch.num_layers // placement.pp) * arch.layer_params
    return where(placement.pp == 1, embed + layers + head, layers + max(embed, head))


def kbit_upcast(job: AnyJob, fsdp: Flag) -> Flag:
    """QLoRA whose stack runs peft's prepare_model_for_kbit_training (Job.kbit_prepare, else the profile's): the
    embeddings, norms and head (every parameter that is not 4-bit) become fp32, and so does the residual stream
    they feed. TRL skips the call for sharded QLoRA, so ``fsdp`` (sharded over > 1 GPU) turns it off."""
    return (job.method == "qlora") & settings_of(job).kbit_upcast & not_(fsdp)


def _quantised_params(job: AnyJob, arch: Architecture) -> Num:
    """Parameters a QLoRA stores in 4 bits: the layer linears (and the head when quantize_lm_head)."""
    return arch.num_layers * arch.linear_params_per_layer + where(settings_of(job).quantize_lm_head,
                                                                  arch.lm_head_params, 0)


def quant_state_bytes(job: Job, arch: Architecture) -> float:
    """Bytes of a QLoRA's 4-bit quant states (the absmax beyond the 0.5 B/param codes; 0 for other methods)."""
    if job.method != "qlora":
        return 0.0
    return float(_quantised_params(job, arch) * (nf4_bytes(job) - 0.5))


def sharded_fsdp(placement: AnyPlacement) -> Flag:
    """FSDP (any sharding) over more than one data-parallel rank."""
    return (placement.dp > 1) & strategy_in(placement, FSDP_STRATEGIES)


def _upcast(job: AnyJob, placement: AnyPlacement) -> Flag:
    return kbit_upcast(job, sharded_fsdp(placement))


def upcast_bytes(job: AnyJob, arch: Architecture, placement: AnyPlacement) -> Num:
    """Bytes per GPU that kbit_upcast adds to a replica's weights: +2 B for every parameter that is not 4-bit."""
    share = stage_params(arch, placement) / arch.total_params / placement.tp
    return where(_upcast(job, placement), share * (arch.total_params - _quantised_params(job, arch)) * 2, 0.0)


def weight_bytes(job: AnyJob, arch: Architecture, placement: AnyPlacement) -> Num:
    """Resident weights of one model replica on one GPU (before data-parallel sharding)."""
    share = stage_params(arch, placement) / arch.total_params / placement.tp
    linear = _quantised_params(job, arch)
    quantised = linear * nf4_bytes(job) + (arch.total_params - linear) * where(_upcast(job, placement), 4, 2)
    base = where(job.method == "qlora", quantised, arch.total_params * dtype_bytes(job))
    adapters = where(job.method == "full", 0, trainable_params(job, arch) * settings_of(job).adapter_bytes)
    return share * (base + adapters)


def unit_bytes(job: AnyJob, arch: Architecture, params: float) -> Num:
    """Bytes of ``params`` unsharded: 4-bit for QLoRA layer linears, else the weight dtype."""
    return where(job.method == "qlora", params * nf4_bytes(job), params * where(amp(job), 2, dtype_bytes(job)))
