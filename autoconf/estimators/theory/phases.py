"""The phases of one training step as columns: bytes by part per phase, the refusals, FSDP side streams.

The functions take one Job/Placement or the columns of many rows of one architecture (rows.py); memory.py turns
their phases into the three peaks and the estimate (memory.theory_rows, memory.estimate_memory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from autoconf.catalog import Architecture
from autoconf.defaults import STATE_PARTS
from autoconf.errors import InvalidInputError
from autoconf.estimators.theory import activations as act
from autoconf.estimators.theory import images
from autoconf.estimators.theory import loss as ce
from autoconf.estimators.theory.rows import (
    AnyJob,
    AnyPlacement,
    Flag,
    JobColumns,
    Num,
    PlacementColumns,
    is_in,
    maximum,
    minimum,
    not_,
    per_value,
    settings_of,
    strategy_in,
    where,
)
from autoconf.estimators.theory.states import States, vision_states
from autoconf.estimators.theory.weights import AMP, sharded_fsdp
from autoconf.schema import Calibration, Job, Phase, Placement

PHASES: tuple[Phase, ...] = ("load", "loss", "backward", "static", "optimizer")  # max() order: the first peak wins
# transformers' TP gathers the logits on every rank unless the stack's loss is vocabulary-parallel (phase_parts);
# False: every stack's logits split over the TP ranks (the theory before issue 26; tests/_identity.py)
GATHERED_TP_LOGITS = True
TEXT_PARTS = STATE_PARTS  # the text parts of a phase, in the order they are summed
VISION_PARTS = ("vision_weights", "vision_gradients", "vision_optimizer", "vision_activations")
PhaseTable = dict[Phase, dict[str, Num]]


def _split(job: AnyJob, placement: AnyPlacement) -> tuple[Flag, Flag, Num]:
    """(sequence parallel does not divide dp, the batch does not split, data-parallel groups × accumulation)."""
    bad_sp = placement.dp % job.sequence_parallel != 0
    per = placement.dp // job.sequence_parallel * job.gradient_accumulation_steps
    return bad_sp, job.batch_size % maximum(per, 1) != 0, per


def _sp_error(dp: int, sp: int) -> InvalidInputError:
    return InvalidInputError("sequence_parallel", f"must divide the data-parallel degree {dp}; got {sp}")


def _batch_error(per: int, batch: int) -> InvalidInputError:
    return InvalidInputError(
        "batch_size", f"must be a multiple of data-parallel GPUs × gradient_accumulation_steps = {per}; got {batch}")


def micro_batch(job: AnyJob, placement: AnyPlacement) -> Num:
    """Samples per forward pass of one data-parallel group: global batch / (DP groups × accumulation).

    With sequence parallelism of degree c, c GPUs share each sample (each holds s/c of its tokens). One Job raises
    where the batch does not split (columns: ``refusals`` marks those rows)."""
    bad_sp, bad_batch, per = _split(job, placement)
    if isinstance(job, Job) and bad_sp:
        raise _sp_error(int(placement.dp), job.sequence_parallel)
    if isinstance(job, Job) and bad_batch:
        raise _batch_error(per, job.batch_size)
    return job.batch_size // maximum(per, 1)


def _tp_error(arch: Architecture, tp: int) -> InvalidInputError:
    return InvalidInputError(
        "tp", f"must divide the attention heads ({arch.num_heads}) and KV heads ({arch.num_kv_heads}); got {tp}")


def _pp_error(arch: Architecture, pp: int) -> InvalidInputError:
    return InvalidInputError("pp", f"must be at most the number of layers ({arch.num_layers}); got {pp}")


def _bad_tp(arch: Architecture, tp: Num) -> Flag:
    return (arch.num_heads % tp != 0) | ((arch.num_kv_heads % tp != 0) & (tp % arch.num_kv_heads != 0))


def check_parallelism(arch: Architecture, placement: Placement) -> None:
    if _bad_tp(arch, placement.tp):
        raise _tp_error(arch, placement.tp)
    if placement.pp > arch.num_layers:
        raise _pp_error(arch, placement.pp)


def refusals(job: JobColumns, place: PlacementColumns, arch: Architecture, no_bf16: Flag,
             gpu_names: np.ndarray | str) -> dict[int, Exception]:
    """Why theory refuses each row (None: answered), in the order one estimate checks: tp and pp against the
    architecture, bf16 on a GPU without it (``no_bf16``), the LoRA targets, images on a text model, the split of
    the batch. The message of each row is the one ``estimate_memory`` raises for it. Rows not listed are answered."""
    out: dict[int, Exception] = {}
    bad_sp, bad_batch, per = _split(job, place)

    def at(column: Any, i: int) -> int:  # noqa: ANN401 - row i of a column, or the one value of every row
        if not isinstance(column, np.ndarray):
            return int(column)
        return int(column[i if len(column) > 1 else 0])

    checks: list[tuple[Flag, Callable[[int], Exception]]] = [
        (_bad_tp(arch, place.tp), lambda i: _tp_error(arch, int(place.tp[i]))),
        (place.pp > arch.num_layers, lambda i: _pp_error(arch, int(place.pp[i]))),
        (no_bf16 & is_in(job.dtype, ("bf16", "amp-bf16")), lambda i: InvalidInputError(
            "dtype", f"bf16 is not supported on {gpu_names if isinstance(gpu_names, str) else gpu_names[i]}; "
            "use fp16 or fp32")),
        (_lora_refused(job, arch), lambda i: _targets_error(job, arch, i)),
        ((job.images_per_sample > 0) & (arch.vision is None), lambda i: images.images_error(
            arch, at(job.images_per_sample, i))),
        (bad_sp, lambda i: _sp_error(int(place.dp[i]), at(job.sequence_parallel, i))),
        (bad_batch, lambda i: _batch_error(at(per, i), at(job.batch_size, i))),
    ]
    for mask, error in checks:
        if not (mask.any() if isinstance(mask, np.ndarray) else mask):  # a scalar flag: every row's
            continue
        for i in np.flatnonzero(np.broadcast_to(mask, (job.size,))).tolist():
            if i not in out:
                out[i] = error(i)
    return out


def _lora_refused(job: JobColumns, arch: Architecture) -> Flag:
    """LoRA rows whose targets the architecture refuses (the targets are not resolved where no row is LoRA: a
    search of full fine-tuning layouts)."""
    lora = job.method != "full"
    if not (lora.any() if isinstance(lora, np.ndarray) else lora):
        return lora
    return _targets_refused(job, arch) & lora


def _targets_refused(job: JobColumns, arch: Architecture) -> np.ndarray:
    return np.asarray(per_value(job.lora_target_modules, lambda t: 1.0 if _targets_exception(arch, t) else 0.0) > 0)


def _targets_exception(arch: Architecture, targets: tuple[str, ...]) -> Exception | None:
    try:
        arch.lora_targets(targets)
    except ValueError as exc:
        return exc
    return None


def _targets_error(job: JobColumns, arch: Architecture, i: int) -> Exception:
    codes = job.lora_target_modules.codes  # one entry: the same targets on every row (JobColumns.broadcast)
    found = _targets_exception(arch, job.lora_target_modules.table[codes[i if len(codes) > 1 else 0]])
    assert found is not None
    return found


def phase_parts(job: AnyJob, arch: Architecture, placement: AnyPlacement, st: States,
                calib: Calibration | None, samples: Num | None = None) -> tuple[PhaseTable, Flag]:
    """Bytes by part in each phase (PHASES) and whether the row has a load phase (else it never peaks there).
    ``samples``: micro_batch(job, placement) where the caller has it."""
    samples = micro_batch(job, placement) if samples is None else samples
    tokens = samples * images.text_tokens_per_sample(job, arch)  # image tokens join the text sequence
    tokens = where(job.sequence_parallel > 1, tokens / job.sequence_parallel, tokens)
    settings = settings_of(job)
    layers = -(-arch.num_layers // placement.pp)
    # 1F1B pipeline: the first stage holds min(micro-batches, stages) micro-batches in flight
    in_flight = where(placement.pp > 1, minimum(job.gradient_accumulation_steps, placement.pp), 1)
    fsdp = sharded_fsdp(placement)
    # checkpoints go to CPU RAM; one in transfer and one prefetched stay on the GPU
    layers = where(settings.activation_offloading & job.gradient_checkpointing, minimum(layers, 2), layers)
    stacked, largest = act.stack_bytes_per_token(job, arch, calib, fsdp, layers)
    layer = largest * tokens / placement.tp
    saved = (stacked + act.outside_layers_bytes_per_token(job, arch, fsdp)) * tokens * in_flight / placement.tp
    # the vision tower runs on the first stage, once per image of the micro-batch (sequence parallel ranks
    # share a sample's text, not its images)
    vision_act = images.activation_bytes_per_image(job, arch) * job.images_per_sample * samples * in_flight
    recompute = where(job.gradient_checkpointing, layer, 0.0)
    # the math SDPA kernel's softmax backward: two score-sized fp32 gradients of one layer at a time
    recompute = recompute + act.score_backward_bytes_per_token(job, arch) * tokens / placement.tp
    # a tied head's gradient waits in autograd's input buffer (one of st.tied_transient's two) while the first
    # layer is recomputed, and the sum at the very end holds both (states.tied_grad_transient)
    # under TP a vocabulary-parallel loss (Megatron, nanotron, torchtitan's loss_parallel) holds V / tp of the logits
    # per rank; transformers' own TP plan gathers the head's output on every rank ("colwise_gather_output"; traced:
    # hf-trainer tp 2 ranks hold the unsplit V-wide bytes per token): frameworks.Profile.vocab_parallel_loss
    split = where(settings.vocab_parallel_loss | (not GATHERED_TP_LOGITS), placement.tp, 1)
    loss = ce.loss_bytes_per_token(job, arch, calib, fsdp) * tokens / split
    head = ce.loss_fixed_bytes(job, arch) / placement.tp  # both plans split the head's weight by vocabulary rows
    loss = where(head != 0, loss + head, loss)
    # amp keeps bf16 copies of the weights that autocast made, alive through forward and backward
    # (FSDP mixed precision instead gathers bf16 units, already counted in st.gathered)
    autocast = where(is_in(job.dtype, AMP) & (job.method == "full") & not_(fsdp), st.weights / 2, 0.0)
    w = st.weights + st.gathered + st.buffers
    g_live = where(st.grads_persist, st.gradients, 0.0)
    # every rank moves its full checkpoint copy to the GPU before the wrapper shards it
    has_load = fsdp_like(placement) & not_(settings.efficient_loading) & settings.profile.full_copy_on_gpu
    phases: PhaseTable = {
        "load": {"weights": st.replica_weights, "gradients": 0.0, "optimizer": 0.0,
                 "activations": 0.0, "logits": 0.0},
        "loss": {"weights": w + autocast - st.resharded_at_loss, "gradients": g_live, "optimizer": st.optimizer, "activations": saved,
                 "logits": loss},
        "backward": {"weights": w + autocast, "gradients": g_live, "optimizer": st.optimizer,
                     "activations": saved + recompute, "logits": 0.0},
        "static": {"weights": w, "gradients": st.gradients, "optimizer": st.optimizer,
                   "activations": maximum(recompute + st.tied_transient / 2, st.tied_transient), "logits": 0.0},
        "optimizer": {"weights": st.weights, "gradients": st.gradients,
                      "optimizer": st.optimizer + st.optimizer_step_temp, "activations": 0.0, "logits": 0.0},
    }
    return _with_vision(phases, vision_states(job, arch, placement), st.grads_persist, vision_act), has_load


def _with_vision(phases: PhaseTable, states: tuple[Num, Num, Num], persist: Flag, activations: Num) -> PhaseTable:
    """Append a VLM's vision parts to every phase (all 0.0 for a text model): the tower and projector weights
    always; their gradients where the text gradients are live; their saved activations through forward and
    backward (the loss and backward phases)."""
    w, g, o = states
    for name, parts in phases.items():
        parts["vision_weights"] = w
        parts["vision_gradients"] = (g if name in ("static", "optimizer") else 0.0 if name == "load"
                                     else where(persist, g, 0.0))
        parts["vision_optimizer"] = o if name != "load" else 0.0
        parts["vision_activations"] = activations if name in ("loss", "backward") else 0.0
    return phases


# torch FSDP (FSDP1 FlatParameter and FSDP2 fully_shard) reduce-scatters every gradient into a tensor it
# allocates on its own post-backward / reduce-scatter stream, and all-gathers parameters into buffers it allocates
# on its unshard / all-gather stream (torch/distributed/fsdp/_runtime_utils.py _post_backward_hook: "for the
# sharded strategies, the gradient is produced in the post-backward stream"; _fully_shard/_fsdp_collectives.py
# foreach_reduce). The caching allocator reuses a freed block only on the stream that allocated it
# (torch Tensor.record_stream docs: "the CUDA caching allocator guarantees that the memory will only be reused
# with the same creation stream"). DeepSpeed ZeRO is not listed: its gradient partitions persist (states.py).
SIDE_STREAM_STRATEGIES = ("fsdp", "fsdp-hybrid", "fsdp-shard-grad-op")


def _sum(values: Iterable[Num]) -> Num:
    """sum(values), left to right, without the parts that are the float 0.0 (x + 0.0 is x): over columns each
    skipped part is one numpy addition fewer."""
    total: Num = 0.0
    for value in values:
        if not (isinstance(value, float) and value == 0.0):
            total = total + value
    return total


def side_stream_bytes(phases: PhaseTable, st: States, placement: AnyPlacement, has_load: Flag = True,
                      totals: Mapping[str, Num] | None = None) -> Num:
    """Reserved bytes that torch FSDP's side streams keep cached while the compute stream peaks.

    Each stream's pool reserves its own peak, so torch reserves (at least) the sum of the three pools' peaks:
    the compute stream's (weights shard, optimizer states and temporaries, activations, logits), the
    reduce-scatter stream's (the sharded gradients, freed by zero_grad but kept cached for the next backward)
    and the all-gather stream's (the gathered units, freed after each layer but kept cached through the
    optimizer step). The result is that sum minus the allocator peak (0 for any other strategy, and nearly 0
    for LoRA, whose sharded gradients are the adapters'). A load phase counts only where ``has_load``.
    ``totals``: each phase's sum of parts where the caller has it (memory.theory_rows: the same sums)."""
    resident = st.weights + st.buffers
    peak = compute = grads = gathered = 0.0
    for name, parts in phases.items():
        total = _sum(parts.values()) if totals is None else totals[name]
        g, vision = parts["gradients"], parts["vision_gradients"]
        g = g if isinstance(vision, float) and vision == 0.0 else g + vision  # a text model's vision: 0.0
        u = 0.0 if name == "load" else maximum(0.0, parts["weights"] - resident)
        if name == "load":  # a row without the phase: 0 changes none of the maxima below (all parts are >= 0)
            total, g = where(has_load, total, 0.0), where(has_load, g, 0.0)
        peak, compute = maximum(peak, total), maximum(compute, total - g - u)
        grads, gathered = maximum(grads, g), maximum(gathered, u)
    active = (placement.dp > 1) & strategy_in(placement, SIDE_STREAM_STRATEGIES)
    return where(active, maximum(0.0, compute + grads + gathered - peak), 0.0)


def loss_segment_cache(job: AnyJob, arch: Architecture, placement: AnyPlacement, samples: Num | None = None) -> Num:
    """Reserved bytes of cached loss-sized segments that shorter batches left (samples of varying length;
    loss.LOSS_SEGMENT_NOTE): per token × the tokens of one micro-batch on this GPU, as the loss phase counts
    them. Free blocks: in torch reserved and the device peak, never in torch allocated (cuda.peaks). ``samples``:
    micro_batch(job, placement) where the caller has it."""
    per_token = ce.loss_segment_bytes_per_token(job, arch)
    samples = micro_batch(job, placement) if samples is None else samples
    tokens = samples * images.text_tokens_per_sample(job, arch) / job.sequence_parallel
    return where(per_token != 0, per_token * tokens / placement.tp, 0.0)


def fsdp_like(placement: AnyPlacement) -> Flag:
    """Weights sharded across data-parallel ranks (FSDP full/hybrid shard or ZeRO-3)."""
    return (placement.dp > 1) & strategy_in(placement, ("fsdp", "fsdp-hybrid", "zero3"))
