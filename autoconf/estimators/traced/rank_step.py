"""The steps of a rank trace (autoconf/estimators/traced/dist.py): the HF Trainer's training step, checkpoint save.

Each step (``train_step``): forward with the model's loss, backward, ``clip_grad_norm_(1.0)`` as the Trainer's
``max_grad_norm``, AdamW step, ``zero_grad``. The trace runs two: the first creates the optimizer states, the second
is steady (``short_first_step`` traces only step 1's clipping and AdamW step, ``first_update``: a fifth less CPU, but
the allocator then sees the states before any activation, not in the real order, and its reserved peak differs).
DDP steps run under ``no_sync()``: the reducer's in-place bucket all-reduce and its bucket rebuild after step 1 read
data, and skipping them frees or allocates nothing.

The checkpoint save (``save_checkpoint``) is accelerate's FULL_STATE_DICT default for several processes
(torch.distributed.checkpoint.state_dict ``get_model_state_dict`` / ``get_optimizer_state_dict`` with
``full_state_dict``, ``cpu_offload``): each parameter is gathered whole on the device, copied to the host and
dropped. Host copies are not counted (``HostCopies``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode

from autoconf.estimators.traced.fsdp1 import clip_fsdp1, is_fsdp1
from autoconf.estimators.traced.hf_config import DTYPES
from autoconf.estimators.traced.hf_parallel import by_mesh, clip_by_mesh
from autoconf.estimators.traced.live_bytes import BACKWARD, GRADIENTS, LOGITS, OPT_STEP, OPTIMIZER, WEIGHTS
from autoconf.estimators.traced.step import StepHooks, kept_output
from autoconf.estimators.traced.wrap import RankBytes

# Phase codes of the samples: live_bytes.py's four, then these (the estimator maps them to schema phases).
CLIP, LOAD, SAVE = 4, 5, 6
PHASES = ("forward", "loss", "backward", "optimizer", "clip", "load", "save")
MAX_GRAD_NORM = 1.0  # transformers TrainingArguments.max_grad_norm default


class HostCopies(TorchFunctionMode):
    """``Tensor.to("cpu")`` in a checkpoint save is a device-to-host copy: make it, uncounted."""

    def __init__(self, tracker: RankBytes) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if func is torch.Tensor.to and str(target) == "cpu":
            self.tracker.skip = True
            try:
                return args[0].detach().clone()
            finally:
                self.tracker.skip = False
        return func(*args, **kwargs)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, hooks: StepHooks, shape: tuple[int, int],
               spec: dict[str, Any], tracker: RankBytes) -> None:
    """The HF Trainer's step: forward with the model's loss, backward, clip, optimizer step, zero_grad (the output
    held to its end under ``keep_output``)."""
    batch, seq = shape
    ids = torch.randint(0, spec["arch"]["vocab_size"], (batch, seq))
    labels = ids.clone()
    autocast_dtype = fsdp1_amp(spec) if spec["strategy"] == "fsdp1" else DTYPES[spec["dtype"]][1]
    amp = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
    hooks.tracker = tracker
    # DDP: the reducer's bucket all-reduce (and its bucket rebuild after step 1) reads data; its buckets are
    # allocated at construction and the all-reduce works in place, so no_sync() leaves the bytes unchanged
    sync = model.no_sync() if isinstance(model, DistributedDataParallel) else contextlib.nullcontext()
    with sync:
        with amp:
            out = model(input_ids=ids, labels=labels)
        loss = out.loss
        held = kept_output(out, spec)  # step.py: the loss only, or the output held through the update
        del out
        tracker.set_phase(BACKWARD, LOGITS)
        loss.backward()
        del loss, ids, labels
    update(model, opt, tracker)
    del held
    hooks.tracker = None


def fsdp1_amp(spec: dict[str, Any]) -> torch.dtype | None:
    """The autocast and ``MixedPrecision`` dtype of an FSDP1 rank: amp-*'s; the rows' ``bf16``/``fp16`` flag on
    weights of that dtype for fms-hf-tuning LoRA with 4.x checkpointing (fsdp1.py) and for QLoRA (transformers'
    ``_fsdp_qlora_plugin_updates`` sets FSDP1's mixed precision to the floating ``bnb_4bit_quant_storage``)."""
    plain, amp = DTYPES[spec["dtype"]]
    return amp or (plain if spec.get("hf4_checkpointing") or spec["method"] == "qlora" else None)


def update(model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: RankBytes) -> None:
    """Clip the gradients, step the optimizer, drop the gradients (the Trainer's ``zero_grad``)."""
    tracker.set_phase(CLIP, OPTIMIZER)
    trained: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
    if len(by_mesh(trained)) > 1:  # tensor parallel: parameters on several meshes, clipped as the Trainer does
        clip_by_mesh(trained, MAX_GRAD_NORM)
    elif is_fsdp1(model):
        clip_fsdp1(model, MAX_GRAD_NORM)
    else:
        torch.nn.utils.clip_grad_norm_(trained, MAX_GRAD_NORM)
    tracker.set_phase(OPT_STEP, OPTIMIZER)
    opt.step()
    tracker.sample()
    opt.zero_grad(set_to_none=True)
    tracker.sample()


def first_update(model: torch.nn.Module, opt: torch.optim.Optimizer, tracker: RankBytes) -> None:
    """Step 1's clipping and optimizer step, where AdamW creates its states, from gradients of the rank's
    size and layout (zeros: values do not change bytes). Step 1's forward and backward are step 2's
    without the states, so they are not traced again."""
    tracker.enter(1, CLIP, GRADIENTS)
    for param in model.parameters():
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    update(model, opt, tracker)


def save_checkpoint(model: torch.nn.Module, opt: torch.optim.Optimizer, strategy: str, tracker: RankBytes) -> None:
    """accelerate's save for several processes: full state dicts offloaded to the host (FSDP2; the model's only
    under tensor parallelism); DDP's ``state_dict()`` holds references only."""
    tracker.enter(3, SAVE, WEIGHTS)
    with HostCopies(tracker):
        if strategy in ("ddp", "single"):
            state = [model.state_dict(), opt.state_dict()]
        else:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                get_optimizer_state_dict,
            )
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = [get_model_state_dict(model, options=options)]
            # tensor parallel: the Trainer saves no optimizer state of a model sharded at load (trainer.py:
            # "Resuming is not supported for models sharded at load time", save_only_model)
            if strategy != "tp":
                state.append(get_optimizer_state_dict(model, opt, options=options))
    tracker.sample()
    del state
    tracker.sample()
