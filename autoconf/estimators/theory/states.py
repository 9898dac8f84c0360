"""Model states per GPU: weights, gradients and optimizer states, by dtype, method and sharding.

Byte counts (Ψ = parameters, Ψ_t = trainable parameters, N = sharding degree):

* pure bf16/fp16 (HF with torch_dtype=bf16, torch AdamW): weights 2Ψ, grads 2Ψ_t, AdamW m and v
  ``zeros_like(param)`` so also 2+2 B → 8 B/param (traced in shared/theory_notes.md; confirmed by the
  fms-acceleration rows: Mistral-7B full FT ends a step with 6 B/param allocated = weights + states).
* amp (fp32 master weights + autocast): 4 + 4 + 8 = 16 B/param, plus the bf16 weight copies autocast
  caches through forward/backward (+2 B/param, transient; theory_notes "Variants").
* DeepSpeed ZeRO (bf16 mixed precision): bf16 weights 2, bf16 grads 2, and per partition fp32 grads 4,
  fp32 master 4, m and v 8 (ZeRO paper, Rajbhandari et al. 2020, §3 with fp32 grad accumulation).
* LoRA/QLoRA: peft casts adapters to fp32 (``autocast_adapter_dtype=True``), so an adapter parameter
  costs 4 + 4 + 8 = 16 B; the frozen base has no gradient or state.
* the resident weights (bytes per parameter by dtype, adapters, NF4) and the trainable parameters: weights.py.
* The framework profile (frameworks.py) decides the adapter dtype (peft: fp32; torchtune, LitGPT: bf16)
  and optimizer-in-backward (each parameter steps inside backward and drops its gradient at once, so at
  most the largest parameter's gradient is live and there is no step() temporary).
* bitsandbytes 32-bit optimizers (``paged-adamw``) keep fp32 m and v whatever the parameter dtype; the
  paged ones live in CUDA unified memory, outside torch's allocator (see cuda.py). DoRA adds one
  magnitude parameter per output feature of every adapted module (peft's lora_magnitude_vector).

Every function takes one ``Job``/``Placement`` or the columns of a batch (rows.py): a branch on a field is
``rows.where``, so one row and a million rows run the same formulas.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import overload

import numpy as np

from autoconf.catalog.architecture import Architecture
from autoconf.estimators.theory.images import trainable_vision_params
from autoconf.estimators.theory.rows import (
    AnyJob,
    AnyPlacement,
    Flag,
    JobColumns,
    Num,
    is_in,
    maximum,
    minimum,
    node_size,
    not_,
    settings_of,
    strategy_in,
    where,
)
from autoconf.estimators.theory.weights import (
    FSDP_STRATEGIES,
    amp,
    dtype_bytes,
    trainable_params,
    unit_bytes,
    weight_bytes,
)
from autoconf.schema import Job

ZERO_BUCKET_ELEMENTS = 5e8  # DeepSpeed reduce_bucket_size / allgather_bucket_size default (elements)
ZERO_STRATEGIES = ("zero0", "zero1", "zero2", "zero3")
SHARD_WEIGHTS = ("fsdp", "fsdp-hybrid", "zero3")
SHARD_GRADS = (*SHARD_WEIGHTS, "fsdp-shard-grad-op", "zero2")
SHARD_OPTIMIZER = (*SHARD_GRADS, "zero1")
PAGED = ("paged-adamw", "paged-adamw-8bit")


@dataclass(frozen=True)
class States:
    """Per-GPU bytes of the model states and the transient parts that depend on the phase (floats for one row,
    arrays for a batch)."""

    weights: Num
    gradients: Num
    optimizer: Num
    gathered: Num  # unsharded parameter units live during forward/backward (FSDP/ZeRO-3)
    grads_persist: Flag  # gradients live during the next forward (DDP buckets, FSDP/ZeRO shards)
    optimizer_step_temp: Num  # extra bytes while optimizer.step() runs
    buffers: Num  # framework buckets (ZeRO reduce/allgather)
    trainable_params: Num
    outside: Num = 0.0  # bytes held outside torch's allocator (paged optimizer states)
    replica_weights: Num = 0.0  # weights.weight_bytes: one unsharded replica's (the load phase's weights)
    tied_transient: Num = 0.0  # tied embedding gradients summed at the end of backward (tied_grad_transient)
    resharded_at_loss: Num = 0.0  # of ``gathered``: the decoder units FSDP has resharded when the loss runs


@overload
def optimizer_bytes_per_param(job: Job, zero: bool, as_full: bool = False) -> float: ...
@overload
def optimizer_bytes_per_param(job: JobColumns, zero: Flag, as_full: bool = False) -> np.ndarray: ...
def optimizer_bytes_per_param(job: AnyJob, zero: Flag, as_full: bool = False) -> Num:
    """State bytes per trainable parameter (excluding DeepSpeed's fp32 master, added separately); ``as_full``:
    for plain (non-adapter) parameters whatever the method."""
    wide = amp(job) | (job.dtype == "fp32") | zero | (job.optimizer_state_dtype == "fp32")
    adapter = False if as_full else (job.method != "full") & not_(wide)
    # torch AdamW: zeros_like(adapter) for adapters, else fp32 when mixed/ZeRO/fp32 states, else the weight dtype
    state = where(adapter, settings_of(job).adapter_bytes, where(wide, 4, dtype_bytes(job)))
    eight_bit = 2 * 1 + 2 * 4 / 2048  # two uint8 states + fp32 absmax per 2048-block (bitsandbytes)
    return where(job.optimizer == "adamw", 2 * state,
                 where(job.optimizer == "paged-adamw", 2 * 4,  # bitsandbytes 32-bit optimizer: fp32 m and v
                       where(is_in(job.optimizer, ("adamw-8bit", "paged-adamw-8bit")), eight_bit,
                             state)))  # SGD with momentum: one buffer


def _shard_degree(placement: AnyPlacement) -> Num:
    return where(strategy_in(placement, ("fsdp-hybrid",)), minimum(placement.dp, node_size(placement)),
                 placement.dp)


def model_states(job: AnyJob, arch: Architecture, placement: AnyPlacement) -> States:
    """Weights, gradients and optimizer bytes per GPU at steady state (step >= 2)."""
    n = _shard_degree(placement)
    trainable = trainable_params(job, arch)
    psi_t = trainable / placement.tp / placement.pp
    full = job.method == "full"
    settings = settings_of(job)
    grad_b = where(full, dtype_bytes(job), settings.adapter_bytes)
    weights = replica = weight_bytes(job, arch, placement)
    grads = psi_t * grad_b
    zero = strategy_in(placement, ("zero1", "zero2", "zero3"))
    opt = psi_t * optimizer_bytes_per_param(job, zero)
    # ZeRO mixed precision adds an fp32 master copy (4 B) and an fp32 gradient partition (4 B) per
    # trainable parameter; both are partitioned like the optimizer states: 2Ψ + 18Ψ/N for ZeRO-2.
    opt = where(zero & full & not_(amp(job)) & (job.dtype != "fp32"), opt + psi_t * (4 + 4), opt)
    shard_w = strategy_in(placement, SHARD_WEIGHTS)
    shard_g = strategy_in(placement, SHARD_GRADS)
    shard_o = strategy_in(placement, SHARD_OPTIMIZER)
    unit = unit_bytes(job, arch, arch.layer_params) / placement.tp  # gathered in the compute dtype
    sharded = shard_w & (n > 1)
    weights = where(sharded, weights / n, weights)
    # FSDP (auto-wrapped per decoder layer) keeps the current and the prefetched layer unsharded, and
    # the root unit (embeddings, final norm, head) unsharded through forward and backward; ZeRO-3 the
    # largest module (DeepSpeed's own estimator counts 4·Ψ_LL = params + grads of the largest layer).
    root_bytes = minimum(dtype_bytes(job), where(amp(job), 2, 4))
    root = (arch.embedding_params + arch.lm_head_params) * root_bytes * (1 - 1 / n)
    # with tensor parallel, FSDP2 follows transformers' _fsdp_plan instead (distributed/fsdp.py): the embedding is
    # resharded after its forward and only [final norm, lm_head] stay gathered (the embedding itself when tied), each
    # a vocabulary shard (traced tp 2 × fsdp 4, llama3.1-8b: weights at the loss = shards + head / tp)
    head = arch.lm_head_params if arch.lm_head_params > arch.vocab_size else arch.embedding_params
    root = where((placement.tp > 1) & TP_FSDP_PLAN_ROOT, head / placement.tp * root_bytes * (1 - 1 / n), root)
    gathered = where(sharded, where(strategy_in(placement, FSDP_STRATEGIES), 2 * unit + root,
                                    2 * arch.largest_layer_params * 2), 0.0)
    grads = where(shard_g, grads / n, grads)
    opt = where(shard_o, opt / n, opt)
    opt = where(placement.offload != "none", 0.0, opt)  # optimizer (and its fp32 master) lives in CPU RAM
    both = placement.offload == "optimizer+params"
    weights = where(both, 0.0, weights)
    gathered = where(both, maximum(gathered, 2 * unit), gathered)
    # FSDP full shard reshards each decoder unit after its forward and gathers the last one again only once the
    # loss's backward reaches it: at the loss the root unit alone is unsharded (torch FSDP2 reshard_after_forward,
    # FSDP1 FULL_SHARD; traced FSDP2 ranks of llama3.1-8b on 2-64 GPUs: weights at the loss = shards + root)
    resharded = where(sharded & strategy_in(placement, FSDP_STRATEGIES) & not_(both),
                      LOSS_RESHARDED_UNITS * unit, 0.0)
    temp = _optimizer_temp(job, arch, psi_t / where(shard_o, n, 1), placement)
    buffers = where(strategy_in(placement, ("zero1", "zero2")) & (n > 1), ZERO_BUCKET_ELEMENTS * 2, 0.0)
    # DDP's gradients are views of its persistent buckets and DeepSpeed keeps its gradient partitions;
    # FSDP's sharded gradients are freed by zero_grad(set_to_none=True) like a single GPU's (the
    # fms-acceleration FSDP full-FT rows peak in the optimizer step, not at the loss).
    persist = (n > 1) & strategy_in(placement, ("ddp", *ZERO_STRATEGIES))
    # optimizer in backward: each parameter is stepped in its grad hook and its gradient freed: one parameter's
    # gradient at a time
    in_backward = settings.optimizer_in_backward
    largest = where(full, arch.largest_layer_params, maximum(trainable / max(arch.num_layers, 1), 1.0))
    grads = where(in_backward, minimum(grads, largest * grad_b / placement.tp), grads)
    temp = where(in_backward, 0.0, temp)
    persist = persist & not_(in_backward)
    outside = where(is_in(job.optimizer, PAGED), opt, 0.0)
    count = int(psi_t) if isinstance(job, Job) else np.floor(psi_t)
    tied = tied_grad_transient(job, arch, placement, grad_b)
    return States(weights, grads, opt, gathered, persist, temp, buffers, count, outside, replica,
                  where(in_backward, 0.0, tied), resharded)


# tensor parallel inside FSDP gathers transformers' _fsdp_plan root ([norm, lm_head]) at the loss, not accelerate's
# root unit (embedding + head); False: as before issue 26 (tests/_identity.py)
TP_FSDP_PLAN_ROOT = True
# Decoder units FSDP keeps gathered in forward and backward (the current and the prefetched) but not at the loss
LOSS_RESHARDED_UNITS = 2.0
# A tied weight's gradient addends and their sum beyond the one gradient: the two addends (tied_grad_transient)
TIED_GRADIENT_COPIES = 2.0


def tied_grad_transient(job: AnyJob, arch: Architecture, placement: AnyPlacement, grad_b: Num) -> Num:
    """Bytes beyond the gradients when a tied embedding's two gradients meet at the end of backward.

    The head's gradient of a tied weight waits in the autograd engine's input buffer of the weight's
    AccumulateGrad until the embedding's backward (the last op) yields the second; InputBuffer::add then sums
    them out of place (torch/csrc/autograd/input_buffer.cpp; traced: aten.embedding_dense_backward, then
    aten.add.Tensor, on real CPU tensors too), so the two addends and the sum, three V × h gradients, are
    live at once: two beyond the one the gradients count (traced llama3.2-1b full: +0.98 GiB = 2 · V · h · 2 B).
    Only where the embedding trains (full fine-tuning) and one rank holds both uses (no pipeline split).
    """
    tied = arch.tie_word_embeddings and arch.vocab_size > 0
    return where((job.method == "full") & (placement.pp == 1) & tied,
                 TIED_GRADIENT_COPIES * arch.vocab_size * arch.hidden_size * grad_b / placement.tp, 0.0)


def _optimizer_temp(job: AnyJob, arch: Architecture, local_trainable: Num, placement: AnyPlacement) -> Num:
    """Temporaries of optimizer.step().

    foreach AdamW materialises one params-sized list of intermediates (theory_notes: +1× params,
    7B: +12.5 GiB; the fms-acceleration Mistral-7B full rows peak at exactly 10 B/param = 8 + 2);
    the for-loop version needs about two copies of the largest tensor; fused needs none.
    """
    state_b = where(job.method != "full", settings_of(job).adapter_bytes, dtype_bytes(job))
    largest = where(job.method == "full", arch.largest_layer_params, 0)
    temp = where(job.optimizer_impl == "foreach", local_trainable * state_b,
                 where(job.optimizer_impl == "for-loop", 2 * largest * state_b / placement.tp, 0.0))
    return where((placement.offload == "none") & (job.optimizer == "adamw"), temp, 0.0)


def vision_states(job: AnyJob, arch: Architecture, placement: AnyPlacement) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer) bytes per GPU of a VLM's vision tower and projector; 0 for text models.

    The vision parts stay bf16 under QLoRA (4-bit quantisation covers the language model's layer linears)
    and sit on the first pipeline stage. Trainable vision parts (freeze_vision / freeze_projector False) are
    plain modules in the weight dtype even under LoRA (peft modules_to_save), so their gradients cost the
    weight dtype and their optimizer states follow optimizer_bytes_per_param, sharded as the text states.
    """
    if arch.vision is None:
        return 0.0, 0.0, 0.0
    n = _shard_degree(placement)
    weights = arch.vision_params * where(job.method == "qlora", 2, dtype_bytes(job)) / placement.tp
    train = trainable_vision_params(job, arch) / placement.tp
    grads = train * dtype_bytes(job)
    zero = strategy_in(placement, ("zero1", "zero2", "zero3"))
    opt = train * optimizer_bytes_per_param(job, zero, as_full=True)  # states in weight dtype
    # fp32 master + fp32 gradient partition, as for the text states
    opt = where(zero & not_(amp(job)) & (job.dtype != "fp32"), opt + train * (4 + 4), opt)
    many = n > 1
    weights = where(many & strategy_in(placement, SHARD_WEIGHTS), weights / n, weights)
    grads = where(many & strategy_in(placement, SHARD_GRADS), grads / n, grads)
    opt = where(many & strategy_in(placement, SHARD_OPTIMIZER), opt / n, opt)
    return weights, grads, where(placement.offload != "none", 0.0, opt)


def largest(values: list[Num]) -> Num:
    """max() of floats, or the element-wise maximum of columns."""
    return reduce(maximum, values)
